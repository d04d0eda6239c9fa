"""Top-N over an updating aggregate (upsert_table)::

    SELECT * FROM (
      SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY total DESC) AS rn
      FROM (SELECT category, item, SUM(price) AS total FROM t GROUP BY category, item))
    WHERE rn <= N

The inner aggregate is maintained from partials in Delta (``state_ttl``, sql/state.py): the
stream is the aggregate's, and each micro-batch, after merging its partials, re-ranks every
group of the partitions it touches (the merged partials of its keys and the stored partials
of the other keys of those partitions) and MERGEs the top N by (partition keys, rank). A group
only grows in number, so the ranks 1..min(N, groups) of a partition never disappear: a row
that leaves the top N is replaced at its rank (``-U`` old, ``+U`` new in the changelog).

ORDER BY gains every projected column as a tie-breaker (ascending, NULLs first), so that
ROW_NUMBER is one order in batch (the oracle) and in the stream.

RANK() and DENSE_RANK() keep their ties, as the batch query does: every row ranked <= N, so a
partition may hold more than N rows, and a rank may be held by several rows or by none. The
table is then keyed by the aggregate's GROUP BY keys (which must be shown), the rank query
marks its rows ``__keep``, and the sink (runtime/partials.py reranked) adds, with ``__keep``
false, the table's rows of the re-ranked groups that left the top N: deleted (``-D``), while
a group that stays but changes rank or value is ``-U``/``+U`` and one that enters ``+I``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from sqlglot import exp

from .errors import SqlError
from .state import _group_keys, _windowed
from .upsert import (
    KEEP_COLUMN,
    RANK_INPUT,
    Dedup,
    _output_name,
    break_ties,
    ranked_aggregate,
    ties_share_ranks,
)


def _refuse(what: str, why: str, node: Optional[exp.Expr]) -> SqlError:
    return SqlError(
        "SSV131",
        what,
        why,
        "Rank a GROUP BY aggregate in a subquery, PARTITION BY some of its GROUP BY keys, and "
        "set state_ttl or declare every GROUP BY key in constant_domain (see "
        "docs/upsert_table.md, Top-N over an aggregate).",
        node,
    )


def rewrite_aggregate_rank(
    tree: exp.Expr, dedup: Dedup, state_ttl: bool
) -> Tuple[exp.Select, exp.Expr, exp.Expr, Tuple[str, ...]]:
    """(stream, rank, oracle, partition keys as partials columns ``__k<i>``) of a Top-N over
    the aggregate ``ranked_aggregate(dedup)``: the stream is the aggregate itself (split into
    partials by the compiler), the rank query ranks RANK_INPUT (the aggregate's rows of the
    touched partitions), the oracle is the whole query over the inputs."""
    agg = ranked_aggregate(dedup)
    assert agg is not None
    if _windowed(agg):
        raise _refuse(
            "a Top-N over a window aggregate not partitioned by window_start and window_end",
            "only a window Top-N (PARTITION BY window_start, window_end, ...) ranks a window "
            "aggregate",
            dedup.window,
        )
    if not state_ttl:
        raise _refuse(
            "a Top-N over an aggregate without state_ttl or constant_domain",
            "each micro-batch re-ranks all groups of the partitions it touches, which are kept "
            "as partial aggregates in Delta only with state_ttl, or when constant_domain "
            "declares every GROUP BY key (then without expiry)",
            dedup.window,
        )
    if agg.args.get("having") is not None or agg.args.get("distinct"):
        raise _refuse(
            "a Top-N over an aggregate with HAVING or DISTINCT",
            "a group leaving the aggregate would leave a rank empty",
            agg,
        )
    columns = [p.alias_or_name for p in agg.expressions]
    if any(isinstance(p, exp.Star) for p in agg.expressions) or not all(columns):
        raise _refuse("an unnamed aggregate column", "name every column (AS ...)", agg)
    group_names = [_output_name(agg, k) for k in _group_keys(agg)]
    by_name = {n.lower(): i for i, n in enumerate(group_names) if n}
    partition: List[str] = []
    for key in dedup.keys:
        if key.table or key.name.lower() not in by_name:
            raise _refuse(
                "a Top-N over an aggregate partitioned by something other than its GROUP BY keys",
                "the partitions re-ranked are found by the aggregate's keys",
                key,
            )
        partition.append(f"__k{by_name[key.name.lower()]}")
    shown: List[exp.Expr] = []
    for proj in dedup.scope.expressions:
        if isinstance(proj, exp.Star):
            shown += [exp.column(exp.to_identifier(c)) for c in columns]
        elif isinstance(proj, exp.Column) and not proj.table:
            shown.append(proj.copy())
        elif not (isinstance(proj, exp.Alias) and proj.this is dedup.window):
            raise _refuse(
                "computed columns beside a Top-N's ROW_NUMBER()",
                "only * and the aggregate's columns may be projected next to it",
                proj,
            )
    if dedup.scope.args.get("where") is not None or any(
        dedup.scope.args.get(a) for a in ("joins", "group", "having", "distinct", "order", "limit")
    ):
        raise _refuse(
            "a Top-N over an aggregate with a WHERE, join or grouping beside its ROW_NUMBER()",
            "the ranked relation must be the aggregate itself",
            dedup.window,
        )
    if ties_share_ranks(dedup):  # RANK / DENSE_RANK: keyed by the group keys, shown
        names = {c.alias_or_name.lower() for c in shown}
        missing = [n for n in group_names if not n or n.lower() not in names]
        if missing:
            raise _refuse(
                f"a Top-N by {dedup.window.this.sql()} without the GROUP BY keys in its result",
                "rows tied in the ORDER BY share a rank, so the table is keyed by the "
                "aggregate's GROUP BY keys",
                dedup.window,
            )
    else:
        break_ties(dedup, shown)
    dedup.scope.set("expressions", [*[c.copy() for c in shown], dedup.window.parent])
    oracle = tree.copy()
    stream = agg.copy()
    dedup.scope.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(RANK_INPUT))))
    if ties_share_ranks(dedup):  # the re-ranked rows are kept; the sink adds those that left
        dedup.scope.append("expressions", exp.alias_(exp.true(), KEEP_COLUMN))
    return stream, tree, oracle, tuple(partition)
