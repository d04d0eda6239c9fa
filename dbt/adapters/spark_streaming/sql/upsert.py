"""upsert_table queries: which shapes an upsert table maintains, their unique key, Spark's
output mode, and the two rewrites update mode needs.

Shapes (the query's top-level SELECT):

- an aggregate grouped by keys, without a window (update mode): each micro-batch emits the
  groups it changed; the key is the GROUP BY columns;
- a window aggregate (the key adds window_start and window_end): final rows once the
  watermark closes the window (append mode), or with ``emit: {early: true}`` updated rows of
  open windows in every micro-batch (update mode);
- keep-first / keep-latest deduplication (update mode; the key is the PARTITION BY columns)::

      SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn
                       FROM t [WHERE ...]) WHERE rn = 1

  rewritten to ``GROUP BY k`` keeping ``MAX(STRUCT(ts, <columns>))`` (``MIN`` for ascending
  order): one row of state per key, and the same row as ROW_NUMBER, ties broken by the other
  columns so that batch and stream agree;
- a Top-N over a GROUP BY aggregate in a subquery (sql/aggtopn.py; the key is the PARTITION BY
  columns and the row number, re-ranked from the aggregate's partials each micro-batch);
- any append-only query, with ``unique_key`` given.

In update mode a group that stops satisfying HAVING must be deleted from the table, but
Spark would filter it out and emit nothing. So HAVING becomes a projected boolean
``__keep``: the sink upserts the rows where it holds and deletes the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from sqlglot import exp

from .analysis import Classification, is_aggregating, table_key
from .errors import SqlError
from .groupwin import window_keys
from .state import PartialsSpec, _group_keys
from .topn import WindowTopN, rownum_limit  # the same filter shapes as a window Top-N

RANK_INPUT = "__rank_input"  # Top-N: the relation a micro-batch re-ranks
KEEP_COLUMN = "__keep"  # update mode: HAVING as a projected boolean (False: delete the key)
DEDUP_ROW = "__d"  # deduplication: the kept row of a key, as a struct
UPDATE, APPEND = "update", "append"
RANKINGS = (
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
)  # ROW_NUMBER: every shape; the others: sql/aggtopn.py


@dataclass(frozen=True)
class UpsertSpec:
    """How an upsert_table query is maintained: its key columns (output names), Spark's output
    mode, and the column holding HAVING (None if the query has no HAVING in update mode)."""

    unique_key: Tuple[str, ...]
    output_mode: str
    keep_column: Optional[str] = None
    rank_sql: Optional[str] = (
        None  # Top-N: re-ranks RANK_INPUT (new rows + the table's, see rewrite_rank)
    )
    partials: Optional[PartialsSpec] = (
        None  # state_ttl: partial aggregates kept in Delta (sql/state.py)
    )
    rank_keys: Optional[Tuple[str, ...]] = None  # Top-N over an aggregate: partition partials


@dataclass
class Dedup:
    """A keep-first / keep-latest deduplication (see the module docstring)."""

    scope: exp.Select  # SELECT *, ROW_NUMBER() OVER (...) AS rn FROM t
    window: exp.Window
    keys: List[exp.Column]
    order: List[exp.Ordered]
    rownum: str
    limit: Optional[int]  # N of the outer `rn <= N` (1 for deduplication)


def dedups(tree: exp.Expr, window_topns: Sequence[WindowTopN]) -> List[Dedup]:
    """ROW_NUMBER() OVER (PARTITION BY <columns> ORDER BY ...) projections of a SELECT over one
    table that an outer SELECT filters by the row number (window Top-Ns excluded)."""
    taken = {id(t.window) for t in window_topns}
    found = []
    for window in tree.find_all(exp.Window):
        alias = window.parent
        if id(window) in taken or not isinstance(window.this, RANKINGS):
            continue
        if not isinstance(alias, exp.Alias) or not isinstance(alias.parent, exp.Select):
            continue
        scope, keys = alias.parent, list(window.args.get("partition_by") or [])
        order = list((window.args.get("order") or exp.Order()).expressions)
        if not order or not all(isinstance(k, exp.Column) for k in keys):
            continue
        sub = scope.parent
        outer = (
            sub.parent.parent
            if isinstance(sub, exp.Subquery) and isinstance(sub.parent, exp.From)
            else None
        )
        if not isinstance(outer, exp.Select):
            continue
        dedup = Dedup(scope, window, keys, order, alias.alias, None)
        if (not keys or not isinstance(window.this, exp.RowNumber)) and ranked_aggregate(
            dedup
        ) is None:  # a global Top-N, and RANK / DENSE_RANK: of an aggregate only
            continue
        found.append(
            Dedup(
                scope,
                window,
                keys,
                order,
                alias.alias,
                rownum_limit(outer.args.get("where"), alias.alias),
            )
        )
    return found


def ties_share_ranks(dedup: Dedup) -> bool:
    """RANK / DENSE_RANK: rows tied in the ORDER BY share a rank, so a partition's top N may
    hold more than N rows and (partition, rank) does not identify one (sql/aggtopn.py)."""
    return not isinstance(dedup.window.this, exp.RowNumber)


def ranked_aggregate(dedup: Dedup) -> Optional[exp.Select]:
    """The GROUP BY aggregate a Top-N ranks, when its SELECT reads one (sql/aggtopn.py)."""
    frm = dedup.scope.args.get("from_")
    sub = frm.this if frm is not None else None
    if isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Select):
        if sub.this.args.get("group") is not None:
            return sub.this
    return None


def _unsupported(what: str, why: str, node: Optional[exp.Expr], code: str = "SSV131") -> SqlError:
    return SqlError(
        code,
        what,
        why,
        "Supported by upsert_table: GROUP BY aggregates (with or without "
        "a window TVF), keep-first/keep-latest deduplication (ROW_NUMBER() ... = 1), Top-N "
        "(SELECT * FROM (... ROW_NUMBER() ...) WHERE rn <= N), and append-only queries with a "
        "unique_key.",
        node,
    )


def _dedup_columns(dedup: Dedup, schemas: Mapping[str, Mapping[str, str]]) -> List[str]:
    """The input columns of a deduplication's table (its SELECT * expands to them)."""
    frm = dedup.scope.args.get("from_")
    table = frm.this if frm is not None else None
    if (
        not isinstance(table, exp.Table)
        or not isinstance(table.this, exp.Identifier)
        or table_key(table) not in schemas
    ):
        raise _unsupported(
            "deduplication over something other than a table",
            "ROW_NUMBER() deduplication must read a ref(), source() or table directly",
            dedup.window,
        )
    if any(
        dedup.scope.args.get(a) for a in ("joins", "group", "having", "distinct", "order", "limit")
    ):
        raise _unsupported(
            "deduplication with joins, grouping or ordering in its SELECT",
            "only projections and a WHERE may stand beside the ROW_NUMBER()",
            dedup.window,
        )
    return list(schemas[table_key(table)])


