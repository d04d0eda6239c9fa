"""Rewrite window TVFs into Spark ``window()`` / ``session_window()`` derived tables (see the
package docstring)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from sqlglot import exp

from .analysis import WindowSpec, own_nodes, tvf_alias, tvf_data, window_key
from .dialect import WatermarkedTable, WindowTVF
from .intervals import duration_string, interval_literal
from .joins import WindowJoin, conjuncts, expand_stars, side_columns, tvf_output
from .topn import WindowTopN

WINDOW_STRUCT = "__w"  # the Spark window struct; its `end` is what the watermark closes
CUMULATE_WINDOW = "__v"  # CUMULATE: Spark's sliding window, before it is kept as __w
SESSION_KEY = "__p"  # SESSION without PARTITION BY: a constant group key (see _group_keys)
SESSION_ROWS = "__rows"  # SESSION rows: the input rows of one session, collected
TOP_ROWS = "__top"  # window Top-N: the first N rows of one group, in ROW_NUMBER order
ORDER_FIELD = "__o"  # window Top-N: the ORDER BY values of a collected row (__o0, __o1, ...)
TIE_STARTS = "__starts"  # window RANK / DENSE_RANK: where each ORDER BY value starts in __top


def _window_struct() -> exp.Column:
    return exp.column(WINDOW_STRUCT)


def _time_column(spec: WindowSpec) -> exp.Column:
    return exp.column(exp.to_identifier(spec.time_column))


def _micros_interval(micros: exp.Expr) -> exp.Expr:
    """``micros * INTERVAL '1' MICROSECOND``: a duration of ``micros`` (a BIGINT expression)."""
    one_us = exp.Interval(this=exp.Literal.string("1"), unit=exp.var("MICROSECOND"))
    return exp.Mul(this=micros, expression=one_us)


def _into_max_window(time: exp.Expr, spec: WindowSpec, before: bool) -> exp.Expr:
    """CUMULATE: how far ``time`` is into its max window (``before``: how far before the next
    max window start), in microseconds. The max windows start at offset + n * size, as Flink
    and Spark's window() align them."""
    offset = spec.offset_us % spec.size_us
    micros: exp.Expr = exp.Anonymous(this="unix_micros", expressions=[time])
    if before:
        micros = (
            exp.Sub(this=exp.Literal.number(offset), expression=micros)
            if offset
            else exp.Neg(this=micros)
        )
    elif offset:
        micros = exp.Sub(this=micros, expression=exp.Literal.number(offset))
    return exp.Anonymous(this="pmod", expressions=[micros, exp.Literal.number(spec.size_us)])


def window_expression(name: str, spec: Optional[WindowSpec] = None) -> exp.Expr:
    """Expression over ``__w`` computing window_start / window_end / window_time of the window
    TVF ``spec`` (TUMBLE, HOP and SESSION if None).

    A CUMULATE window's ``__w`` is the Spark window [end - max size, end) (see
    _windowed_input): its start is the next max window start at or after ``__w.start``.
    """
    if name == "window_start":
        start = exp.column("start", table=WINDOW_STRUCT)
        if spec is None or spec.kind != "cumulate":
            return start
        shift = _micros_interval(_into_max_window(start.copy(), spec, before=True))
        return exp.Add(this=start, expression=shift)
    end = exp.column("end", table=WINDOW_STRUCT)
    if name == "window_end":
        return end
    one_ms = exp.Interval(this=exp.Literal.string("1"), unit=exp.var("MILLISECOND"))
    return exp.Sub(this=end, expression=one_ms)


def _window_column(spec: WindowSpec) -> exp.Expr:
    """Spark's window of one row: window(ts, size, slide, offset) or session_window(ts, gap).

    CUMULATE uses the sliding window of the max size and its step (Spark wants an offset
    smaller than the slide: the step grid is the same): see _windowed_input.
    """
    if spec.kind == "session":
        return exp.Anonymous(
            this="session_window",
            expressions=[_time_column(spec), exp.Literal.string(duration_string(spec.size_us))],
        )
    offset = spec.offset_us % spec.slide_us if spec.kind == "cumulate" else spec.offset_us
    return exp.Anonymous(
        this="window",
        expressions=[
            _time_column(spec),
            exp.Literal.string(duration_string(spec.size_us)),
            exp.Literal.string(duration_string(spec.slide_us)),
            exp.Literal.string(duration_string(offset)),
        ],
    )


