"""Static analysis of a parsed model query: window TVF arguments and query scopes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Dict, Iterator, List, Mapping, Optional, Tuple

from sqlglot import exp

from .dialect import PartitionedTable, WindowTVF
from .errors import SqlError
from .intervals import describe, interval_micros

WINDOW_COLUMNS = ("window_start", "window_end", "window_time")
TIMESTAMP_TYPES = frozenset({"timestamp", "timestamp_ntz", "timestamp_ltz"})
_PARAMS = {
    "TUMBLE": (("DATA", "TIMECOL", "SIZE", "OFFSET"), 3),
    "HOP": (("DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"), 4),
    "CUMULATE": (("DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"), 4),
    "SESSION": (("DATA", "TIMECOL", "GAP"), 3),
}
_SIGNATURES = {
    "TUMBLE": "TUMBLE(TABLE <table>, DESCRIPTOR(<time column>), <size interval>"
    " [, <offset interval>])",
    "HOP": "HOP(TABLE <table>, DESCRIPTOR(<time column>), <slide interval>, <size interval>"
    " [, <offset interval>])",
    "CUMULATE": "CUMULATE(TABLE <table>, DESCRIPTOR(<time column>), <step interval>,"
    " <max size interval> [, <offset interval>])",
    "SESSION": "SESSION(TABLE <table> [PARTITION BY <column> | PARTITION BY (<column>, ...)],"
    " DESCRIPTOR(<time column>), <gap interval>)",
}


@dataclass(frozen=True)
class WindowSpec:
    """One windowing TVF: its input relation, time column and sizes in microseconds.

    ``kind`` is the lower-case TVF name. ``size_us`` is the window size (CUMULATE: the max
    size; SESSION: the gap); ``slide_us`` the HOP slide or CUMULATE step (= size otherwise).
    ``partition_by`` holds a SESSION's PARTITION BY columns, as spelled in the input table.
    """

    source: str
    time_column: str
    kind: str
    size_us: int
    slide_us: int
    offset_us: int
    partition_by: Tuple[str, ...] = ()


def table_key(table: exp.Table) -> str:
    """Lower-case 'schema.identifier' (or 'identifier') of a table reference; catalog dropped."""
    return ".".join(p for p in (table.db.lower(), table.name.lower()) if p)


def own_nodes(scope: exp.Expr, *keys: str) -> Iterator[exp.Expr]:
    """Nodes under ``scope`` (restricted to the args ``keys`` if given) not inside a nested
    query."""
    roots: List[exp.Expr] = []
    if keys:
        for key in keys:
            value = scope.args.get(key)
            roots.extend(
                v for v in (value if isinstance(value, list) else [value]) if v is not None
            )
    else:
        roots = [scope]
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if node is not scope and isinstance(node, (exp.Query, exp.Subquery, WindowTVF)):
            continue
        stack.extend(reversed(list(node.iter_expressions())))


def _bad_args(tvf: WindowTVF, why: str, node: Optional[exp.Expr] = None) -> SqlError:
    return SqlError(
        "SSV102",
        f"invalid arguments to window TVF {tvf.function}",
        why,
        f"Call it as TABLE({_SIGNATURES[tvf.function]}); named arguments "
        f"({', '.join(_PARAMS[tvf.function][0])}) may follow the positional ones.",
        node if node is not None else tvf.this,
    )


def bind_arguments(tvf: WindowTVF) -> Dict[str, exp.Expr]:
    """Map a TVF's positional and named arguments to parameter names (SSV102 on error)."""
    names, required = _PARAMS[tvf.function]
    bound: Dict[str, exp.Expr] = {}
    seen_named = False
    for i, arg in enumerate(tvf.expressions):
        if isinstance(arg, exp.Kwarg):
            seen_named = True
            name = arg.this.name.upper()
            if name not in names:
                raise _bad_args(tvf, f"unknown named argument {name}", arg)
            if name in bound:
                raise _bad_args(tvf, f"argument {name} is given twice", arg)
            bound[name] = arg.expression
        else:
            if seen_named:
                raise _bad_args(tvf, "a positional argument follows a named one", arg)
            if i >= len(names):
                raise _bad_args(tvf, f"too many arguments ({len(tvf.expressions)})", arg)
            bound[names[i]] = arg
    missing = [n for n in names[:required] if n not in bound]
    if missing:
        raise _bad_args(tvf, f"missing argument(s) {', '.join(missing)}")
    return bound


