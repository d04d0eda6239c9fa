"""Exactly-once upserts of micro-batches into a keyed Delta table, with its changelog.

A micro-batch of an updating query holds the new version of every key it changed (Spark's
update mode), with a boolean ``keep`` column when the query has HAVING (False: the key no
longer qualifies). The committer compares each row with the table's current row of its key
(NULL keys match NULL keys) and derives the changes, in the retract encoding of seed 001:

    new key, kept ........................ +I new
    existing key, kept, values changed ... -U old, +U new
    existing key, kept, values equal ..... nothing
    existing key, not kept ............... -D old

The changes are appended to the changelog table (``<table>/_dbt_streaming/changelog``: the
result columns, ``_op``, ``_batch_id``, ``_commit_version``), then applied to the table by
one MERGE. Both commits carry the Delta app transaction ``(app_id, batch_id)``, changelog
first: a batch is done when the table has it; a crash between the two commits leaves the
table as it was, so the replayed batch derives the same changes, skips the changelog commit
and applies the MERGE. ``_commit_version`` is the table version the MERGE creates (the run
lock makes this process the table's only writer).

Replaying the changelog in ``(_commit_version, deletes first)`` order, applying ``+I``/``+U``
as upserts and ``-U``/``-D`` as deletes by key, reproduces the table.
"""

from __future__ import annotations

import json
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from ..faults import fault_point
from ..layout import changelog_path
from .sink import META_KEY

OP, BATCH, VERSION = "_op", "_batch_id", "_commit_version"
RESTARTED = "_restarted"  # state_ttl models: the change restarted a key whose state had expired


def changelog_schema(schema: pa.Schema, restarts: bool = False) -> pa.Schema:
    schema = (
        schema.append(pa.field(OP, pa.string()))
        .append(pa.field(BATCH, pa.int64()))
        .append(pa.field(VERSION, pa.int64()))
    )
    return schema.append(pa.field(RESTARTED, pa.bool_())) if restarts else schema


def quote(name: str) -> str:
    """A column name quoted for delta-rs predicates (DataFusion SQL)."""
    return '"' + name.replace('"', '""') + '"'


def _flags(value: bool, n: int) -> pa.Array:
    return pa.array([value] * n, pa.bool_())


def key_tuples(table: pa.Table, keys: Sequence[str]) -> list[tuple]:
    """Each row's key as a tuple of Python values (NULL is None, so NULL keys match)."""
    return list(zip(*(table.column(k).to_pylist() for k in keys), strict=False))


def rows_with_keys(dt: DeltaTable, keys: Sequence[str], of: pa.Table) -> pa.Table:
    """The rows of `dt` whose key columns each hold a value of that column in `of` (a superset of
    the rows with `of`'s keys when there are several key columns). Files whose statistics rule
    the values out are not read, and no row of other keys reaches Python: a batch's work grows
    with the keys it touches, not with the table."""
    import pyarrow.dataset as ds

    dataset, where = dt.to_pyarrow_dataset(), None
    for k in keys:
        # files MERGE wrote may hold strings as string_view: compare as the table's type
        column, values = ds.field(k).cast(dataset.schema.field(k).type), pc.unique(of.column(k))
        match = column.isin(values.drop_null().cast(dataset.schema.field(k).type))
        if values.null_count:
            match = match | column.is_null()
        where = match if where is None else where & match
    return dataset.to_table(filter=where)


