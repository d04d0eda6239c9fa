"""Interval joins (Calcite's "shipped within 1 hour", Flink's interval join): two streams joined
on a key and on a bounded difference of their event times::

    SELECT ... FROM orders o [INNER | LEFT | RIGHT | FULL] JOIN shipments s
    ON o.id = s.order_id AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR

Both inputs are tables read directly (sources, seeds or models), the ON holds an equality
between them and time-bound conjuncts ``A op B`` (``<``, ``<=``, ``>``, ``>=`` or ``BETWEEN``)
where A and B are each one side's timestamp column plus or minus interval literals. Together
they must bound the other side's time from both ends, as seen from each side: otherwise a row
waits for a partner forever (SSV150). Each side's time column is the same in every bound.

The rewrite reads each side with Spark's watermark on its time column (``(SELECT * FROM t
WATERMARK ts DELAY OF <watermark_delay>) AS o``) and leaves the ON as written: Spark's
stream-stream join derives from the bounds how long it keeps each side's rows (its "state
watermark", below), emits matched pairs at once and, for an outer join, an unmatched row when
it leaves the state. ``*`` and ``o.*`` in the SELECT list are expanded to the sides' columns so
that the oracle can add its own.

Spark's rule, read in StreamingJoinHelper.getStateValueWatermark (Spark 4.3) and pinned by
tests/functional/test_interval_join.py: a bound ``tR - tL + c < 0`` (``<=``) between the right
time tR and the left time tL lets Spark drop left rows with ``tL <= W + c`` (``W + c - 1 ms``),
W being the micro-batch's watermark in milliseconds and ``W + c`` truncated to milliseconds;
symmetrically ``tL - tR + c < 0`` drops right rows; the lowest such value per side applies.
An input row whose time is <= the watermark of the micro-batch that reads it is dropped as late.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from sqlglot import exp

from .analysis import TIMESTAMP_TYPES, table_key
from .dialect import WatermarkedTable
from .errors import SqlError
from .intervals import interval_literal, interval_micros
from .joins import JOIN_TYPES, conjuncts, expand_stars

# One side's bound: rows of that side with time <= W + offset_us (- 1 ms unless strict) leave
# Spark's state once the watermark is W.
Bound = Tuple[int, bool]


@dataclass
class IntervalJoin:
    """An interval join: ``scope`` joins ``aliases`` (left, right) with ``join`` of ``kind``;
    ``times`` are the sides' time columns, ``bounds`` each side's state bounds."""

    scope: exp.Select
    join: exp.Join
    kind: str
    aliases: Tuple[str, str]
    times: Tuple[str, str]
    bounds: Tuple[List[Bound], List[Bound]]
    bounding: Tuple[exp.Expr, ...] = ()  # the conjuncts that bound the time difference


def _linear(node: exp.Expr, aliases: Sequence[str]) -> Optional[Tuple[Dict, int]]:
    """``node`` as {(side index, column): coefficient}, constant microseconds; None unless it is
    a sum of qualified columns and interval literals."""
    if isinstance(node, exp.Paren):
        return _linear(node.this, aliases)
    if isinstance(node, exp.Column):
        side = [i for i, a in enumerate(aliases) if node.table.lower() == a.lower()]
        return ({(side[0], node.name.lower()): 1}, 0) if side else None
    if isinstance(node, (exp.Add, exp.Sub)):
        a, b = _linear(node.this, aliases), _linear(node.expression, aliases)
        if a is None or b is None:
            return None
        sign = -1 if isinstance(node, exp.Sub) else 1
        terms = dict(a[0])
        for key, coef in b[0].items():
            terms[key] = terms.get(key, 0) + sign * coef
        return {k: v for k, v in terms.items() if v}, a[1] + sign * b[1]
    us = interval_micros(node)
    return None if us is None else ({}, us)


def _comparisons(cond: exp.Expr) -> List[Tuple[exp.Expr, exp.Expr, bool]]:
    """``cond`` as (x, y, strict) meaning ``x < y`` (strict) or ``x <= y``."""
    if isinstance(cond, exp.Between):
        return [(cond.args["low"], cond.this, False), (cond.this, cond.args["high"], False)]
    if isinstance(cond, (exp.LT, exp.LTE)):
        return [(cond.this, cond.expression, isinstance(cond, exp.LT))]
    if isinstance(cond, (exp.GT, exp.GTE)):
        return [(cond.expression, cond.this, isinstance(cond, exp.GT))]
    return []


def time_bounds(
    conds: List[exp.Expr], aliases: Sequence[str]
) -> Tuple[Dict[int, str], Tuple[List[Bound], List[Bound]], List[exp.Expr]]:
    """The sides' time columns, each side's state bounds, and the conjuncts of ``conds`` that
    bound the sides' time difference (SSV154 if a side's bounds name two columns)."""
    times: Dict[int, str] = {}
    bounds: Tuple[List[Bound], List[Bound]] = ([], [])
    used = []
    for cond in conds:
        for x, y, strict in _comparisons(cond):
            diff = _linear(exp.Sub(this=x, expression=y), aliases)
            if diff is None:
                continue
            terms, const = diff
            coefs = {side: coef for (side, _), coef in terms.items()}
            if len(terms) != 2 or sorted(coefs.values()) != [-1, 1] or len(coefs) != 2:
                continue
            for side, column in terms:
                if times.setdefault(side, column) != column:
                    raise SqlError(
                        "SSV154",
                        f"the time bounds of the interval join name two columns of "
                        f"{aliases[side]}: {times[side]} and {column}",
                        "Spark keeps each input of a stream-stream join by one event-time "
                        "column, the one its watermark is on",
                        f"Bound the time difference with one column of {aliases[side]}.",
                        cond,
                    )
            # x - y = coef_l * tL + coef_r * tR + const: the side with coefficient -1 is bounded
            bounds[coefs[0] == 1].append((const, strict))
            used.append(cond)
    return times, bounds, used


def state_threshold_us(watermark_us: int, bounds: List[Bound]) -> int:
    """The time (microseconds) at or below which a side's rows have left Spark's join state once
    the watermark is ``watermark_us`` (see the module docstring)."""
    values = []
    for offset, strict in bounds:
        total = watermark_us // 1000 * 1000 + offset
        ms = abs(total) // 1000 * (1 if total >= 0 else -1)  # Scala's toLong truncates
        values.append((ms - (0 if strict else 1)) * 1000)
    return min(values)


def _side_table(node: exp.Expr, dimensions: Sequence[str], ctes: set) -> Optional[exp.Table]:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        return None
    key = table_key(node)
    if not node.db and key in ctes:
        return None
    wanted = {d.lower() for d in dimensions}
    return None if wanted & {key, key.rpartition(".")[2]} else node


def _refuse(what: str, why: str, fix: str, node: exp.Expr) -> SqlError:
    return SqlError("SSV154", what, why, fix, node)


def _interval_join(
    scope: exp.Select,
    schemas: Mapping[str, Mapping[str, str]],
    dimensions: Sequence[str],
    ctes: set,
) -> Optional[IntervalJoin]:
    joins = scope.args.get("joins") or []
    frm = scope.args.get("from_")
    if len(joins) != 1 or frm is None:
        return None
    found = [_side_table(n, dimensions, ctes) for n in (frm.this, joins[0].this)]
    if found[0] is None or found[1] is None:
        return None
    tables = (found[0], found[1])
    join = joins[0]
    aliases = (tables[0].alias_or_name, tables[1].alias_or_name)
    kind = JOIN_TYPES.get((join.side.upper(), join.kind.upper()))
    if kind is None or kind == "SEMI" or join.args.get("using") or join.args.get("method"):
        return None  # SSV150 (check_joins) says what a stream join may be
    if aliases[0].lower() == aliases[1].lower():
        raise _refuse(
            "the two inputs of an interval join have the same name",
            "its ON must say which input each column comes from",
            "Give each input its own alias (FROM orders o JOIN shipments s ...).",
            join,
        )
    conds = conjuncts(join.args.get("on"))
    if kind == "INNER":
        where = scope.args.get("where")
        conds += conjuncts(where.this if where is not None else None)
    times, bounds, used = time_bounds(conds, aliases)
    if not bounds[0] or not bounds[1]:
        return None  # no time bound (SSV150 from check_joins, with how to add one)
    for side, table in enumerate(tables):
        types = schemas.get(table_key(table)) or {}
        col_type = {c.lower(): t for c, t in types.items()}.get(times[side])
        if col_type is None or col_type.lower() not in TIMESTAMP_TYPES:
            raise _refuse(
                f"the interval join bounds {aliases[side]}.{times[side]}, which is not a "
                f"timestamp column of {table_key(table)}"
                + (f" (it is {col_type})" if col_type else ""),
                "the watermark of a stream-stream join is on each input's event-time column",
                "Bound the time difference of two timestamp columns, one of each input.",
                used[0],
            )
    if not any(_equates_sides(c, aliases) for c in conds):
        raise _refuse(
            "the interval join has no equality between its two inputs",
            "Spark joins two streams by a key: each side's rows are kept in state per value of "
            "an expression equated with the other side's",
            f"Add a key to the ON, e.g. {aliases[0]}.id = {aliases[1]}.id.",
            join,
        )
    return IntervalJoin(scope, join, kind, aliases, (times[0], times[1]), bounds, tuple(used))


def _sides(node: exp.Expr, aliases: Sequence[str]) -> set:
    return {
        i
        for c in node.find_all(exp.Column)
        for i, a in enumerate(aliases)
        if c.table.lower() == a.lower()
    }


def _equates_sides(cond: exp.Expr, aliases: Sequence[str]) -> bool:
    if not isinstance(cond, exp.EQ):
        return False
    a, b = _sides(cond.this, aliases), _sides(cond.expression, aliases)
    return {frozenset(a), frozenset(b)} == {frozenset({0}), frozenset({1})}


def interval_joins(
    tree: exp.Expr,
    schemas: Mapping[str, Mapping[str, str]],
    dimensions: Sequence[str],
    skip: AbstractSet[int] = frozenset(),
) -> List[IntervalJoin]:
    """Every interval join of ``tree`` (see the module docstring) outside the SELECTs ``skip``
    (window joins); SqlError on a malformed one. A join of two tables without time bounds is
    not one (check_joins refuses it, SSV150)."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    found = []
    for scope in list(tree.find_all(exp.Select)):
        if id(scope) in skip:
            continue
        join = _interval_join(scope, schemas, dimensions, ctes)
        if join is None:
            continue
        for col in (join.join.args["on"]).find_all(exp.Column):
            if not col.table:
                raise _refuse(
                    f"column {col.sql(dialect='spark')} in the ON of an interval join is not "
                    "qualified",
                    "an interval join's ON must say which input each column comes from: "
                    "conditions on one input decide which rows an outer join emits at once",
                    f"Write {join.aliases[0]}.{col.name} or {join.aliases[1]}.{col.name}.",
                    col,
                )
        found.append(join)
    return found


