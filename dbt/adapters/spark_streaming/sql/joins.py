"""Window joins (FLIP-145 "Window Join"): two window TVFs joined on both window bounds.

A window join is a SELECT whose FROM and single JOIN are each a window TVF, directly or
wrapped in a subquery that projects and filters its rows, or both window aggregates of window
TVFs (subqueries grouping by both window bounds, FLIP-145's cumulative example)::

    SELECT ... FROM (SELECT * FROM TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), INTERVAL '5' MINUTES))) L
    [INNER | LEFT | RIGHT | FULL] JOIN
      TABLE(TUMBLE(TABLE r, DESCRIPTOR(ts), INTERVAL '5' MINUTES)) R
    ON L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end [AND ...]

Both TVFs must be the same kind with the same sizes and offset (SSV122), and the ON must equate
both window bounds (SSV107). The rewrite gives each side its window struct ``__w`` (CUMULATE:
one per cumulative window) and joins on ``L.__w = R.__w`` in place of the bounds: Spark's
stream-stream join keeps each side's rows in state until the watermark passes ``__w.end``, and
then emits the unmatched rows of an outer join with NULLs (see oracle.py for the exact rule).
A window aggregate side instead projects ``__w`` (grouped by it): Spark chains the
aggregates and the join in append mode, each aggregate emits a window once, when it closes, and
both sides of a window arrive in the same micro-batch, so the join emits the window's rows
(matched or not) in that micro-batch and its state holds them only until then.
A side's time column is projected as ``ts + INTERVAL '0' SECOND``: Spark refuses a join input
with two event-time columns (MULTIPLE_EVENT_TIME_COLUMNS), and that copy carries no watermark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from sqlglot import exp

from .analysis import WINDOW_COLUMNS, WindowSpec, is_aggregating, tvf_alias, window_key
from .dialect import WindowTVF
from .errors import SqlError
from .intervals import describe

JOIN_TYPES = {
    ("", ""): "INNER",
    ("", "INNER"): "INNER",
    ("LEFT", ""): "LEFT",
    ("LEFT", "OUTER"): "LEFT",
    ("RIGHT", ""): "RIGHT",
    ("RIGHT", "OUTER"): "RIGHT",
    ("FULL", ""): "FULL",
    ("FULL", "OUTER"): "FULL",
    ("LEFT", "SEMI"): "SEMI",  # a window SEMI join (semijoin.py: IN / EXISTS)
}
_SIZE_NAMES = {"tumble": ("size",), "hop": ("slide", "size"), "cumulate": ("step", "max size")}


@dataclass
class JoinSide:
    """One input of a window join: ``node`` (the TVF or the subquery wrapping it) in FROM / JOIN,
    referred to by ``alias``; ``wrapper`` is the SELECT over the TVF when there is one."""

    node: exp.Expr
    tvf: WindowTVF
    alias: str
    wrapper: Optional[exp.Select]
    aggregate: bool = False  # the wrapper is a window aggregate of the TVF (GROUP BY both bounds)


@dataclass
class WindowJoin:
    """A window join: ``scope`` joins ``sides`` (left, right) with ``join`` of ``kind``
    (INNER, LEFT, RIGHT, FULL); ``start`` / ``end`` are the ON conjuncts equating the bounds."""

    scope: exp.Select
    join: exp.Join
    kind: str
    sides: Tuple[JoinSide, JoinSide]
    start: exp.EQ
    end: exp.EQ


def _unsupported(what: str, why: str, fix: str, node: exp.Expr) -> SqlError:
    return SqlError("SSV108", what, why, fix, node)


def _groups_by_window(select: exp.Select, tvf: WindowTVF) -> bool:
    group = select.args.get("group")
    return group is not None and {"window_start", "window_end"} <= {
        window_key(g, tvf) for g in group.expressions
    }


def _wrapper_tvf(sub: exp.Subquery) -> Optional[Tuple[WindowTVF, exp.Select, bool]]:
    """(TVF, wrapping SELECT, whether it aggregates) if ``sub`` only projects and filters the rows
    of one window TVF, or is a window aggregate of it (grouped by both window bounds)."""
    select = sub.this
    if not isinstance(select, exp.Select) or not isinstance(select.args.get("from_"), exp.From):
        return None
    tvf = select.args["from_"].this
    if not isinstance(tvf, WindowTVF):
        return None
    aggregate = is_aggregating(select)
    if aggregate and not _groups_by_window(select, tvf):
        return None
    if any(
        select.args.get(a) for a in ("joins", "qualify", "windows", "order", "limit", "with_")
    ) or (select.args.get("having") and not aggregate):
        return None
    if any(
        isinstance(n, (exp.Window, exp.Query)) and n is not select
        for p in select.expressions
        for n in p.walk()
    ):
        return None
    return tvf, select, aggregate


def window_side(node: exp.Expr) -> Optional[JoinSide]:
    if isinstance(node, WindowTVF):
        return JoinSide(node, node, tvf_alias(node), None)
    if isinstance(node, exp.Subquery) and node.alias:
        found = _wrapper_tvf(node)
        if found:
            return JoinSide(node, found[0], node.alias, found[1], found[2])
    return None


def side_bound(col: exp.Expr, side: JoinSide) -> Optional[str]:
    """'window_start' / 'window_end' if ``col`` is ``<side alias>.<that window bound of the
    side>``."""
    if not isinstance(col, exp.Column) or col.table.lower() != side.alias.lower():
        return None
    name = col.name.lower()
    if side.wrapper is None:
        return name if name in ("window_start", "window_end") else None
    for proj in side.wrapper.expressions:
        if isinstance(proj, exp.Star) and name in ("window_start", "window_end"):
            return name
        if proj.alias_or_name.lower() == name:
            key = window_key(proj.unalias(), side.tvf)
            return key if key in ("window_start", "window_end") else None
    return None


def conjuncts(node: Optional[exp.Expr]) -> List[exp.Expr]:
    """The AND-ed terms of ``node`` (none if it is None)."""
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def _bound_equality(cond: exp.EQ, sides: Tuple[JoinSide, JoinSide]) -> Optional[str]:
    """The bound ``cond`` equates between the two sides (``L.window_end = R.window_end``), if
    any."""
    for a, b in ((cond.this, cond.expression), (cond.expression, cond.this)):
        left, right = side_bound(a, sides[0]), side_bound(b, sides[1])
        if left is not None and left == right:
            return left
    return None


def _check_same_windows(sides: Tuple[JoinSide, JoinSide], specs: Mapping[int, WindowSpec]) -> None:
    """SSV122 unless both sides are the same TVF kind with the same sizes and offset."""
    left, right = (specs[id(s.tvf)] for s in sides)

    def shown(spec: WindowSpec) -> str:
        sizes = (
            (spec.slide_us, spec.size_us) if spec.kind in ("hop", "cumulate") else (spec.size_us,)
        )
        text = ", ".join(
            f"{n} {describe(v)}" for n, v in zip(_SIZE_NAMES[spec.kind], sizes, strict=True)
        )
        return f"{spec.kind.upper()} ({text}" + (
            f", offset {describe(spec.offset_us)})" if spec.offset_us else ")"
        )

    if (left.kind, left.size_us, left.slide_us, left.offset_us) != (
        right.kind,
        right.size_us,
        right.slide_us,
        right.offset_us,
    ):
        raise SqlError(
            "SSV122",
            "the two inputs of a window join have different windows",
            "rows join only within the same window, so both sides must use the same window TVF "
            f"with the same sizes and offset. Got: {shown(right)}; Expected: {shown(left)}",
            "Use the same TVF and intervals on both sides of the join.",
            sides[1].tvf.this,
        )


def _check_on(join: exp.Join, sides: Tuple[JoinSide, JoinSide]) -> Tuple[exp.EQ, exp.EQ]:
    """The ON conjuncts equating window_start and window_end (SSV107 if one is missing, SSV123 on
    a column not qualified by a side's alias)."""
    on = join.args.get("on")
    for col in on.find_all(exp.Column) if on is not None else []:
        if not col.table:
            raise SqlError(
                "SSV123",
                f"column {col.sql(dialect='spark')} in the ON of a window join is not qualified",
                "a window join's ON must say which input each column comes from: conditions on "
                "one input decide which rows an outer join emits at once",
                f"Write {sides[0].alias}.{col.name} or {sides[1].alias}.{col.name}.",
                col,
            )
    found: Dict[str, exp.EQ] = {}
    for cond in conjuncts(on):
        if not isinstance(cond, exp.EQ):
            continue
        bound = _bound_equality(cond, sides)
        if bound is not None:
            found.setdefault(bound, cond)
    missing = [b for b in ("window_start", "window_end") if b not in found]
    if missing:
        a, b = sides[0].alias, sides[1].alias
        raise SqlError(
            "SSV107",
            f"window join does not equate {' and '.join(missing)} of its inputs",
            "a window join joins rows of the same window only, so its ON must equate both "
            "window_start and window_end of the two window TVFs (FLIP-145)",
            f"Add {' AND '.join(f'{a}.{m} = {b}.{m}' for m in missing)} to the ON.",
            on if on is not None else join,
        )
    return found["window_start"], found["window_end"]


def _window_join(scope: exp.Select, specs: Mapping[int, WindowSpec]) -> Optional[WindowJoin]:
    joins = scope.args.get("joins") or []
    frm = scope.args.get("from_")
    if not joins or frm is None:
        return None
    nodes = [frm.this] + [j.this for j in joins]
    sides = [window_side(n) for n in nodes]
    if sum(s is not None for s in sides) < 2:  # e.g. a TVF joined with a dimension table
        return None
    if len(nodes) > 2:
        raise _unsupported(
            "window joins of more than two inputs are not supported yet",
            "only one window join per SELECT can be rewritten",
            "Join two window TVFs per SELECT (nest a second join in a subquery).",
            joins[1],
        )
    join = joins[0]
    kind = JOIN_TYPES.get((join.side.upper(), join.kind.upper()))
    if kind is None or join.args.get("using") or join.args.get("method"):
        label = " ".join(p for p in (join.method, join.side, join.kind) if p) + " JOIN"
        label += " ... USING" if join.args.get("using") else ""
        raise _unsupported(
            f"{label.strip()} is not supported in a window join",
            "window joins can be INNER, LEFT, RIGHT, FULL OUTER or LEFT SEMI joins with an ON "
            "clause (Spark cannot run a streaming anti join)",
            "Use [INNER | LEFT | RIGHT | FULL | LEFT SEMI] JOIN ... ON ...; for an anti join, "
            "WHERE NOT EXISTS (SELECT * FROM <window TVF> R WHERE <the ON>).",
            join,
        )
    left, right = sides
    assert left is not None and right is not None  # two inputs, at least two of them sides
    pair = (left, right)
    for side in pair:
        if side.tvf.function == "SESSION":
            raise _unsupported(
                "window joins of SESSION windows are not supported",
                "sessions of the two inputs are formed independently, so they have no common "
                "windows to join on (Flink refuses them too)",
                "Join TUMBLE, HOP or CUMULATE windows, or join the sessions' aggregates in a batch "
                "model.",
                side.tvf.this,
            )
    if is_aggregating(scope):
        raise _unsupported(
            "aggregating the rows of a window join is not supported yet",
            "only the joined rows themselves can be emitted by a streaming_view",
            "Aggregate each input before the join, or aggregate the join's model downstream.",
            scope.args.get("group") or scope,
        )
    if pair[0].aggregate != pair[1].aggregate:
        rows = pair[0] if pair[1].aggregate else pair[1]
        raise _unsupported(
            "a window join of a window aggregate with the rows of a window TVF is not supported",
            "an aggregate emits a window when the watermark closes it, and by then the other "
            "side's rows of that window have left the join's state",
            "Join two window aggregates, or the rows of two window TVFs.",
            rows.node,
        )
    _check_same_windows(pair, specs)
    start, end = _check_on(join, pair)
    return WindowJoin(scope, join, kind, pair, start, end)


def window_joins(
    tree: exp.Expr, tvfs: List[WindowTVF], specs: List[WindowSpec]
) -> List[WindowJoin]:
    """Every window join of ``tree`` (see module docstring); SqlError on a malformed one."""
    by_tvf = {id(t): s for t, s in zip(tvfs, specs, strict=True)}
    found = []
    for scope in list(tree.find_all(exp.Select)):
        join = _window_join(scope, by_tvf)
        if join is not None:
            found.append(join)
    return found


def side_columns(side: JoinSide, tvf_columns: List[str]) -> List[str]:
    """The columns a side exposes to the join (``tvf_columns``: those of its TVF)."""
    if side.wrapper is None:
        return list(tvf_columns)
    names: List[str] = []
    for proj in side.wrapper.expressions:
        names += list(tvf_columns) if isinstance(proj, exp.Star) else [proj.alias_or_name]
    return names


def tvf_output(columns: List[str]) -> List[str]:
    """The columns of a window TVF over a table with ``columns`` (FLIP-145)."""
    return list(columns) + list(WINDOW_COLUMNS)


def expand_stars(scope: exp.Select, exposed: Mapping[str, List[Tuple[str, str]]]) -> None:
    """Replace the ``*`` and ``t.*`` of a join's SELECT list, in place, by the columns each side
    exposes (`exposed`: lower-case side alias -> [(alias, column), ...], in order)."""
    projections: List[exp.Expr] = []
    for proj in scope.expressions:
        star = isinstance(proj, exp.Star) or (
            isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)
        )
        if not star:
            projections.append(proj)
            continue
        wanted = (
            [proj.table.lower()] if isinstance(proj, exp.Column) and proj.table else list(exposed)
        )
        projections += [
            exp.column(exp.to_identifier(c), table=exp.to_identifier(a))
            for w in wanted
            for a, c in exposed.get(w, [])
        ]
    scope.set("expressions", projections)
