"""``apply_changes``: an upsert_table that applies a feed of change rows by key: its current
state (SCD type 1) or its history (SCD type 2, ``_versions`` below).

    config(materialized='upsert_table', unique_key='id',
           apply_changes={'sequence_by': 'seq', 'delete_when': "op = 'd'",
                          'except_columns': ['op'], 'tombstone_ttl': '2 days'})
    SELECT * FROM {{ source('cdc', 'customers') }}

The query (append-only: projections, filters, joins with ``dimensions`` tables) gives change
rows. The table holds, per key, the change row with the highest ``sequence_by`` among all the
key's rows read so far, without ``except_columns``; if that row is a delete (``delete_when``
true) the key is absent. The query is rewritten to::

    SELECT __d.c1 AS c1, ..., NOT __d.__deleted AS __keep
    FROM (SELECT MAX(STRUCT(seq AS __seq, COALESCE(<delete_when>, FALSE) AS __deleted,
                            c1, ..., cn)) AS __d
          FROM (<query>) AS __changes WHERE seq IS NOT NULL GROUP BY <unique_key>) AS __d

``MAX(STRUCT(...))`` picks one row whatever the order the rows arrive in: the highest
sequence; at an equal sequence a delete, then the greatest row by its columns in the query's
order (as deduplication breaks ties, sql/upsert.py). ``__keep`` false deletes the key
(delta/upsert.py). Rows whose sequence is NULL are ignored.

The aggregate keeps its state as partials in Delta (sql/state.py split_aggregate, as with
``state_ttl``): each micro-batch merges its rows with the stored row of each key it touches, so
a change older than the key's last applied one (a delete too) changes nothing, within a run and
across runs. A deleted key's stored row is its tombstone: it is dropped once no change touched
the key for ``tombstone_ttl`` (processing time; default 2 days), and the stored rows of keys that
exist are never dropped. A change older than the delete that arrives after that inserts the key
again: the changelog marks it ``_restarted`` and snapshot_equivalence leaves it out (as a
``state_ttl`` key that started afresh).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp

from .analysis import Classification
from .columns import NESTED, UNORDERED, OutputColumn, columns_of
from .errors import SqlError
from .intervals import parse_duration
from .state import TOMBSTONE, PartialsSpec
from .upsert import KEEP_COLUMN, RANK_INPUT

SEQ_FIELD, DELETED_FIELD = "__seq", "__deleted"  # the kept row's sequence and delete flag
CHANGES = "__changes"  # the query's change rows, as a derived table
ROW = "__d"  # the kept row of a key, as a struct (and its derived table)
DEFAULT_TOMBSTONE_TTL = "2 days"
KNOWN = (
    "sequence_by",
    "delete_when",
    "scd_type",
    "except_columns",
    "tombstone_ttl",
    "track_history_columns",
)
START, END = "__start_at", "__end_at"  # scd_type 2: the version's sequence, the next change's


@dataclass(frozen=True)
class ApplyChanges:
    sequence_by: str
    delete_when: Optional[str]
    except_columns: Tuple[str, ...]
    tombstone_ttl_us: int
    scd_type: int


@dataclass
class Rewritten:
    """An apply_changes query rewritten: `tree` (scd_type 1: the query; 2: the aggregate kept
    as partials per key and sequence), its unique key, and for scd_type 2 the query that
    computes the versions of the keys a micro-batch touches (over RANK_INPUT: sql/aggtopn.py's
    re-ranking), the oracle (the whole query) and the partition keys (partials columns)."""

    tree: exp.Select
    unique_key: Tuple[str, ...]
    versions: Optional[exp.Select] = None
    oracle: Optional[exp.Expr] = None
    partition: Tuple[str, ...] = ()


def _config_error(what: str, why: str, fix: str, node: Optional[exp.Expr] = None) -> SqlError:
    return SqlError("SSV180", what, why, fix, node)


def _names(value: Any, what: str) -> Tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise _config_error(
            f"apply_changes {what} is {value!r}",
            "it must name columns of the query",
            f"Set {what} to a column name or a list of column names.",
        )
    return tuple(names)


def parse_apply_changes(
    value: Any, materialization: str = "upsert_table", state_ttl: Optional[str] = None
) -> Optional[ApplyChanges]:
    """The ``apply_changes`` config (None if unset); SSV180 for a malformed one or one beside
    ``state_ttl`` or on a streaming_view, SSV182 for ``track_history_columns`` (not built
    yet)."""
    if value is None:
        return None
    if materialization != "upsert_table":
        raise _config_error(
            f"apply_changes on a {materialization}",
            "a change feed applied by key updates and deletes rows",
            "Use materialized='upsert_table'.",
        )
    if state_ttl is not None:
        raise _config_error(
            "apply_changes with state_ttl",
            "the table keeps every existing key; only deleted keys expire, after tombstone_ttl",
            "Remove state_ttl; set apply_changes' tombstone_ttl instead.",
        )
    if not isinstance(value, Mapping) or "sequence_by" not in value:
        raise _config_error(
            f"apply_changes is {value!r}",
            "it must be a mapping naming at least the column that orders a key's changes",
            "Set apply_changes={'sequence_by': '<column>', 'delete_when': \"op = 'd'\"}.",
        )
    unknown = sorted(set(value) - set(KNOWN))
    if unknown:
        raise _config_error(
            f"apply_changes has unknown keys {', '.join(map(str, unknown))}",
            f"apply_changes takes {', '.join(KNOWN)}",
            "Remove or rename them.",
        )
    scd = value.get("scd_type", 1)
    if scd not in (1, 2, "1", "2"):
        raise _config_error(
            f"apply_changes scd_type is {scd!r}", "it must be 1 or 2", "Set scd_type: 1 or 2."
        )
    if "track_history_columns" in value:
        raise SqlError(
            "SSV182",
            "apply_changes track_history_columns is not supported yet",
            "every change of any column makes a new version",
            "Remove track_history_columns; select the columns whose history you keep into "
            "this model and the others into an scd_type 1 model.",
        )
    if int(scd) == 2 and "tombstone_ttl" in value:
        raise _config_error(
            "apply_changes tombstone_ttl with scd_type 2",
            "scd_type 2 keeps every version and every delete: nothing expires",
            "Remove tombstone_ttl.",
        )
    sequence_by = value["sequence_by"]
    if not isinstance(sequence_by, str) or not sequence_by:
        raise _config_error(
            f"apply_changes sequence_by is {sequence_by!r}",
            "it must be one column (scd_type 1 may order by a STRUCT computed in the query)",
            "Set sequence_by to one column name.",
        )
    delete_when = value.get("delete_when")
    if delete_when is not None and (not isinstance(delete_when, str) or not delete_when.strip()):
        raise _config_error(
            f"apply_changes delete_when is {delete_when!r}",
            "it must be a boolean SQL expression over the query's columns",
            "Set delete_when like \"op = 'd'\", or leave it out if the feed has no deletes.",
        )
    ttl = value.get("tombstone_ttl", DEFAULT_TOMBSTONE_TTL)
    try:
        ttl_us = parse_duration(str(ttl))
    except ValueError:
        ttl_us = 0
    if ttl_us <= 0:
        raise _config_error(
            f"apply_changes tombstone_ttl is {ttl!r}",
            "it must be a positive duration: how long a deleted key's last sequence is kept",
            f"Set tombstone_ttl like '2 days' or '12 hours' (default {DEFAULT_TOMBSTONE_TTL!r}).",
        )
    return ApplyChanges(
        sequence_by,
        delete_when,
        _names(value.get("except_columns") or [], "except_columns"),
        ttl_us,
        int(scd),
    )


def refuse_stateful(cls: Classification, stateful: bool) -> None:
    """SSV181 unless the query only selects, filters and joins dimensions tables (`stateful`:
    it ranks, deduplicates or joins streams)."""
    if cls.kind == "append" and not cls.aggregating and not stateful:
        return
    why, node = cls.updating_reason or ("it aggregates, ranks or joins streams", None)
    raise SqlError(
        "SSV181",
        "an apply_changes query that is not a stream of change rows",
        "apply_changes keeps the last change row per key, so the query must only select, "
        f"filter and join dimensions tables; {why}",
        "Select the change rows (SELECT * FROM <feed> [WHERE ...]) and aggregate in a model "
        "downstream.",
        node,
    )


def _change_columns(
    query: exp.Expr, schemas: Mapping[str, Mapping[str, str]]
) -> List[OutputColumn]:
    """The change query's columns; SSV180 if they are not known, one has no name, or one
    cannot be compared (a map or a variant, where the types are known)."""
    ctes = {c.alias_or_name.lower(): c.this for c in query.find_all(exp.CTE)}
    typed = columns_of(query, schemas, ctes)
    if typed is None:
        raise _config_error(
            "the columns of an apply_changes query are not known",
            "a SELECT * over a subquery or a relation without a schema hides them, and the kept "
            "row is built from every column",
            "Select the change rows' columns by name.",
            query,
        )
    for c in typed:
        if not c.name:
            assert c.node is not None  # (a table's columns are named)
            raise _config_error(
                f"the apply_changes query's column {c.node.sql('spark')} has no alias",
                "the kept row is built from every column by name, and Spark names a computed "
                "column after its expression",
                "Add `AS <name>` to it.",
                c.node,
            )
    seen: set = set()
    for c in typed:
        if c.name.lower() in seen:
            raise _config_error(
                f"the apply_changes query has two columns named {c.name!r}",
                "the kept row is built from every column by name",
                "Select the column once, or rename one with `AS <name>`.",
                c.node,
            )
        seen.add(c.name.lower())
        if c.type is not None and any(t.this in UNORDERED for t in c.type.find_all(exp.DataType)):
            raise _config_error(
                f"the apply_changes query's column {c.name!r} has type {c.type.sql('spark')}",
                "the kept row is the greatest of a key's change rows compared by all their "
                "columns (except_columns too), and maps and variants cannot be compared",
                f"Convert it in the query (e.g. to_json({c.name}) AS {c.name}) or leave it out "
                f"of the query (SELECT * EXCEPT ({c.name}) ...).",
                c.node,
            )
    return typed


def _find(name: str, columns: Sequence[str], what: str) -> str:
    for c in columns:
        if c.lower() == name.lower():
            return c
    raise _config_error(
        f"apply_changes {what} {name!r} is not a column of the query",
        f"the query's columns are {', '.join(columns)}",
        f"Name one of them in {what}, or select {name} in the query.",
    )


def _delete_when(text: Optional[str], columns: Sequence[str]) -> exp.Expr:
    """The condition that a change row is a delete (FALSE without delete_when); SSV180 unless
    it is a boolean expression of the row's own columns, named unqualified (it is evaluated
    over the query as a derived table)."""
    if text is None:
        return exp.false()
    try:
        deleted = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError as e:
        raise _config_error(
            f"apply_changes delete_when {text!r} does not parse",
            str(e).splitlines()[0],
            "Write a boolean SQL expression such as \"op = 'd'\".",
        ) from None
    known = {n.lower() for n in columns}
    stray = [c.name for c in deleted.find_all(exp.Column) if c.name.lower() not in known]
    if stray or not isinstance(deleted, exp.Condition) or deleted.find(exp.Select):
        raise _config_error(
            f"apply_changes delete_when {text!r} is not an expression over the query's columns",
            f"the query's columns are {', '.join(columns)}"
            + (f"; {', '.join(stray)} is not one" if stray else ""),
            "Write a boolean SQL expression over those columns, such as \"op = 'd'\".",
        )
    qualified = next((c for c in deleted.find_all(exp.Column) if c.table), None)
    if qualified is not None:
        raise _config_error(
            f"apply_changes delete_when {text!r} qualifies the column {qualified.sql('spark')}",
            "delete_when is evaluated over the query's rows as a derived table, where the "
            "query's tables and their aliases are not visible",
            "Name the query's columns unqualified, such as \"op = 'd'\".",
        )
    aggregate = deleted.find(exp.AggFunc, exp.Window)
    if aggregate is not None:
        raise _config_error(
            f"apply_changes delete_when {text!r} aggregates ({aggregate.sql('spark')})",
            "delete_when is evaluated per change row: whether that row is a delete",
            "Write a condition on the change row's own columns, such as \"op = 'd'\".",
        )
    return deleted


def rewrite_apply_changes(
    query: exp.Expr,
    apply: ApplyChanges,
    unique_key: Optional[Sequence[str]],
    schemas: Mapping[str, Mapping[str, str]],
) -> Rewritten:
    """The query that keeps each key's last change, or its versions (module docstring)."""
    if not unique_key:
        raise SqlError(
            "SSV130",
            "apply_changes without a unique_key",
            "the change rows are applied by key, and nothing in the query says which columns "
            "identify a row",
            "Set config unique_key='<column>' (or a list) naming the change rows' key.",
            query,
        )
    typed = _change_columns(query, schemas)
    columns = [c.name for c in typed]
    keys = tuple(_find(k, columns, "unique_key") for k in unique_key)
    seq = _find(apply.sequence_by, columns, "sequence_by")
    dropped = {_find(c, columns, "except_columns").lower() for c in apply.except_columns}
    if dropped & {k.lower() for k in keys}:
        raise _config_error(
            "apply_changes except_columns names a unique_key column",
            "the table is keyed by it",
            "Remove the key from except_columns.",
        )
    seq_type = next(c.type for c in typed if c.name == seq)
    if apply.scd_type == 2 and seq_type is not None and seq_type.is_type(*NESTED):
        raise _config_error(
            f"apply_changes sequence_by {seq!r} has type {seq_type.this.value} with scd_type 2",
            "scd_type 2 keys each version by its sequence (__start_at), so the sequence must be "
            "a single orderable scalar column: a number, string, date or timestamp",
            "Order the changes by one scalar column (computed in the query if need be), or use "
            "scd_type 1, which may order by a STRUCT.",
        )
    deleted = _delete_when(apply.delete_when, columns)
    fields: List[exp.Expr] = [
        _alias(_col(seq), SEQ_FIELD),
        _alias(exp.func("COALESCE", exp.Paren(this=deleted), exp.false()), DELETED_FIELD),
    ]
    fields += [_alias(_col(c), c) for c in columns]
    with_ = query.args.get("with_")
    if with_ is not None:  # the CTEs go to the top, where Spark takes them
        query.set("with_", None)
    kept = exp.Max(this=exp.Struct(expressions=fields))
    changes = exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(CHANGES)))
    not_null = exp.Not(this=exp.Is(this=_col(seq), expression=exp.Null()))
    shown = [c for c in columns if c.lower() not in dropped]
    if apply.scd_type == 2:
        return _versions(kept, changes, not_null, keys, seq, shown, with_)
    per_key = (
        exp.Select(expressions=[exp.alias_(kept, ROW)])
        .from_(changes)
        .where(not_null)
        .group_by(*[_col(k) for k in keys])
    )
    top = exp.Select(
        expressions=[_alias(exp.Dot(this=exp.column(ROW), expression=_id(c)), c) for c in shown]
        + [
            _alias(
                exp.Not(this=exp.Dot(this=exp.column(ROW), expression=_id(DELETED_FIELD))),
                KEEP_COLUMN,
            )
        ]
    ).from_(exp.Subquery(this=per_key, alias=exp.TableAlias(this=_id(ROW))))
    if with_ is not None:
        top.set("with_", with_)
    return Rewritten(top, keys)