def break_ties(dedup: Dedup, shown: Sequence[exp.Expr]) -> None:
    """Order a Top-N's ties by every shown column, ascending (after its own ORDER BY), so that
    the stream and the batch query rank equal rows alike."""
    ordered = {o.this.sql() for o in dedup.order}
    order = dedup.window.args["order"]
    extra = [exp.Ordered(this=c.copy(), nulls_first=True) for c in shown if c.sql() not in ordered]
    order.set("expressions", [*order.expressions, *extra])


def rewrite_dedup(dedup: Dedup, schemas: Mapping[str, Mapping[str, str]]) -> None:
    """Replace the deduplication's SELECT by ``SELECT __d.c AS c, ..., 1 AS rn FROM (SELECT
    MAX|MIN(STRUCT(<order keys>, <columns>)) AS __d FROM t WHERE ... GROUP BY <keys>)``."""
    columns = _dedup_columns(dedup, schemas)
    desc = {bool(o.args.get("desc")) for o in dedup.order}
    if len(desc) > 1:
        raise _unsupported(
            "deduplication ordered both ascending and descending",
            "the kept row is the MAX (descending) or MIN (ascending) of the ORDER BY keys",
            dedup.window.args.get("order"),
        )
    fields: List[exp.Expr] = []
    for i, o in enumerate(dedup.order):
        if bool(o.args.get("nulls_first")) == bool(
            o.args.get("desc")
        ):  # NULLs not where MAX/MIN put them
            fields.append(exp.alias_(exp.Is(this=o.this.copy(), expression=exp.Null()), f"__n{i}"))
        fields.append(exp.alias_(o.this.copy(), f"__o{i}"))
    fields += [exp.alias_(exp.column(exp.to_identifier(c)), exp.to_identifier(c)) for c in columns]
    agg = exp.Max if desc.pop() else exp.Min
    kept = exp.Select(
        expressions=[exp.alias_(agg(this=exp.Struct(expressions=fields)), DEDUP_ROW)]
    ).from_(dedup.scope.args["from_"].this.copy())
    if dedup.scope.args.get("where") is not None:
        kept.set("where", dedup.scope.args["where"].copy())
    kept = kept.group_by(*[k.copy() for k in dedup.keys])

    lower = {c.lower(): c for c in columns}
    out: List[exp.Expr] = []
    for proj in dedup.scope.expressions:
        if isinstance(proj, exp.Star):
            out += [_field(c) for c in columns]
        elif isinstance(proj, exp.Alias) and proj.this is dedup.window:
            out.append(exp.alias_(exp.Literal.number(1), exp.to_identifier(proj.alias)))
        elif isinstance(proj, exp.Column) and proj.name.lower() in lower:
            out.append(_field(lower[proj.name.lower()], proj.name))
        else:
            raise _unsupported(
                "computed columns beside a deduplication's ROW_NUMBER()",
                "only * and input columns may be projected next to it; compute in the outer SELECT",
                proj,
            )
    dedup.scope.replace(
        exp.Select(expressions=out).from_(
            exp.Subquery(this=kept, alias=exp.TableAlias(this=exp.to_identifier(DEDUP_ROW)))
        )
    )


