"""The columns a query or relation outputs, as far as the query and the source schemas tell:
their names as Spark gives them and, where known, their types (a source column's, a CAST's, or
the kind of value a STRUCT, ARRAY, MAP or PARSE_JSON builds)."""

from __future__ import annotations

from typing import Collection, List, Mapping, NamedTuple, Optional, Tuple

import sqlglot
from sqlglot import exp

from .analysis import WINDOW_COLUMNS, table_key, tvf_data
from .dialect import WindowTVF


class OutputColumn(NamedTuple):
    name: str  # as the sources spell it; '' for a computed column without an alias
    type: Optional[exp.DataType]  # None if not known
    node: Optional[exp.Expr] = None  # the projection


# the types of the nested values a query builds (to tell scalars, maps and variants apart)
_BUILT: Mapping[type, exp.DType] = {
    exp.Struct: exp.DType.STRUCT,
    exp.Array: exp.DType.ARRAY,
    exp.Map: exp.DType.MAP,
    exp.VarMap: exp.DType.MAP,
    exp.ParseJSON: exp.DType.VARIANT,
}
UNORDERED = (exp.DType.MAP, exp.DType.VARIANT)  # Spark cannot compare these
NESTED = tuple(exp.DataType.NESTED_TYPES)  # (STRUCT, ARRAY, MAP, ...)


def inputs(select: exp.Select) -> List[exp.Expr]:
    """The relations `select` reads: its FROM's and its joins'."""
    from_ = select.args.get("from_")
    return ([from_.this] if from_ is not None else []) + [
        j.this for j in select.args.get("joins") or []
    ]


def columns_of(
    node: exp.Expr, schemas: Mapping[str, Mapping[str, str]], ctes: Mapping[str, exp.Expr]
) -> Optional[List[OutputColumn]]:
    """The output columns of a query or relation `node`, named as the sources spell them, with
    their types where the schemas or the query tell; None if not known. A set operation has its
    first query's columns."""
    if isinstance(node, (exp.Subquery, exp.SetOperation)):
        return columns_of(node.this, schemas, ctes)
    if isinstance(node, WindowTVF):
        table, _ = tvf_data(node)
        columns = None if table is None else columns_of(table, schemas, ctes)
        return (
            None if columns is None else columns + [OutputColumn(c, None) for c in WINDOW_COLUMNS]
        )
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        name = node.name.lower()
        if not node.db and name in ctes:  # (inside it, its name is another relation's)
            return columns_of(ctes[name], schemas, {k: v for k, v in ctes.items() if k != name})
        schema = schemas.get(table_key(node))
        return (
            None if schema is None else [OutputColumn(c, _datatype(t)) for c, t in schema.items()]
        )
    if not isinstance(node, exp.Select):
        return None
    sides = [(s.alias_or_name.lower(), columns_of(s, schemas, ctes)) for s in inputs(node)]
    out: List[OutputColumn] = []
    for proj in node.expressions:
        star = proj.this if isinstance(proj, exp.Column) else proj
        if not isinstance(star, exp.Star):
            # Spark names a column, an alias, a literal and a column's CAST so; the others
            # after the expression (unnamed here)
            named = isinstance(proj, (exp.Alias, exp.Column, exp.Literal)) or (
                isinstance(proj, exp.Cast) and isinstance(proj.this, exp.Column)
            )
            out.append(OutputColumn(proj.alias_or_name if named else "", _type(proj, sides), proj))
            continue
        excepted = star.args.get("except_") or []  # (Spark has no REPLACE; EXCEPT of a field)
        if any(star.args.get(a) for a in ("replace", "rename", "ilike")) or any(
            c.table for c in excepted
        ):
            return None
        dropped = {c.name.lower() for c in excepted}
        qualifier = proj.table.lower() if isinstance(proj, exp.Column) else ""
        expanded = [columns for alias, columns in sides if not qualifier or alias == qualifier]
        if not expanded or any(columns is None for columns in expanded):
            return None  # (a star of no input: a struct's fields)
        out += [c for columns in expanded for c in columns or [] if c.name.lower() not in dropped]
    return out


def spark_name(proj: exp.Expr, relations: Collection[str] = ()) -> Optional[str]:
    """The name Spark gives the projection ``proj``: its alias, column name, literal or CAST
    column's name; for an unaliased aggregate of a column or ``*`` the name Spark derives
    (``count(1)``, ``min(x)``, ``count(DISTINCT u)``; a column qualified by one of
    ``relations``, lower case, loses its qualifier, a struct's field keeps it); None for other
    expressions (Spark prints their SQL its own way)."""
    if isinstance(proj, (exp.Alias, exp.Column, exp.Literal)):
        return proj.alias_or_name
    if isinstance(proj, exp.Cast) and isinstance(proj.this, exp.Column):
        return proj.this.name
    if not isinstance(proj, exp.AggFunc) or proj.expressions:
        return None
    function = proj.sql(dialect="spark").partition("(")[0].lower()
    arg, distinct = proj.this, ""
    if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
        arg, distinct = arg.expressions[0], "DISTINCT "
    arg = arg.unnest() if isinstance(arg, exp.Paren) else arg
    if isinstance(arg, exp.Star) and isinstance(proj, exp.Count):
        return "count(1)"
    if isinstance(arg, exp.Column) and not isinstance(arg.this, exp.Star):
        keep = [p.name for p in arg.parts[:-1]]
        if keep and keep[-1].lower() in relations:
            keep = []
        return f"{function}({distinct}{'.'.join([*keep, arg.name])})"
    if isinstance(arg, exp.Literal) and arg.is_int:
        return f"{function}({distinct}{arg.this})"
    return None


def name_aggregates(select: exp.Select) -> Optional[exp.Expr]:
    """Alias, in place, each unaliased aggregate ``select`` projects as Spark names it, before
    a rewrite replaces it (the result keeps the query's column names); the first projection
    with an aggregate that cannot be named so, if any."""
    relations = {r.alias_or_name.lower() for r in inputs(select)}
    for proj in select.expressions:
        if isinstance(proj, (exp.Alias, exp.Column)) or not proj.find(exp.AggFunc):
            continue
        name = spark_name(proj, relations)
        if name is None:
            return proj
        alias = exp.Alias(alias=exp.to_identifier(name, quoted=True))
        proj.replace(alias)
        alias.set("this", proj)  # the node itself, not a copy: callers may hold its parts
    return None


def _type(
    node: exp.Expr, sides: List[Tuple[str, Optional[List[OutputColumn]]]]
) -> Optional[exp.DataType]:
    """The type of projection `node` over `sides` (its inputs' aliases and columns), if known."""
    node = node.unalias()
    if isinstance(node, exp.Cast):
        return node.to
    if isinstance(node, exp.Column):
        qualifier = node.table.lower()
        for alias, columns in sides:
            for c in columns or []:
                if (not qualifier or alias == qualifier) and c.name.lower() == node.name.lower():
                    return c.type
        return None
    built = _BUILT.get(type(node))
    return None if built is None else exp.DataType(this=built)


def _datatype(spark_type: str) -> Optional[exp.DataType]:
    try:
        return exp.DataType.build(spark_type, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return None
