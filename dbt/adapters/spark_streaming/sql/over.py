"""OVER aggregations on event time (Flink's "over aggregation", FLIP-11 row windows)::

    SELECT k, ts, x,
           SUM(x) OVER (PARTITION BY k ORDER BY ts
                        RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW) AS s
    FROM <source> [WHERE ...]

recognised and checked here, in pure SQL terms, into an OverSpec (plain data): Spark has no
streaming OVER operator, so runtime/over.py runs it as a stateful operator over the rows of
``input_sql``, one output row per input row once the watermark passes the row's time.

The shape: one SELECT over one source table (optionally filtered by WHERE), each item either
free of window functions or exactly ``<aggregate>(...) OVER <window>``, all over the same window,
inline or named (``WINDOW w AS (...)``). The window's ORDER BY is one TIMESTAMP column of the
source, ascending: it becomes the stream's event time (watermarked by ``watermark_delay``).
Frames: ``RANGE BETWEEN <interval> PRECEDING AND CURRENT ROW``, ``ROWS BETWEEN <n> PRECEDING
AND CURRENT ROW``, ``ROWS|RANGE UNBOUNDED PRECEDING`` (also spelt ``BETWEEN UNBOUNDED PRECEDING
AND CURRENT ROW``, or no frame: RANGE UNBOUNDED, the SQL default), and the one-bound short forms
of all three. Over a RANGE or ROWS frame any aggregate runs, as in a window aggregate (Spark
evaluates it over the frame's rows in each micro-batch; COUNT(DISTINCT x) as
SIZE(COLLECT_SET(x))); an unbounded frame keeps one running accumulator per partition, which
the aggregates of RUNNING have.

Codes: SSV170 ORDER BY not the event time ascending; SSV171 a frame that cannot run on a
stream; SSV172 a shape outside the one above; SSV173 an OVER aggregation as upsert_table;
SSV174 a ranking without a bound (no Top-N).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Tuple

from sqlglot import exp

from .analysis import TIMESTAMP_TYPES, table_key
from .dialect import WatermarkedTable, WindowTVF
from .errors import SqlError
from .intervals import interval_literal, interval_micros
from .oracle import LATE_COLUMN

RANGE = "range"  # RANGE BETWEEN <interval> PRECEDING AND CURRENT ROW
ROWS = "rows"  # ROWS BETWEEN <n> PRECEDING AND CURRENT ROW
UNBOUNDED_RANGE = "unbounded_range"  # RANGE UNBOUNDED PRECEDING (peers included)
UNBOUNDED_ROWS = "unbounded_rows"  # ROWS UNBOUNDED PRECEDING

# the aggregates with a running accumulator (runtime/over.py), for unbounded frames
RUNNING = {
    exp.Sum: "sum",
    exp.Count: "count",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
    exp.CountIf: "count_if",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
}
OFFSET_FUNCTIONS = (exp.Lag, exp.Lead)  # sqlglot's AggFuncs, but frames do not apply to them
TIME = "__dss_time_us"  # the input's event time, microseconds since the epoch (bigint)
EVENT_TIME = "__dss_event_time"  # the input's event time (the watermarked timestamp)
SEQ = "__dss_seq"  # a row's arrival order in its partition (the operator's output, bounded frames)
EMIT = "__dss_emit"  # true for a row to emit, false for a kept row that is only in frames
KEY = "__dss_p{}"
COLUMN = "__dss_c{}"
ARG = "__dss_a{}"


@dataclass(frozen=True)
class OverAggregate:
    """One ``<aggregate> OVER w`` item, for an unbounded frame's running accumulator: ``function``
    (a RUNNING name) of the input column ``arg`` (None: COUNT(*)). Over a bounded frame Spark
    evaluates the items of OverSpec.frame_items instead."""

    function: Optional[str]
    arg: Optional[str]


@dataclass(frozen=True)
class OverSpec:
    """An OVER aggregation, for runtime/over.py.

    The operator's input rows (QueryPlan.sql_for) carry the partition keys ``keys``, TIME and
    EVENT_TIME, the non-window items and the aggregates' arguments. ``frame`` is RANGE, ROWS,
    UNBOUNDED_RANGE or UNBOUNDED_ROWS and ``preceding`` its bound (microseconds for RANGE, rows
    for ROWS, None unbounded). ``outputs`` lists the result columns in order: (name, input
    column) for a non-window item (EVENT_TIME for the time column itself), (name, index into
    ``aggregates``) for an aggregate. ``time_column`` is the source's event-time column (for
    the oracle). ``frame_items`` (bounded frames) are the Spark SQL select items that give the
    result columns from the operator's output rows in a micro-batch: each aggregate over the
    frame as a Spark window over TIME (RANGE) or TIME, SEQ (ROWS), then EMIT."""

    keys: Tuple[str, ...]
    frame: str
    preceding: Optional[int]
    aggregates: Tuple[OverAggregate, ...]
    outputs: Tuple[Tuple[str, object], ...]
    time_column: str
    frame_items: Tuple[str, ...] = ()


def _error(code: str, what: str, why: str, fix: str, node: Optional[exp.Expr]) -> SqlError:
    return SqlError(code, what, why, fix, node)


def over_windows(tree: exp.Expr) -> List[exp.Window]:
    """The OVER clauses applying an aggregate in the items of the outer SELECT of ``tree``
    (others, and those in subqueries, are refused as SSV108 by the compiler)."""
    if not isinstance(tree, exp.Select):
        return []
    return [
        node
        for item in tree.expressions
        for node in item.find_all(exp.Window)
        if isinstance(node.this, exp.AggFunc)
    ]


def _shape_error(what: str, node: Optional[exp.Expr]) -> SqlError:
    return _error(
        "SSV172",
        what,
        "an OVER aggregation runs as one stateful operator over the rows of one source: one "
        "SELECT over one table (WHERE allowed), each item either without OVER or exactly "
        "<aggregate>(...) OVER <window>, all over the same window",
        "Compute other expressions in a downstream model that reads this one, and split "
        "different windows into separate models.",
        node,
    )


def _resolve(
    window: exp.Window, named: Mapping[str, exp.Window], seen: Tuple[str, ...] = ()
) -> exp.Window:
    """The window definition of ``window``: a named window (``OVER w``, ``WINDOW w AS (...)``)
    refined, as in standard SQL and Calcite, by the frame of the window that names it (``OVER
    (w ROWS 2 PRECEDING)``, ``OVER w (RANGE ...)``), and its ORDER BY where the named window
    has none. A named window may itself name another (``WINDOW w2 AS (w1 ROWS ...)``)."""
    name = window.args.get("alias")
    if name is None:
        return window
    key = name.name.lower()
    if key in seen:
        raise _shape_error(f"WINDOW {name.name} refers to itself", window)
    if key not in named:
        raise _shape_error(f"OVER {name.name} names no WINDOW definition", window)
    base = _resolve(named[key], named, (*seen, key))
    if window.args.get("partition_by"):
        raise _shape_error(f"a window that names {name.name} has its own PARTITION BY", window)
    if window.args.get("order") and base.args.get("order"):
        raise _shape_error(f"a window that names {name.name} has its own ORDER BY", window)
    out = base.copy()
    out.set("alias", None)
    for arg in ("order", "spec"):
        if window.args.get(arg) is not None:
            out.set(arg, window.args[arg].copy())
    return out


def _frame(window: exp.Window) -> Tuple[str, Optional[int]]:
    spec = window.args.get("spec")
    if spec is None:  # ORDER BY without a frame: RANGE UNBOUNDED PRECEDING AND CURRENT ROW
        return UNBOUNDED_RANGE, None
    kind = str(spec.args.get("kind") or "").upper()
    start, start_side = spec.args.get("start"), str(spec.args.get("start_side") or "").upper()
    end = spec.args.get("end")
    end_text = str(end).upper() if end is not None else "CURRENT ROW"
    if end is not None and not isinstance(end, str):
        end_text = end.sql().upper() + " " + str(spec.args.get("end_side") or "").upper()
    ok_end = end_text.strip() == "CURRENT ROW"
    if ok_end and start_side == "PRECEDING":
        if str(start).upper() == "UNBOUNDED":
            return (UNBOUNDED_RANGE if kind == "RANGE" else UNBOUNDED_ROWS), None
        if kind == "RANGE":
            us = interval_micros(start) if isinstance(start, exp.Expr) else None
            if us is not None and us >= 0:
                return RANGE, us
        if kind == "ROWS" and isinstance(start, exp.Literal) and not start.is_string:
            if str(start.this).isdigit():
                return ROWS, int(start.this)
    raise _error(
        "SSV171",
        f"the window frame {spec.sql()} cannot run on a stream",
        "a streaming OVER aggregation emits each row once the watermark passes its time, so its "
        "frame must end at the current row and start at a bounded or unbounded past: RANGE "
        "takes an INTERVAL, ROWS a row count (FOLLOWING rows would not be known yet)",
        "Use RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW, ROWS BETWEEN 2 "
        "PRECEDING AND CURRENT ROW, or ROWS / RANGE UNBOUNDED PRECEDING.",
        spec,
    )


def _time_column(
    window: exp.Window, columns: Mapping[str, str], source: str
) -> Tuple[exp.Column, str]:
    order = window.args.get("order")
    items = order.expressions if order is not None else []
    fix = (
        f"Order the window by one timestamp column of {source}, ascending (ORDER BY <time>); "
        "it is the stream's event time, watermarked by the model's watermark_delay."
    )
    why = (
        "a stream is only complete up to its watermark, so an OVER aggregation can only take "
        "rows in event-time order: the source's timestamp column, ascending"
    )
    if len(items) != 1:
        raise _error(
            "SSV170",
            "an OVER aggregation must ORDER BY exactly one event-time column"
            + ("" if items else " (it has no ORDER BY)"),
            why,
            fix,
            order or window,
        )
    item = items[0]
    col = item.this
    if item.args.get("desc"):
        raise _error("SSV170", "an OVER aggregation's ORDER BY is descending", why, fix, item)
    if not isinstance(col, exp.Column) or col.name.lower() not in columns:
        raise _error(
            "SSV170",
            f"ORDER BY {col.sql()} is not a column of {source}",
            why,
            fix,
            item,
        )
    ctype = columns[col.name.lower()].lower()
    if ctype not in TIMESTAMP_TYPES:
        raise _error(
            "SSV170",
            f"ORDER BY {col.name} orders by a {ctype} column, not a timestamp",
            why,
            fix,
            item,
        )
    return col, col.name


RANKINGS = (exp.Rank, exp.DenseRank, exp.RowNumber, exp.PercentRank, exp.CumeDist, exp.Ntile)


def refuse_unbounded_ranking(tree: exp.Expr) -> None:
    """SSV174 for a ranking in the outer SELECT (``SELECT user, RANK() OVER (ORDER BY
    lastAction) FROM (... GROUP BY user)``): nothing bounds it, so one new row re-ranks every
    row below it (Flink's Streaming Concepts, "Computing Updates"). A Top-N (the ranking
    filtered by ``<= N`` in an outer query) is recognised before this, by the compiler."""
    if not isinstance(tree, exp.Select):
        return
    for item in tree.expressions:
        for window in item.find_all(exp.Window):
            if isinstance(window.this, RANKINGS):
                raise _error(
                    "SSV174",
                    f"{window.this.sql()} OVER (...) ranks every row of the result, unbounded",
                    "as a stream, one new or changed row changes the rank of every row below "
                    "it, so each update rewrites a large part of the table",
                    "Keep only the top N: SELECT * FROM (SELECT ..., RANK() OVER (...) AS r "
                    "FROM ...) WHERE r <= N, as an upsert_table over a GROUP BY, or over the "
                    "rows or aggregate of a window TVF (a window Top-N); or rank in a batch "
                    "model.",
                    window,
                )


def _signature(window: exp.Window) -> str:
    args = [window.args.get(a) for a in ("order", "spec")]
    parts = [a.sql() if isinstance(a, exp.Expr) else "" for a in args]
    keys = ",".join(p.sql() for p in window.args.get("partition_by") or [])
    return f"{keys}|{parts[0]}|{parts[1]}"


def analyse_over(
    tree: exp.Expr,
    schemas: Mapping[str, Mapping[str, str]],
    delay_us: Optional[int],
    materialization: str,
) -> Optional[Tuple[OverSpec, exp.Select]]:
    """The OverSpec of ``tree`` if it applies aggregates OVER a window, with the query of its
    input rows (a tree; QueryPlan binds its sources), else None; SSV170-173 (and SSV105 without
    a watermark delay) on one that cannot run."""
    refuse_unbounded_ranking(tree)
    windows = over_windows(tree)
    if not windows:
        return None
    if materialization != "streaming_view":
        raise _error(
            "SSV173",
            "an OVER aggregation cannot be an upsert_table",
            "its rows are final once the watermark passes their time and are only appended",
            "Use materialized='streaming_view'.",
            windows[0],
        )
    select = tree
    frm = select.args.get("from_")
    table = frm.this if frm is not None else None
    for clause in ("joins", "group", "having", "distinct", "with_", "qualify"):
        if select.args.get(clause):
            node = select.args[clause]
            raise _shape_error(
                f"an OVER aggregation with {clause.rstrip('_').upper()}",
                node[0] if isinstance(node, list) else node,
            )
    if not isinstance(table, exp.Table) or isinstance(table, WindowTVF) or table.args.get("joins"):
        raise _shape_error("an OVER aggregation must read one source table", table or select)
    if any(isinstance(n, exp.Subquery) for n in select.find_all(exp.Subquery)):
        raise _shape_error("an OVER aggregation with a subquery", select)
    source = table_key(table)
    columns = {c.lower(): t for c, t in (schemas.get(source) or {}).items()}
    named = {
        w.this.name.lower(): w
        for w in select.args.get("windows") or []
        if isinstance(w.this, exp.Identifier)
    }
    definitions = [_resolve(w, named) for w in windows]
    for w, d in zip(windows, definitions, strict=True):  # inline them (Spark has no refinement)
        w.set("partition_by", [p.copy() for p in d.args.get("partition_by") or []])
        for part in ("order", "spec"):
            w.set(part, d.args[part].copy() if d.args.get(part) is not None else None)
        w.set("alias", None)
    select.set("windows", None)
    if len({_signature(d) for d in definitions}) > 1:
        raise _shape_error("OVER aggregations over different windows in one model", windows[1])
    window = definitions[0]
    col, time_name = _time_column(window, columns, source)
    frame, preceding = _frame(window)
    if delay_us is None:
        raise _error(
            "SSV105",
            "OVER aggregation without a watermark delay",
            "each row is emitted once the watermark passes its time, so the stream needs to know "
            "how late rows may arrive",
            "Set watermark_delay in the model config (e.g. watermark_delay='1 minute').",
            window,
        )
    projections: List[exp.Expr] = []
    keys = []
    for i, key in enumerate(window.args.get("partition_by") or []):
        projections.append(exp.alias_(key.copy(), KEY.format(i)))
        keys.append(KEY.format(i))
    if not keys:
        projections.append(exp.alias_(exp.Literal.number(0), KEY.format(0)))
        keys.append(KEY.format(0))
    projections.append(
        exp.alias_(exp.Anonymous(this="unix_micros", expressions=[col.copy()]), TIME)
    )
    projections.append(exp.alias_(col.copy(), EVENT_TIME))
    aggregates: List[OverAggregate] = []
    calls: List[exp.Expr] = []  # each aggregate over the operator's columns
    outputs: List[Tuple[str, object]] = []
    by_id: Dict[int, exp.Window] = {id(w): w for w in windows}
    for i, item in enumerate(select.expressions):
        inner = item.this if isinstance(item, exp.Alias) else item
        name = item.alias_or_name
        if isinstance(inner, exp.Window) and id(inner) in by_id:
            if not name or not isinstance(item, exp.Alias):
                raise _shape_error(f"{inner.sql()} has no name", item)
            aggregate, call = _aggregate(inner.this, frame, projections)
            outputs.append((name, len(aggregates)))
            aggregates.append(aggregate)
            calls.append(call)
            continue
        if any(isinstance(n, exp.Window) for n in item.find_all(exp.Window)):
            raise _shape_error(f"an OVER aggregate inside an expression ({item.sql()})", item)
        if isinstance(inner, exp.Star):
            raise _shape_error("SELECT * with an OVER aggregation", item)
        if not name:
            raise _shape_error(f"{item.sql()} has no name", item)
        if isinstance(inner, exp.Column) and inner.name.lower() == time_name.lower():
            outputs.append((name, EVENT_TIME))  # Spark allows one event-time column
            continue
        projections.append(exp.alias_(inner.copy(), COLUMN.format(i)))
        outputs.append((name, COLUMN.format(i)))
    source_node: exp.Expr = WatermarkedTable(
        this=exp.Table(
            this=table.this.copy(), db=table.args["db"].copy() if table.args.get("db") else None
        ),
        column=exp.column(time_name),
        delay=interval_literal(delay_us),
    )
    if table.args.get("alias") is not None:
        source_node = exp.Subquery(
            this=exp.select(exp.Star()).from_(source_node), alias=table.args["alias"].copy()
        )
    body = exp.Select(expressions=projections).from_(source_node)
    if select.args.get("where") is not None:
        body.set("where", select.args["where"].copy())
    for w in windows:  # the oracle's (Spark has no DISTINCT window function)
        distinct_count = _distinct_count(w.this)
        if distinct_count is not None:
            w.replace(_size_of_set(w.copy(), distinct_count))
    spec = OverSpec(
        keys=tuple(keys),
        frame=frame,
        preceding=preceding,
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
        time_column=time_name,
    )
    if frame in (RANGE, ROWS):
        spec = replace(spec, frame_items=_frame_items(spec, calls))
    return spec, body


def _distinct_count(agg: exp.Expr) -> Optional[exp.Expr]:
    """x of ``COUNT(DISTINCT x)``, else None."""
    distinct = agg.this if isinstance(agg, exp.Count) else None
    if isinstance(distinct, exp.Distinct) and len(distinct.expressions) == 1:
        return distinct.expressions[0]
    return None


def _size_of_set(window: exp.Window, values: exp.Expr) -> exp.Expr:
    """``COUNT(DISTINCT x) OVER w`` as ``SIZE(COLLECT_SET(x) OVER w)``, as window aggregates
    run it (sql/rewrite.py rewrite_distinct_counts): the same value, both ignore NULLs."""
    window.set("this", exp.Anonymous(this="collect_set", expressions=[values.copy()]))
    return exp.Anonymous(this="size", expressions=[window])


def _aggregate(
    agg: exp.AggFunc, frame: str, projections: List[exp.Expr]
) -> Tuple[OverAggregate, exp.Expr]:
    """The aggregate of one ``<agg> OVER w`` item, and ``agg`` over the operator's columns: each
    of its arguments that reads a column (and its first, unless ``*``) becomes an input column,
    appended to ``projections``."""
    if isinstance(agg, OFFSET_FUNCTIONS):
        raise _shape_error(
            f"{agg.sql()} OVER: LAG and LEAD take no frame; an OVER aggregation applies an "
            "aggregate to its frame (FIRST_VALUE(x) OVER (... ROWS 1 PRECEDING) is the "
            "previous row's x where the frame has two rows)",
            agg,
        )
    values = _distinct_count(agg)
    if isinstance(agg.this, exp.Distinct) and values is None:
        raise _shape_error(
            f"{agg.sql()} OVER: of the DISTINCT aggregates COUNT(DISTINCT <one expression>) "
            "runs, as in window aggregates",
            agg,
        )
    function = RUNNING.get(type(agg)) if values is None else None
    if frame in (UNBOUNDED_RANGE, UNBOUNDED_ROWS) and function is None:
        raise _error(
            "SSV171",
            f"{agg.sql()} OVER an unbounded frame",
            "an unbounded frame keeps one running accumulator per partition instead of its "
            "rows: SUM, COUNT, MIN, MAX, AVG, STDDEV / VARIANCE (_SAMP, _POP), COUNT_IF, "
            f"BOOL_AND and BOOL_OR have one; {agg.sql()} would need every row (or value) of the "
            "partition's history",
            "Use a RANGE BETWEEN <interval> PRECEDING or ROWS BETWEEN <n> PRECEDING frame "
            "(any aggregate runs over those), or a window aggregate (TUMBLE, CUMULATE).",
            agg,
        )
    call = exp.Anonymous(this="collect_set", expressions=[values.copy()]) if values else agg.copy()
    arg: Optional[str] = None
    for i, child in enumerate(list(call.iter_expressions())):
        if isinstance(child, exp.Star) or (i and child.find(exp.Column) is None):
            continue  # COUNT(*), and constant arguments (PERCENTILE(x, 0.5)) stay as they are
        name = ARG.format(len(projections))
        projections.append(exp.alias_(child.copy(), name))
        child.replace(exp.column(name))
        arg = arg or name
    if values is not None:
        call = exp.Anonymous(this="size", expressions=[call])
    return OverAggregate(function, arg), call


def _frame_items(spec: OverSpec, calls: List[exp.Expr]) -> Tuple[str, ...]:
    """OverSpec.frame_items of a RANGE or ROWS frame."""
    order = [TIME] if spec.frame == RANGE else [TIME, SEQ]
    items: List[exp.Expr] = []
    for name, ref in spec.outputs:
        if isinstance(ref, str):
            items.append(exp.alias_(exp.column(ref), name, quoted=True))
            continue
        assert isinstance(ref, int)
        call = calls[ref].copy()  # an aggregate, or SIZE(COLLECT_SET(...))
        sized = not isinstance(call, exp.AggFunc)
        window = exp.Window(
            this=call.expressions[0] if sized else call,
            partition_by=[exp.column(k) for k in spec.keys],
            order=exp.Order(expressions=[exp.Ordered(this=exp.column(c)) for c in order]),
            spec=exp.WindowSpec(
                kind="RANGE" if spec.frame == RANGE else "ROWS",
                start=exp.Literal.number(spec.preceding),
                start_side="PRECEDING",
                end="CURRENT ROW",
            ),
        )
        item = exp.Anonymous(this="size", expressions=[window]) if sized else window
        items.append(exp.alias_(item, name, quoted=True))
    items.append(exp.column(EMIT))
    return tuple(i.sql(dialect="spark") for i in items)


def _not_late(time: exp.Expr) -> exp.Expr:
    late = exp.LTE(this=time, expression=exp.column(LATE_COLUMN))
    return exp.Not(this=exp.Coalesce(this=late, expressions=[exp.false()]))


def _source(tree: exp.Expr) -> exp.Table:
    return tree.args["from_"].this


def _late_filtered(tree: exp.Expr, time_column: str, late: bool) -> None:
    """Replace the (bound) source of ``tree`` by its rows not dropped as late (``late``: by its
    rows dropped as late), keeping its correlation name."""
    table = _source(tree)
    alias = table.args.get("alias")
    bare = exp.Table(this=table.this.copy())
    cond = _not_late(exp.column(time_column))
    rows = exp.select(exp.Star()).from_(bare).where(exp.Not(this=cond) if late else cond)
    name = alias.copy() if alias is not None else exp.TableAlias(this=table.this.copy())
    table.replace(exp.Subquery(this=rows, alias=name))


def emitted(tree: exp.Expr, spec: OverSpec, watermark_us: int) -> exp.Expr:
    """What the stream emitted up to a batch with watermark ``watermark_us``: the model's query
    (its source bound to a view carrying LATE_COLUMN) over the rows not dropped as late, for the
    rows whose time is at or below the watermark."""
    tree = tree.copy()
    alias = _source(tree).alias_or_name
    _late_filtered(tree, spec.time_column, late=False)
    tree.set(
        "expressions",
        [*tree.expressions, exp.alias_(exp.column(spec.time_column, table=alias), EVENT_TIME)],
    )
    due = exp.LTE(
        this=exp.column(EVENT_TIME),
        expression=exp.Anonymous(
            this="timestamp_micros", expressions=[exp.Literal.number(watermark_us)]
        ),
    )
    return (
        exp.select(exp.Star(except_=[exp.column(EVENT_TIME)]))
        .from_(exp.Subquery(this=tree, alias=exp.TableAlias(this=exp.to_identifier("__over"))))
        .where(due)
    )


def late_rows(tree: exp.Expr, spec: OverSpec) -> exp.Expr:
    """The source rows (after the model's WHERE) the stream dropped as late, with the watermark
    of the batch that read them."""
    tree = tree.copy()
    _late_filtered(tree, spec.time_column, late=True)
    tree.set(
        "expressions",
        [
            exp.Star(except_=[exp.column(LATE_COLUMN)]),
            exp.alias_(exp.column(LATE_COLUMN), "batch_watermark"),
        ],
    )
    tree.set("windows", None)
    return tree