def cumulate_start(spec: WindowSpec, time: exp.Expr) -> exp.Expr:
    """CUMULATE: the start S of the max window holding ``time``: ts - pmod(ts - offset, size)."""
    into = _into_max_window(time.copy(), spec, before=False)
    return exp.Sub(this=time, expression=_micros_interval(into))


def _group_keys(spec: WindowSpec) -> List[exp.Expr]:
    """What a window aggregate groups by in place of window_start, window_end.

    A SESSION without PARTITION BY gets a constant key column: Spark refuses a streaming
    session window aggregate with no other group key ("Global aggregation with session
    window in streaming query is not supported").
    """
    keys: List[exp.Expr] = [_window_struct()]
    if spec.kind == "session" and not spec.partition_by:
        keys.append(exp.column(SESSION_KEY))
    return keys


def _windowed_input(spec: WindowSpec, table: exp.Table, delay_us: Optional[int]) -> exp.Select:
    """SELECT *, <window> AS __w [, 0 AS __p] FROM <table> [WATERMARK ...].

    CUMULATE has no Spark built-in. Its windows [S, S + k * step) (S the start of the row's
    max window, k = 1 .. size / step) are told apart by their ends, so each is keyed by the
    Spark sliding window [S + k * step - size, S + k * step) of the max size and the step,
    which holds the row exactly when the cumulative window does, provided it starts at or
    before S. So the rows get Spark's sliding windows (``__v``), those starting after S are
    filtered out, and ``__v`` becomes ``__w`` (an alias keeps its event-time metadata)::

        SELECT * EXCEPT (__v), __v AS __w FROM (SELECT *, window(ts, size, step) AS __v
        FROM <table> [WATERMARK ...]) WHERE __v.start <= <S of ts>

    A window aggregate groups by ``__w`` like any other, so the watermark closes (and Spark
    emits) each cumulative window at its own end, as Flink does.
    """
    cumulate = spec.kind == "cumulate"
    window = exp.alias_(_window_column(spec), CUMULATE_WINDOW if cumulate else WINDOW_STRUCT)
    projections: List[exp.Expr] = [exp.Star(), window]
    if spec.kind == "session" and not spec.partition_by:
        projections.append(exp.alias_(exp.Literal.number(0), SESSION_KEY))
    source: exp.Expr = exp.Table(
        this=table.this.copy(), db=table.args["db"].copy() if table.args.get("db") else None
    )
    if delay_us is not None:
        source = WatermarkedTable(
            this=source,
            column=_time_column(spec),
            delay=interval_literal(delay_us),
        )
    inner = exp.Select(expressions=projections).from_(source)
    if not cumulate:
        return inner
    kept = exp.LTE(
        this=exp.column("start", table=CUMULATE_WINDOW),
        expression=cumulate_start(spec, _time_column(spec)),
    )
    star = exp.Star(except_=[exp.column(CUMULATE_WINDOW)])
    return (
        exp.Select(expressions=[star, exp.alias_(exp.column(CUMULATE_WINDOW), WINDOW_STRUCT)])
        .from_(exp.Subquery(this=inner))
        .where(kept)
    )


def window_start_of(windowed: exp.Select) -> exp.Expr:
    """The window_start of a row of a windowed input (see _windowed_input): ``__w.start``, or
    for CUMULATE the max window start its filter computes."""
    where = windowed.args.get("where")
    if where is not None and isinstance(where.this, exp.LTE):
        bound = where.this.this
        if isinstance(bound, exp.Column) and bound.table == CUMULATE_WINDOW:
            return where.this.expression.copy()
    return exp.column("start", table=WINDOW_STRUCT)