def _interval(tvf: WindowTVF, bound: Dict[str, exp.Expr], name: str) -> int:
    node = bound[name]
    us = interval_micros(node)
    if us is None:
        raise _bad_args(
            tvf,
            f"{name} must be an interval literal such as INTERVAL '10' MINUTES, "
            f"got {node.sql(dialect='spark')}",
            node,
        )
    if name != "OFFSET" and us <= 0:
        raise _bad_args(tvf, f"{name} must be a positive interval, got {node.sql('spark')}", node)
    return us


def _sizes(tvf: WindowTVF, bound: Dict[str, exp.Expr]) -> Tuple[int, int, int]:
    """(size, slide or step, offset) of a TVF in microseconds, checked against each other."""
    if tvf.function == "SESSION":
        gap = _interval(tvf, bound, "GAP")
        return gap, gap, 0
    size = _interval(tvf, bound, "SIZE")
    step_name = {"HOP": "SLIDE", "CUMULATE": "STEP"}.get(tvf.function)
    slide = _interval(tvf, bound, step_name) if step_name else size
    offset = _interval(tvf, bound, "OFFSET") if "OFFSET" in bound else 0
    if step_name and size % slide:  # (without a step, slide is size)
        raise _bad_args(
            tvf,
            f"{tvf.function} size ({describe(size)}) must be a whole multiple of "
            f"its {step_name.lower()} ({describe(slide)})",
            bound["SIZE"],
        )
    # The offset shifts the windows Spark's window() assigns: HOP's by its slide, TUMBLE's and
    # CUMULATE's (whose base is the max-size tumbling window) by their size.
    limit, label = (slide, "slide") if tvf.function == "HOP" else (size, "size")
    if abs(offset) >= limit:
        raise _bad_args(
            tvf,
            f"the absolute OFFSET ({describe(abs(offset))}) must be smaller than "
            f"the window {label} ({describe(limit)})",
            bound["OFFSET"],
        )
    return size, slide, offset


def _partition_keys(
    tvf: WindowTVF,
    source: str,
    columns: Mapping[str, Tuple[str, str]],
    keys: List[exp.Expr],
) -> Tuple[str, ...]:
    """A SESSION's PARTITION BY keys, checked to be distinct columns of its input table."""
    names: List[str] = []
    for key in keys:
        if not isinstance(key, exp.Column) or key.name.lower() not in columns:
            raise SqlError(
                "SSV102",
                f"invalid PARTITION BY key {key.sql(dialect='spark')} of window TVF SESSION",
                f"PARTITION BY must list columns of {source}; it has "
                f"{', '.join(c for c, _ in columns.values())}",
                "Name input columns, e.g. TABLE t PARTITION BY (item, region).",
                key,
            )
        name = columns[key.name.lower()][0]
        if name not in names:
            names.append(name)
    return tuple(names)


def analyse_tvf(tvf: WindowTVF, schemas: Mapping[str, Mapping[str, str]]) -> WindowSpec:
    """Validate one window TVF against ``schemas`` and return its WindowSpec."""
    bound = bind_arguments(tvf)
    data, timecol = bound["DATA"], bound["TIMECOL"]
    keys: List[exp.Expr] = []
    if isinstance(data, PartitionedTable):
        if tvf.function != "SESSION":
            raise _bad_args(
                tvf,
                f"PARTITION BY is only allowed for SESSION, not {tvf.function}",
                data.expressions[0],
            )
        data, keys = data.this, list(data.expressions)
    if not isinstance(data, exp.Table) or not isinstance(data.this, exp.Identifier):
        raise _bad_args(tvf, "DATA must be TABLE <name> (e.g. TABLE analytics.bids)", data)
    if not (
        isinstance(timecol, exp.Anonymous)
        and timecol.name.upper() == "DESCRIPTOR"
        and len(timecol.expressions) == 1
        and isinstance(timecol.expressions[0], exp.Column)
    ):
        raise _bad_args(tvf, "TIMECOL must be DESCRIPTOR(<time column>)", timecol)
    size, slide, offset = _sizes(tvf, bound)
    source = table_key(data)
    # `schemas` is looked up by key only (keys are lower-case names): the adapter's mapping
    # reads a table's schema from Delta on demand.
    if source not in schemas:
        raise SqlError(
            "SSV104",
            f"unknown input table {source} for window TVF {tvf.function}",
            "there is no Delta table by that name, and its columns are needed to check the time "
            "column",
            "Run `dbt seed` or the upstream model first, or declare the source's "
            "`meta: {location: ...}`.",
            data,
        )
    columns = {c.lower(): (c, str(t)) for c, t in schemas[source].items()}
    col_node = timecol.expressions[0]
    col = col_node.name.lower()
    if col not in columns:
        raise SqlError(
            "SSV103",
            f"time column {col_node.name} is not a column of {source}",
            f"DESCRIPTOR must name a timestamp column of the input table; {source} has "
            f"{', '.join(c for c, _ in columns.values())}",
            "Name one of those columns in DESCRIPTOR(...).",
            col_node,
        )
    ctype = columns[col][1].strip().lower()
    if ctype not in TIMESTAMP_TYPES:
        raise SqlError(
            "SSV103",
            f"time column {columns[col][0]} of {source} has type {ctype}",
            "window TVFs need an event-time column of type timestamp or timestamp_ntz",
            "Use a timestamp column, or cast it in an upstream model.",
            col_node,
        )
    partition_by = _partition_keys(tvf, source, columns, keys)
    return WindowSpec(
        source, columns[col][0], tvf.function.lower(), size, slide, offset, partition_by
    )


