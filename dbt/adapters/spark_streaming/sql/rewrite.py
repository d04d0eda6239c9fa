"""Rewrite window TVFs into Spark ``window()`` derived tables (see package docstring)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from sqlglot import exp

from .analysis import WindowSpec, own_nodes, tvf_alias, window_key
from .dialect import WatermarkedTable, WindowTVF
from .intervals import duration_string, interval_literal

WINDOW_STRUCT = "__w"


def _window_struct() -> exp.Column:
    return exp.column(WINDOW_STRUCT)


def window_expression(name: str) -> exp.Expr:
    """Expression over the ``__w`` struct computing window_start / window_end / window_time."""
    if name == "window_start":
        return exp.column("start", table=WINDOW_STRUCT)
    end = exp.column("end", table=WINDOW_STRUCT)
    if name == "window_end":
        return end
    one_ms = exp.Interval(this=exp.Literal.string("1"), unit=exp.var("MILLISECOND"))
    return exp.Sub(this=end, expression=one_ms)


def _windowed_input(spec: WindowSpec, table: exp.Table, delay_us: Optional[int]) -> exp.Select:
    """SELECT *, window(...) AS __w FROM <table> [WATERMARK <col> DELAY OF <delay>]."""
    window = exp.Anonymous(
        this="window",
        expressions=[
            exp.column(exp.to_identifier(spec.time_column)),
            exp.Literal.string(duration_string(spec.size_us)),
            exp.Literal.string(duration_string(spec.slide_us)),
            exp.Literal.string(duration_string(spec.offset_us)),
        ],
    )
    source: exp.Expr = exp.Table(
        this=table.this.copy(), db=table.args["db"].copy() if table.args.get("db") else None
    )
    if delay_us is not None:
        source = WatermarkedTable(
            this=source,
            column=exp.column(exp.to_identifier(spec.time_column)),
            delay=interval_literal(delay_us),
        )
    return exp.Select(expressions=[exp.Star(), exp.alias_(window, WINDOW_STRUCT)]).from_(source)


def _tvf_table(tvf: WindowTVF) -> exp.Table:
    for arg in tvf.expressions:
        value = arg.expression if isinstance(arg, exp.Kwarg) else arg
        if isinstance(value, exp.Table):
            return value
    raise AssertionError("window TVF without a TABLE argument")  # analysis guarantees one


def _replace_window_refs(scope: exp.Select, tvf: WindowTVF) -> None:
    """In the window aggregate ``scope``, point window_* references at the ``__w`` struct."""
    projections: List[exp.Expr] = []
    for proj in scope.expressions:
        key = window_key(proj, tvf)
        if key is not None:
            projections.append(exp.alias_(window_expression(key), key))
        else:
            projections.append(proj)
    scope.set("expressions", projections)
    for node in list(own_nodes(scope, "expressions", "where", "joins", "having", "order")):
        key = window_key(node, tvf)
        if key is None:
            continue
        replacement = window_expression(key)
        if isinstance(replacement, exp.Sub):
            replacement = exp.Paren(this=replacement)
        node.replace(replacement)
    group = scope.args["group"]
    keys: List[exp.Expr] = []
    for item in group.expressions:
        if window_key(item, tvf) is None:
            keys.append(item)
        elif not any(isinstance(k, exp.Column) and k.name == WINDOW_STRUCT and not k.table
                     for k in keys):
            keys.append(_window_struct())
    group.set("expressions", keys)


def _projection_table(inner: exp.Select, columns: List[str]) -> exp.Select:
    """Expose the input's columns plus window_start/window_end/window_time (hide ``__w``)."""
    projections: List[exp.Expr] = [exp.column(exp.to_identifier(c)) for c in columns]
    projections += [exp.alias_(window_expression(n), n)
                    for n in ("window_start", "window_end", "window_time")]
    return exp.Select(expressions=projections).from_(exp.Subquery(this=inner))


def rewrite_tvfs(
    tvfs: List[WindowTVF],
    specs: List[WindowSpec],
    window_aggregates: Dict[int, exp.Select],
    schemas: Mapping[str, Mapping[str, str]],
    delay_us: Optional[int],
) -> None:
    """Replace every window TVF in place by its Spark derived table."""
    for tvf, spec in zip(tvfs, specs):
        inner = _windowed_input(spec, _tvf_table(tvf), delay_us)
        alias = exp.TableAlias(this=exp.to_identifier(tvf_alias(tvf)))
        scope = window_aggregates.get(id(tvf))
        if scope is not None:
            _replace_window_refs(scope, tvf)
            derived = exp.Subquery(this=inner, alias=alias)
        else:
            columns = list(schemas[spec.source])
            derived = exp.Subquery(this=_projection_table(inner, columns), alias=alias)
        tvf.replace(derived)
