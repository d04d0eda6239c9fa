"""The partial aggregates of a `state_ttl` model, per key, in a Delta table beside its result
(``<table>/_dbt_streaming/partials``; sql/state.py has the rewrite, runtime/partials.py the
batch). Each micro-batch MERGEs the merged partials of the keys it touched and deletes the
partials idle longer than the TTL, in one commit carrying the app transaction
``(app_id, batch_id)``. That commit is the batch's last, so it is the one that says the batch
is done."""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction

from ..layout import partials_path
from .upsert import quote

UPDATED = "__updated_ms"  # processing time (ms) of the batch that last updated the key


class PartialsCommitter:
    def __init__(self, table_path: str, app_id: str, keys: list[str]):
        self.path, self.app_id, self.keys = partials_path(table_path), app_id, keys

    def committed(self, batch_id: int) -> bool:
        if not DeltaTable.is_deltatable(self.path):
            return False
        last = DeltaTable(self.path).transaction_version(self.app_id)
        return last is not None and batch_id <= last

    def commit(self, merged: pa.Table, batch_id: int, cutoff_ms: int) -> None:
        """Store `merged` (keys, partials, UPDATED) and drop the partials last updated before
        `cutoff_ms`."""
        if not DeltaTable.is_deltatable(self.path):
            DeltaTable.create(self.path, schema=merged.schema, mode="error")
        dt = DeltaTable(self.path)
        before = dt.version()
        props = CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)])
        on = " AND ".join(f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in self.keys)
        (
            dt.merge(merged, on, source_alias="s", target_alias="t", commit_properties=props)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(predicate=f"t.{quote(UPDATED)} < {int(cutoff_ms)}")
            .execute()
        )
        if dt.version() == before:  # a MERGE that changes nothing commits nothing
            dt.create_write_transaction(
                [], mode="append", schema=dt.schema(), commit_properties=props
            )