def _replace_window_refs(scope: exp.Select, tvf: WindowTVF, spec: WindowSpec) -> None:
    """In the window aggregate ``scope``, point window_* references at the ``__w`` struct."""
    projections: List[exp.Expr] = []
    for proj in scope.expressions:
        key = window_key(proj, tvf)
        if key is not None:
            projections.append(exp.alias_(window_expression(key, spec), key))
        else:
            projections.append(proj)
    scope.set("expressions", projections)
    for node in list(own_nodes(scope, "expressions", "where", "joins", "having", "order")):
        key = window_key(node, tvf)
        if key is None:
            continue
        replacement = window_expression(key, spec)
        if not isinstance(replacement, exp.Column):
            replacement = exp.Paren(this=replacement)
        node.replace(replacement)
    group = scope.args["group"]
    keys: List[exp.Expr] = []
    for item in group.expressions:
        if window_key(item, tvf) is None:
            keys.append(item)
        elif not any(
            isinstance(k, exp.Column) and k.name == WINDOW_STRUCT and not k.table for k in keys
        ):
            keys.extend(_group_keys(spec))
    group.set("expressions", keys)


def _window_columns(spec: WindowSpec) -> List[exp.Expr]:
    return [
        exp.alias_(window_expression(n, spec), n)
        for n in ("window_start", "window_end", "window_time")
    ]


def _projection_table(inner: exp.Select, columns: List[str], spec: WindowSpec) -> exp.Select:
    """Expose the input's columns plus window_start/window_end/window_time (hide ``__w``).

    SESSION rows need the merged session of each row, which only Spark's session window
    aggregate computes: collect each session's rows, then unnest them (INLINE) next to the
    session's bounds. Like any window aggregate, a session is emitted when the watermark
    passes its end.
    """
    if spec.kind != "session":
        projections = [exp.column(exp.to_identifier(c)) for c in columns] + _window_columns(spec)
        return exp.Select(expressions=projections).from_(exp.Subquery(this=inner))
    row = exp.Struct(
        expressions=[
            exp.alias_(exp.column(exp.to_identifier(c)), exp.to_identifier(c)) for c in columns
        ]
    )
    sessions = (
        exp.Select(
            expressions=[
                _window_struct(),
                exp.alias_(exp.Anonymous(this="collect_list", expressions=[row]), SESSION_ROWS),
            ]
        )
        .from_(exp.Subquery(this=inner))
        .group_by(
            *_group_keys(spec), *[exp.column(exp.to_identifier(c)) for c in spec.partition_by]
        )
    )
    projections = [exp.Anonymous(this="inline", expressions=[exp.column(SESSION_ROWS)])]
    return exp.Select(expressions=projections + _window_columns(spec)).from_(
        exp.Subquery(this=sessions)
    )


def _dot(row: exp.Expr, name: str) -> exp.Dot:
    return exp.Dot(this=row.copy(), expression=exp.to_identifier(name))


def _compare(ordered: exp.Ordered, i: int, a: exp.Expr, b: exp.Expr) -> exp.Expr:
    """Comparison of collected rows ``a`` and ``b`` on ORDER BY key ``i``: <0, 0, >0 as the
    ranking function orders (ASC / DESC, NULLS FIRST / LAST as written, else Spark's default:
    NULLs smallest)."""
    left, right = _dot(a, f"{ORDER_FIELD}{i}"), _dot(b, f"{ORDER_FIELD}{i}")
    first = -1 if ordered.args.get("nulls_first") else 1
    up = -1 if ordered.args.get("desc") else 1
    num = exp.Literal.number

    def neg(n: int) -> exp.Expr:
        return num(n) if n >= 0 else exp.Neg(this=num(-n))

    return exp.Case(
        ifs=[
            exp.If(
                this=exp.and_(
                    exp.Is(this=left.copy(), expression=exp.Null()),
                    exp.Is(this=right.copy(), expression=exp.Null()),
                ),
                true=num(0),
            ),
            exp.If(this=exp.Is(this=left.copy(), expression=exp.Null()), true=neg(first)),
            exp.If(this=exp.Is(this=right.copy(), expression=exp.Null()), true=neg(-first)),
            exp.If(this=exp.LT(this=left.copy(), expression=right.copy()), true=neg(-up)),
            exp.If(this=exp.GT(this=left.copy(), expression=right.copy()), true=neg(up)),
        ],
        default=num(0),
    )


