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
window aggregate) keeps state of its own.
"""

from __future__ import annotations

from typing import Optional, Sequence

from sqlglot import exp

from .analysis import WindowSpec, table_key
from .oracle import window_aggregates
from .rewrite import WINDOW_STRUCT

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
    return windows[0] if all(s.find(exp.Star) for s in selects) else None


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
