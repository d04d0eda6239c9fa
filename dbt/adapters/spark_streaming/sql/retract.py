"""Models that read an upsert_table: they consume its changelog, retractions applied.

An upsert_table's rows are updated and deleted, so a stream cannot read the table itself; its
changelog (``<table>_changelog``: the rows, ``_op`` in ``+I -U +U -D``) is append-only. An
aggregate over the upsert table is maintained from the changelog by counting each change with
a sign, +1 for ``+I``/``+U`` and -1 for ``-U``/``-D`` (Flink's retract stream)::

    SELECT cnt, COUNT(*) AS users, SUM(x) AS total FROM analytics.clicks_per_user GROUP BY cnt

becomes, over the changelog::

    SELECT cnt, SUM(__s) AS users, <SUM(x * __s), NULL when no non-NULL x remains> AS total,
           (SUM(__s) > 0) AS __keep
    FROM (SELECT *, CASE WHEN _op IN ('+I', '+U') THEN 1 ELSE -1 END AS __s
          FROM analytics.clicks_per_user_changelog) GROUP BY cnt

COUNT(*), COUNT(x), SUM(x) and AVG(x) subtract a removed row. MIN(x), MAX(x) and
COUNT(DISTINCT x) cannot; they become aggregates that keep a count per value
(sql/multiset.py), whose state the query keeps as partials in Delta (sql/state.py), never in
Spark's state. ``FILTER (WHERE c)`` becomes part of the argument (``IF(c, x, NULL)``; for
COUNT(*), the sign). A group whose rows were all retracted is deleted (``__keep``,
sql/upsert.py). Other DISTINCT aggregates, joins and window TVFs over an upsert table are
refused (SSV141), as is a streaming_view over one (SSV140), naming the upstream model.
"""

from __future__ import annotations

from typing import List, Mapping, Optional

from sqlglot import exp

from .analysis import is_aggregating, own_nodes, table_key
from .columns import UNORDERED, columns_of, name_aggregates, spark_name
from .dialect import WindowTVF
from .errors import SqlError
from .multiset import Retracted, RetractedCountDistinct, RetractedMax, RetractedMin

SIGN = "__s"
OP_COLUMN = "_op"
_COUNTED: Mapping[type, type[Retracted]] = {exp.Min: RetractedMin, exp.Max: RetractedMax}


def updating_inputs(tree: exp.Expr, changelogs: Mapping[str, str]) -> list[exp.Table]:
    """The table references of ``tree`` that name an upsert_table (keys of ``changelogs``)."""
    return [
        t
        for t in tree.find_all(exp.Table)
        if isinstance(t.this, exp.Identifier) and table_key(t) in changelogs
    ]


def _refuse(upstream: str, why: str, node: Optional[exp.Expr]) -> SqlError:
    return SqlError(
        "SSV141",
        f"this query cannot consume the updates of upsert_table {upstream}",
        why,
        f"Over {upstream}, write a GROUP BY with COUNT, SUM, AVG, MIN, MAX or COUNT(DISTINCT "
        "x) (maintained from its "
        f"changelog, retractions applied); or read {upstream}_changelog as an append-only "
        "stream; or make this a batch model.",
        node,
    )


def _counted(agg: exp.Expr) -> Optional[type[Retracted]]:
    """The aggregate kept as a count per value that ``agg`` becomes, if it is one: MIN, MAX
    (DISTINCT or not: the same) or COUNT(DISTINCT x)."""
    distinct = isinstance(agg.this, exp.Distinct)
    if distinct and len(agg.this.expressions) != 1:
        return None
    if isinstance(agg, exp.Count):
        return RetractedCountDistinct if distinct else None
    return _COUNTED.get(type(agg))


def _signed(agg: exp.Expr, upstream: str, where: Optional[exp.Expr] = None) -> exp.Expr:
    """The aggregate over signed changelog rows that equals ``agg`` (``FILTER (WHERE where)``)
    over the table's rows."""
    sign = exp.column(SIGN)
    value = agg.this
    if isinstance(agg, exp.Count) and isinstance(value, exp.Star):
        if where is None:
            return exp.Sum(this=sign)
        return exp.Sum(this=exp.If(this=where.copy(), true=sign, false=exp.Literal.number(0)))
    kept = _counted(agg)
    if kept is None and (
        isinstance(value, exp.Distinct) or not isinstance(agg, (exp.Count, exp.Sum, exp.Avg))
    ):
        raise _refuse(
            upstream,
            f"{agg.sql(dialect='spark')} cannot be retracted (COUNT, SUM and AVG can: a "
            "row's removal is subtracted; MIN, MAX and COUNT(DISTINCT x) keep a count per "
            "value)",
            agg,
        )
    if isinstance(value, exp.Distinct):
        value = value.expressions[0]
    if where is not None:  # FILTER (WHERE c): the rows where c does not hold count as NULL
        value = exp.If(this=where.copy(), true=value.copy(), false=exp.Null())
    if kept is not None:  # sql/multiset.py
        signed = exp.Struct(
            expressions=[exp.alias_(value.copy(), "v"), exp.alias_(sign.copy(), "s")]
        )
        return kept(this=signed)
    present = exp.Sum(
        this=exp.If(
            this=exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
            true=sign.copy(),
            false=exp.Literal.number(0),
        )
    )
    if isinstance(agg, exp.Count):
        return present
    total = exp.Sum(this=exp.Mul(this=exp.Paren(this=value.copy()), expression=sign.copy()))
    result = total if isinstance(agg, exp.Sum) else exp.Div(this=total, expression=present.copy())
    # no non-NULL value left: SUM and AVG are NULL, as in batch
    return exp.Case(
        ifs=[exp.If(this=exp.GT(this=present, expression=exp.Literal.number(0)), true=result)]
    )


