"""Unqualified columns of a join that more than one of its inputs has (SSV119).

Spark refuses such a column when it analyses the query (AMBIGUOUS_REFERENCE), but the model's
other checks run first and may blame something else: FLIP-145's cumulative example, pasted as
a model (its view as a CTE), selects ``seller_id, window_start, window_end`` unqualified over
the join of two window aggregates that both have them, and its Top-N over that view was
refused as an unsupported OVER clause. So this check runs before the others, on the query as
written, and names the column and the inputs that have it.

The SELECT list and WHERE of a join are checked (an unqualified column in a window join's ON
is SSV123), with only what the query and the source schemas tell: an input whose columns are
unknown (a table without a schema, a subquery selecting ``*`` from one) is ignored, as are
joins with USING or NATURAL (which merge the shared columns).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from sqlglot import exp

from .analysis import own_nodes
from .columns import columns_of, inputs
from .errors import SqlError

_Ctes = Dict[str, exp.Expr]


def output_columns(
    node: exp.Expr, schemas: Mapping[str, Mapping[str, str]], ctes: _Ctes
) -> Optional[List[str]]:
    """The column names (lower case) a FROM / JOIN input ``node`` has, or None if one is
    unknown."""
    columns = columns_of(node, schemas, ctes)
    if columns is None or not all(c.name for c in columns):
        return None
    return [c.name.lower() for c in columns]


def _in_lambda(node: exp.Expr, scope: exp.Select) -> bool:
    parent = node.parent
    while parent is not None and parent is not scope:
        if isinstance(parent, exp.Lambda):
            return True
        parent = parent.parent
    return False


def refuse_ambiguous_columns(tree: exp.Expr, schemas: Mapping[str, Mapping[str, str]]) -> None:
    """SSV119 naming the unqualified columns of a join's SELECT list or WHERE that more
    than one of the join's inputs has (in the first such join)."""
    ctes: _Ctes = {cte.alias_or_name.lower(): cte.this for cte in tree.find_all(exp.CTE)}
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if not joins or any(j.args.get("using") or j.args.get("kind") == "NATURAL" for j in joins):
            continue
        owners: Dict[str, List[str]] = {}
        for side in inputs(select):
            for name in dict.fromkeys(output_columns(side, schemas, ctes) or []):
                owners.setdefault(name, []).append(side.alias_or_name)
        found: Dict[str, exp.Column] = {}
        for node in own_nodes(select, "expressions", "where"):
            if not isinstance(node, exp.Column) or node.table or isinstance(node.this, exp.Star):
                continue
            if len(owners.get(node.name.lower(), [])) > 1 and not _in_lambda(node, select):
                found.setdefault(node.name.lower(), node)
        if found:
            raise _ambiguous(list(found.values()), owners)


def _ambiguous(columns: List[exp.Column], owners: Dict[str, List[str]]) -> SqlError:
    first = columns[0].name
    sides = owners[first.lower()]
    names = ", ".join(c.name for c in columns)
    plural = len(columns) > 1
    return SqlError(
        "SSV119",
        f"column{'s' if plural else ''} {names} {'are' if plural else 'is'} ambiguous",
        f"{'they are' if plural else 'it is'} unqualified in a join whose inputs "
        f"{' and '.join(sides)} both have a column {first}"
        + (" (and likewise for the others)" if plural else "")
        + ", so Spark cannot tell which one is meant",
        f"Qualify {'each' if plural else 'it'} with the input it comes from, e.g. "
        f"{sides[0]}.{first} (or {sides[1]}.{first}).",
        columns[0],
    )