def _last_per_key(batch: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The batch with one row per key, the last (an append-only query's rows may repeat a
    unique_key; update-mode batches hold each key once)."""
    last = {key: i for i, key in enumerate(key_tuples(batch, keys))}
    return (
        batch
        if len(last) == batch.num_rows
        else batch.take(pa.array(sorted(last.values()), pa.int64()))
    )


def _changed(new: pa.Table, old: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Per row pair, whether any column differs (NULL-safe; nested types always count as
    changed)."""
    changed = _flags(False, new.num_rows)
    for c in columns:
        a, b = new.column(c), old.column(c)
        if pa.types.is_nested(a.type):
            return _flags(True, new.num_rows)
        differ = pc.fill_null(pc.not_equal(a, b), True)  # NULL vs value: differ
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        changed = pc.or_(changed, pc.and_(differ, pc.invert(both_null)))
    return changed


class UpsertCommitter:
    """Applies update-mode micro-batches to the keyed table at `path` and its changelog."""

    def __init__(
        self, path: str, app_id: str, schema: pa.Schema, keys: Sequence[str], keep: str | None
    ):
        self.path, self.app_id, self.schema, self.keys, self.keep = (
            path,
            app_id,
            schema,
            list(keys),
            keep,
        )
        self.changelog = changelog_path(path)

    def committed(self, batch_id: int) -> bool:
        last = DeltaTable(self.path).transaction_version(self.app_id)
        return last is not None and batch_id <= last

    def changes(self, dt: DeltaTable, batch: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(changelog rows with `_op`, MERGE source rows with `__op` 'U' or 'D') of a batch."""
        batch = _last_per_key(batch, self.keys)
        keep = (
            pc.fill_null(batch.column(self.keep), False)
            if self.keep
            else _flags(True, batch.num_rows)
        )
        new = batch.select(self.schema.names).cast(self.schema)
        # the table's current rows of these keys; files MERGE wrote may hold strings as
        # string_view, hence the cast
        old = rows_with_keys(dt, self.keys, new).cast(self.schema)
        at = {key: i for i, key in enumerate(key_tuples(old, self.keys))}
        matches = pa.array([at.get(key) for key in key_tuples(new, self.keys)], pa.int64())
        found = pc.is_valid(matches)
        old_rows = old.take(pc.fill_null(matches, 0)) if old.num_rows else None
        if old_rows is not None:
            values = [c for c in self.schema.names if c not in self.keys]
            changed = pc.and_(found, _changed(new, old_rows, values))
        else:
            changed = _flags(False, new.num_rows)
        inserted = pc.and_(pc.invert(found), keep)
        updated = pc.and_(changed, keep)
        deleted = pc.and_(found, pc.invert(keep))
        parts = [(new.filter(inserted), "+I")]
        if old_rows is not None:
            parts = (
                [(old_rows.filter(updated), "-U"), (old_rows.filter(deleted), "-D")]
                + parts
                + [(new.filter(updated), "+U")]
            )
        log = pa.concat_tables(
            [t.append_column(OP, pa.array([op] * t.num_rows, pa.string())) for t, op in parts]
        )
        upserts, deletes = new.filter(pc.or_(inserted, updated)), new.filter(deleted)
        source = pa.concat_tables(
            [
                upserts.append_column("__op", pa.array(["U"] * upserts.num_rows, pa.string())),
                deletes.append_column("__op", pa.array(["D"] * deletes.num_rows, pa.string())),
            ]
        )
        return log, source

    def commit(
        self, batch: pa.Table, batch_id: int, metadata: dict, restarted: set | None = None
    ) -> int:
        """Apply `batch` as the commit of `batch_id`; returns the number of changelog rows.
        With `restarted` (state_ttl models), the changelog marks the changes of those keys."""
        fault_point("before_write", batch_id)
        dt = DeltaTable(self.path)
        log, source = self.changes(dt, batch)
        props = CommitProperties(
            app_transactions=[Transaction(self.app_id, batch_id)],
            custom_metadata={META_KEY: json.dumps(metadata)},
        )
        version = dt.version() + 1
        logged = DeltaTable(self.changelog).transaction_version(self.app_id)
        if log.num_rows and (logged is None or logged < batch_id):
            log = log.append_column(
                BATCH, pa.array([batch_id] * log.num_rows, pa.int64())
            ).append_column(VERSION, pa.array([version] * log.num_rows, pa.int64()))
            if restarted is not None:
                log = log.append_column(
                    RESTARTED,
                    pa.array([key in restarted for key in key_tuples(log, self.keys)], pa.bool_()),
                )
            write_deltalake(
                self.changelog,
                log,
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(self.app_id, batch_id)]
                ),
            )
        fault_point("during_write", batch_id)
        if source.num_rows:
            on = " AND ".join(
                f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in self.keys
            )
            values = {quote(c): f"s.{quote(c)}" for c in self.schema.names}
            (
                dt.merge(source, on, source_alias="s", target_alias="t", commit_properties=props)
                .when_matched_delete(predicate="s.__op = 'D'")
                .when_matched_update(values, predicate="s.__op = 'U'")
                .when_not_matched_insert(values, predicate="s.__op = 'U'")
                .execute()
            )
        else:  # every batch commits, so the table's last commit records what was consumed
            dt.create_write_transaction(
                [], mode="append", schema=self.schema, commit_properties=props
            )
        fault_point("after_delta_commit", batch_id)
        return log.num_rows


def create_changelog(table_path: str, schema: pa.Schema, restarts: bool = False) -> None:
    DeltaTable.create(
        changelog_path(table_path), schema=changelog_schema(schema, restarts), mode="error"
    )