def _order_compare(order: List[exp.Ordered], a: exp.Expr, b: exp.Expr) -> exp.Expr:
    """<0, 0, >0 as collected row ``a`` comes before, ties with or comes after ``b`` in ORDER BY."""
    terms: List[exp.Expr] = [
        exp.Anonymous(this="nullif", expressions=[_compare(o, i, a, b), exp.Literal.number(0)])
        for i, o in enumerate(order)
    ]
    return exp.Coalesce(this=terms[0], expressions=terms[1:] + [exp.Literal.number(0)])


def _lambda(body: exp.Expr, *params: str) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(p) for p in params])


def _fn(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _tie_starts(order: List[exp.Ordered]) -> exp.Expr:
    """RANK / DENSE_RANK: the 1-based positions in the sorted ``__top`` where a new ORDER BY
    value starts, ``FILTER(SEQUENCE(1, SIZE(__top)), __j -> __j = 1 OR <row __j - 1 and row __j
    differ>)``: ascending, one per distinct value."""
    j, top = exp.column("__j"), exp.column(TOP_ROWS)
    prev = _fn(
        "element_at",
        top.copy(),
        _fn(
            "greatest",
            exp.Sub(this=j.copy(), expression=exp.Literal.number(1)),
            exp.Literal.number(1),
        ),
    )
    differs = exp.NEQ(
        this=_order_compare(order, prev, _fn("element_at", top.copy(), j.copy())),
        expression=exp.Literal.number(0),
    )
    first = exp.EQ(this=j.copy(), expression=exp.Literal.number(1))
    return _fn(
        "filter",
        _fn("sequence", exp.Literal.number(1), _fn("size", top.copy())),
        _lambda(exp.or_(first, differs), "__j"),
    )


def _ranks(topn: WindowTopN) -> Tuple[exp.Expr, exp.Expr]:
    """(the rows of the sorted ``__top`` that rank <= N, the rank of row ``__r`` at 0-based
    position ``__i`` among them) for RANK / DENSE_RANK, over ``__top`` and ``__starts``
    (_tie_starts). A row's RANK is its value's start position, its DENSE_RANK the number of
    starts up to it; the rows kept are those before the first start past N (RANK) or the
    (N+1)-th start (DENSE_RANK): every start among them is one of the first N."""
    n, top, starts = topn.limit, exp.column(TOP_ROWS), exp.column(TIE_STARTS)
    j, num = exp.column("__j"), exp.Literal.number
    upto = _lambda(
        exp.LTE(this=j.copy(), expression=exp.Add(this=exp.column("__i"), expression=num(1))), "__j"
    )
    first_n = _fn("slice", starts.copy(), num(1), num(n))
    if topn.function == "rank":
        beyond = _fn(
            "array_min",
            _fn("filter", starts.copy(), _lambda(exp.GT(this=j.copy(), expression=num(n)), "__j")),
        )
        rank = _fn("array_max", _fn("filter", first_n, upto))
    else:
        beyond = _fn("array_min", _fn("slice", starts.copy(), num(n + 1), num(1)))
        rank = _fn("size", _fn("filter", first_n, upto))
    count = exp.Coalesce(
        this=exp.Sub(this=beyond, expression=num(1)), expressions=[_fn("size", top.copy())]
    )
    return _fn("slice", top.copy(), num(1), count), rank


def _topn_query(
    topn: WindowTopN,
    inner: exp.Select,
    alias: Optional[exp.TableAlias],
    columns: List[str],
    spec: WindowSpec,
) -> exp.Select:
    """A window Top-N as a window aggregate (grouping by ``__w``, so the watermark closes it)::

        SELECT inline(transform(__top, (__r, __i) -> struct(__r.c AS c, ..., <window_*>,
                                                             __i + 1 AS rownum)))
        FROM (SELECT __w, slice(array_sort(collect_list(struct(<order keys> AS __o0, ...,
                     <input columns>)), <comparator>), 1, N) AS __top
              FROM (<input>) AS t [WHERE ...] GROUP BY __w, <partition keys>)

    exposing the columns the Top-N subquery exposed, with ``rownum`` = the row's position in
    its group. ``<input>`` is the windowed input (``*`` = its ``columns`` and window_start,
    window_end, window_time), or, for a Top-N over a window aggregate, that aggregate
    projecting ``__w`` besides its ``columns``: Spark chains the two aggregates in
    append mode, and the second emits a window in the micro-batch in which the first does.

    RANK / DENSE_RANK keep the whole sorted array in ``__top``, find where each ORDER BY value
    starts (``__starts``) in a projection above the aggregate, and keep the rows ranked <= N
    (see _ranks): ties share a rank, so a group may keep more than N rows.
    """
    fields: List[exp.Expr] = [
        exp.alias_(o.this.copy(), f"{ORDER_FIELD}{i}") for i, o in enumerate(topn.order)
    ]
    fields += [exp.alias_(exp.column(exp.to_identifier(c)), exp.to_identifier(c)) for c in columns]
    collected = _fn("collect_list", exp.Struct(expressions=fields))
    comparator = _lambda(
        _order_compare(topn.order, exp.column("__a"), exp.column("__b")), "__a", "__b"
    )
    top: exp.Expr = _fn("array_sort", collected, comparator)
    if topn.function == "row_number":
        top = _fn("slice", top, exp.Literal.number(1), exp.Literal.number(topn.limit))
    aggregate = exp.Select(expressions=[*_group_keys(spec), exp.alias_(top, TOP_ROWS)]).from_(
        exp.Subquery(this=inner, alias=alias)
    )
    if topn.scope.args.get("where") is not None:
        aggregate.set("where", topn.scope.args["where"].copy())
    aggregate = aggregate.group_by(*_group_keys(spec), *[k.copy() for k in topn.keys])
    source: exp.Select = aggregate
    rows: exp.Expr = exp.column(TOP_ROWS)
    rank: exp.Expr = exp.Add(this=exp.column("__i"), expression=exp.Literal.number(1))
    if topn.function != "row_number":
        source = exp.Select(
            expressions=[
                *_group_keys(spec),
                exp.column(TOP_ROWS),
                exp.alias_(_tie_starts(topn.order), TIE_STARTS),
            ]
        ).from_(exp.Subquery(this=aggregate))
        rows, rank = _ranks(topn)

    lower = {c.lower(): c for c in columns}
    out: List[exp.Expr] = []
    for proj in topn.scope.expressions:
        if isinstance(proj, exp.Star):
            out += [exp.alias_(_dot(exp.column("__r"), c), exp.to_identifier(c)) for c in columns]
            if topn.aggregate is None:
                out += [
                    exp.alias_(window_expression(n, spec), n)
                    for n in ("window_start", "window_end", "window_time")
                ]
        elif isinstance(proj, exp.Column):
            key = window_key(proj, topn.tvf) if topn.aggregate is None else None
            if key is not None:
                out.append(exp.alias_(window_expression(key, spec), proj.name))
            else:
                name = lower.get(proj.name.lower(), proj.name)
                out.append(exp.alias_(_dot(exp.column("__r"), name), exp.to_identifier(proj.name)))
        else:  # the ranking function's alias
            out.append(exp.alias_(rank, exp.to_identifier(topn.rownum)))
    ranked = _fn("transform", rows, _lambda(exp.Struct(expressions=out), "__r", "__i"))
    return exp.Select(expressions=[_fn("inline", ranked)]).from_(exp.Subquery(this=source))


def rewrite_distinct_counts(tree: exp.Expr) -> None:
    """COUNT(DISTINCT x) becomes SIZE(COLLECT_SET(x)), in place: the same value (both ignore
    NULLs), and Spark streaming aggregates collect_set but refuses distinct aggregates. The
    set lives in the aggregate's state until its window closes. Other DISTINCT aggregates
    are left for classify() to refuse."""
    for count in list(tree.find_all(exp.Count)):
        distinct = count.this
        if isinstance(distinct, exp.Distinct) and len(distinct.expressions) == 1:
            values = exp.Anonymous(this="collect_set", expressions=[distinct.expressions[0].copy()])
            count.replace(exp.Anonymous(this="size", expressions=[values]))


def _subquery_alias(select: exp.Select) -> Optional[exp.TableAlias]:
    """The alias of the subquery ``select`` is the body of (a Top-N reads its input from one)."""
    subquery = select.parent
    assert subquery is not None
    return subquery.args.get("alias")


def _join_keys(spec: WindowSpec) -> List[str]:
    """What a window join side carries for the join condition in place of its window bounds."""
    return [WINDOW_STRUCT]


def _join_side_table(inner: exp.Select, columns: List[str], spec: WindowSpec) -> exp.Select:
    """A window join side: the input's columns, window_start/window_end/window_time and ``__w``.
    The time column is a copy without Spark's watermark (``ts + INTERVAL '0' SECOND``): a join
    input may carry one event-time column only, and that must be ``__w``."""
    zero = exp.Interval(this=exp.Literal.string("0"), unit=exp.var("SECOND"))
    projections: List[exp.Expr] = []
    for c in columns:
        col: exp.Expr = exp.column(exp.to_identifier(c))
        if c == spec.time_column:
            col = exp.alias_(exp.Add(this=col, expression=zero), exp.to_identifier(c))
        projections.append(col)
    projections += _window_columns(spec) + [exp.column(k) for k in _join_keys(spec)]
    return exp.Select(expressions=projections).from_(exp.Subquery(this=inner))


def _of_side(node: exp.Expr, alias: str) -> bool:
    cols = list(node.find_all(exp.Column))
    return bool(cols) and all(c.table.lower() == alias.lower() for c in cols)


def _not_null_keys(conds: List[exp.Expr], left: str, right: str) -> List[exp.Expr]:
    """``k IS NOT NULL`` for both operands of each equality between the two sides (besides the
    window keys). Spark 4.3's streaming FULL OUTER join matches NULL keys with each other (its
    state compares keys as bytes; INNER, LEFT and RIGHT infer IS NOT NULL filters, FULL does
    not), so a FULL window join says it in its ON: a row with a NULL key then fails a condition
    on its own side and is emitted at once, unmatched (as in batch, where NULL = NULL is not
    true)."""
    found: List[exp.Expr] = []
    for cond in conds:
        if not isinstance(cond, exp.EQ) or any(
            c.name == WINDOW_STRUCT for c in cond.find_all(exp.Column)
        ):
            continue
        a, b = cond.this, cond.expression
        if (_of_side(a, left) and _of_side(b, right)) or (_of_side(a, right) and _of_side(b, left)):
            found += [exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null())) for x in (a, b)]
    return found