def tvf_scope(tvf: WindowTVF) -> Optional[exp.Select]:
    """The SELECT whose FROM / JOIN holds ``tvf``."""
    parent = tvf.parent
    if isinstance(parent, (exp.From, exp.Join)) and isinstance(parent.parent, exp.Select):
        return parent.parent
    return None


def window_key(col: exp.Expr, tvf: WindowTVF) -> Optional[str]:
    """'window_start' / 'window_end' / 'window_time' if ``col`` refers to that column of ``tvf``."""
    if not isinstance(col, exp.Column) or col.name.lower() not in WINDOW_COLUMNS:
        return None
    if col.table and col.table.lower() != tvf_alias(tvf).lower():
        return None
    return col.name.lower()


def tvf_data(tvf: WindowTVF) -> Tuple[Optional[exp.Table], List[exp.Expr]]:
    """The ``TABLE t`` argument of a TVF (None if it has none) and its PARTITION BY keys."""
    for arg in tvf.expressions:
        value = arg.expression if isinstance(arg, exp.Kwarg) else arg
        if isinstance(value, exp.Table):
            return value, []
        if isinstance(value, PartitionedTable):
            return value.this, list(value.expressions)
    return None, []


def tvf_alias(tvf: WindowTVF) -> str:
    """The alias a TVF is referred by: its own alias, else its input table's name."""
    if tvf.alias:
        return tvf.alias
    table, _ = tvf_data(tvf)
    return table.name.lower() if table is not None else tvf.function.lower()


def is_aggregating(select: exp.Select) -> bool:
    """True if ``select`` groups, is DISTINCT, or uses aggregate functions in its own scope
    (not as window functions: RANK() OVER (...) does not aggregate)."""
    if select.args.get("group") or select.args.get("distinct"):
        return True
    return any(
        isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window)
        for n in own_nodes(select, "expressions", "having")
    )


@dataclass
class Classification:
    """Result of classifying the query's scopes."""

    kind: str
    window_aggregates: Dict[int, exp.Select]  # id(tvf) -> window aggregate scope
    aggregating: bool
    updating_reason: Optional[Tuple[str, Optional[exp.Expr]]]