def refuse_as_upsert(joins: List[IntervalJoin]) -> None:
    """SSV153: an interval join's rows are only ever appended."""
    if joins:
        raise SqlError(
            "SSV153",
            "an interval join as upsert_table",
            "an interval join only appends rows: each matched pair once, and each unmatched row "
            "of an outer join once, when the watermark passes its time bound; none is ever "
            "updated or retracted, so there is no key to upsert by",
            "Use materialized='streaming_view'; aggregate its rows in a downstream model.",
            joins[0].join,
        )


def rewrite_interval_joins(
    joins: List[IntervalJoin], schemas: Mapping[str, Mapping[str, str]], delay_us: int
) -> None:
    """Read each side as ``(SELECT * FROM t WATERMARK <time> DELAY OF <delay>) AS alias`` and
    expand ``*`` / ``alias.*`` in the SELECT list to the sides' columns, in place. A FULL join
    also says ``k IS NOT NULL`` for its keys (Spark's FULL stream join matches NULL keys)."""
    for join in joins:
        nodes = (join.scope.args["from_"].this, join.join.this)
        columns = {}
        for node, alias, time in zip(nodes, join.aliases, join.times, strict=True):
            columns[alias.lower()] = (alias, list(schemas[table_key(node)]))
            source = WatermarkedTable(
                this=exp.Table(
                    this=node.this.copy(), db=node.args["db"].copy() if node.db else None
                ),
                column=exp.column(exp.to_identifier(time)),
                delay=interval_literal(delay_us),
            )
            body = exp.Select(expressions=[exp.Star()]).from_(source)
            node.replace(
                exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )
        _hide_comparisons(join)
        if join.kind == "FULL":
            keys = [c for c in conjuncts(join.join.args["on"]) if _equates_sides(c, join.aliases)]
            extra = [
                exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))
                for c in keys
                for x in (c.this, c.expression)
            ]
            join.join.set("on", exp.and_(join.join.args["on"], *extra))
        expand_stars(join.scope, {w: [(a, c) for c in cols] for w, (a, cols) in columns.items()})


