"""What a streaming query has emitted, as batch SQL: the snapshot-equivalence oracle.

Spark's rule for a window aggregate in append mode, found by experiment on Spark 4.3 and
pinned by tests/functional/test_equivalence.py:

- an input row is dropped from a window instance when the instance's end is <= the
  watermark of the micro-batch that reads the row (``batchWatermarkMs`` of that batch). The
  row's own time does not matter, only its window's end; a HOP row can be dropped from one
  window and kept in the next;
- a window is emitted, once and finally, when its end is <= the watermark.

A window join (sql/joins.py: two sides joined on ``L.__w = R.__w``), found by experiment on
Spark 4.3 and pinned by tests/functional/test_window_join.py:

- a side's input row is dropped when its ``__w.end`` is <= the watermark of the micro-batch
  that reads it (the same rule; not by the row's own time);
- a matched pair is emitted in the micro-batch that reads its second row, before its window
  closes (Flink emits it at the window end: same rows, earlier);
- an unmatched row of an outer join's preserved side is emitted with NULLs when the
  watermark reaches its window end (``__w.end <= watermark``), or at once when it fails the ON
  conjuncts that name only its own side (Spark's pre-join filter: it can never match).

An interval join (sql/intervaljoin.py: two tables joined on a key and bounded event times),
found by experiment on Spark 4.3 and pinned by tests/functional/test_interval_join.py:

- a side's input row is dropped when its time is <= the watermark of the micro-batch that
  reads it;
- a matched pair is emitted in the micro-batch that reads its second row;
- an unmatched row of an outer join's preserved side is emitted with NULLs when it leaves the
  join's state: its time is <= the side's state threshold at the last batch's watermark
  (``intervaljoin.state_threshold_us``), or at once when it fails the ON conjuncts that name
  only its own side.

Stateless queries (projections and filters of TVF rows) drop nothing: every row read is
emitted. So the oracle is the model's own rewritten query, in which each window aggregate's
windowed input is filtered with ``__w.end > <the row's batch watermark>`` (a column the
oracle's input views carry, LATE_COLUMN) and the aggregate keeps only windows with
``__w.end <= <the last batch's watermark>``. This works on the ``__w`` window struct, so
it holds for every window kind the rewrite produces (for SESSION, ``__w`` of an input row is
``[ts, ts + gap)`` and Spark drops the row when that ends at or before the watermark; the
group's windows merge into the session).
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

from sqlglot import exp

from .intervaljoin import IntervalJoin, rewritten_interval_joins, state_threshold_us
from .joins import conjuncts
from .rewrite import WINDOW_STRUCT, window_start_of

LATE_COLUMN = "__dss_late_wm"
PRESENT = "__dss_present"  # an interval join side's marker: the row is from that side


def _is_window_struct(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and node.name == WINDOW_STRUCT and not node.table


def _projects_window(select: exp.Expr) -> bool:
    return isinstance(select, exp.Select) and any(
        isinstance(p, exp.Alias) and p.alias == WINDOW_STRUCT for p in select.expressions
    )


def window_aggregates(tree: exp.Expr) -> Iterator[Tuple[exp.Select, exp.Subquery]]:
    """(aggregate scope, windowed input derived table) for every SELECT grouping by ``__w``."""
    found: List[Tuple[exp.Select, exp.Subquery]] = []
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if not group or not any(_is_window_struct(g) for g in group.expressions):
            continue
        sources = [select.args["from_"].this] if select.args.get("from_") else []
        sources += [j.this for j in select.args.get("joins") or []]
        for source in sources:
            if isinstance(source, exp.Subquery) and _projects_window(source.this):
                found.append((select, source))
    return iter(found)


def _windowed_inputs(node: exp.Expr) -> List[exp.Subquery]:
    return [s for s in node.find_all(exp.Subquery) if _projects_window(s.this)]


def _is_side_window(node: exp.Expr, alias: str) -> bool:
    return (
        isinstance(node, exp.Column)
        and node.name == WINDOW_STRUCT
        and node.table.lower() == alias.lower()
    )


def window_joins(tree: exp.Expr) -> Iterator[Tuple[exp.Select, exp.Join, str, str]]:
    """(join scope, its JOIN, left alias, right alias) for every window join, found by its
    ``L.__w = R.__w`` ON conjunct."""
    found = []
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if len(joins) != 1 or select.args.get("from_") is None:
            continue
        left, right = select.args["from_"].this.alias, joins[0].this.alias
        for cond in conjuncts(joins[0].args.get("on")):
            if (
                isinstance(cond, exp.EQ)
                and _is_side_window(cond.this, left)
                and _is_side_window(cond.expression, right)
            ):
                found.append((select, joins[0], left, right))
                break
    return iter(found)


def _window_end() -> exp.Column:
    return exp.column("end", table=WINDOW_STRUCT)


def _micros(value: int) -> exp.Expr:
    return exp.Anonymous(this="timestamp_micros", expressions=[exp.Literal.number(value)])


def _drop_late(derived: exp.Subquery) -> None:
    on_time = exp.GT(this=_window_end(), expression=exp.column(LATE_COLUMN))
    derived.set(
        "this", exp.select(exp.Star()).from_(exp.Subquery(this=derived.this)).where(on_time)
    )


def _side_only(cond: exp.Expr, alias: str) -> bool:
    cols = list(cond.find_all(exp.Column))
    return bool(cols) and all(c.table.lower() == alias.lower() for c in cols)


def _join_emitted(
    scope: exp.Select, join: exp.Join, left: str, right: str, watermark_us: int
) -> None:
    """Keep the rows of an outer window join that Spark has emitted (see module docstring)."""
    side = join.side.upper()
    if side not in ("LEFT", "RIGHT", "FULL") or join.kind.upper() == "SEMI":
        return  # inner and semi joins emit their rows at once
    present = {
        a: exp.Not(this=exp.Is(this=exp.column(WINDOW_STRUCT, table=a), expression=exp.Null()))
        for a in (left, right)
    }
    end = {a: exp.column("end", table=WINDOW_STRUCT, db=a) for a in (left, right)}
    terms: List[exp.Expr] = [
        exp.and_(present[left].copy(), present[right].copy()),
        exp.LTE(
            this=exp.Coalesce(this=end[left], expressions=[end[right]]),
            expression=_micros(watermark_us),
        ),
    ]
    on = conjuncts(join.args.get("on"))
    for alias, preserved in ((left, ("LEFT", "FULL")), (right, ("RIGHT", "FULL"))):
        own = [c.copy() for c in on if _side_only(c, alias)]
        if side in preserved and own:
            passes = exp.Coalesce(this=exp.and_(*own), expressions=[exp.false()])
            terms.append(exp.and_(present[alias].copy(), exp.Not(this=exp.Paren(this=passes))))
    where = scope.args.get("where")
    closed = exp.or_(*terms)
    scope.set(
        "where", exp.Where(this=exp.and_(where.this, exp.Paren(this=closed)) if where else closed)
    )


def emitted(tree: exp.Expr, watermark_us: int, closed: bool = True) -> exp.Expr:
    """A copy of the rewritten ``tree`` that computes exactly what the stream emitted up to a
    batch whose watermark was ``watermark_us``, over inputs carrying LATE_COLUMN. ``closed``:
    only windows the watermark closed (append mode); in update mode open windows are emitted
    too, and only the late-row rule applies."""
    tree = tree.copy()
    aggregates = list(window_aggregates(tree))
    for scope, join, left, right in window_joins(tree):
        for derived in _join_inputs(scope, join, aggregates):
            _drop_late(derived)
        if closed:
            _join_emitted(scope, join, left, right, watermark_us)
    for bounded in rewritten_interval_joins(tree):
        _interval_emitted(bounded, watermark_us, closed)
    for scope, derived in aggregates:
        _drop_late(derived)
        if not closed:
            continue
        # MAX(): a predicate on the grouping key would be pushed below the aggregate by Spark's
        # optimizer, and for SESSION that is before the rows' windows merge into sessions.
        done = exp.LTE(this=exp.Max(this=_window_end()), expression=_micros(watermark_us))
        having = scope.args.get("having")
        scope.set("having", exp.Having(this=exp.and_(having.this, done) if having else done))
    return tree


def _not_late(time: str) -> exp.Expr:
    late = exp.LTE(this=exp.column(time), expression=exp.column(LATE_COLUMN))
    return exp.Not(this=exp.Coalesce(this=late, expressions=[exp.false()]))


def _interval_emitted(join: IntervalJoin, watermark_us: int, closed: bool) -> None:
    """Keep the rows of an interval join that Spark has emitted (see module docstring): drop
    late input rows, mark each side's rows, and keep an outer join's unmatched rows that left
    the state (or failed their own side's conditions)."""
    nodes = (join.scope.args["from_"].this, join.join.this)
    for node, time in zip(nodes, join.times, strict=True):
        body = node.this
        body.set("expressions", [*body.expressions, exp.alias_(exp.true(), PRESENT)])
        body.where(_not_late(time), copy=False)
    preserved = {"LEFT": (0,), "RIGHT": (1,), "FULL": (0, 1)}.get(join.kind, ())
    if not closed or not preserved:
        return
    present = [exp.column(PRESENT, table=exp.to_identifier(a)) for a in join.aliases]
    terms: List[exp.Expr] = [exp.and_(present[0].copy(), present[1].copy())]
    on = conjuncts(join.join.args.get("on"))
    for side in preserved:
        alias, time = join.aliases[side], join.times[side]
        threshold = _micros(state_threshold_us(watermark_us, join.bounds[side]))
        left_state = exp.LTE(
            this=exp.column(time, table=exp.to_identifier(alias)), expression=threshold
        )
        gone: exp.Expr = exp.Coalesce(this=left_state, expressions=[exp.false()])
        own = [c.copy() for c in on if _side_only(c, alias)]
        if own:
            passes = exp.Coalesce(this=exp.and_(*own), expressions=[exp.false()])
            gone = exp.or_(gone, exp.Not(this=exp.Paren(this=passes)))
        terms.append(exp.and_(present[side].copy(), exp.Paren(this=gone)))
    closed_rows = exp.Paren(this=exp.or_(*terms))
    join.scope.where(closed_rows, copy=False)


def _join_inputs(
    scope: exp.Select, join: exp.Join, aggregates: List[Tuple[exp.Select, exp.Subquery]]
) -> List[exp.Subquery]:
    """The windowed inputs of a window join's sides that are not inputs of a window aggregate
    (a side that is a window aggregate drops late rows there, and emits closed windows only)."""
    below = {id(derived) for _, derived in aggregates}
    found = _windowed_inputs(scope.args["from_"].this) + _windowed_inputs(join.this)
    return [d for d in found if id(d) not in below]


def kept(tree: exp.Expr, keep_column: str) -> exp.Expr:
    """``SELECT * EXCEPT (keep) FROM (tree) WHERE keep``: the rows an update-mode sink keeps,
    HAVING having become the projected boolean ``keep_column`` (sql/upsert.py)."""
    star = exp.Star(except_=[exp.column(keep_column)])
    return (
        exp.select(star)
        .from_(exp.Subquery(this=tree, alias=exp.TableAlias(this=exp.to_identifier("__kept"))))
        .where(exp.column(keep_column))
    )


def late_rows(tree: exp.Expr) -> List[exp.Select]:
    """One query per window aggregate and per window join side of ``tree``: the input rows
    dropped as late, with the window they were dropped from and the watermark of the batch that
    read them. (A join side's rows are listed before the filters of its subquery and before
    one-sided ON conditions that Spark pushes below the join.)"""
    queries = []
    aggregates = list(window_aggregates(tree))
    inputs = [derived for _, derived in aggregates]
    for scope, join, _, _ in window_joins(tree):
        inputs += _join_inputs(scope, join, aggregates)
    for bounded in rewritten_interval_joins(tree):
        sides = (bounded.scope.args["from_"].this, bounded.join.this)
        for node, time in zip(sides, bounded.times, strict=True):
            queries.append(
                exp.select(
                    exp.Star(except_=[exp.column(LATE_COLUMN)]),
                    exp.alias_(exp.column(LATE_COLUMN), "batch_watermark"),
                )
                .from_(exp.Subquery(this=node.this.copy()))
                .where(exp.LTE(this=exp.column(time), expression=exp.column(LATE_COLUMN)))
            )
    for derived in inputs:
        inner = derived.this.copy()
        star = exp.Star(except_=[exp.column(WINDOW_STRUCT), exp.column(LATE_COLUMN)])
        queries.append(
            exp.select(
                star,
                exp.alias_(window_start_of(derived.this), "window_start"),
                exp.alias_(_window_end(), "window_end"),
                exp.alias_(exp.column(LATE_COLUMN), "batch_watermark"),
            )
            .from_(exp.Subquery(this=inner))
            .where(exp.LTE(this=_window_end(), expression=exp.column(LATE_COLUMN)))
        )
    return queries