def classify(
    tree: exp.Expr, tvfs: List[WindowTVF], join_scopes: AbstractSet[int] = frozenset()
) -> Classification:
    """Find window aggregates (SSV107 on half-grouped windows) and decide append vs updating.

    ``join_scopes`` holds the ids of the SELECTs that are window joins (joins.py): they hold two
    TVFs, and their rows, like a window aggregate's, need a watermark delay."""
    by_scope: Dict[int, List[WindowTVF]] = {}
    for tvf in tvfs:
        scope = tvf_scope(tvf)
        if scope is not None:
            by_scope.setdefault(id(scope), []).append(tvf)
    window_aggs: Dict[int, exp.Select] = {}
    aggregating = False
    reason: Optional[Tuple[str, Optional[exp.Expr]]] = None
    for select in tree.find_all(exp.Select):
        scope_tvfs = by_scope.get(id(select), [])
        if id(select) in join_scopes:
            aggregating = True
            continue
        if len(scope_tvfs) > 1:
            raise SqlError(
                "SSV108",
                "window joins (two window TVFs in one SELECT) are not supported yet",
                "only one window TVF per SELECT can be rewritten to a Spark window() column",
                "Aggregate each window in its own model or CTE and join the results.",
                scope_tvfs[1].this,
            )
        if not is_aggregating(select):
            continue
        for node in own_nodes(select, "expressions", "having"):
            if isinstance(node, exp.AggFunc) and isinstance(node.this, exp.Distinct):
                raise SqlError(
                    "SSV108",
                    "DISTINCT aggregates other than COUNT(DISTINCT <one expression>) are "
                    "not supported yet",
                    "Spark structured streaming cannot compute exact distinct "
                    "aggregates; COUNT(DISTINCT x) is rewritten to SIZE(COLLECT_SET(x))",
                    "Deduplicate in an upstream model, or use COUNT(DISTINCT x) / "
                    "approx_count_distinct(x).",
                    node,
                )
        aggregating = True
        group = select.args.get("group")
        keys = set()
        if scope_tvfs and group:
            keys = {window_key(g, scope_tvfs[0]) for g in group.expressions} - {None}
        if group and "window_start" in keys and "window_end" in keys:
            if scope_tvfs[0].function == "SESSION":
                _check_session_keys(scope_tvfs[0], group)
            window_aggs[id(scope_tvfs[0])] = select
            continue
        if keys & {"window_start", "window_end"}:
            missing = ({"window_start", "window_end"} - keys).pop()
            raise SqlError(
                "SSV107",
                f"window aggregate does not group by {missing}",
                "a window aggregate must group by both window_start and window_end of its window"
                " TVF (FLIP-145) so that each window is emitted exactly once",
                "Add window_start and window_end to the GROUP BY.",
                group,
            )
        if reason is None:
            names = {
                g.name.lower()
                for g in (group.expressions if group else [])
                if isinstance(g, exp.Column)
            }
            if {"window_start", "window_end"} <= names:
                why = (
                    "it groups by window_start and window_end of a CTE or subquery rather than "
                    "of a window TVF in its own FROM clause, so Spark cannot tell when a window "
                    "is complete (put the TABLE(TUMBLE(...)) directly in this SELECT's FROM and "
                    "move filters into its WHERE)"
                )
            else:
                why = (
                    "it aggregates without grouping by window_start and window_end of a window "
                    "TVF in its FROM clause, so its results change as new rows arrive"
                )
            reason = (why, group or select)
    for node in tree.find_all(exp.Union, exp.Intersect, exp.Except):
        if reason is None and (node.args.get("distinct") or not isinstance(node, exp.Union)):
            reason = (
                f"{node.key.upper()} {'ALL' if not node.args.get('distinct') else 'DISTINCT'}"
                " deduplicates rows across the whole stream, so its result keeps changing",
                node,
            )
    # Rows of a SESSION TVF are computed by a window aggregate too (see rewrite.py), so they
    # also need a watermark delay.
    if any(t.function == "SESSION" and id(t) not in window_aggs for t in tvfs):
        aggregating = True
    kind = "updating" if reason else "append"
    return Classification(kind, window_aggs, aggregating, reason)


def _check_session_keys(tvf: WindowTVF, group: exp.Group) -> None:
    """SSV121 unless a SESSION window aggregate groups by exactly its PARTITION BY keys.

    Spark merges sessions per GROUP BY key, while Flink merges them per partition key: the
    two agree only when the keys are the same.
    """
    _, partition = tvf_data(tvf)
    wanted = {k.name.lower() for k in partition if isinstance(k, exp.Column)}
    others = [g for g in group.expressions if window_key(g, tvf) is None]
    alias = tvf_alias(tvf).lower()
    got = {
        g.name.lower()
        for g in others
        if isinstance(g, exp.Column) and (not g.table or g.table.lower() == alias)
    }
    if got == wanted and len(got) == len(others):
        return
    shown = ", ".join(g.sql(dialect="spark") for g in others) or "none"
    expected = ", ".join(k.sql(dialect="spark") for k in partition) or "none"
    raise SqlError(
        "SSV121",
        "SESSION window aggregate groups by other keys than its PARTITION BY",
        f"sessions are formed per PARTITION BY key, so besides window_start and window_end the "
        f"GROUP BY must list exactly those keys. Got: {shown}; Expected: {expected}",
        "List the same columns in SESSION(TABLE t PARTITION BY (...), ...) and in the GROUP BY "
        "(next to window_start and window_end).",
        others[0] if others else group,
    )