def _rewrite_join_scope(
    join: WindowJoin, specs: Mapping[int, WindowSpec], schemas: Mapping[str, Mapping[str, str]]
) -> None:
    """Join on ``L.__w = R.__w`` in place of the two window
    bound equalities, pass ``__w`` through subquery sides, and expand ``*`` / ``L.*`` in the
    SELECT list to the sides' columns (so ``__w`` stays hidden)."""
    left, right = join.sides
    spec = specs[id(left.tvf)]
    keys = [
        exp.EQ(this=exp.column(k, table=left.alias), expression=exp.column(k, table=right.alias))
        for k in _join_keys(spec)
    ]
    conds: List[exp.Expr] = []
    for cond in conjuncts(join.join.args["on"]):
        if cond is join.start:
            conds += keys
        elif cond is not join.end:
            conds.append(cond.copy())
    if join.kind == "FULL":
        conds += _not_null_keys(conds, left.alias, right.alias)
    join.join.set("on", exp.and_(*conds))
    exposed = {}
    for side in join.sides:
        side_spec = specs[id(side.tvf)]
        exposed[side.alias.lower()] = [
            (side.alias, c) for c in side_columns(side, tvf_output(list(schemas[side_spec.source])))
        ]
        if side.wrapper is not None and not any(
            isinstance(p, exp.Star) for p in side.wrapper.expressions
        ):
            side.wrapper.set(
                "expressions",
                side.wrapper.expressions + [exp.column(k) for k in _join_keys(side_spec)],
            )
    expand_stars(join.scope, exposed)


