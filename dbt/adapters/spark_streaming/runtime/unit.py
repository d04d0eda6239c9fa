"""dbt unit tests (`unit_tests:`) of streaming models: the model's query evaluated in batch over
the given rows, with the rewrite the snapshot-equivalence oracle uses (sql/oracle.py).

dbt compiles a unit test into the model's SQL with each given input as a CTE in front, named
``__dbt__cte__<input>`` (a ref's identifier; ``<source>__<table>`` for a source), and leaves to
the `unit` materialization how to run it. Spark cannot run a window TVF, so here the fixture
CTEs are taken off, the model's query is compiled by our compiler over them (their columns as
Spark types them), and the oracle's SQL for what the stream emits is returned with the fixtures
put back in front: one statement, no temp view (unit tests run in threads).

By default the given rows are a finished input, as Flink's batch mode reads one: all read in one
micro-batch, none late, and the end of input closes every window. With a watermark (the unit
test's `config: {meta: {watermark: '<timestamp>'}}`) the result is what a streaming run had
emitted once its watermark reached that time: the windows that end by then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import StreamingError
from ..sql import LATEST
from .inputs import classify, named
from .model import compile_sql
from .upsert import UPSERT_TABLE, names_config

FIXTURE = "__dbt__cte__"  # dbt's prefix of an ephemeral relation (BaseRelation)
STREAMING = ("streaming_view", UPSERT_TABLE)
END_OF_INPUT_US = 253402300799999999  # 9999-12-31 23:59:59.999999: past every window's end
NEVER_LATE = "TIMESTAMP_MICROS(-62135596800000000)"  # 0001-01-01: a batch watermark before all


def inputs_of(manifest, node) -> list[dict]:
    """What the dbt graph says of each relation `node` reads, as macros/streaming_inputs.sql
    gives it (runtime/inputs.py classify), each with `fixture`: the CTE of its given rows."""
    out = []
    for node_id in node.depends_on.nodes:
        upstream = manifest.nodes.get(node_id) or manifest.sources.get(node_id)
        if upstream is None:
            continue
        config = upstream.config.to_dict(omit_none=True) if upstream.config else {}
        meta = getattr(upstream, "meta", None) or config.get("meta") or {}
        source = upstream.resource_type == "source"
        name = upstream.identifier if source else (upstream.alias or upstream.name)
        given = f"{upstream.source_name}__{upstream.name}" if source else upstream.name
        out.append(
            {
                "relation": f"{upstream.schema}.{name}",
                "resource_type": str(upstream.resource_type),
                "materialized": config.get("materialized"),
                "read_as": config.get("read_as") or meta.get("read_as"),
                "unique_key": meta.get("unique_key") if source else config.get("unique_key"),
                "event_time": meta.get("event_time") if source else config.get("event_time"),
                "apply_changes": None if source else config.get("apply_changes"),
                "fixture": FIXTURE + given.lower(),
            }
        )
    return out


def query(
    spark, sql: str, config: Mapping[str, Any], inputs: list[dict], watermark: Any = None
) -> dict:
    """{'sql': Spark SQL of the unit test's actual rows, 'columns': [[name, type], ...]}, for
    the unit test's compiled `sql` of a model with `config` (its resolved config) reading
    `inputs` (inputs_of)."""
    materialization = config.get("materialized")
    if materialization not in STREAMING:  # a batch model: its SQL as it is, as dbt runs it
        return {"sql": sql, "columns": _columns(spark, sql)}
    if config.get("read_change_feed") is True:
        raise StreamingError(
            "SST507",
            "a unit test of a read_change_feed model",
            "the model reads its inputs as Delta change feeds (rows with `_op`, +I/-U/+U/-D), "
            "which given rows do not describe",
            "Test it with snapshot_equivalence over its table, or unit test a model over the "
            "same query without read_change_feed.",
        )
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    from ..sql.dialect import SparkStreaming
    from ..sql.oracle import LATE_COLUMN

    try:
        tree = sqlglot.parse_one(sql, read=SparkStreaming)
    except (ParseError, TokenError):
        compile_sql(sql, config, materialization, {}, {})  # the compiler's SSV101, with why
        raise
    config, _ = classify(config, inputs)  # the graph's tables are dimensions, as in a run
    versions = config.get("versioned") or {}  # a temporal join's versions: as their fixtures
    fixture = {i["relation"].lower(): i["fixture"] for i in inputs}
    config = {**config, "versioned": {fixture[r]: v for r, v in versions.items()}}
    fixtures, kept = {}, []
    with_ = tree.args.get("with_")
    for cte in with_.expressions if with_ is not None else []:
        if cte.alias_or_name.lower().startswith(FIXTURE):
            fixtures[cte.alias_or_name.lower()] = cte.this
        else:
            kept.append(cte)
    if with_ is not None:
        with_.set("expressions", kept)
        if not kept:
            tree.set("with_", None)
    changelogs = {}  # an upsert_table's versions: its given rows, each inserted once
    for relation, v in versions.items():
        name = fixture[relation]
        if (v.get("end") or v.get("how") == LATEST) and name in fixtures:
            given = fixtures[name].sql(dialect="spark")
            fixtures[name] = sqlglot.parse_one(
                f"SELECT *, '+I' AS _op, CAST(0 AS BIGINT) AS _commit_version FROM ({given})",
                read="spark",
            )
            changelogs[name] = name
    schemas = {
        name: dict(_columns(spark, f"SELECT * FROM ({body.sql(dialect='spark')})"))
        for name, body in fixtures.items()
    }
    wanted = names_config(config, "dimensions")
    dimensions = [i["fixture"] for i in inputs if named(i["relation"], wanted)]
    plan = compile_sql(
        tree.sql(dialect=SparkStreaming), config, materialization, schemas, changelogs, dimensions
    )
    bindings = {name: f"{name}__input" for name in fixtures}
    emitted = sqlglot.parse_one(
        plan.emitted_sql(bindings, _watermark_us(watermark)), read=SparkStreaming
    )
    ctes = []
    for name, body in fixtures.items():
        tagged = f"SELECT *, {NEVER_LATE} AS {LATE_COLUMN} FROM {name}"
        ctes += [
            exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(name))),
            exp.CTE(
                this=sqlglot.parse_one(tagged, read="spark"),
                alias=exp.TableAlias(this=exp.to_identifier(bindings[name])),
            ),
        ]
    own = emitted.args.get("with_")
    emitted.set("with_", exp.With(expressions=ctes + (own.expressions if own else [])))
    out = emitted.sql(dialect=SparkStreaming)
    columns = _columns(spark, out)
    if any(name == LATE_COLUMN for name, _ in columns):  # a stateless `SELECT *` selects it
        out = f"SELECT * EXCEPT ({LATE_COLUMN}) FROM ({out})"
        columns = [c for c in columns if c[0] != LATE_COLUMN]
    return {"sql": out, "columns": columns}


def _columns(spark, sql: str) -> list[list[str]]:
    """The query's columns, [name, Spark type]; SST509 if Spark cannot analyze it."""
    from pyspark.errors import AnalysisException

    try:
        fields = spark.sql(sql).schema.fields
    except AnalysisException as exc:
        raise StreamingError(
            "SST509",
            "the unit test's query does not run over its given rows",
            str(exc).strip().splitlines()[0],
            "Give each input the columns the model reads (a column that no given row has is "
            "NULL of the input table's type; with `format: sql`, select every column).",
        ) from None
    return [[f.name, f.dataType.simpleString()] for f in fields]


def _watermark_us(watermark: Any) -> int:
    """The unit test's watermark as microseconds since the epoch (none: the end of input)."""
    if watermark is None:
        return END_OF_INPUT_US
    from datetime import datetime, timezone

    try:
        at = datetime.fromisoformat(str(watermark))
    except ValueError:
        raise StreamingError(
            "SST508",
            f"the unit test's watermark {watermark!r} is not a timestamp",
            "meta `watermark` says up to which event time the stream has emitted",
            "Write it as 'YYYY-MM-DD HH:MM:SS' (UTC), e.g. watermark: '2020-04-15 08:10:00'.",
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    delta = at - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
