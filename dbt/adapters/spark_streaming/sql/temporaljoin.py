"""Event-time temporal joins (Flink's ``FOR SYSTEM_TIME AS OF``): each row of a stream joined
with the version of a versioned table valid at the row's event time::

    SELECT o.id, o.amount * r.rate AS converted
    FROM orders AS o [LEFT] JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
    ON o.currency = r.currency

The right side is versioned:

- an append-only stream of versions keyed by a unique key with an event time (a source declared
  ``meta: {unique_key: <col>, event_time: <col>}``, the design documents' replace mode). A
  version is valid from its time until the next version of its key (``[start, next start)``);
- or an ``upsert_table`` with ``apply_changes`` of ``scd_type: 2`` and a TIMESTAMP
  ``sequence_by``: its rows are the versions, valid over ``[__start_at, __end_at)`` (a delete
  ends one with no next), read as changes from its changelog (``+I`` a version, ``-D`` one
  removed, ``-U``/``+U`` one whose end or values changed: a late change placed in the history);
- or an ``upsert_table`` with ``unique_key`` and ``event_time`` in its config (Flink's
  versioned view over an upsert stream, e.g. keep-latest deduplication): each row its
  changelog upserts (``+I``, ``+U``) is a version of its key from its ``event_time``, as a
  source's appended version (the query cannot delete a key: sql/compiler.py refuses
  ``event_time`` where it could, SSV166). Among versions of one key at one time the last
  committed is valid.

A left row takes the version of greatest start <= its own time (if that version has not ended
by then), and is emitted once the watermark (the minimum of both inputs') passes its time.

The plan (TemporalSpec, plain data; runtime/temporaljoin.py runs it):

- Two inputs, each a source with its watermark, its event time as TIME and MICROS, the join
  key as KEY columns (the stream's key expressions cast to the version key's types) and its
  row. The runtime unions them and groups them by the key into a stateful operator, which
  holds a key's pending rows and versions and outputs each due row with its version (LEFT_ROW,
  RIGHT_ROW; no version: NULL).
- ``post_sql``: the model's own SELECT over a micro-batch of those pairs (BATCH_INPUT): the
  stream's alias names the row, the versioned side's alias the version if the whole ON holds
  for it, else NULL (an INNER join drops the row); then the model's WHERE and items.
- The oracle (``emitted``): the model's query in batch over the rows not dropped as late, the
  versioned side with each version's end (the next version's time), the stream's rows at or
  below the last watermark, each joined with the version valid at its time. An upsert_table's
  versions are its changelog replayed by version without the changes dropped as late: a
  change is late when the part of time it changes starts at or below the watermark of the
  batch that read it, its version's start (``+I``, ``-D``, a change of values) or, for a change
  of end only, the earlier of its two ends (NULL: never). The operator drops the same ones.

Codes: SSV161 AS OF not the stream's event time; SSV162 the table is not versioned; SSV163 the
ON does not equate the version key; SSV164 a RIGHT or FULL temporal join, or one in an
upsert_table; SSV165 a query around the join that does not run on this plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp

from .analysis import table_key
from .columns import spark_name
from .dialect import SparkStreaming, WatermarkedTable
from .errors import SqlError
from .intervals import interval_literal
from .joins import conjuncts
from .oracle import LATE_COLUMN

KEY = "__dss_k{}"  # the operator's grouping columns: the join key
WATERMARKED = frozenset({"timestamp", "timestamp_ltz"})  # (Spark: no watermark on TIMESTAMP_NTZ)
TIME = "__dss_t"  # an input row's event time (the watermarked column)
MICROS = "__dss_us"  # the same, microseconds since the epoch
LEFT_ROW = "__dss_l"  # a row of the stream (a struct of its columns)
RIGHT_ROW = "__dss_r"  # a version (a struct of its columns)
BATCH_INPUT = "__dss_tj_batch"  # post_sql's input: the operator's output in a micro-batch
END = "__dss_end"  # the oracle: when a version stops being valid (the next one's time)


# How a relation holds versions (Versioned.how): recorded with a model's query (runtime/model.py
# QUERY_CONFIG), so these texts stay as they are.
SOURCE_META = "its sources.yml meta {unique_key, event_time}"  # how a source declares versions
SCD2 = "its apply_changes scd_type 2"  # how an upsert_table holds versions: its rows
LATEST = "its unique_key and event_time config"  # ... or the rows its changelog upserts
UPSERTS = ("+I", "+U")  # the changelog's _op of those rows
# an upsert_table's changelog read as changes of versions: the change columns it adds
CHANGE_META = ("_op", "_batch_id", "_commit_version", "_restarted")
END_US = "__dss_end_us"  # a change's version end (microseconds, NULL: open)
OP = "__dss_op"  # a change's _op
COMMIT = "__dss_cv"  # a change's _commit_version
WT = "__dss_wt"  # the versions' watermarked time (the change's latest time)
CHANGE_COLUMNS = (END_US, OP, COMMIT, WT)


@dataclass(frozen=True)
class Versioned:
    """How a relation holds versions: its key columns and each version's time column; ``how``
    SOURCE_META, SCD2 or LATEST (an upsert_table's: read through its changelog); ``end``: each
    version's end column (SCD2)."""

    keys: Tuple[str, ...]
    time: str
    how: str = SOURCE_META
    end: Optional[str] = None

    @property
    def from_changelog(self) -> bool:
        """Whether the versions are read from the relation's changelog (an upsert_table's)."""
        return self.end is not None or self.how == LATEST


@dataclass
class TemporalJoin:
    """``join`` in ``scope``: ``left`` (alias) joined, INNER or LEFT (``kind``), with the versioned
    ``right`` table (alias ``right_alias``) as of ``as_of`` (a left column); ``keys`` pairs the
    left expressions equated with the right key columns; ``rest`` the other ON conjuncts."""

    scope: exp.Select
    join: exp.Join
    kind: str
    left: str
    right: exp.Table
    right_alias: str
    as_of: exp.Column
    versioned: Versioned
    keys: Tuple[Tuple[exp.Expr, str], ...]
    rest: Tuple[exp.Expr, ...]


def _aliases(scope: exp.Select) -> List[str]:
    frm = scope.args.get("from_")
    relations = ([frm.this] if frm is not None else []) + [
        j.this for j in scope.args.get("joins") or []
    ]
    return [r.alias_or_name.lower() for r in relations]


def _temporal_join(
    scope: exp.Select, join: exp.Join, versioned: Mapping[str, Versioned]
) -> TemporalJoin:
    table = join.this
    version = table.args["version"]
    right = table.alias_or_name.lower()
    name = table_key(table)
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise SqlError(
            "SSV164",
            f"a {join.sql(dialect='spark').split(' JOIN')[0].strip() or side} temporal join",
            "a temporal join emits each row of its left side once, joined with the version "
            "valid at its time (or with NULLs: LEFT); the versions themselves are not emitted",
            "Write INNER JOIN or LEFT JOIN, the stream on the left and the versioned table FOR "
            "SYSTEM_TIME AS OF the stream's event time on the right.",
            join,
        )
    as_of = version.expression
    aliases = _aliases(scope)
    left = [a for a in aliases if a != right]
    if (
        str(version.this).upper() != "TIMESTAMP"
        or not isinstance(as_of, exp.Column)
        or (as_of.table and as_of.table.lower() == right)
        or (as_of.table and as_of.table.lower() not in left)
        or (not as_of.table and len(left) != 1)
    ):
        raise SqlError(
            "SSV161",
            f"FOR SYSTEM_TIME AS OF {as_of.sql(dialect='spark')}: not an event-time column "
            "of the joined stream",
            "the version joined to a row is the one valid at the row's event time, so AS OF "
            "names that column; a literal would be time travel, and processing time would make "
            "the result depend on when a micro-batch ran",
            "Write FOR SYSTEM_TIME AS OF <stream alias>.<event-time column> (e.g. "
            f"{left[0] if left else 'o'}.ts), or list {name} in `dimensions` to join its "
            "latest version at each batch.",
            version,
        )
    spec = versioned.get(name)
    if spec is None:
        raise SqlError(
            "SSV162",
            f"{name} is not a versioned table",
            "a temporal join needs each version's key and time to know which version was valid "
            "when",
            f"Declare a source's versions in its sources.yml entry (meta: {{unique_key: "
            "<key column>, event_time: <time column>}: an append-only stream of versions), "
            "join an upsert_table with apply_changes scd_type 2 (its versions by a TIMESTAMP "
            "sequence_by) or one with unique_key and event_time in its config (the rows it "
            f"upserts, each from its event_time), or list {name} in `dimensions` and drop FOR "
            "SYSTEM_TIME AS OF to join its latest version at each batch.",
            table,
        )
    keys: List[Tuple[exp.Expr, str]] = []
    rest: List[exp.Expr] = []
    for cond in conjuncts(join.args.get("on")):
        pair = _key_equality(cond, right, spec.keys)
        if pair is not None:
            keys.append(pair)
        else:
            rest.append(cond)
    missing = [k for k in spec.keys if k.lower() not in {c.lower() for _, c in keys}]
    stream = left[0] if left else "o"
    if missing:
        raise SqlError(
            "SSV163",
            f"the ON of the temporal join with {name} does not equate its key {', '.join(missing)}",
            f"a row is joined with one version of one key of {name} ({spec.how}), so the ON "
            "names every key column",
            "Add "
            + " AND ".join(f"{stream}.<column> = {right}.{k}" for k in missing)
            + " to the ON.",
            join,
        )
    return TemporalJoin(
        scope,
        join,
        "LEFT" if side == "LEFT" else "INNER",
        (as_of.table or left[0]).lower(),
        table,
        right,
        as_of,
        spec,
        tuple(keys),
        tuple(rest),
    )


def _key_equality(
    cond: exp.Expr, right: str, keys: Tuple[str, ...]
) -> Optional[Tuple[exp.Expr, str]]:
    """(the left expression, the right key column) if ``cond`` equates a key column of the
    versioned side (alias ``right``) with an expression of the other side."""
    if not isinstance(cond, exp.EQ):
        return None
    for mine, other in ((cond.this, cond.expression), (cond.expression, cond.this)):
        if (
            isinstance(mine, exp.Column)
            and mine.table.lower() == right
            and mine.name.lower() in {k.lower() for k in keys}
            and all(c.table.lower() != right for c in other.find_all(exp.Column))
        ):
            return other, mine.name
    return None


def temporal_joins(tree: exp.Expr, versioned: Mapping[str, Versioned]) -> List[TemporalJoin]:
    """Every ``JOIN t FOR SYSTEM_TIME AS OF ...`` of ``tree``, analysed; ``versioned`` maps the
    relations that hold versions (table_key) to how. SqlError (SSV161-SSV164) on one that cannot
    run."""
    found = []
    for join in tree.find_all(exp.Join):
        table = join.this
        if isinstance(table, exp.Table) and isinstance(table.args.get("version"), exp.Version):
            assert isinstance(join.parent, exp.Select)
            found.append(_temporal_join(join.parent, join, versioned))
    return found


@dataclass(frozen=True)
class TemporalSpec:
    """A temporal join's plan (see the module docstring). ``kind`` INNER or LEFT; ``keys`` the
    KEY columns; ``left_sql`` and ``right_sql`` the inputs over the source tables; ``post_sql``
    the result over BATCH_INPUT; for the oracle the aliases, event-time columns and version key
    columns as the query spells them; ``right_end`` and ``right_values`` (the version's columns
    but its end) for versions read as changes of an upsert_table (SCD2) from ``changelog``,
    read in whole versions (a version's -U and +U in one micro-batch); with ``changelog`` but
    no ``right_end``, the versions are the rows it upserts (LATEST), each with its COMMIT."""

    kind: str
    keys: Tuple[str, ...]
    left_sql: str
    right_sql: str
    post_sql: str
    left: str
    right: str
    left_time: str
    right_time: str
    right_keys: Tuple[str, ...]
    right_end: Optional[str] = None
    right_values: Tuple[str, ...] = ()
    changelog: Optional[str] = None  # the changelog the versions are read from (table key)

    @property
    def changes(self) -> bool:
        """Whether the versions arrive as changes (CHANGE_COLUMNS beside each)."""
        return self.right_end is not None

    @property
    def upserts(self) -> bool:
        """Whether the versions are the rows an upsert_table's changelog upserts (LATEST)."""
        return self.changelog is not None and not self.changes


def _shape_error(what: str, node: Optional[exp.Expr]) -> SqlError:
    return SqlError(
        "SSV165",
        what,
        "a temporal join runs as the model's one SELECT: a stream joined with one versioned "
        "table, then a projection and WHERE of the joined rows, each emitted once",
        "Write SELECT <columns> FROM <stream> [LEFT] JOIN <versioned> FOR SYSTEM_TIME AS OF "
        "<stream>.<event time> ON ... [WHERE ...]; aggregate its rows in a downstream model.",
        node,
    )


def _check_shape(join: TemporalJoin, tree: exp.Expr) -> None:
    scope = join.scope
    if scope is not tree:
        raise _shape_error("a temporal join inside a subquery or CTE", join.join)
    if len(scope.args.get("joins") or []) != 1:
        raise _shape_error("a temporal join beside another join", join.join)
    if not isinstance(scope.args["from_"].this, exp.Table):
        raise _shape_error("a temporal join of a subquery or table function", scope.args["from_"])
    for arg in ("group", "having", "qualify", "distinct", "windows", "order", "limit", "with_"):
        if scope.args.get(arg):
            raise _shape_error(f"{arg.rstrip('_').upper()} around a temporal join", scope.args[arg])
    for node in scope.find_all(exp.AggFunc, exp.Window, exp.Subquery, exp.Select):
        if node is not scope:
            raise _shape_error(f"{node.sql(dialect='spark')} in a temporal join's query", node)


def _columns(schema: Mapping[str, str]) -> Dict[str, str]:
    return {c.lower(): c for c in schema}


def _qualify(node: exp.Expr, sides: List[Tuple[str, Dict[str, str]]]) -> None:
    """Qualify, in place, each column of ``node`` not qualified by a side's alias with the alias
    of the side that has it (``sides``: (alias, lower-case name -> name)): ``x`` and, for a
    struct's field, ``s.f``."""
    aliases = {alias for alias, _ in sides}
    for column in list(node.find_all(exp.Column)):
        if isinstance(column.this, exp.Star) or column.args.get("db") is not None:
            continue
        head = column.table.lower() if column.table else column.name.lower()
        if column.table and column.table.lower() in aliases:
            continue
        for alias, names in sides:
            if head in names:
                column.set("db" if column.table else "table", exp.to_identifier(alias))
                break


def _expand(item: exp.Expr, sides: List[Tuple[str, Dict[str, str]]]) -> List[exp.Expr]:
    """``*`` and ``<alias>.*`` as the columns they stand for."""
    if isinstance(item, exp.Star):
        wanted = [alias for alias, _ in sides]
    elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
        wanted = [item.table.lower()]
    else:
        return [item]
    return [
        exp.column(name, table=alias, quoted=True)
        for alias, names in sides
        if alias in wanted
        for name in names.values()
    ]


def _input(
    table: exp.Table,
    alias: str,
    time: str,
    keys: Sequence[exp.Expr],
    delay_us: int,
    upserts: Optional[Sequence[str]] = None,
) -> exp.Select:
    """One input of the operator: the KEY columns, TIME, MICROS and the row's columns (which
    the runtime packs into LEFT_ROW or RIGHT_ROW); ``upserts``: ``table`` is an upsert_table's
    changelog (LATEST), of which the rows it upserts are read, with these columns and COMMIT."""
    watermarked = WatermarkedTable(
        this=exp.Table(this=table.this.copy(), db=table.args["db"].copy() if table.db else None),
        column=exp.column(time),
        delay=interval_literal(delay_us),
    )
    source = exp.Subquery(
        this=exp.select(exp.Star()).from_(watermarked),
        alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
    )
    at = exp.column(time, table=alias, quoted=True)
    items = [exp.alias_(k, KEY.format(i)) for i, k in enumerate(keys)]
    items += [exp.alias_(at.copy(), TIME), exp.alias_(exp.func("unix_micros", at.copy()), MICROS)]
    on_time = exp.Not(this=exp.Is(this=at, expression=exp.null()))
    if upserts is None:
        items.append(exp.Column(this=exp.Star(), table=exp.to_identifier(alias, quoted=True)))
        return exp.select(*items).from_(source).where(on_time)
    items.append(exp.alias_(exp.column("_commit_version", table=alias, quoted=True), COMMIT))
    items += [exp.column(c, table=alias, quoted=True) for c in upserts]
    return exp.select(*items).from_(source).where(exp.and_(on_time, _upserted(alias)))


def _upserted(alias: Optional[str] = None) -> exp.Expr:
    """The changelog's rows that upsert a key (UPSERTS), of the side ``alias``: a ``-U`` repeats
    a version already read, and in the commit of a ``+U`` at the same time it would compete
    with it for the last committed."""
    op = exp.column("_op", table=alias, quoted=True) if alias else exp.column("_op")
    return exp.In(this=op, expressions=[exp.Literal.string(o) for o in UPSERTS])


def analyse_temporal_join(
    tree: exp.Expr,
    schemas: Mapping[str, Mapping[str, str]],
    versioned: Mapping[str, Versioned],
    delay_us: Optional[int],
    upsert: bool,
    dimensions: Sequence[str] = (),
    changelogs: Mapping[str, str] = {},
) -> Optional[TemporalSpec]:
    """The plan of the model query ``tree`` if it is a temporal join (None if it has none),
    qualifying its columns and expanding its stars in place, and binding an upsert_table's
    versions to its changelog (``changelogs``: the upsert_tables' changelog names); SqlError
    SSV105, SSV161-SSV165 if it cannot run. ``versioned`` as temporal_joins; ``upsert``: the
    model is an upsert_table; ``dimensions``: config `dimensions` (neither side may be one)."""
    joins = temporal_joins(tree, versioned)
    if not joins:
        return None
    join = joins[0]
    _check_shape(join, tree)
    assert isinstance(tree, exp.Select)
    left_table = tree.args["from_"].this
    left_schema = schemas.get(table_key(left_table), {})
    changelog = changelogs.get(table_key(join.right)) if join.versioned.from_changelog else None
    right_schema = {
        c: t
        for c, t in schemas.get(changelog or table_key(join.right), {}).items()
        if not (changelog and c.lower() in CHANGE_META)
    }
    left_names, right_names = _columns(left_schema), _columns(right_schema)
    end = join.versioned.end
    if end is not None:  # not part of a version as joined: it may change after (module doc)
        right_names.pop(end.lower(), None)
    sides = [(join.left, left_names), (join.right_alias, right_names)]
    for node in [*tree.expressions, join.join.args.get("on"), tree.args.get("where")]:
        if node is not None:
            _qualify(node, sides)
            _refuse_end(node, end, join.right_alias)
    join = temporal_joins(tree, versioned)[0]  # its key equalities, over qualified columns
    if upsert:
        raise SqlError(
            "SSV164",
            "a temporal join in an upsert_table",
            "a temporal join emits each row of its stream once, joined with the version valid "
            "at its time: its rows never change, so they append",
            "Use materialized='streaming_view' (and aggregate its rows in a downstream model).",
            join.join,
        )
    for table in (left_table, join.right):
        key = table_key(table)
        if any(d.lower() in (key, key.rpartition(".")[2]) for d in dimensions):
            raise _shape_error(
                f"{key} is in config `dimensions`: read as a table at its latest version, it "
                "has no rows arriving for a temporal join (remove it from `dimensions`, or drop "
                "FOR SYSTEM_TIME AS OF to join the latest version)",
                table,
            )
    time = left_names.get(join.as_of.name.lower())
    if time is None or left_schema[time].lower() not in WATERMARKED:
        raise SqlError(
            "SSV161",
            f"FOR SYSTEM_TIME AS OF {join.as_of.sql(dialect='spark')}: not a TIMESTAMP column of "
            f"{table_key(left_table)}",
            "the version joined to a row is the one valid at the row's event time, a TIMESTAMP "
            "column of the stream (not TIMESTAMP_NTZ: Spark keeps no watermark on it)",
            "Name the stream's event-time column (a TIMESTAMP) in FOR SYSTEM_TIME AS OF; cast a "
            "TIMESTAMP_NTZ column to TIMESTAMP in an upstream model.",
            join.as_of,
        )
    spec = join.versioned
    name = table_key(join.right)
    if spec.from_changelog and changelog is None:
        raise SqlError(
            "SSV162",
            f"{name} has no changelog to read its versions from",
            f"an upsert_table's versions ({spec.how}) are read from its changelog, which its "
            "first run creates",
            f"Run {name} first (dbt run builds a model's parents before it).",
            join.right,
        )
    missing = [c for c in (*spec.keys, spec.time) if c.lower() not in right_names]
    right_end = _columns(right_schema).get(end.lower()) if end else None
    if end and right_end is None:
        missing.append(end)
    right_time = right_names.get(spec.time.lower())
    if missing or right_time is None or right_schema[right_time].lower() not in WATERMARKED:
        raise SqlError(
            "SSV162",
            f"{name} has no column {', '.join(missing)}, which {spec.how} names"
            if missing
            else f"{name}'s version time {spec.time} is not a TIMESTAMP column (TIMESTAMP_NTZ "
            "has no watermark in Spark)",
            f"a version's key and time are columns of {name} ({spec.how}); the time is a TIMESTAMP",
            {
                SCD2: f"Give {name} a TIMESTAMP sequence_by (CAST it in its query).",
                LATEST: f"Set the event_time of {name} to a TIMESTAMP column of its query "
                "(CAST it there).",
            }.get(
                spec.how,
                f"Fix the meta of {name} in its sources.yml entry to name its key and "
                "event-time columns.",
            ),
            join.right,
        )
    if changelog is not None:  # the versions are read as changes from the changelog
        db, _, identifier = changelog.rpartition(".")
        join.right.set("alias", exp.TableAlias(this=exp.to_identifier(join.right_alias)))
        join.right.set("this", exp.to_identifier(identifier))
        join.right.set("db", exp.to_identifier(db) if db else None)
    if delay_us is None:
        raise SqlError(
            "SSV105",
            "temporal join without a watermark delay",
            "a row is joined once the watermark passes its time: the versions up to it have "
            "arrived by then, so the stream needs to know how late rows may arrive",
            "Set watermark_delay in the model config (e.g. watermark_delay='1 minute').",
            join.join,
        )
    left, right = join.left, join.right_alias
    items = [e for item in tree.expressions for e in _expand(item, sides)]
    named = []
    for item in items:
        output = spark_name(item, (left, right))
        if output is None:
            raise _shape_error(f"{item.sql(dialect='spark')} has no name (write AS <name>)", item)
        named.append(
            exp.alias_(item.unalias() if isinstance(item, exp.Alias) else item, output, quoted=True)
        )
    tree.set("expressions", items)
    key_columns = [right_names[c.lower()] for _, c in join.keys]
    left_keys = [
        _key(e, right_schema[c], left, left_names, left_schema)
        for (e, _), c in zip(join.keys, key_columns, strict=True)
    ]
    right_keys = [exp.column(c, table=right, quoted=True) for c in key_columns]
    values = tuple(right_names.values())
    return TemporalSpec(
        kind=join.kind,
        keys=tuple(KEY.format(i) for i in range(len(join.keys))),
        left_sql=_sql(_input(left_table, left, time, left_keys, delay_us)),
        right_sql=_sql(
            _input(
                join.right,
                right,
                right_time,
                right_keys,
                delay_us,
                values if changelog is not None else None,
            )
            if right_end is None
            else _changes(join.right, right, (right_time, right_end), values, right_keys, delay_us)
        ),
        post_sql=_sql(_post(named, join, tree.args.get("where"))),
        left=left,
        right=right,
        left_time=time,
        right_time=right_time,
        right_keys=tuple(key_columns),
        right_end=right_end,
        right_values=values if right_end else (),
        changelog=changelog,
    )


def _key(
    left: exp.Expr,
    spark_type: str,
    alias: str,
    names: Mapping[str, str],
    schema: Mapping[str, str],
) -> exp.Expr:
    """The grouping key of the stream's side (``alias``, columns ``schema``, ``names`` as
    _columns gives them) of a key equality
    ``left = <a version key of type spark_type>``: SSV163 if ``left`` is of another type (its
    group would not be the rows the equality matches), else ``left`` itself, or TRY_CAST to
    the key's type where its type is not known here."""
    wanted = exp.DataType.build(spark_type, dialect="spark")
    known: Optional[exp.DataType] = left.to if isinstance(left, exp.Cast) else None
    if isinstance(left, exp.Column) and left.table.lower() == alias and not left.args.get("db"):
        name = names.get(left.name.lower())
        known = exp.DataType.build(schema[name], dialect="spark") if name else None
    if known is None:
        return exp.TryCast(this=left.copy(), to=wanted, safe=True)
    if known != wanted:
        text = left.sql(dialect="spark")
        raise SqlError(
            "SSV163",
            f"the temporal join's key {text} is {known.sql('spark')}, the version key it "
            f"equals {wanted.sql('spark')}",
            "a row is matched with the versions of its key's group; with two types the group "
            "and the ON's comparison could tell other rows apart",
            f"CAST one side in the ON (e.g. CAST({text} AS {wanted.sql('spark')}) = ...).",
            left,
        )
    return left.copy()


def _sql(tree: exp.Expr) -> str:
    return tree.sql(dialect=SparkStreaming, comments=False)


def _changes(
    table: exp.Table,
    alias: str,
    times: Tuple[str, str],
    values: Sequence[str],
    keys: Sequence[exp.Expr],
    delay_us: int,
) -> exp.Select:
    """The versions' input read as changes (an upsert_table's changelog ``table``): the KEY
    columns, TIME NULL (Spark drops no change as late: the operator does, by pairs), MICROS the
    version's start, CHANGE_COLUMNS, and the version's columns ``values``. The watermark is on
    WT, the change's latest time (its start, or its end if later)."""
    start, end = (exp.column(c, quoted=True) for c in times)
    latest = exp.func("greatest", start, exp.Coalesce(this=end, expressions=[start.copy()]))
    watermarked = WatermarkedTable(
        this=exp.Table(this=table.this.copy(), db=table.args["db"].copy() if table.db else None),
        column=exp.alias_(latest, WT),
        delay=interval_literal(delay_us),
    )
    source = exp.Subquery(
        this=exp.select(exp.Star()).from_(watermarked),
        alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
    )

    def column(name: str) -> exp.Column:
        return exp.column(name, table=alias, quoted=True)

    items = [exp.alias_(k, KEY.format(i)) for i, k in enumerate(keys)]
    items += [
        exp.alias_(exp.cast(exp.null(), "timestamp"), TIME),
        exp.alias_(exp.func("unix_micros", column(times[0])), MICROS),
        exp.alias_(exp.func("unix_micros", column(times[1])), END_US),
        exp.alias_(column("_op"), OP),
        exp.alias_(column("_commit_version"), COMMIT),
        exp.alias_(column(WT), WT),
    ]
    return exp.select(*items, *(column(c) for c in values)).from_(source)


def _refuse_end(node: exp.Expr, end: Optional[str], alias: str) -> None:
    """SSV165 if ``node`` reads the versions' end column ``end`` (of the side ``alias``)."""
    if end is None:
        return
    for column in node.find_all(exp.Column):
        if column.name.lower() == end.lower() and column.table.lower() in ("", alias):
            raise _shape_error(
                f"{column.sql(dialect='spark')}: a version's end is not known when a row is "
                "joined with it (a later change may end it); the version valid at the row's "
                "time is joined, and its columns but the end can be read",
                column,
            )


def _post(items: List[exp.Expr], join: TemporalJoin, where: Optional[exp.Where]) -> exp.Select:
    """The result of a micro-batch of (LEFT_ROW, RIGHT_ROW) pairs (BATCH_INPUT)."""
    left, right = (exp.to_identifier(a, quoted=True) for a in (join.left, join.right_alias))
    pairs = exp.select(
        exp.alias_(exp.column(LEFT_ROW), left.copy()),
        exp.alias_(exp.column(RIGHT_ROW), right.copy()),
    ).from_(exp.to_table(BATCH_INPUT))
    on = join.join.args.get("on") or exp.true()
    matched = exp.If(this=on.copy(), true=exp.column(right.copy()), false=exp.null())
    joined = exp.select(exp.column(left.copy()), exp.alias_(matched, right.copy())).from_(
        pairs.subquery("__dss_pairs")
    )
    post = exp.select(*items).from_(joined.subquery("__dss_joined"))
    conditions = [where.this.copy()] if where is not None else []
    if join.kind == "INNER":
        conditions.insert(
            0, exp.Not(this=exp.Is(this=exp.column(right.copy()), expression=exp.null()))
        )
    return post.where(exp.and_(*conditions)) if conditions else post


def emitted(tree: exp.Expr, spec: TemporalSpec, watermark_us: int) -> exp.Expr:
    """What the stream emitted up to a batch with watermark ``watermark_us``: the model's query
    (sources bound to views carrying LATE_COLUMN) over the rows not dropped as late, the
    stream's rows at or below the watermark, each joined with the version valid at its time."""
    tree = tree.copy()
    join = tree.args["joins"][0]
    due = exp.LTE(
        this=exp.column(spec.left_time),
        expression=exp.func("timestamp_micros", exp.Literal.number(watermark_us)),
    )
    _filtered(tree.args["from_"].this, spec.left_time, due)
    if spec.changes:
        _replace(join.this, _replayed(join.this, spec))
    else:
        versions = _filtered(join.this, spec.right_time, _upserted() if spec.upserts else None)
        order = [spec.right_time, *(["_commit_version"] if spec.upserts else [])]
        end = exp.Window(  # (among versions at one time the last committed is valid)
            this=exp.func("lead", exp.column(spec.right_time)),
            partition_by=[exp.column(k) for k in spec.right_keys],
            order=exp.Order(expressions=[exp.Ordered(this=exp.column(c)) for c in order]),
        )
        versions.set("expressions", [exp.Star(), exp.alias_(end, END)])
    at = exp.column(spec.left_time, table=spec.left, quoted=True)
    start, stop = (exp.column(c, table=spec.right, quoted=True) for c in (spec.right_time, END))
    valid = exp.and_(
        exp.LTE(this=start, expression=at.copy()),
        exp.or_(
            exp.Is(this=stop.copy(), expression=exp.null()), exp.LT(this=at.copy(), expression=stop)
        ),
    )
    join.set("on", exp.and_(join.args.get("on") or exp.true(), valid))
    return tree


def late_rows(tree: exp.Expr, spec: TemporalSpec) -> List[exp.Expr]:
    """The rows of each side the stream dropped as late, with the watermark of the batch that
    read them."""
    out: List[exp.Expr] = []
    for table, time, versions in (
        (tree.args["from_"].this, spec.left_time, False),
        (tree.args["joins"][0].this, spec.right_time, True),
    ):
        changes = versions and spec.changes  # late by their effect
        rows = exp.select(
            exp.Star(except_=[exp.column(c) for c in (LATE_COLUMN, *(_EFFECT if changes else ()))]),
            exp.alias_(exp.column(LATE_COLUMN), "batch_watermark"),
        )
        if changes:
            out.append(rows.from_(_effects(table, spec).subquery("__dss_c")).where(_EFFECT[1]))
        else:
            late = _late(time)
            if versions and spec.upserts:
                late = exp.and_(_upserted(), late)
            out.append(rows.from_(exp.Table(this=table.this.copy())).where(late))
    return out


_EFFECT = ("__dss_effect", "__dss_late_change")  # a change's effect time and whether it is late
_CHANGES, _EFFECTS = "__dss_changes", "__dss_effects"  # the templates' inputs (placeholders)
_EFFECTS_SQL = """
SELECT *, COALESCE(__dss_effect <= unix_micros({late}), FALSE) AS __dss_late_change
FROM (
  SELECT *, CASE
      WHEN _op IN ('+I', '-D') OR NOT (
        MAX(IF(_op = '-U', STRUCT({values}), NULL)) OVER w
        <=> MAX(IF(_op = '+U', STRUCT({values}), NULL)) OVER w
      ) THEN unix_micros({start})
      ELSE LEAST(
        MAX(IF(_op = '-U', COALESCE(unix_micros({end}), {never}), NULL)) OVER w,
        MAX(IF(_op = '+U', COALESCE(unix_micros({end}), {never}), NULL)) OVER w
      )
    END AS __dss_effect
  FROM {changes}
  WINDOW w AS (PARTITION BY {keys}, {start}, _commit_version)
) AS __dss_e
"""
_REPLAYED_SQL = """
SELECT *, LEAST({end}, LEAD({start}) OVER (PARTITION BY {keys} ORDER BY {start})) AS {out}
FROM (
  SELECT *, ROW_NUMBER() OVER (
      PARTITION BY {keys}, {start}
      ORDER BY _commit_version DESC, CASE WHEN _op IN ('+I', '+U') THEN 1 ELSE 0 END DESC
    ) AS __dss_rn
  FROM {effects} AS __dss_f
  WHERE NOT __dss_late_change AND _op <> '-U'
) AS __dss_r
WHERE __dss_rn = 1 AND _op IN ('+I', '+U')
"""


def _template(sql: str, spec: TemporalSpec) -> exp.Select:
    """``sql`` (_EFFECTS_SQL, _REPLAYED_SQL) over the versions' columns of ``spec``."""

    def quoted(name: str) -> str:
        return exp.column(name, quoted=True).sql(dialect="spark")

    tree = sqlglot.parse_one(
        sql.format(
            keys=", ".join(map(quoted, spec.right_keys)),
            start=quoted(spec.right_time),
            end=quoted(spec.right_end or ""),
            values=", ".join(map(quoted, spec.right_values)),
            late=quoted(LATE_COLUMN),
            never=str(2**63 - 1),
            out=END,
            changes=_CHANGES,
            effects=_EFFECTS,
        ),
        read="spark",
    )
    assert isinstance(tree, exp.Select)
    return tree


def _effects(table: exp.Table, spec: TemporalSpec) -> exp.Select:
    """The changes read from the bound changelog ``table``, each with its effect time and
    whether it was late (_EFFECT; see the module docstring)."""
    tree = _template(_EFFECTS_SQL, spec)
    for node in tree.find_all(exp.Table):
        if node.name == _CHANGES:
            node.replace(exp.Table(this=table.this.copy()))
    return tree


def _replayed(table: exp.Table, spec: TemporalSpec) -> exp.Select:
    """The versions the stream held: the changes of the bound changelog ``table`` not dropped
    as late, replayed by version (the last change of each), each with its end (END: its own,
    or the next version's start if earlier)."""
    tree = _template(_REPLAYED_SQL, spec)
    for node in tree.find_all(exp.Table):
        if node.name == _EFFECTS:
            node.replace(exp.Subquery(this=_effects(table, spec), alias=node.args["alias"]))
    return tree


def _replace(table: exp.Table, rows: exp.Select) -> None:
    """Replace the bound ``table`` by ``rows``, keeping its correlation name."""
    alias = table.args.get("alias") or exp.TableAlias(this=table.this.copy())
    table.replace(exp.Subquery(this=rows, alias=alias.copy()))


def _late(time: str) -> exp.Expr:
    """Spark's rule: a row at or below the watermark of the batch that read it is dropped."""
    late = exp.LTE(this=exp.column(time), expression=exp.column(LATE_COLUMN))
    return exp.Coalesce(this=late, expressions=[exp.false()])


def _filtered(table: exp.Table, time: str, condition: Optional[exp.Expr]) -> exp.Select:
    """Replace the bound ``table`` by its rows with a time, not dropped as late (and meeting
    ``condition``), keeping its correlation name; the new SELECT."""
    on_time = exp.and_(
        exp.Not(this=exp.Is(this=exp.column(time), expression=exp.null())),
        exp.Not(this=_late(time)),
        *([condition] if condition is not None else []),
    )
    rows = exp.select(exp.Star()).from_(exp.Table(this=table.this.copy())).where(on_time)
    _replace(table, rows)
    return rows