def _hide_comparisons(join: IntervalJoin) -> None:
    """Wrap each ON conjunct that compares but does not bound the time difference in
    ``COALESCE(<it>, FALSE)`` (the same truth in a join condition). Spark solves every ``<``,
    ``<=``, ``>``, ``>=`` conjunct of a stream-stream join's condition for a state threshold,
    and one on a single side (``o.amount > 10``) yields a constant: the lowest, so that side's
    rows would never leave the state and an outer join would never emit them unmatched."""
    bounding = {id(c) for c in join.bounding}
    compares = (exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between)
    conds = []
    for cond in conjuncts(join.join.args.get("on")):
        if id(cond) not in bounding and cond.find(*compares) is not None:
            cond = exp.Coalesce(this=cond.copy(), expressions=[exp.false()])
        conds.append(cond)
    join.join.set("on", exp.and_(*conds))


def rewritten_interval_joins(tree: exp.Expr) -> List[IntervalJoin]:
    """The interval joins of a rewritten ``tree`` (for the oracle): SELECTs joining two
    ``(SELECT * FROM t WATERMARK ...)`` derived tables."""
    found = []
    for scope in tree.find_all(exp.Select):
        joins = scope.args.get("joins") or []
        if len(joins) != 1 or scope.args.get("from_") is None:
            continue
        nodes = (scope.args["from_"].this, joins[0].this)
        times = [_watermarked_side(n) for n in nodes]
        if times[0] is None or times[1] is None:
            continue
        aliases = (nodes[0].alias, nodes[1].alias)
        _, bounds, _ = time_bounds(conjuncts(joins[0].args.get("on")), aliases)
        kind = JOIN_TYPES.get((joins[0].side.upper(), joins[0].kind.upper()), "INNER")
        found.append(IntervalJoin(scope, joins[0], kind, aliases, (times[0], times[1]), bounds))
    return found


def _watermarked_side(node: exp.Expr) -> Optional[str]:
    """The time column of an interval join side ``(SELECT * FROM t WATERMARK ts ...) AS a``."""
    if not isinstance(node, exp.Subquery) or not node.alias:
        return None
    body = node.this
    if not isinstance(body, exp.Select) or not isinstance(body.args.get("from_"), exp.From):
        return None
    source = body.args["from_"].this
    if not isinstance(source, WatermarkedTable) or len(body.expressions) != 1:
        return None
    if not isinstance(body.expressions[0], exp.Star):
        return None
    return source.args["column"].name