def rewrite_rank(
    tree: exp.Expr, dedup: Dedup, schemas: Mapping[str, Mapping[str, str]]
) -> Tuple[exp.Select, exp.Expr, exp.Expr]:
    """A Top-N without a window, ``SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k
    ORDER BY o) AS rn FROM t WHERE ...) WHERE rn <= N``, as (stream, rank, oracle) queries:

    - stream: ``SELECT <columns> FROM t WHERE ...``, stateless, append-only;
    - rank: the query over RANK_INPUT, which each micro-batch binds to its new rows plus the
      table's rows of the partition keys they touch. The input is append-only, so a row out of
      the top N never returns: the top N of (table's top N + new rows) is the top N of all;
    - oracle: the query over ``t`` (snapshot equivalence).

    ORDER BY gains every column as a tie-breaker (ascending), so the ranks are one order in
    batch and stream. The table is the state: N rows per key, no Spark state.
    """
    columns = _dedup_columns(dedup, schemas)
    shown: List[exp.Expr] = []
    for proj in dedup.scope.expressions:
        if isinstance(proj, exp.Star):
            shown += [exp.column(exp.to_identifier(c)) for c in columns]
        elif isinstance(proj, exp.Column):
            shown.append(proj.copy())
        elif not (isinstance(proj, exp.Alias) and proj.this is dedup.window):
            raise _unsupported(
                "computed columns beside a Top-N's ROW_NUMBER()",
                "only * and input columns may be projected next to it",
                proj,
            )
    break_ties(dedup, shown)
    # explicit columns: the oracle's inputs carry an extra column (sql/oracle.py LATE_COLUMN)
    dedup.scope.set("expressions", [*[c.copy() for c in shown], dedup.window.parent])
    stream = exp.Select(expressions=shown).from_(dedup.scope.args["from_"].this.copy())
    if dedup.scope.args.get("where") is not None:
        stream.set("where", dedup.scope.args["where"].copy())
    oracle = tree.copy()
    dedup.scope.set("where", None)
    dedup.scope.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(RANK_INPUT))))
    return stream, tree, oracle


