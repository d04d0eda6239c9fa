"""A window aggregate's backlog split in two at a window end: the windows the backlog closes are
aggregated by a batch query, the rest by the stream (runtime/backlog.py).

A stream's first micro-batch over a large backlog puts every window of it into Spark's state
store, though the watermark that batch sets closes all but the last few: saving and then
removing them costs three times the batch aggregate over the same rows (bench/README.md,
"Where our time goes"). Spark's rule (sql/oracle.py) makes the split exact: a batch drops a
row from a window that ends at or before the previous batch's watermark. If the first batch
(0) reads the backlog and the second (1) reads nothing, a window ending at or before batch 0's
watermark is emitted in batch 1 with the rows of batch 0 alone; any later row of it is late.
So for a split point ``closed_us`` at or below that watermark, the windows ending at or before
it are the batch query's over batch 0's rows, and the stream can leave batch 0's rows of them
out of its state: ``NOT <marker> OR __w.end > closed`` on its windowed input, the marker a
column true on batch 0's rows (below the aggregate, above the WATERMARK clause, so the
watermark still sees every row; later rows of those windows still reach the aggregate, which
drops them as late and counts them).

Only a query whose sole state is one window aggregate of TUMBLE, HOP or CUMULATE windows over
one source splits (a Top-N of a window's rows is one): a SESSION's windows merge (a row's own
window may end before its session does), and a join or a second aggregate (a Top-N over a
window aggregate) keeps state of its own. Nor does a query with a filter Spark may move below
its WATERMARK clause: Spark's optimizer pushes every deterministic conjunct that does not
reference the event time column below it (PushPredicateThroughNonJoin), so the watermark is
then the largest event time of the rows that pass, not of every row, and a split point from
the source's statistics would be above it (a WHERE on a non-time column, or a HAVING or an
outer WHERE on a grouping key other than the window).
"""

from __future__ import annotations

from typing import Optional, Sequence

from sqlglot import exp

from .analysis import WindowSpec, table_key
from .oracle import window_aggregates
from .rewrite import CUMULATE_WINDOW, WINDOW_STRUCT

SPLIT_KINDS = ("tumble", "hop", "cumulate")


def splittable(tree: exp.Expr, windows: Sequence[WindowSpec]) -> Optional[WindowSpec]:
    """The window TVF of a rewritten append-mode ``tree`` whose backlog can be split, or None:
    its windowed input must read the source table itself, keeping all its columns (``*``), so
    the stream's marker column reaches the split's filter."""
    if len(windows) != 1 or windows[0].kind not in SPLIT_KINDS:
        return None
    aggregates = list(window_aggregates(tree))
    grouped = [s for s in tree.find_all(exp.Select) if s.args.get("group")]
    if len(aggregates) != 1 or len(grouped) != 1 or any(True for _ in tree.find_all(exp.Join)):
        return None
    derived = aggregates[0][1]
    tables = list(derived.find_all(exp.Table))
    if len(tables) != 1 or table_key(tables[0]) != windows[0].source:
        return None
    selects = derived.find_all(exp.Select)
    if not all(s.find(exp.Star) for s in selects):
        return None
    return None if _filters_below_watermark(aggregates[0][0], windows[0]) else windows[0]


def _conjuncts(select: exp.Select, clause: str) -> list[exp.Expr]:
    condition = select.args.get(clause)
    if condition is None:
        return []
    condition = condition.this
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _filters_below_watermark(aggregate: exp.Select, window: WindowSpec) -> bool:
    """Whether a conjunct of a WHERE or HAVING may pass below the WATERMARK clause (module
    doc): in the aggregate's input (its WHERE, the windowed input's), any that references neither
    the time column nor the window; above it (its HAVING, an enclosing query's WHERE or HAVING),
    any without an aggregate function whose columns all derive from grouping keys but the
    window (Spark pushes those through the aggregate)."""
    timed = {window.time_column.lower(), "window_start", "window_end", "window_time"}
    structs = {WINDOW_STRUCT, CUMULATE_WINDOW}

    def columns(node: exp.Expr) -> list[exp.Column]:
        return list(node.find_all(exp.Column))

    def is_time(column: exp.Column) -> bool:
        return column.name.lower() in timed | structs or column.table.lower() in structs

    for inner in [aggregate, *aggregate.args["from_"].find_all(exp.Select)]:
        if any(not any(is_time(c) for c in columns(x)) for x in _conjuncts(inner, "where")):
            return True

    keys = {
        c.name.lower()
        for c in aggregate.args["group"].expressions
        if isinstance(c, exp.Column) and not is_time(c)
    }

    def on_keys(node: exp.Expr) -> bool:
        return not node.find(exp.AggFunc, exp.Window) and all(
            c.name.lower() in keys for c in columns(node)
        )

    def outputs(select: exp.Select) -> set[str]:
        return {p.alias_or_name.lower() for p in select.expressions if on_keys(p.unalias())}

    keys |= outputs(aggregate)  # its HAVING sees the grouping keys and their aliases
    select: Optional[exp.Select] = aggregate
    clauses: tuple[str, ...] = ("having",)
    while select is not None:  # from the aggregate out: the names its keys have there
        if any(on_keys(x) for clause in clauses for x in _conjuncts(select, clause)):
            return True
        star = any(isinstance(p, exp.Star) for p in select.expressions)
        keys = outputs(select) | (keys if star else set())
        select, clauses = select.parent_select, ("where", "having")
    return False


def split(tree: exp.Expr, closed_us: int, marker: Optional[str] = None) -> exp.Expr:
    """A copy of ``tree`` (``splittable``) that aggregates only the windows ending at or before
    ``closed_us`` (the batch query's part), or, given the stream's boolean ``marker`` column
    (true on the rows of its first batch), leaves those windows' rows of the first batch out
    (the stream's part; the marker is not passed on)."""
    tree = tree.copy()
    ((_, derived),) = window_aggregates(tree)
    end = exp.column("end", table=WINDOW_STRUCT)
    at = exp.Anonymous(this="timestamp_micros", expressions=[exp.Literal.number(closed_us)])
    if marker is None:
        keep: exp.Expr = exp.LTE(this=end, expression=at)
        star = exp.Star()
    else:
        later = exp.Not(this=exp.column(marker))
        keep = exp.or_(later, exp.GT(this=end, expression=at))
        star = exp.Star(except_=[exp.column(marker)])
    derived.set("this", exp.select(star).from_(exp.Subquery(this=derived.this)).where(keep))
    return tree
