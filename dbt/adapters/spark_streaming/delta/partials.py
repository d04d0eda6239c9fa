"""The partial aggregates of a `state_ttl` model, per key, in a Delta table beside its result
(``<table>/_dbt_streaming/partials``; sql/state.py has the rewrite, runtime/partials.py the
batch). Each micro-batch MERGEs the merged partials of the keys it touched and deletes the
partials idle longer than the TTL, in one commit carrying the app transaction
``(app_id, batch_id)``. That commit is the batch's last, so it is the one that says the batch
is done."""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction

from ..layout import partials_path
from ..sql.state import TOMBSTONE
from .upsert import quote

UPDATED = "__updated_ms"  # processing time (ms) of the batch that last updated the key


def key_tuples(table: pa.Table, keys: Sequence[str]) -> list[tuple]:
    """Each row's key as a tuple of Python values (NULL is None, so NULL keys match)."""
    return list(zip(*(table.column(k).to_pylist() for k in keys), strict=False))


def rows_with_keys(
    dt: DeltaTable, keys: Sequence[str], of: pa.Table, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows of `dt` whose key columns each hold a value of that column in `of` (a superset of
    the rows with `of`'s keys when there are several key columns; only `columns` if given).
    Files whose statistics rule the values out are not read, and no row of other keys reaches
    Python: a batch's work grows with the keys it touches, not with the table."""
    import pyarrow.dataset as ds

    dataset, where = dt.to_pyarrow_dataset(), None
    for k in keys:
        # files MERGE wrote may hold strings as string_view: compare as the table's type
        column, values = ds.field(k).cast(dataset.schema.field(k).type), pc.unique(of.column(k))
        match = column.isin(values.drop_null().cast(dataset.schema.field(k).type))
        if values.null_count:
            match = match | column.is_null()
        where = match if where is None else where & match
    return dataset.to_table(filter=where, columns=None if columns is None else list(columns))


class PartialsCommitter:
    def __init__(self, table_path: str, app_id: str, keys: list[str]):
        self.path, self.app_id, self.keys = partials_path(table_path), app_id, keys
        self.written: dict[str, list[dict]] = {}  # the files its last commit added (sizes unknown)

    def committed(self, batch_id: int) -> bool:
        if not DeltaTable.is_deltatable(self.path):
            return False
        last = DeltaTable(self.path).transaction_version(self.app_id)
        return last is not None and batch_id <= last

    def commit(self, merged: pa.Table, batch_id: int, cutoff_ms: int) -> None:
        """Store `merged` (keys, partials, UPDATED) and drop the partials last updated before
        `cutoff_ms` (with a TOMBSTONE column, apply_changes: only those of deleted keys, and
        the marker row when `merged` has a new one)."""
        if not DeltaTable.is_deltatable(self.path):
            DeltaTable.create(self.path, schema=merged.schema, mode="error")
        dt = DeltaTable(self.path)
        before = dt.version()
        props = CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)])
        on = " AND ".join(f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in self.keys)
        expired = f"t.{quote(UPDATED)} < {int(cutoff_ms)}"
        if TOMBSTONE in merged.schema.names:  # apply_changes: only tombstones expire
            expired += f" AND t.{quote(TOMBSTONE)}"
            # the marker row (runtime/partials.py, TOMBSTONE NULL): a new one replaces it
            on += f" AND ((t.{quote(TOMBSTONE)} IS NULL) = (s.{quote(TOMBSTONE)} IS NULL))"
            if merged.column(TOMBSTONE).null_count:
                expired = f"({expired}) OR t.{quote(TOMBSTONE)} IS NULL"
        metrics = (
            dt.merge(merged, on, source_alias="s", target_alias="t", commit_properties=props)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(predicate=expired)
            .execute()
        )
        # for auto-compaction (runtime/maintenance.py), which counts them against the table
        self.written = {self.path: [{"size": 0}] * metrics.get("num_target_files_added", 0)}
        if dt.version() == before:  # a MERGE that changes nothing commits nothing
            dt.create_write_transaction(
                [], mode="append", schema=dt.schema(), commit_properties=props
            )