def _field(column: str, name: Optional[str] = None) -> exp.Expr:
    return exp.alias_(
        exp.Dot(this=exp.column(DEDUP_ROW), expression=exp.to_identifier(column)),
        exp.to_identifier(name or column),
    )


def _output_name(select: exp.Select, key: exp.Expr) -> Optional[str]:
    """The output column name under which ``select`` projects GROUP BY / PARTITION BY ``key``."""
    if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit():
        i = int(key.this) - 1
        return select.expressions[i].alias_or_name if 0 <= i < len(select.expressions) else None
    for proj in select.expressions:
        if isinstance(proj, exp.Star):
            if isinstance(key, exp.Column):
                return key.name
        target = proj.this if isinstance(proj, exp.Alias) else proj
        if (
            isinstance(key, exp.Column)
            and isinstance(target, exp.Column)
            and target.name.lower() == key.name.lower()
        ):
            return proj.alias_or_name
        if (
            isinstance(proj, exp.Alias)
            and isinstance(key, exp.Column)
            and not key.table
            and proj.alias.lower() == key.name.lower()
        ):
            return proj.alias
        if target == key:
            return proj.alias_or_name
    return None


def _keys(select: exp.Select, keys: Sequence[exp.Expr], what: str) -> Tuple[str, ...]:
    names = []
    for key in keys:
        name = _output_name(select, key)
        if name is None:
            raise SqlError(
                "SSV130",
                f"cannot infer the unique_key of the upsert_table: {what} "
                f"{key.sql(dialect='spark')} is not a column of its result",
                "the table is keyed by the columns that identify a result row",
                "Select that key in the outer query, or set config unique_key=[...].",
                key,
            )
        names.append(name)
    return tuple(dict.fromkeys(names))