def _refuse_uncountable(
    aggregates: List[exp.Expr],
    table: exp.Table,
    upstream: str,
    schemas: Mapping[str, Mapping[str, str]],
) -> None:
    """SSV141 on a MIN, MAX or COUNT(DISTINCT) of a column (of ``table``, as the schemas tell)
    that cannot be a count's key: MAP and VARIANT values (Spark cannot order them), and
    TIMESTAMP_NTZ ones (delta-rs cannot store them inside the counts' map)."""
    typed = {c.name.lower(): c.type for c in columns_of(table, schemas, {}) or []}
    for agg in aggregates:
        value = agg.this.expressions[0] if isinstance(agg.this, exp.Distinct) else agg.this
        kind = typed.get(value.name.lower()) if isinstance(value, exp.Column) else None
        if kind is not None and any(
            t.is_type(*UNORDERED, exp.DType.TIMESTAMPNTZ) for t in kind.find_all(exp.DataType)
        ):
            raise _refuse(
                upstream,
                f"{agg.sql(dialect='spark')} keeps a count per value, which a "
                f"{kind.sql(dialect='spark')} value cannot be the key of (Spark cannot order "
                "MAP or VARIANT values; delta-rs cannot store TIMESTAMP_NTZ ones in a map)",
                agg,
            )


def rewrite_retractions(
    tree: exp.Expr,
    changelogs: Mapping[str, str],
    materialization: str,
    schemas: Mapping[str, Mapping[str, str]] = {},
) -> bool:
    """If ``tree`` reads an upsert_table, rewrite it in place to aggregate that table's changelog
    (see module docstring) and return True; SqlError if the query cannot."""
    inputs = updating_inputs(tree, changelogs)
    if not inputs:
        return False
    table = inputs[0]
    upstream = table_key(table)
    if materialization != "upsert_table":
        raise SqlError(
            "SSV140",
            f"a streaming_view cannot read upsert_table {upstream}",
            f"{upstream}'s rows are updated and deleted, and a streaming_view only appends",
            "Use materialized='upsert_table' for an aggregate over it, read "
            f"{upstream}_changelog, or make this a batch model.",
            table,
        )
    frm = tree.args.get("from_")
    if (
        not isinstance(tree, exp.Select)
        or frm is None
        or frm.this is not table
        or tree.args.get("joins")
        or len(inputs) > 1
    ):
        raise _refuse(
            upstream,
            "only a GROUP BY reading it directly in its FROM (no joins, subqueries or "
            "set operations) is maintained from its changelog",
            table,
        )
    if not tree.args.get("group") or not is_aggregating(tree):
        raise _refuse(
            upstream,
            "the query does not aggregate it with GROUP BY, so it would have to update "
            "and delete rows one by one",
            tree,
        )
    if any(
        isinstance(n, (exp.Subquery, WindowTVF, exp.Window)) for n in tree.walk() if n is not tree
    ):
        raise _refuse(
            upstream,
            "subqueries, window TVFs and OVER are not maintained over its changes",
            tree,
        )
    aggregates = [n for n in own_nodes(tree, "expressions", "having") if isinstance(n, exp.AggFunc)]
    counted = any(_counted(a) for a in aggregates)  # then partials in Delta (sql/state.py)
    unnamed = name_aggregates(tree)
    if unnamed is None and counted:
        unnamed = next((p for p in tree.expressions if spark_name(p) is None), None)
    if unnamed is not None:
        raise _refuse(
            upstream,
            f"its column {unnamed.sql(dialect='spark')} has no name, and the rewrite over the "
            "changelog would give it another one (name it: ... AS total)",
            unnamed,
        )
    _refuse_uncountable([a for a in aggregates if _counted(a)], table, upstream, schemas)
    for agg in aggregates:
        filtered = agg.parent if isinstance(agg.parent, exp.Filter) else None
        if filtered is None:
            agg.replace(_signed(agg, upstream))
        elif not counted and isinstance(agg, exp.Count) and isinstance(agg.this, exp.Star):
            agg.replace(_signed(agg, upstream))  # SUM(__s) FILTER (WHERE ...)
        else:  # folded into the argument: a SUM or a count per value cannot keep a FILTER
            filtered.replace(_signed(agg, upstream, filtered.expression.this))
    sign = exp.If(
        this=exp.In(
            this=exp.column(OP_COLUMN),
            expressions=[exp.Literal.string("+I"), exp.Literal.string("+U")],
        ),
        true=exp.Literal.number(1),
        false=exp.Literal.number(-1),
    )
    signed = exp.select(exp.Star(), exp.alias_(sign, SIGN)).from_(
        exp.to_table(changelogs[upstream])
    )
    alias = table.alias_or_name
    frm.set("this", exp.Subquery(this=signed, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    alive = exp.GT(this=exp.Sum(this=exp.column(SIGN)), expression=exp.Literal.number(0))
    having = tree.args.get("having")
    tree.set("having", exp.Having(this=exp.and_(alive, having.this) if having else alive))
    return True