def rewrite_tvfs(
    tvfs: List[WindowTVF],
    specs: List[WindowSpec],
    window_aggregates: Dict[int, exp.Select],
    schemas: Mapping[str, Mapping[str, str]],
    delay_us: Optional[int],
    topns: Optional[Dict[int, WindowTopN]] = None,
    joins: Optional[List[WindowJoin]] = None,
) -> None:
    """Replace every window TVF in place by its Spark derived table."""
    by_tvf = {id(t): s for t, s in zip(tvfs, specs, strict=True)}
    join_sides = {id(side.tvf) for j in joins or [] for side in j.sides if not side.aggregate}
    for join in joins or []:
        _rewrite_join_scope(join, by_tvf, schemas)
    for tvf, spec in zip(tvfs, specs, strict=True):
        table, _ = tvf_data(tvf)
        assert table is not None  # analysis guarantees a TABLE argument
        inner = _windowed_input(spec, table, delay_us)
        alias = exp.TableAlias(this=exp.to_identifier(tvf_alias(tvf)))
        scope = window_aggregates.get(id(tvf))
        topn = (topns or {}).get(id(tvf))
        if topn is not None and topn.join_side is not None:
            topn = None  # a Top-N over the window join of this aggregate: below
        if id(tvf) in join_sides:
            side = _join_side_table(inner, list(schemas[spec.source]), spec)
            tvf.replace(exp.Subquery(this=side, alias=alias))
            continue
        if topn is not None and topn.aggregate is None:
            topn.scope.replace(_topn_query(topn, inner, alias, list(schemas[spec.source]), spec))
            continue
        if scope is not None:
            _replace_window_refs(scope, tvf, spec)
            derived = exp.Subquery(this=inner, alias=alias)
        else:
            columns = list(schemas[spec.source])
            derived = exp.Subquery(this=_projection_table(inner, columns, spec), alias=alias)
        tvf.replace(derived)
        if topn is not None:  # a Top-N over this window aggregate: rank its rows by __w
            assert scope is not None and scope is topn.aggregate
            scope.set("expressions", [*scope.expressions, *_group_keys(spec)])
            topn.scope.replace(
                _topn_query(topn, scope, _subquery_alias(scope), list(topn.columns), spec)
            )
    for topn in (topns or {}).values():
        if topn.join_side is None:
            continue
        # A Top-N over a window join of window aggregates: the join passes on the window of its
        # left side (RIGHT join: right side), and the Top-N groups its rows by it. Spark chains
        # aggregate -> join -> aggregate in append mode; a window's rows all reach the Top-N in
        # the micro-batch in which the aggregates close it.
        spec = by_tvf[id(topn.tvf)]
        join_scope = topn.aggregate
        assert join_scope is not None  # the window join's SELECT
        join_scope.set(
            "expressions",
            [
                *join_scope.expressions,
                *[exp.column(k, table=exp.to_identifier(topn.join_side)) for k in _join_keys(spec)],
            ],
        )
        topn.scope.replace(
            _topn_query(topn, join_scope, _subquery_alias(join_scope), list(topn.columns), spec)
        )
