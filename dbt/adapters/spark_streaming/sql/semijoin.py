"""Window SEMI / ANTI joins (FLIP-145): the rows of a window TVF that have (or have not) a
partner in the same window of another window TVF, written as a subquery in WHERE::

    SELECT * FROM TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), INTERVAL '5' MINUTES)) L
    WHERE (window_start, window_end, k) IN (
        SELECT window_start, window_end, k FROM TABLE(TUMBLE(TABLE r, ...)))
    -- or: WHERE [NOT] EXISTS (SELECT * FROM <window TVF> R
    --          WHERE L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end)

``rewrite_window_subqueries`` turns each such conjunct into a window join (joins.py) of the
SELECT's FROM with the subquery's FROM, on the IN pairs and the subquery's correlated
conditions (its own conditions stay with its rows):

- IN / EXISTS becomes ``LEFT SEMI JOIN``: Spark's stream-stream semi join emits a left row once,
  in the micro-batch in which its first partner arrives (Flink: at the window end; same rows);
- NOT EXISTS becomes ``LEFT JOIN ... WHERE <right window_start> IS NULL``: Spark's streaming
  anti join is refused ("LeftAnti joins with a streaming DataFrame/Dataset on the right are not
  supported"), and a left outer window join emits a row without partner when the watermark
  passes its window end, as Flink's window anti join does;
- NOT IN is refused (SSV155): it is false for every row once the other side has a NULL in the
  window, so a row could only be emitted once the window closed and no NULL came; write NOT
  EXISTS (the same for non-NULL keys).

The two windows must be the same TVF with the same sizes and the ON must equate both bounds,
as for any window join (SSV122, SSV107).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from sqlglot import exp

from .dialect import WindowTVF
from .errors import SqlError
from .joins import conjuncts, window_side

WINDOW_STRUCT = "__w"  # rewrite.WINDOW_STRUCT (rewrite.py imports joins.py, which this precedes)

SEMI_ALIAS = "__sub"  # the subquery's window TVF, when it has no alias of its own


def _window_subquery(cond: exp.Expr) -> Optional[Tuple[str, exp.Select, Optional[exp.Expr]]]:
    """('in' | 'exists' | 'not in' | 'not exists', the subquery's SELECT, the IN's left side) if
    ``cond`` is one of those over a SELECT whose FROM is a window TVF (or a subquery of one)."""
    negated = isinstance(cond, exp.Not)
    inner = cond.this if negated else cond
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Exists):
        select, kind, lhs = inner.this, "exists", None
    elif isinstance(inner, exp.In) and inner.args.get("query") is not None:
        select, kind, lhs = inner.args["query"], "in", inner.this
    else:
        return None
    while isinstance(select, exp.Subquery):
        select = select.this
    if not isinstance(select, exp.Select) or not isinstance(select.args.get("from_"), exp.From):
        return None
    if window_side(select.args["from_"].this) is None:
        return None
    return ("not " if negated else "") + kind, select, lhs


def _refuse(what: str, why: str, fix: str, node: exp.Expr) -> SqlError:
    return SqlError("SSV155", what, why, fix, node)


def _qualify(node: exp.Expr, alias: str) -> exp.Expr:
    """``node`` with its unqualified columns qualified by ``alias``."""
    node = node.copy()
    for col in node.find_all(exp.Column):
        if not col.table and not isinstance(col.this, exp.Star):
            col.set("table", exp.to_identifier(alias))
    return node


def _mentions(node: exp.Expr, alias: str) -> bool:
    return any(c.table.lower() == alias.lower() for c in node.find_all(exp.Column))


def _semi_join(scope: exp.Select, cond: exp.Expr) -> Optional[List[exp.Expr]]:
    """Rewrite the window SEMI / ANTI ``cond`` of ``scope`` into a join of its FROM, in place;
    the conjuncts that replace ``cond`` in the WHERE (None if ``cond`` is not one)."""
    found = _window_subquery(cond)
    if found is None:
        return None
    kind, sub, lhs = found
    outer = window_side(scope.args["from_"].this) if scope.args.get("from_") else None
    if outer is None or scope.args.get("joins"):
        raise _refuse(
            f"{kind.upper()} over a window TVF in a query that does not read one window TVF",
            "a window SEMI / ANTI join relates the rows of two window TVFs, window by window",
            "Read one window TVF in the FROM (TABLE(TUMBLE(...)) or a subquery of one) and the "
            "other in the subquery.",
            cond,
        )
    if kind == "not in":
        raise _refuse(
            "NOT IN over a window TVF is not supported",
            "NOT IN is false for every row as soon as the subquery yields a NULL, so a row "
            "could only be emitted once its window had closed without one; a stream cannot take "
            "back the rows it emitted",
            "Write NOT EXISTS (SELECT * FROM ... R WHERE L.k = R.k AND L.window_start = "
            "R.window_start AND L.window_end = R.window_end): the same for keys that are not "
            "NULL.",
            cond,
        )
    if any(sub.args.get(a) for a in ("group", "having", "joins", "qualify", "limit", "order")):
        raise _refuse(
            f"{kind.upper()} over a window TVF whose subquery aggregates, joins or limits",
            "only the rows of a window TVF, filtered, can be joined window by window",
            "Filter the window TVF's rows in the subquery; aggregate in a separate model.",
            sub,
        )
    node = sub.args["from_"].this
    if not node.alias:
        node.set("alias", exp.TableAlias(this=exp.to_identifier(SEMI_ALIAS)))
    inner = node.alias
    outer_alias = outer.alias
    on: List[exp.Expr] = []
    if lhs is not None:
        left = lhs.expressions if isinstance(lhs, exp.Tuple) else [lhs]
        right = [p.unalias() for p in sub.expressions]
        if len(left) != len(right) or any(isinstance(p, exp.Star) for p in right):
            raise _refuse(
                "the IN's left side and its subquery's columns do not pair up",
                f"Got: {len(left)} value(s) and {len(right)} column(s)",
                "Select as many columns in the subquery as the IN compares.",
                sub,
            )
        on += [
            exp.EQ(this=_qualify(a, outer_alias), expression=_qualify(b, inner))
            for a, b in zip(left, right, strict=True)
        ]
    where = sub.args.get("where")
    own: List[exp.Expr] = []
    for c in conjuncts(where.this if where is not None else None):
        (on if _mentions(c, outer_alias) else own).append(_qualify(c, inner))
    if own:
        node = _filtered(node, inner, own)
    join = exp.Join(this=node.copy(), on=exp.and_(*on) if on else None, side="LEFT")
    if kind in ("in", "exists"):
        join.set("kind", "SEMI")
    scope.append("joins", join)
    # SELECT * of the query stays the outer rows' columns.
    scope.set(
        "expressions",
        [
            exp.column(exp.Star(), table=exp.to_identifier(outer_alias))
            if isinstance(p, exp.Star)
            else p
            for p in scope.expressions
        ],
    )
    if kind == "not exists":
        return [exp.Is(this=exp.column(WINDOW_STRUCT, table=inner), expression=exp.Null())]
    return []


def _filtered(node: exp.Expr, alias: str, own: List[exp.Expr]) -> exp.Expr:
    """The subquery's window side ``node`` filtered by its own conditions ``own``: a TVF is
    wrapped in ``(SELECT * FROM <TVF> WHERE ...) AS alias``; a subquery selecting ``*`` of one
    gets them in its WHERE (SSV155 for a subquery that renames columns)."""
    if isinstance(node, WindowTVF):
        body = exp.select(exp.Star()).from_(node.copy()).where(exp.and_(*own))
        return exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    body = node.this
    if not all(isinstance(p, exp.Star) for p in body.expressions):
        raise _refuse(
            "a condition of a window SEMI / ANTI subquery on its own rows, over a subquery that "
            "selects columns",
            "the condition must filter the window TVF's rows where they are read",
            "Move the condition into the subquery in the FROM (or select * there).",
            own[0],
        )
    for cond in own:
        for col in cond.find_all(exp.Column):
            col.set("table", None)
    body.where(exp.and_(*own), copy=False)
    return node


def rewrite_window_subqueries(tree: exp.Expr) -> None:
    """Rewrite every window SEMI / ANTI join of ``tree`` into a window join (see the module
    docstring), in place; SSV155 on a form that cannot be one."""
    for scope in list(tree.find_all(exp.Select)):
        where = scope.args.get("where")
        if where is None:
            continue
        kept: List[exp.Expr] = []
        changed = False
        for cond in conjuncts(where.this):
            if changed and _window_subquery(cond) is not None:
                raise _refuse(
                    "two window SEMI / ANTI subqueries in one WHERE",
                    "each becomes a window join of the query's window TVF, and one SELECT can "
                    "hold one window join",
                    "Nest them: apply one in a subquery of the FROM, the other outside.",
                    cond,
                )
            extra = _semi_join(scope, cond)
            if extra is None:
                kept.append(cond)
                continue
            changed = True
            kept += extra
        if changed:
            scope.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