def _versions(
    kept: exp.Expr,
    changes: exp.Expr,
    not_null: exp.Expr,
    keys: Tuple[str, ...],
    seq: str,
    shown: List[str],
    with_: Optional[exp.Expr],
) -> Rewritten:
    """scd_type 2: the last change per key and sequence, kept as partials (the tree)::

        SELECT k, seq AS __start_at, MAX(STRUCT(...)).c1 AS c1, ..., MAX(...).__deleted
        FROM (<query>) AS __changes WHERE seq IS NOT NULL GROUP BY k, seq

    and the versions of a key, from all its rows of that (the touched keys', re-read from the
    partials by runtime/partials.py reranked)::

        SELECT c1, ..., __start_at, LEAD(__start_at) OVER (PARTITION BY k ORDER BY __start_at)
               AS __end_at, NOT __deleted AS __keep FROM RANK_INPUT

    A delete's row is not kept (``__keep`` false: a version at its sequence is deleted) and
    ends the version before it."""
    grouped = {k.lower() for k in (*keys, seq)}  # (the group keys: as themselves)
    values = [c for c in shown if c.lower() not in grouped]
    aggregate = (
        exp.Select(
            expressions=[_alias(_col(k), k) for k in keys]
            + [_alias(_col(seq), START)]
            + ([_alias(_col(seq), seq)] if seq in shown else [])
            + [_alias(exp.Dot(this=kept.copy(), expression=_id(c)), c) for c in values]
            + [_alias(exp.Dot(this=kept.copy(), expression=_id(DELETED_FIELD)), DELETED_FIELD)]
        )
        .from_(changes)
        .where(not_null)
        .group_by(*[_col(k) for k in keys], _col(seq))
    )
    lead = exp.Window(
        this=exp.func("LEAD", _col(START)),
        partition_by=[_col(k) for k in keys],
        order=exp.Order(expressions=[exp.Ordered(this=_col(START))]),
    )
    versions = exp.Select(
        expressions=[_alias(_col(c), c) for c in shown]
        + [_alias(_col(START), START), _alias(lead, END)]
        + [_alias(exp.Not(this=_col(DELETED_FIELD)), KEEP_COLUMN)]
    ).from_(exp.to_table(RANK_INPUT))
    whole = versions.copy()
    whole.set(
        "from_",
        exp.From(
            this=exp.Subquery(this=aggregate.copy(), alias=exp.TableAlias(this=_id(RANK_INPUT)))
        ),
    )
    oracle = (
        exp.select(exp.Star(except_=[_col(KEEP_COLUMN)]))
        .from_(exp.Subquery(this=whole, alias=exp.TableAlias(this=_id("__kept"))))
        .where(_col(KEEP_COLUMN))
    )
    if with_ is not None:
        aggregate.set("with_", with_)
        oracle.set("with_", with_.copy())
    partition = tuple(f"__k{i}" for i in range(len(keys)))
    return Rewritten(aggregate, (*keys, START), versions, oracle, partition)


def _id(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _col(name: str) -> exp.Column:
    return exp.column(_id(name))


def _alias(node: exp.Expr, name: str) -> exp.Expr:
    return exp.alias_(node, _id(name))


def keep_tombstones(spec: PartialsSpec) -> PartialsSpec:
    """The partials of the rewritten query with a TOMBSTONE column (the kept row is a delete):
    only those expire (delta/partials.py)."""
    (partial,) = [n for n in _aliases(spec.merge_sql) if n.startswith("__p")]  # MAX(STRUCT)
    merge = (
        f"SELECT *, {partial}.{DELETED_FIELD} AS {TOMBSTONE} FROM ({spec.merge_sql}) AS __merged"
    )
    return replace(spec, merge_sql=merge, expiry="tombstone_ttl", sequence=f"{partial}.{SEQ_FIELD}")


def _aliases(sql: str) -> List[str]:
    select = sqlglot.parse_one(sql, read="spark")
    return [p.alias_or_name for p in select.expressions]
