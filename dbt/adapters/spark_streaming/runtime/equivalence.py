"""Snapshot equivalence: a streaming model's Delta table equals its query run in batch over
the input it has consumed (Flink's Streaming Concepts), and the input rows it dropped as late,
listed.

The model's commits record, per micro-batch, the source versions read so far and the batch's
watermark (runtime/sink.py). From them the oracle reads each source as of the last
version consumed, tagging every row with the watermark of the batch that read it
(delta/source.py `files_by_batch`), and runs the model's own rewritten query with Spark's
late-row and window-emission rule applied (sql/oracle.py). The table, as of that commit,
must equal the result as a multiset.

FLOAT and DOUBLE columns are compared within a tolerance, every other type exactly (DECIMAL
included): the stream adds partial sums in another order than the batch query
(runtime/tolerance.py).

With `state_ttl`, a key whose partials expired starts afresh (Flink's idle state
retention), so its row aggregates only what came after: by design it differs from the batch
query. Its changes are marked `_restarted` in the changelog, and such keys are left out of
the comparison on both sides (the summary counts them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from dbt.adapters.events.logging import AdapterLogger

from ..delta.history import HistoryGone, commit_history
from ..delta.source import FORMAT, consumed, latest_version
from ..errors import StreamingError
from ..layout import changelog_path, query_path
from ..sql.oracle import LATE_COLUMN
from .catalog import Catalog
from .model import compile_model, recorded_model, recorded_query
from .tolerance import FLOAT_ABS_TOLERANCE, FLOAT_TOLERANCE, float_columns, pair, subtract

logger = AdapterLogger("SparkStreaming")

SAMPLE_ROWS = 5


def _batches(target: str, at_version: Optional[int]) -> list[dict]:
    try:
        history = commit_history(target)
    except HistoryGone:
        raise StreamingError(
            "SST506",
            f"the first commits of {target} are no longer known",
            "snapshot equivalence rebuilds the input each micro-batch read, and its watermark, "
            "from the table's commits; its Delta log keeps those of its last "
            "`delta.logRetentionDuration` (30 days by default) once a checkpoint follows them, "
            "and the copy the adapter keeps in _dbt_streaming/history has a gap (another writer "
            "cleaned the log up first, or it was removed): what the first batches read and "
            "dropped as late is unknown, and a batch query over a guess could fail a right table",
            "Rebuild the model (`dbt run --full-refresh -s <model>`) to test it over a whole "
            "history; commit to a model table with delta-rs's log cleanup off "
            "(post_commithook_properties=PostCommitHookProperties(cleanup_expired_logs=False)).",
        ) from None
    batches = [
        c
        for c in history
        if c.get("batch_id") is not None
        and (at_version is None or c["table_version"] <= at_version)
    ]
    if not batches:
        raise StreamingError(
            "SST501",
            f"{target} has no streaming commit"
            + (f" at or before version {at_version}" if at_version is not None else ""),
            "snapshot equivalence compares a table with the input its stream consumed, "
            "recorded per commit",
            "Run `dbt run` on the model first (or pick a later `at_version`).",
        )
    return batches


def _plan(catalog: Catalog, target: str, fingerprint: str):
    try:
        query = recorded_query(target, fingerprint)
    except FileNotFoundError:
        raise StreamingError(
            "SST502",
            f"the query that built {target} is not recorded",
            f"no {query_path(target, fingerprint)} (the table predates query recording)",
            "Rebuild the model with `dbt run --full-refresh`.",
        ) from None
    if query.get("dimensions"):
        raise StreamingError(
            "SST505",
            f"{target} joins dimension tables ({', '.join(query['dimensions'])})",
            "each micro-batch joined them at the version current when it ran, which its commits do "
            "not record, so no single batch query reproduces the table",
            "Remove the snapshot_equivalence test from this model; test the dimension join with "
            "ordinary dbt tests.",
        )
    plan = compile_model(catalog, recorded_model(target, query))
    if plan.fingerprint != fingerprint:
        raise StreamingError(
            "SST503",
            f"the query of {target} compiles differently than when its table was built",
            "this version of dbt-spark-streaming rewrites it to other Spark SQL, so the batch side "
            "would not be the query the stream ran",
            "Rebuild the model with `dbt run --full-refresh`.",
        )
    return plan


def bind_inputs(
    spark, catalog: Catalog, plan, batches: list[dict], after: dict, prefix: str
) -> dict:
    """Temp views of the plan's sources as read by `batches`, rows tagged with their batch's
    watermark; `after` gives per source the position read before the first of them (-1: none)."""
    bindings = {}
    for i, name in enumerate(plan.sources):
        schedule = [
            [consumed(b)[name], b.get("late_watermark_ms", b["watermark_ms"])]
            for b in batches
            if name in b["sources"]
        ]
        view = f"{prefix}_{i}"
        reader = spark.read.format(FORMAT)
        if schedule and plan.change_feed:  # the changes each batch read (config read_change_feed)
            reader = reader.option("readChangeFeed", "true")
        if schedule:  # else a dimension table (config `dimensions`), not read by the stream
            reader = reader.option(
                "batchWatermarks",
                json.dumps(
                    {"after": after.get(name, -1), "batches": schedule, "column": LATE_COLUMN}
                ),
            )
        reader.load(catalog.location_of(name)).createOrReplaceTempView(view)
        bindings[name] = view
    return bindings


def late_rows(spark, catalog: Catalog, plan, batches: list[dict], after: dict, prefix: str):
    """DataFrame of the input rows `batches` dropped as late (None if the query drops none)."""
    queries = plan.late_rows_sql(bind_inputs(spark, catalog, plan, batches, after, prefix))
    if not queries:
        return None
    frames = [spark.sql(q) for q in queries]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other, allowMissingColumns=True)
    return df


def late_rows_view(spark, catalog: Catalog, schema: str, identifier: str) -> str:
    """A temp view listing every input row the model's stream dropped as late, with the window
    it was dropped from and the watermark of the batch that read it."""
    target = catalog.location(schema, identifier)
    batches = _batches(target, None)
    plan = _plan(catalog, target, batches[-1]["fingerprint"])
    view = f"__dss_late_{schema}_{identifier}"
    df = late_rows(spark, catalog, plan, batches, {}, f"{view}_in")
    if df is None:
        df = spark.sql("SELECT CAST(NULL AS timestamp) AS batch_watermark WHERE false")
    df.createOrReplaceTempView(view)
    return view


@dataclass
class Equivalence:
    """Outcome of one snapshot-equivalence check."""

    model: str
    table_version: int  # the version of the table checked
    stream_version: int  # the stream's last commit at or before it
    sources: dict
    watermark: Optional[str]
    actual_rows: int
    expected_rows: int
    restarted_keys: int  # left out: their partials expired (after `expiry`) and started afresh
    missing: int
    unexpected: int
    view: str  # temp view of the differing rows: _diff ('missing' | 'unexpected') + the columns
    columns: list = field(default_factory=list)
    samples: dict = field(default_factory=dict)
    beyond_tolerance: list = field(default_factory=list)  # lines: rows differing in a float only
    expiry: str = "state_ttl"

    @property
    def passed(self) -> bool:
        return not (self.missing or self.unexpected)

    def summary(self) -> str:
        srcs = ", ".join(f"{n}@v{v}" for n, v in self.sources.items())
        outside = (
            f", changed outside the stream after v{self.stream_version}"
            if self.stream_version != self.table_version
            else ""
        )
        head = (
            f"snapshot_equivalence {self.model}@v{self.table_version}{outside} over {srcs} "
            f"(watermark {self.watermark or 'none'}): {self.actual_rows} rows in the table, "
            f"{self.expected_rows} from the batch query"
            + (
                f" ({self.restarted_keys} keys left out: restarted after {self.expiry})"
                if self.restarted_keys
                else ""
            )
            + "; "
        )
        if self.passed:
            return head + "equal"
        lines = [
            head + f"{self.missing} missing, {self.unexpected} unexpected",
            f"  ({', '.join(self.columns)})",
        ]
        for kind in ("missing", "unexpected"):
            for row in self.samples.get(kind, []):
                lines.append(
                    f"  {kind}: ({', '.join('NULL' if v is None else str(v) for v in row)})"
                )
        lines += [f"  {line}" for line in self.beyond_tolerance]
        return "\n".join(lines)


def _restarted_keys(spark, plan, target: str, version: int, columns: list[str]):
    """The keys (a DataFrame of the unique key columns) whose state_ttl partials expired and
    restarted, up to table version `version`; None if there are none."""
    if plan.upsert is None or plan.upsert.partials is None:
        return None
    from ..delta.upsert import RESTARTED, VERSION

    by_name = {c.lower(): c for c in columns}
    keys = [by_name[k.lower()] for k in plan.upsert.unique_key]
    log = spark.read.format(FORMAT).load(changelog_path(target))
    restarted = (
        log.where(f"{RESTARTED} AND {VERSION} <= {int(version)}")
        .select(*[f"`{k}`" for k in keys])
        .distinct()
    )
    return restarted.localCheckpoint() if restarted.limit(1).count() else None


def _emitted(spark, catalog: Catalog, plan, batches: list[dict], prefix: str):
    """What `plan`'s stream emitted over the input `batches` read, up to the last one's
    watermark."""
    bindings = bind_inputs(spark, catalog, plan, batches, {}, prefix)
    rows = spark.sql(plan.emitted_sql(bindings, batches[-1]["watermark_ms"] * 1000))
    return rows.drop(LATE_COLUMN)  # a `SELECT *` of a stateless query selects it too


def _expected(
    spark, catalog: Catalog, target: str, plan, batches: list[dict], prefix: str, tolerance
):
    """The batch query's rows for the table. A query changed in a way that kept the state
    (runtime/changes.py) ran from the batch after the change on: an append-only table holds,
    for each query in turn, what it emitted over its batches, less what it would have emitted
    up to the change (the earlier query's rows; their float columns equal within the
    `tolerance`, (rel, floor): runtime/tolerance.py subtract); an upsert_table holds, for each
    key, the row of the last query that wrote it (its changelog says which). The earlier
    queries' rows have their columns as a change of the columns left them."""
    ends = [
        i
        for i, b in enumerate(batches)
        if i + 1 == len(batches) or batches[i + 1]["fingerprint"] != b["fingerprint"]
    ]
    if len(ends) == 1:
        return _emitted(spark, catalog, plan, batches, f"{prefix}_in")
    expected, start = None, 0
    for n, end in enumerate(ends):
        query = plan if end == ends[-1] else _plan(catalog, target, batches[end]["fingerprint"])
        rows = _emitted(spark, catalog, query, batches[: end + 1], f"{prefix}_in{n}")
        if expected is not None:
            columns = batches[start].get("columns")  # the change rewrote the table's columns
            if columns:
                expected = _rewritten(expected, columns, rows.schema)
            if plan.upsert is None:
                earlier = _emitted(spark, catalog, query, batches[:start], f"{prefix}_in{n}b")
                rows = expected.unionByName(subtract(rows, earlier, *tolerance))
            else:
                rows = _by_last_writer(spark, target, plan, expected, rows, batches[start])
        expected, start = rows, end + 1
    return expected