def analyse_upsert(
    tree: exp.Expr,
    cls: Classification,
    found: Sequence[Dedup],
    topns: Sequence[WindowTopN],
    unique_key: Optional[Sequence[str]],
    early: bool,
) -> UpsertSpec:
    """The UpsertSpec of an upsert_table query; moves HAVING to ``__keep`` in update mode.
    Raises SqlError for shapes an upsert table cannot maintain."""
    given = tuple(unique_key) if unique_key else None
    top = tree
    if not isinstance(top, exp.Select):
        raise _unsupported(
            "an upsert_table query whose top level is a set operation",
            f"{top.key.upper()} results cannot be keyed",
            top,
        )
    for dedup in found:
        if dedup.limit is None:
            raise _unsupported(
                "ROW_NUMBER() without a filter on it",
                "only ROW_NUMBER() ... WHERE rn = 1 (deduplication) or rn <= N (Top-N) is "
                "maintained",
                dedup.window,
            )
        if (dedup.limit > 1 or ranked_aggregate(dedup) is not None) and not (
            len(top.expressions) == 1 and isinstance(top.expressions[0], exp.Star)
        ):
            raise _unsupported(
                "a Top-N whose outer SELECT is not SELECT *",
                "the table keeps the ranked rows whole, to re-rank them with new rows",
                top.expressions[0],
            )
        if dedup.scope.find_ancestor(exp.Select) is not top:  # its subquery's SELECT
            raise _unsupported(
                "a deduplication or Top-N nested below the top-level SELECT",
                "its result is updating, and the operations over it would need retractions",
                dedup.window,
            )
    window_aggs = {id(s) for s in cls.window_aggregates.values()}
    ranked = {id(ranked_aggregate(d)) for d in found}  # a Top-N (or Top-1) of an aggregate
    nested = [
        s
        for s in tree.find_all(exp.Select)
        if s is not top and is_aggregating(s) and id(s) not in window_aggs | ranked
    ]
    if nested:
        raise _unsupported(
            "an aggregate nested below the top-level SELECT",
            "its result is updating, and the operations over it would need retractions",
            nested[0],
        )
    if early and id(top) not in window_aggs:
        raise SqlError(
            "SSV132",
            "emit early applies to window aggregates only",
            "emit: {early: true} refines the rows of open windows until they close",
            "Remove `emit` from the config, or group by window_start and window_end of a window "
            "TVF.",
            top,
        )
    if found:
        dedup = found[0]
        assert dedup.limit is not None  # refused above
        agg = ranked_aggregate(dedup)
        if agg is not None and ties_share_ranks(dedup):  # a row per group; leavers deleted
            names = [_output_name(agg, k) for k in _group_keys(agg)]
            by_group = [exp.column(n) for n in names if n]
            return UpsertSpec(_keys(top, by_group, "GROUP BY key"), UPDATE, KEEP_COLUMN)
        if dedup.limit > 1 or agg is not None:  # Top-N: see below
            # a row per partition key and rank (always: the sink re-ranks)
            return UpsertSpec(
                _keys(top, [*dedup.keys, exp.column(dedup.rownum)], "Top-N key"),
                UPDATE if ranked_aggregate(dedup) is not None else APPEND,  # sql/aggtopn.py
            )
        return UpsertSpec(given or _keys(top, dedup.keys, "PARTITION BY key"), UPDATE)
    if is_aggregating(top):
        group = top.args.get("group")
        if (
            group is None and top.args.get("distinct") and not given
        ):  # SELECT DISTINCT: every column
            given = tuple(p.alias_or_name for p in top.expressions)
        if given:
            keys = given
        elif group is not None:
            keys = _keys(top, window_keys(top, group.expressions, _output_name), "GROUP BY key")
        else:
            raise SqlError(
                "SSV130",
                "cannot infer the unique_key of the upsert_table: the aggregate has no GROUP BY",
                "a global aggregate has no key column",
                "Group by a key, or set config unique_key=[...].",
                top,
            )
        if id(top) in window_aggs and not early:
            return UpsertSpec(keys, APPEND)
        keep = None
        having = top.args.get("having")
        if having is not None:
            top.set("having", None)
            top.append("expressions", exp.alias_(exp.Paren(this=having.this), KEEP_COLUMN))
            keep = KEEP_COLUMN
        return UpsertSpec(keys, UPDATE, keep)
    if cls.kind == "updating":
        why, node = cls.updating_reason or ("the query is updating", None)
        raise _unsupported(
            "this updating query shape is not supported by upsert_table yet", why, node
        )
    topn = next((t for t in topns if t.scope.find_ancestor(exp.Select) is top), None)
    if topn is not None and not given and topn.function != "row_number":
        raise SqlError(
            "SSV130",
            f"cannot infer the unique_key of the upsert_table: a window Top-N by "
            f"{topn.function.upper()}() may rank several rows of a group equal",
            "rows tied in the ORDER BY share a rank, so window, partition keys and rank do not "
            "identify a row",
            "Set config unique_key=[...] to columns that identify a ranked row, "
            "or rank with ROW_NUMBER().",
            topn.window,
        )
    if topn is not None and not given:  # a window Top-N: a row per window, partition key and rank
        key_columns = [
            exp.column("window_start"),
            exp.column("window_end"),
            *topn.keys,
            exp.column(topn.rownum),
        ]
        given = _keys(top, key_columns, "window Top-N key")
    if not given:
        raise SqlError(
            "SSV130",
            "cannot infer the unique_key of the upsert_table",
            "the query neither groups nor deduplicates, so no column identifies a result row",
            "Set config unique_key=['<column>', ...] naming the columns that identify a row.",
            top,
        )
    return UpsertSpec(given, APPEND)
