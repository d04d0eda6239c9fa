"""Whether a changed model query can go on from the old query's checkpoint and state.

A streaming query's checkpoint holds, besides the source offsets, the state of its stateful
operators (aggregates, joins, deduplications), keyed by operator and with a schema Spark checks
on restart. What is computed *after* the outermost stateful operator (its projection, HAVING,
a filter or projection of an outer SELECT) is not in that state: changing it keeps the state
valid. Anything else (the sources, the window, the watermark, the grouping keys, the
aggregates, a filter before the aggregation, a join, an upsert key) changes what the state
holds or its schema.

:func:`classify` compares two compiled plans (sql/compiler.py) structurally, over their
rewritten Spark SQL trees: each is reduced to its *state core* (the outermost stateful SELECT
with its projection replaced by the aggregate calls it and its HAVING compute, in order, which
are Spark's aggregation buffers; everything below it as is), and the cores are compared.
Conservative: a construct it does not reduce (a join, a window function, DISTINCT, a set
operation) is compared whole, projection included. A temporal join's state is its two inputs'
rows (sql/temporaljoin.py): its items, WHERE and ON apply to each micro-batch's output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from sqlglot import exp

from .dialect import SparkStreaming, WatermarkedTable

KEEPS_STATE = "keeps_state"
CHANGES_STATE = "changes_state"


@dataclass(frozen=True)
class QueryChange:
    """A change of a model's query: `kind` is KEEPS_STATE or CHANGES_STATE; `what` names it."""

    kind: str
    what: str

    @property
    def keeps_state(self) -> bool:
        return self.kind == KEEPS_STATE


def classify(old, new) -> QueryChange:
    """How the query of plan `new` differs from that of plan `old` (QueryPlans, see module
    docstring)."""
    if tuple(old.sources) != tuple(new.sources):
        return _changes(f"sources {', '.join(old.sources)} -> {', '.join(new.sources)}")
    if _upsert_identity(old) != _upsert_identity(new):
        return _changes(f"upsert maintenance {_upsert_identity(old)} -> {_upsert_identity(new)}")
    if old.temporal is not None and new.temporal is not None:  # sql/temporaljoin.py
        was, now = old.temporal, new.temporal
        if (was.left_sql, was.right_sql) == (now.left_sql, now.right_sql):
            return QueryChange(KEEPS_STATE, "projection, filter or ON of a temporal join")
        return _changes("the temporal join's inputs or key")
    old_tree, new_tree = old._tree, new._tree
    old_core, new_core = _core(old_tree), _core(new_tree)
    if old_core is None and new_core is None:
        return QueryChange(KEEPS_STATE, "projection or filter of a query without state")
    if old_core is None or new_core is None:
        return _changes("a stateful operator was added or removed")
    if _sql(old_core) == _sql(new_core):
        return QueryChange(KEEPS_STATE, "projection or filter after the stateful operator")
    return _changes(_named_difference(old_core, new_core))


def _changes(what: str) -> QueryChange:
    return QueryChange(CHANGES_STATE, what)


def _upsert_identity(plan) -> Optional[Tuple]:
    """What of an upsert_table's maintenance its state depends on: a state_ttl model's partials
    are keyed and named by position (__k0, __p0), so its final projection is not in it."""
    spec = plan.upsert
    if spec is None:
        return None
    partials = spec.partials and replace(spec.partials, final_sql="")
    return (tuple(spec.unique_key), spec.output_mode, spec.rank_sql, partials)


def _sql(tree: exp.Expr) -> str:
    return tree.sql(dialect=SparkStreaming, comments=False)


def _stateful(select: exp.Select) -> bool:
    """Whether this SELECT itself (not its subqueries) runs a stateful operator."""
    if select.args.get("group") or select.args.get("distinct") or select.args.get("joins"):
        return True
    for projection in select.expressions:
        for node in projection.walk():
            if isinstance(node, (exp.AggFunc, exp.Window)):
                return True
    return False


