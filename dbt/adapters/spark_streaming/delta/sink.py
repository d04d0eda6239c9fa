"""Exactly-once commits of micro-batches to a Delta table.

Each batch is written in two phases: parquet files first, then one Delta commit that
adds them and records the app transaction ``(app_id, batch_id)`` plus our metadata. A
replayed batch (Spark re-runs the last batch after a crash) whose id the table's
transaction already covers is skipped, so a crash anywhere loses nothing and duplicates
nothing. Files of a batch that crashed before its commit are never referenced.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction

from ..faults import fault_point

META_KEY = "dbt_spark_streaming"  # commitInfo key holding our JSON metadata


def create_table(path: str, schema: pa.Schema, metadata: dict) -> None:
    """Create an empty Delta table whose first commit carries `metadata`."""
    DeltaTable.create(
        path,
        schema=schema,
        mode="error",
        commit_properties=CommitProperties(custom_metadata={META_KEY: json.dumps(metadata)}),
    )


def last_metadata(path: str) -> dict | None:
    """Our metadata of the most recent commit that has it (None if the table has none)."""
    if not DeltaTable.is_deltatable(path):
        return None
    for entry in DeltaTable(path).history(100):
        if META_KEY in entry:
            return {**json.loads(entry[META_KEY]), "table_version": entry.get("version")}
    return None


def commit_history(path: str) -> list[dict]:
    """Our metadata of every commit that has it, oldest first, with its table version."""
    out = []
    for entry in reversed(DeltaTable(path).history()):
        if META_KEY in entry:
            out.append({**json.loads(entry[META_KEY]), "table_version": entry.get("version")})
    return out


def _stats(t: pa.Table) -> str:
    mins, maxs = {}, {}
    for name in t.column_names:
        col = t.column(name)
        if t.num_rows and (
            pa.types.is_integer(col.type)
            or pa.types.is_floating(col.type)
            or pa.types.is_string(col.type)
        ):
            mm = pc.min_max(col)
            if mm["min"].is_valid:
                mins[name], maxs[name] = mm["min"].as_py(), mm["max"].as_py()
    nulls = {n: t.column(n).null_count for n in t.column_names}
    return json.dumps(
        {"numRecords": t.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


class BatchCommitter:
    """Commits foreachBatch output to the Delta table at `path`, exactly once per batch id."""

    def __init__(self, path: str, app_id: str, schema: pa.Schema):
        self.path, self.app_id, self.schema = path, app_id, schema

    def committed(self, batch_id: int) -> bool:
        last = DeltaTable(self.path).transaction_version(self.app_id)
        return last is not None and batch_id <= last

    def commit(self, table: pa.Table, batch_id: int, metadata: dict) -> int:
        """Append `table` as the commit of `batch_id`; returns the number of rows written."""
        table = table.cast(self.schema)
        fault_point("before_write", batch_id)
        actions = []
        if table.num_rows:
            name = f"part-{batch_id:05d}-{uuid.uuid4()}.snappy.parquet"
            pq.write_table(table, os.path.join(self.path, name), compression="snappy")
            actions.append(
                AddAction(
                    name,
                    os.path.getsize(os.path.join(self.path, name)),
                    {},
                    int(time.time() * 1000),
                    True,
                    _stats(table),
                )
            )
        fault_point("during_write", batch_id)
        dt = DeltaTable(self.path)
        dt.create_write_transaction(
            actions,
            mode="append",
            schema=self.schema,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(self.app_id, batch_id)],
                custom_metadata={META_KEY: json.dumps(metadata)},
            ),
        )
        fault_point("after_delta_commit", batch_id)
        return table.num_rows
