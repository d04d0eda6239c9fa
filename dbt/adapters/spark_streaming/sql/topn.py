"""Window Top-N (FLIP-145 "Window TopN"): find ROW_NUMBER / RANK / DENSE_RANK over the rows
of a window TVF or over a window aggregate, filtered by the rank (rewrite.py rewrites them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Type

from sqlglot import exp

from .analysis import own_nodes, window_key
from .dialect import WindowTVF
from .errors import SqlError
from .joins import JOIN_TYPES, side_bound, window_side

RANKINGS = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}


@dataclass
class WindowTopN:
    """A window Top-N (FLIP-145 "Window TopN"; N = 1 is window deduplication)::

        SELECT ... FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end [, k ...]
                                       ORDER BY ...) AS rownum
          FROM TABLE(<TUMBLE | HOP | CUMULATE>(...))) WHERE rownum <= N

    or the same over a window aggregate of such a TVF in a subquery, ``FROM (SELECT
    window_start, window_end, k, SUM(x) AS total FROM TABLE(...) GROUP BY window_start,
    window_end, k)``, and with RANK() or DENSE_RANK() for ROW_NUMBER().

    ``scope`` is the inner SELECT holding the ranking function; ``tvf`` the window TVF (of
    the aggregate, if any); ``keys`` the PARTITION BY keys besides the window bounds; ``limit``
    the N of the outer filter (``rownum <= N``, ``rownum < N + 1``, ``rownum = 1``, ``rownum
    BETWEEN 1 AND N``); ``function`` one of RANKINGS' values. ``aggregate`` is the window
    aggregate ranked (None: the TVF's rows are) and ``columns`` its output column names. The
    rewrite turns the scope into a window aggregate keeping each group's top rows (rewrite.py).
    """

    scope: exp.Select
    tvf: WindowTVF
    window: exp.Window
    keys: List[exp.Expr]
    order: List[exp.Ordered]
    limit: int
    rownum: str
    function: str = "row_number"
    aggregate: Optional[exp.Select] = None
    columns: Tuple[str, ...] = ()
    join_side: Optional[str] = (
        None  # over a window join (``aggregate`` is its SELECT): the alias of
    )
    # the side whose window the Top-N groups by (the left one, or the right one of a RIGHT join)


def _int_literal(node: exp.Expr) -> Optional[int]:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    return None


def rownum_limit(where: Optional[exp.Where], rownum: str) -> Optional[int]:
    """N of an outer ``WHERE rownum <= N`` (or ``< N + 1``, ``= 1``, ``BETWEEN 1 AND N``)."""
    if where is None:
        return None
    cond = where.this
    while isinstance(cond, exp.Paren):
        cond = cond.this

    def is_rownum(node: exp.Expr) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() == rownum.lower()

    if isinstance(cond, exp.Between) and is_rownum(cond.this):
        low, high = _int_literal(cond.args["low"]), _int_literal(cond.args["high"])
        return high if low == 1 and high and high >= 1 else None
    flipped: Dict[Type[exp.Binary], Type[exp.Binary]] = {exp.GTE: exp.LTE, exp.GT: exp.LT}
    if not isinstance(cond, (exp.LTE, exp.LT, exp.EQ, exp.GTE, exp.GT)):
        return None
    kind: Type[exp.Binary] = type(cond)
    left, right = cond.this, cond.expression
    if not is_rownum(left):
        if kind not in flipped and kind is not exp.EQ:
            return None
        left, right, kind = right, left, flipped.get(kind, kind)
    if not is_rownum(left):
        return None
    n = _int_literal(right)
    if n is None:
        return None
    if kind is exp.LTE and n >= 1:
        return n
    if kind is exp.LT and n >= 2:
        return n - 1
    if kind is exp.EQ and n == 1:
        return 1
    return None


def _grouped_tvf(select: exp.Select) -> Optional[WindowTVF]:
    """The TUMBLE / HOP / CUMULATE TVF that ``select`` is a window aggregate of (its only FROM
    item, grouped by both window bounds), or None."""
    frm = select.args.get("from_")
    tvf = frm.this if frm is not None else None
    group = select.args.get("group")
    if not isinstance(tvf, WindowTVF) or select.args.get("joins") or group is None:
        return None
    if not {"window_start", "window_end"} <= {window_key(g, tvf) for g in group.expressions}:
        return None
    return tvf


def _aggregate_columns(
    aggregate: exp.Select, tvf: WindowTVF
) -> Tuple[Tuple[str, ...], Dict[str, str], Optional[exp.Expr]]:
    """Output column names of a window aggregate below a Top-N, which of them are window bounds
    ({lower-case name: 'window_start' | ...}), and its first column without a name, if any."""
    names: List[str] = []
    bounds: Dict[str, str] = {}
    unnamed: Optional[exp.Expr] = None
    for proj in aggregate.expressions:
        target = proj.this if isinstance(proj, exp.Alias) else proj
        if (
            not isinstance(proj, (exp.Alias, exp.Column))
            or isinstance(target, exp.Star)
            or not proj.alias_or_name
        ):
            unnamed = unnamed or proj
            continue
        names.append(proj.alias_or_name)
        key = window_key(target, tvf)
        if key is not None:
            bounds[proj.alias_or_name.lower()] = key
    return tuple(names), bounds, unnamed


def _join_of_aggregates(select: exp.Select) -> Optional[Tuple[WindowTVF, str, Dict[str, str]]]:
    """(the TVF, alias of the side, {lower-case output name: window bound}) of the side whose
    window a Top-N over the window join ``select`` groups by: a join of two window aggregates
    (joins.py), INNER or LEFT (the left side) or RIGHT (the right side); None otherwise."""
    joins = select.args.get("joins") or []
    frm = select.args.get("from_")
    if len(joins) != 1 or frm is None:
        return None
    left, right = window_side(frm.this), window_side(joins[0].this)
    if left is None or right is None or not (left.aggregate and right.aggregate):
        return None
    kind = JOIN_TYPES.get((joins[0].side.upper(), joins[0].kind.upper()))
    if kind not in ("INNER", "LEFT", "RIGHT"):
        return None
    side = right if kind == "RIGHT" else left
    bounds: Dict[str, str] = {}
    for proj in select.expressions:
        target = proj.this if isinstance(proj, exp.Alias) else proj
        star = isinstance(target, exp.Star) or (
            isinstance(target, exp.Column)
            and isinstance(target.this, exp.Star)
            and target.table.lower() in ("", side.alias.lower())
        )
        if star:  # not a Top-N input (SSV109), but tell that from a window join of other bounds
            for inner in side.wrapper.expressions if side.wrapper is not None else []:
                bound = side_bound(exp.column(inner.alias_or_name, table=side.alias), side)
                if bound is not None:
                    bounds[inner.alias_or_name.lower()] = bound
            continue
        bound = side_bound(target, side) if isinstance(target, exp.Column) else None
        if bound is not None and proj.alias_or_name:
            bounds[proj.alias_or_name.lower()] = bound
    return side.tvf, side.alias, bounds


def _join_columns(select: exp.Select) -> Tuple[Tuple[str, ...], Optional[exp.Expr]]:
    """Output column names of a window join below a Top-N, and its first column without a name
    (a star or an unaliased expression), if any."""
    names: List[str] = []
    unnamed: Optional[exp.Expr] = None
    for proj in select.expressions:
        target = proj.this if isinstance(proj, exp.Alias) else proj
        if (
            not isinstance(proj, (exp.Alias, exp.Column))
            or isinstance(target, exp.Star)
            or isinstance(target.this, exp.Star)
            or not proj.alias_or_name
        ):
            unnamed = unnamed or proj
            continue
        names.append(proj.alias_or_name)
    return tuple(names), unnamed


def _window_topn(window: exp.Window) -> Optional[WindowTopN]:
    """The WindowTopN that ``window`` (an OVER clause) is part of, or None if not that shape."""
    alias = window.parent
    function = RANKINGS.get(type(window.this))
    if function is None or window.this.expressions or window.args.get("spec") is not None:
        return None
    if not isinstance(alias, exp.Alias) or not alias.alias:
        return None
    scope = alias.parent
    if not isinstance(scope, exp.Select) or alias not in scope.expressions:
        return None
    frm = scope.args.get("from_")
    source = frm.this if frm is not None else None
    aggregate: Optional[exp.Select] = None
    columns: Tuple[str, ...] = ()
    unnamed: Optional[exp.Expr] = None
    joined = None
    if isinstance(source, WindowTVF):
        tvf = source
    elif (
        isinstance(source, exp.Subquery)
        and isinstance(source.this, exp.Select)
        and (grouped := _grouped_tvf(source.this)) is not None
    ):
        aggregate, tvf = source.this, grouped
    elif (
        isinstance(source, exp.Subquery)
        and isinstance(source.this, exp.Select)
        and (joined := _join_of_aggregates(source.this)) is not None
    ):
        aggregate, tvf = source.this, joined[0]
    else:
        return None
    if tvf.function == "SESSION":
        return None
    if any(
        scope.args.get(a)
        for a in (
            "joins",
            "group",
            "having",
            "distinct",
            "order",
            "limit",
            "qualify",
            "windows",
            "with_",
        )
    ):
        return None
    for node in own_nodes(scope, "expressions", "where"):
        if node is window or node is alias or node is window.this:
            continue
        if isinstance(node, (exp.Window, exp.AggFunc, exp.Query, exp.Subquery)):
            return None
    for proj in scope.expressions:
        if proj is not alias and not isinstance(proj, (exp.Star, exp.Column)):
            return None
    if aggregate is None:

        def bound(node: exp.Expr) -> Optional[str]:
            return window_key(node, tvf)
    else:
        if joined is not None:
            (columns, unnamed), bounds = _join_columns(aggregate), joined[2]
        else:
            columns, bounds, unnamed = _aggregate_columns(aggregate, tvf)
        qualifier = source.alias.lower()

        def bound(node: exp.Expr) -> Optional[str]:
            if not isinstance(node, exp.Column) or (node.table and node.table.lower() != qualifier):
                return None
            return bounds.get(node.name.lower())

    if scope.args.get("where") and any(bound(n) for n in scope.args["where"].walk()):
        return None
    keys = [k for k in window.args.get("partition_by") or [] if bound(k) is None]
    bounds_used = {bound(k) for k in window.args.get("partition_by") or []}
    if not {"window_start", "window_end"} <= bounds_used or "window_time" in bounds_used:
        return None
    if not all(isinstance(k, exp.Column) for k in keys):
        return None
    order = list((window.args.get("order") or exp.Order()).expressions)
    if not order or any(
        not isinstance(o, exp.Ordered)
        or any(bound(n) for n in o.walk())
        or any(isinstance(n, (exp.AggFunc, exp.Window, exp.Query)) for n in o.walk())
        for o in order
    ):
        return None
    sub = scope.parent
    outer = (
        sub.parent.parent
        if isinstance(sub, exp.Subquery) and isinstance(sub.parent, exp.From)
        else None
    )
    if not isinstance(outer, exp.Select):
        return None
    limit = rownum_limit(outer.args.get("where"), alias.alias)
    if limit is None:
        return None
    what = "window join" if joined is not None else "window aggregate"
    if aggregate is not None and unnamed is not None:
        raise SqlError(
            "SSV109",
            f"a column of the {what} below a window Top-N has no name",
            f"the Top-N keeps the {what}'s rows whole and refers to their columns by name; got "
            f"{unnamed.sql(dialect='spark')}",
            f"Name every selected column of the {what} (e.g. "
            + ("a.sales, b.buyers rather than a.*)." if joined else "SUM(price) AS price)."),
            unnamed,
        )
    return WindowTopN(
        scope,
        tvf,
        window,
        keys,
        order,
        limit,
        alias.alias,
        function,
        aggregate,
        columns,
        joined[1] if joined is not None else None,
    )


def inline_ranked_ctes(tree: exp.Expr) -> None:
    """In place: a CTE that is the FROM of a ranking function's SELECT (``WITH v AS (...) SELECT
    * FROM (SELECT *, ROW_NUMBER() OVER (...) AS rownum FROM v) WHERE ...``, FLIP-145's view
    and Top-N as one model) and is referred to only there becomes a subquery in that FROM, so
    the Top-N is found over it like over a subquery. Other CTEs are left as written."""
    withs = [w for w in tree.find_all(exp.With)]
    for with_ in withs:
        for cte in list(with_.expressions):
            name = cte.alias_or_name.lower()
            refs = [
                t
                for t in tree.find_all(exp.Table)
                if isinstance(t.this, exp.Identifier) and not t.db and t.name.lower() == name
            ]
            if len(refs) != 1 or not isinstance(refs[0].parent, exp.From):
                continue
            scope = refs[0].parent.parent
            if not isinstance(scope, exp.Select) or not any(
                isinstance(p, exp.Alias)
                and isinstance(p.this, exp.Window)
                and type(p.this.this) in RANKINGS
                for p in scope.expressions
            ):
                continue
            alias = refs[0].alias or cte.alias_or_name
            refs[0].replace(
                exp.Subquery(
                    this=cte.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))
                )
            )
            cte.pop()
        if not with_.expressions:
            with_.pop()


def window_topns(tree: exp.Expr) -> List[WindowTopN]:
    """Every window Top-N / deduplication of ``tree`` (see WindowTopN)."""
    found = []
    for window in tree.find_all(exp.Window):
        topn = _window_topn(window)
        if topn is not None:
            found.append(topn)
    return found