def _has_state(tree: exp.Expr) -> bool:
    return any(
        isinstance(node, (exp.Union, exp.Intersect, exp.Except))
        or (isinstance(node, exp.Select) and _stateful(node))
        for node in tree.walk()
    )


def _core(tree: exp.Expr) -> Optional[exp.Expr]:
    """The state core of `tree` (module docstring), None for a query without state."""
    if not _has_state(tree):
        return None
    node = tree
    # stateless outer SELECTs over one subquery: their projection and filter are not state
    while isinstance(node, exp.Select) and not _stateful(node) and not node.args.get("with"):
        frm = node.args.get("from_") or node.args.get("from")
        source = frm.this if isinstance(frm, exp.From) else None
        if not isinstance(source, exp.Subquery) or not _has_state(source.this):
            break
        node = source.this
    if not isinstance(node, exp.Select) or not _reducible(node):
        return node
    core = node.copy()
    aggregates: List[exp.Expr] = []
    for projection in [*node.expressions, node.args.get("having")]:
        for call in projection.find_all(exp.AggFunc) if projection is not None else ():
            if not any(call == seen for seen in aggregates):
                aggregates.append(call.copy())
    core.set("expressions", aggregates or [exp.Literal.number(1)])
    core.set("having", None)
    core.set("order", None)
    return core


def _reducible(select: exp.Select) -> bool:
    """A GROUP BY aggregation (no join, DISTINCT or window function in it): its projection and
    HAVING are computed from the grouping keys and aggregation buffers, after the state."""
    if not select.args.get("group") or select.args.get("joins") or select.args.get("distinct"):
        return False
    return not any(isinstance(n, exp.Window) for p in select.expressions for n in p.walk())


def _named_difference(old: exp.Expr, new: exp.Expr) -> str:
    """What differs between two state cores, named as a user sees it."""
    parts = []
    old_wm, new_wm = _all(old, WatermarkedTable), _all(new, WatermarkedTable)
    if old_wm != new_wm:
        parts.append(f"watermark {_list(old_wm)} -> {_list(new_wm)}")
    old_w, new_w = _windows(old), _windows(new)
    if old_w != new_w:
        parts.append(f"window {_list(old_w)} -> {_list(new_w)}")
    if isinstance(old, exp.Select) and isinstance(new, exp.Select):
        old_g, new_g = _part(old, "group"), _part(new, "group")
        if old_g != new_g:
            parts.append(f"grouping keys {old_g or '(none)'} -> {new_g or '(none)'}")
        if _reducible(old) and _reducible(new):
            old_a = _list([_sql(e) for e in old.expressions])
            new_a = _list([_sql(e) for e in new.expressions])
            if old_a != new_a:
                parts.append(f"aggregates {old_a} -> {new_a}")
        old_f, new_f = _part(old, "where"), _part(new, "where")
        if old_f != new_f:
            parts.append(f"filter before the state {old_f or '(none)'} -> {new_f or '(none)'}")
        if _part(old, "joins") != _part(new, "joins"):
            parts.append("a join")
    return "; ".join(parts) or "the stateful part of the query (its input or operators)"


def _all(tree: exp.Expr, kind) -> List[str]:
    return [_sql(n) for n in tree.find_all(kind)]


def _windows(tree: exp.Expr) -> List[str]:
    return [
        _sql(n)
        for n in tree.find_all(exp.Anonymous, exp.Func)
        if (n.sql_name() if not isinstance(n, exp.Anonymous) else n.name).lower()
        in ("window", "session_window")
    ]


def _part(select: exp.Select, arg: str) -> str:
    value = select.args.get(arg)
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_sql(v) for v in value)
    return _sql(value).removeprefix("GROUP BY ").removeprefix("WHERE ")


def _list(items: List[str]) -> str:
    return ", ".join(items) if items else "(none)"