def _by_last_writer(spark, target: str, plan, before, after, first: dict):
    """An upsert_table's rows: of `after` (the new query's) for the keys its batches wrote, from
    the commit `first` on; of `before` (the earlier queries') for the others."""
    from ..delta.upsert import VERSION

    keys = [k for k in before.columns if k.lower() in {u.lower() for u in plan.upsert.unique_key}]
    log = spark.read.format(FORMAT).load(changelog_path(target))
    written = log.where(f"{VERSION} >= {int(first['table_version'])}").select(*keys).distinct()

    def on(df):
        return [df[f"`{k}`"].eqNullSafe(written[f"`{k}`"]) for k in keys]

    kept = before.join(written, on(before), "left_anti")
    return kept.unionByName(after.join(written, on(after), "left_semi"))


def _rewritten(rows, columns: list, schema):
    """`rows` as the table's rewrite (runtime/streaming.py _check_columns) left them: each
    [new, old] of `columns` the column `old` renamed, or NULL (old None) of `schema`'s type."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in schema.fields}
    return rows.select(
        [
            F.col(f"`{old}`").alias(new)
            if old is not None
            else F.lit(None).cast(types[new]).alias(new)
            for new, old in columns
        ]
    )


def check(
    spark,
    catalog: Catalog,
    schema: str,
    identifier: str,
    *,
    at_version: Optional[int] = None,
    where: Optional[str] = None,
    float_tolerance: Optional[float] = None,
    float_abs_tolerance: Optional[float] = None,
) -> Equivalence:
    """Compare the model's table (as of its last commit, or of `at_version`) with its query run
    in batch over exactly the input that commit had consumed; float columns within the
    tolerance (module docstring; None: the default, 0: exact)."""
    from pyspark.sql import functions as F

    target = catalog.location(schema, identifier)
    version = latest_version(target) if at_version is None else at_version
    batches = _batches(target, version)
    last = batches[-1]
    plan = _plan(catalog, target, last["fingerprint"])
    prefix = f"__dss_eq_{schema}_{identifier}"
    actual = spark.read.format(FORMAT).option("versionAsOf", version).load(target)
    rel = FLOAT_TOLERANCE if float_tolerance is None else float(float_tolerance)
    floor = FLOAT_ABS_TOLERANCE if float_abs_tolerance is None else float(float_abs_tolerance)
    expected = _expected(spark, catalog, target, plan, batches, prefix, (rel, floor))
    if [f.name for f in expected.schema.fields] != actual.columns:
        raise StreamingError(
            "SST504",
            f"the columns of {schema}.{identifier} are not those of its query",
            f"table {actual.columns}, query {[f.name for f in expected.schema.fields]}",
            "Rebuild the model with `dbt run --full-refresh`.",
        )
    expected = expected.select(
        [F.col(f"`{f.name}`").cast(f.dataType) for f in actual.schema.fields]
    )
    if where:
        actual, expected = actual.where(where), expected.where(where)
    restarted = _restarted_keys(spark, plan, target, version, actual.columns)
    if restarted is not None:
        actual, expected = (
            df.join(
                restarted,
                [df[f"`{k}`"].eqNullSafe(restarted[f"`{k}`"]) for k in restarted.columns],
                "left_anti",
            )
            for df in (actual, expected)
        )

    cols = [f"`{c}`" for c in actual.columns]
    tagged = expected.select(*cols, F.lit(1).alias("__e"), F.lit(0).alias("__a")).unionByName(
        actual.select(*cols, F.lit(0).alias("__e"), F.lit(1).alias("__a"))
    )
    # One pass over each side: per distinct row, how often each side has it.
    counts = (
        tagged.groupBy(*cols)
        .agg(F.sum("__e").alias("__e"), F.sum("__a").alias("__a"))
        .localCheckpoint()
    )
    totals = counts.agg(
        F.sum("__e"),
        F.sum("__a"),
        F.sum(F.greatest(F.col("__e") - F.col("__a"), F.lit(0))),
        F.sum(F.greatest(F.col("__a") - F.col("__e"), F.lit(0))),
    ).first()
    expected_rows, actual_rows, missing, unexpected = (int(t or 0) for t in totals)
    rows = (
        counts.where("__e != __a")
        .select(
            F.when(F.col("__e") > F.col("__a"), "missing").otherwise("unexpected").alias("_diff"),
            *cols,
            F.explode(F.sequence(F.lit(1), F.abs(F.col("__e") - F.col("__a")))).alias("__i"),
        )
        .drop("__i")
    )

    floats = float_columns(actual)
    beyond: list[str] = []
    if (rel or floor) and floats and missing and unexpected:
        paired = pair(rows, actual.columns, floats, (missing, unexpected), rel, floor)
        rows, missing, unexpected, beyond = (
            paired.rows,
            paired.missing,
            paired.unexpected,
            paired.beyond,
        )
        if paired.largest:
            column, diff, relative = paired.largest
            logger.debug(
                f"snapshot_equivalence {schema}.{identifier}: {paired.matched} rows equal "
                f"within the float tolerance (relative {rel:g}, absolute {floor:g}); the "
                f"largest difference {diff:.3g} (relative {relative:.3g}) in column {column}"
            )

    view = f"{prefix}_diff"
    rows.createOrReplaceTempView(view)  # cheap to read again: `counts` is checkpointed
    samples = {
        kind: [
            tuple(r)[1:] for r in rows.where(F.col("_diff") == kind).limit(SAMPLE_ROWS).collect()
        ]
        for kind, n in (("missing", missing), ("unexpected", unexpected))
        if n
    }
    return Equivalence(
        model=f"{schema}.{identifier}",
        table_version=version,
        stream_version=last["table_version"],
        sources=last["sources"],
        watermark=last.get("watermark"),
        actual_rows=actual_rows,
        expected_rows=expected_rows,
        restarted_keys=restarted.count() if restarted is not None else 0,
        missing=missing,
        unexpected=unexpected,
        view=view,
        columns=actual.columns,
        samples=samples,
        beyond_tolerance=beyond,
        expiry=plan.upsert.partials.expiry if restarted is not None else "state_ttl",
    )
