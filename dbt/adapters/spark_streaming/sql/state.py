"""What state a streaming query keeps, and keeping a non-window aggregate's state in Delta.

**Bounds** (``check_joins``, ``unbounded_aggregate``). Spark keeps state for stateful
operators. A window aggregate, window Top-N, window join or SESSION drops a window's state when
the watermark passes its end: bounded. Two other shapes grow forever with their keys (Flink's
"Relational Queries on Data Streams", "Bounding memory requirements"):

- a non-window aggregate (GROUP BY, SELECT DISTINCT, deduplication), one aggregate per key;
- a join of two streams without a window, every row of both sides.

Such a query is refused (SSV150, naming the key) unless every GROUP BY key is declared in
``constant_domain`` (its values are a fixed set, so the state is bounded) or ``state_ttl``
is set. A join of streams without a window or time bound cannot be bounded by either (SSV150):
use an interval join (sql/intervaljoin.py), a window join, or join a table (config
``dimensions``).

**Partials** (``split_aggregate``). With ``state_ttl`` a non-window aggregate keeps no Spark
state: the stream only projects each row's group keys and aggregate arguments, and each
micro-batch merges its partial aggregates with those stored, per key, in a Delta table
beside the result (runtime/partials.py). That table is storage, not streaming state; a key
whose partials were not updated for ``state_ttl`` (processing time) starts afresh, as in
Flink's idle state retention (Flink's Streaming Concepts)::

    stream         SELECT <group keys> AS __k0.., <aggregate arguments> AS __a0.. FROM ... WHERE ...
    PARTIAL_SQL    SELECT __k0.., <partial>(__a0) AS __p0.. FROM <batch> GROUP BY __k0..
    MERGE_SQL      SELECT __k0.., <merge>(__p0) AS __p0.. FROM <batch partials + stored>
                   GROUP BY __k0..
    FINAL_SQL      the query, its aggregating SELECT reading <merged> with each aggregate
                   replaced by <final>(__p0..) and each group key by __k0..

    aggregate      partial               merge                                  final
    COUNT          COUNT(a) | COUNT(*)   SUM                                    p
    SUM            SUM(a)                SUM                                    p
    MIN, MAX       MIN(a), MAX(a)        MIN, MAX                               p
    AVG            SUM(a), COUNT(a)      SUM, SUM                               ps / pc
    COLLECT_SET    COLLECT_SET(a)        ARRAY_DISTINCT(FLATTEN(COLLECT_LIST))  p
    MIN, MAX, COUNT(DISTINCT) under retraction: a count per value (sql/multiset.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from sqlglot import exp

from . import multiset
from .analysis import is_aggregating, table_key
from .columns import name_aggregates, spark_name
from .errors import SqlError

BATCH_INPUT = "__dss_batch"  # the micro-batch's projected rows
PARTIALS_INPUT = "__dss_partials"  # the batch's partials and the stored ones of its keys
MERGED_INPUT = "__dss_merged"  # merged partials, one row per key
UPDATED = "__updated_ms"  # stored partials: the processing time of the key's last update
# stored partials of apply_changes (sql/applychanges.py): the key is deleted; only such
# partials expire
TOMBSTONE = "__tombstone"


@dataclass(frozen=True)
class PartialsSpec:
    """A non-window aggregate maintained from partials in Delta (see the module docstring)."""

    keys: Tuple[str, ...]  # __k0.. (the stored partials' key)
    partial_sql: str  # over BATCH_INPUT
    merge_sql: str  # over PARTIALS_INPUT
    final_sql: str  # over MERGED_INPUT
    ttl_ms: int
    expiry: str = "state_ttl"  # the config that sets ttl_ms (in messages)
    # apply_changes (sql/applychanges.py keep_tombstones): the kept row's sequence, over the
    # merged partials; follows from merge_sql, so not in the repr (the plan's fingerprint)
    sequence: Optional[str] = field(default=None, repr=False)


def _agg_scopes(tree: exp.Expr) -> List[exp.Select]:
    return [
        s
        for s in tree.find_all(exp.Select)
        if s.args.get("group") or s.args.get("distinct") or is_aggregating(s)
    ]


def _windowed(select: exp.Select) -> bool:
    """Whether the aggregate groups by a window (the rewritten ``__w`` struct)."""
    return any(
        "__w" in {c.name for c in g.find_all(exp.Column)}
        for g in (select.args.get("group") or exp.Group()).expressions
    )


def _stream_inputs(tree: exp.Expr, dimensions: Sequence[str]) -> List[exp.Table]:
    wanted = {d.lower() for d in dimensions}
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out = []
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier) or (not t.db and t.name.lower() in ctes):
            continue
        key = table_key(t)
        if wanted & {key, key.rpartition(".")[2]}:
            continue
        out.append(t)
    return out


def check_joins(tree: exp.Expr, window_join_scopes: Set[int], dimensions: Sequence[str]) -> None:
    """SSV150 on a join of two streams that is not a window or interval join (unbounded state);
    SSC201 if config ``dimensions`` names a relation the query does not read."""
    read = [table_key(t) for t in _stream_inputs(tree, ())]
    unknown = [
        d for d in dimensions if not any(d.lower() in (k, k.rpartition(".")[2]) for k in read)
    ]
    if unknown:
        raise SqlError(
            "SSC201",
            "invalid config `dimensions`",
            f"Got: {unknown!r} / Expected: names of relations the model's SQL reads: "
            + ", ".join(dict.fromkeys(read)),
            "Set `dimensions` in the model's config() to the model or source names it joins as "
            "tables.",
        )
    streams = _stream_inputs(tree, dimensions)
    if len(streams) < 2:
        return
    for table in streams:
        subquery = _predicate_subquery(table)
        if subquery is not None:
            raise SqlError(
                "SSV150",
                "a subquery of a stream (IN, EXISTS or a scalar subquery) over a stream, "
                "without a window, keeps unbounded state",
                "Spark joins the two streams and keeps every row of both forever, waiting for "
                "matches",
                "Read both as window TVFs on the same window and compare window_start and "
                "window_end in the subquery (a window SEMI / ANTI join), or list the "
                "subquery's table in config `dimensions` (read as a table at each batch).",
                subquery,
            )
    for join in tree.find_all(exp.Join):
        if id(join.parent) in window_join_scopes:
            continue
        raise SqlError(
            "SSV150",
            "a join of two streams without a time bound keeps unbounded state",
            "Spark keeps every row of both sides forever, waiting for matches (state_ttl does not "
            "apply to joins)",
            "Bound the event times of the two tables in the ON (an interval join, each side a "
            "table read directly: ON o.id = s.order_id AND s.ts BETWEEN o.ts AND o.ts + "
            "INTERVAL '1' HOUR), join on a window (both sides TABLE(TUMBLE(...)), ON both "
            "window_start and window_end), or list the side that is a table in config "
            "`dimensions` (joined at each batch, no state).",
            join,
        )


def _predicate_subquery(table: exp.Table) -> Optional[exp.Expr]:
    """The IN / EXISTS / scalar subquery that reads ``table``, if one does (the window forms
    are joins by now: sql/semijoin.py)."""
    node: exp.Expr = table
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.Exists) or (
            isinstance(parent, exp.In) and node is parent.args.get("query")
        ):
            return parent
        if isinstance(node, exp.Subquery) and isinstance(parent, (exp.Binary, exp.Predicate)):
            return parent
        node = parent
    return None


def unbounded_aggregate(
    tree: exp.Expr, *, updating: bool, constant_domain: Sequence[str], state_ttl: bool
) -> Optional[exp.Select]:
    """The query's non-window aggregate whose state grows with its keys (``tree`` rewritten:
    window aggregates group by ``__w``): None if there is none or every key is declared in
    ``constant_domain``; SSV150 unless ``state_ttl`` is set (then its partials go to Delta)."""
    if not updating:
        return None
    scopes = [s for s in _agg_scopes(tree) if not _windowed(s)]
    if not scopes:
        return None
    scope = scopes[0]
    if state_ttl:
        return scope
    keys = _group_keys(scope)
    undeclared = undeclared_keys(scope, constant_domain)
    if keys and not undeclared:
        return None
    what = (
        "SELECT DISTINCT"
        if scope.args.get("distinct")
        else "GROUP BY " + ", ".join(k.sql(dialect="spark") for k in keys)
    )
    raise SqlError(
        "SSV150",
        f"{what} without a window keeps unbounded state",
        f"Spark keeps one aggregate per {', '.join(undeclared) or 'key'} forever, and new values "
        "keep coming",
        "Aggregate over a window TVF (GROUP BY window_start, window_end, ...), declare "
        f"constant_domain: [{', '.join(undeclared)}] if its values are a fixed set, or set "
        "state_ttl: '7 days' (a key idle that long is dropped and starts afresh).",
        scope.args.get("group") or scope,
    )


# A Top-N over an aggregate whose keys are all in constant_domain keeps its partials in Delta
# (sql/aggtopn.py re-ranks from them) without expiry: a TTL of about a century.
NEVER_EXPIRES_US = 100 * 365 * 86_400 * 1_000_000


def undeclared_keys(scope: exp.Select, constant_domain: Sequence[str]) -> List[str]:
    """The GROUP BY keys of ``scope`` (as named in constant_domain) not declared in it."""
    declared = {str(c).lower() for c in constant_domain}
    names = [_key_name(scope, k) for k in _group_keys(scope)]
    return [n for n in names if n.lower() not in declared]


def _key_name(scope: exp.Select, key: exp.Expr) -> str:
    """How a GROUP BY key is named in constant_domain: its output column, else its SQL."""
    for proj in scope.expressions:
        if _same(proj.unalias(), key):
            return proj.alias_or_name
    return key.name if isinstance(key, exp.Column) else key.sql(dialect="spark")


def _group_keys(scope: exp.Select) -> List[exp.Expr]:
    if scope.args.get("distinct"):
        return [p.unalias() for p in scope.expressions]
    keys = []
    for g in (scope.args.get("group") or exp.Group()).expressions:
        if isinstance(g, exp.Literal) and g.is_int:  # GROUP BY 1
            g = scope.expressions[int(g.this) - 1].unalias()
        keys.append(g)
    return keys


def _unsupported(what: str, node: exp.Expr) -> SqlError:
    return SqlError(
        "SSV151",
        f"{what} cannot be maintained with state_ttl",
        "state_ttl keeps partial aggregates per key in Delta, which works for COUNT, SUM, MIN, "
        "MAX, AVG and COUNT(DISTINCT) over plain GROUP BY keys",
        "Rewrite with those aggregates, or drop state_ttl and declare constant_domain for the "
        "keys.",
        node,
    )


def _col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name))


def _column(arg: Optional[exp.Expr]) -> exp.Column:
    assert isinstance(arg, exp.Column)  # (the stream's column __a<j>)
    return arg


def _fn(cls: type, arg: Optional[exp.Expr]) -> exp.Expr:
    return cls(this=arg)


# aggregate class -> ([(suffix, partial, merge)], final(partial columns))
_Partial = Callable[[Optional[exp.Expr]], exp.Expr]
_Parts = List[Tuple[str, _Partial, Callable[[exp.Expr], exp.Expr]]]
# one map of counts per value for MIN, MAX and COUNT(DISTINCT) of an argument under retraction
# (over the batch's rows with multiset.window_columns added)
_COUNTS: _Parts = [("", lambda a: multiset.partial(_column(a)), multiset.merge)]
_RULES: Dict[type, Tuple[_Parts, Callable[..., exp.Expr]]] = {
    exp.Count: (
        [
            (
                "",
                lambda a: exp.Count(this=a if a is not None else exp.Star(), big_int=True),
                lambda p: _fn(exp.Sum, p),
            )
        ],
        lambda p: p,
    ),
    exp.Sum: ([("", lambda a: _fn(exp.Sum, a), lambda p: _fn(exp.Sum, p))], lambda p: p),
    exp.Min: ([("", lambda a: _fn(exp.Min, a), lambda p: _fn(exp.Min, p))], lambda p: p),
    exp.Max: ([("", lambda a: _fn(exp.Max, a), lambda p: _fn(exp.Max, p))], lambda p: p),
    exp.Avg: (
        [
            ("s", lambda a: _fn(exp.Sum, a), lambda p: _fn(exp.Sum, p)),
            ("c", lambda a: exp.Count(this=a, big_int=True), lambda p: _fn(exp.Sum, p)),
        ],
        lambda s, c: exp.Div(
            this=exp.Cast(this=s, to=exp.DataType.build("double")),
            expression=exp.Nullif(this=c, expression=exp.Literal.number(0)),
        ),
    ),
    **{
        kind: (_COUNTS, lambda p, kind=kind: multiset.final(kind, p)) for kind in multiset.RETRACTED
    },
    exp.ArrayUniqueAgg: (
        [
            (
                "",
                lambda a: _fn(exp.ArrayUniqueAgg, a),
                lambda p: exp.ArrayDistinct(this=exp.Flatten(this=exp.ArrayAgg(this=p))),
            )
        ],
        lambda p: p,
    ),
}


def _same(a: exp.Expr, b: exp.Expr) -> bool:
    def bare(e: exp.Expr) -> str:
        e = e.copy()
        for c in e.find_all(exp.Column):
            c.set("table", None)
        return e.sql(dialect="spark").lower()

    return bare(a) == bare(b)


def split_aggregate(
    tree: exp.Expr, scope: exp.Select, ttl_ms: int
) -> Tuple[exp.Select, PartialsSpec]:
    """The stream (stateless) and the batch SQL that maintain ``scope``, the query's one
    non-window aggregate, from partials kept in Delta (module docstring)."""
    if scope.args.get("having") is not None or any(
        scope.args.get(a) for a in ("qualify", "windows")
    ):
        raise _unsupported("HAVING left on the aggregate", scope)
    group = scope.args.get("group")
    if group is not None and any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
        raise _unsupported("ROLLUP, CUBE and GROUPING SETS", group)
    keys = _group_keys(scope)
    if not keys:
        raise _unsupported("an aggregate without GROUP BY keys", scope)
    unnamed = name_aggregates(scope)
    if unnamed is None:
        unnamed = next((p for p in scope.expressions if spark_name(p) is None), None)
    if unnamed is not None:
        raise _unsupported(
            f"a column without a name ({unnamed.sql(dialect='spark')}: name it, ... AS total)",
            unnamed,
        )
    key_cols = [f"__k{i}" for i in range(len(keys))]
    stream_cols: List[exp.Expr] = [
        exp.alias_(k.copy(), kc) for k, kc in zip(keys, key_cols, strict=True)
    ]
    partials: List[exp.Expr] = []
    merges: List[exp.Expr] = []

    finals: Dict[str, exp.Expr] = {}  # one set of partials per distinct aggregate
    made: Dict[Tuple[int, str], List[exp.Expr]] = {}  # ... and per rule and argument
    counted: List[exp.Expr] = []  # window columns the partials read (sql/multiset.py)

    def final_of(agg: exp.AggFunc) -> exp.Expr:
        if agg.sql(dialect="spark") not in finals:
            finals[agg.sql(dialect="spark")] = _final_of(agg)
        return finals[agg.sql(dialect="spark")].copy()

    def _final_of(agg: exp.AggFunc) -> exp.Expr:
        rule = _RULES.get(type(agg))
        arg = agg.this
        if (
            rule is None
            or isinstance(arg, exp.Distinct)
            or agg.expressions
            or isinstance(agg.parent, exp.Filter)
        ):
            raise _unsupported(f"aggregate {agg.sql(dialect='spark')}", agg)
        parts, final = rule
        shared = (id(parts), arg.sql(dialect="spark"))  # e.g. MIN(x) and MAX(x) under retraction
        if shared not in made:
            j = len(partials)
            source = None
            if not isinstance(arg, exp.Star):
                source = _col(f"__a{j}")
                stream_cols.append(exp.alias_(arg.copy(), f"__a{j}"))
            if parts is _COUNTS:
                counted.extend(multiset.window_columns(_column(source), key_cols))
            made[shared] = []
            for suffix, partial, merge in parts:
                name = f"__p{j}{suffix}"
                partials.append(
                    exp.alias_(partial(source.copy() if source is not None else None), name)
                )
                merges.append(exp.alias_(merge(_col(name)), name))
                made[shared].append(_col(name))
        return final(*[name.copy() for name in made[shared]])

    def replace(node: exp.Expr) -> exp.Expr:
        if (
            isinstance(node, exp.Anonymous)
            and node.name.upper() == "COLLECT_SET"
            and len(node.expressions) == 1
        ):
            node = exp.ArrayUniqueAgg(
                this=node.expressions[0].copy()
            )  # as rewrite_distinct_counts writes it
        if isinstance(node, exp.AggFunc):
            return final_of(node)
        for k, kc in zip(keys, key_cols, strict=True):
            if not isinstance(node, (exp.Alias, exp.Star)) and _same(node, k):
                return _col(kc)
        return node

    outputs = []
    for proj in scope.expressions:
        name = proj.alias_or_name
        body = proj.unalias().copy().transform(replace)
        stray = [c for c in body.find_all(exp.Column) if not c.name.startswith(("__k", "__p"))]
        if stray:
            raise _unsupported(
                f"column {stray[0].sql(dialect='spark')} (neither aggregated nor a GROUP BY key)",
                proj,
            )
        outputs.append(exp.alias_(body, exp.to_identifier(name)))

    stream = exp.Select(expressions=stream_cols)
    for arg in ("from_", "joins", "where", "with_"):
        if scope.args.get(arg):
            stream.set(arg, scope.args[arg].copy())
    root_with = tree.args.get("with_") if tree is not scope else None
    if root_with is not None and not stream.args.get("with_"):
        stream.set("with_", root_with.copy())

    def grouped(select: List[exp.Expr], source: str, columns: Sequence[exp.Expr] = ()) -> str:
        rows: exp.Expr = exp.to_table(source)
        if columns:
            rows = exp.select(exp.Star(), *columns).from_(rows).subquery(source)
        q = exp.Select(expressions=[_col(k) for k in key_cols] + select).from_(rows)
        return q.group_by(*[_col(k) for k in key_cols]).sql(dialect="spark")

    final_scope = exp.Select(expressions=outputs).from_(exp.to_table(MERGED_INPUT))
    final_tree = tree.copy() if tree is not scope else final_scope
    if tree is not scope:
        path = _path(tree, scope)
        target = final_tree
        for step in path:
            target = step(target)
        target.replace(final_scope)
        if final_tree.args.get("with_") is not None and root_with is not None:
            final_tree.set("with_", None)  # the stream evaluates the CTEs
    spec = PartialsSpec(
        keys=tuple(key_cols),
        partial_sql=grouped(partials, BATCH_INPUT, counted),
        merge_sql=grouped(merges, PARTIALS_INPUT),
        final_sql=final_tree.sql(dialect="spark"),
        ttl_ms=ttl_ms,
    )
    return stream, spec


def _path(tree: exp.Expr, node: exp.Expr) -> List[Callable[[exp.Expr], exp.Expr]]:
    """Steps that lead from ``tree`` to ``node`` in a copy of ``tree``."""
    steps = []
    while node is not tree:
        parent, key = node.parent, node.arg_key
        assert parent is not None and key is not None  # ``node`` is inside ``tree``
        steps.append(_step(key, node.index))
        node = parent
    return list(reversed(steps))


def _step(key: str, index: Optional[int]) -> Callable[[exp.Expr], exp.Expr]:
    """The child ``args[key]`` (``args[key][index]`` in a list) of an expression."""
    if index is None:
        return lambda t: t.args[key]
    return lambda t: t.args[key][index]


@lru_cache(maxsize=256)
def key_columns(final_sql: str) -> Dict[str, str]:
    """The result columns of `final_sql` (PartialsSpec) that are a stored key column as it is
    (``__k0 AS user``), by name (lower case) -> that key column; empty unless the query is one
    SELECT over MERGED_INPUT, one result row per merged row."""
    import sqlglot

    select = sqlglot.parse_one(final_sql, read="spark")
    frm = select.args.get("from_")
    if (
        not isinstance(select, exp.Select)
        or frm is None
        or not isinstance(frm.this, exp.Table)
        or frm.this.name != MERGED_INPUT
        or any(select.args.get(a) for a in ("joins", "where", "group", "having", "limit"))
    ):
        return {}
    return {
        p.alias_or_name.lower(): p.unalias().name
        for p in select.expressions
        if isinstance(p.unalias(), exp.Column) and p.unalias().name.startswith("__k")
    }
