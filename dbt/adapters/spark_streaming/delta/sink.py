"""Delta commits of files written by Spark tasks: exactly-once micro-batches, appends and
replacements.

Each micro-batch is written in two phases, as Spark's FileStreamSink and Delta's DeltaSink do:
the executors write its Parquet files (delta/writer.py; only their names, sizes and statistics
come back), then this process makes one Delta commit that adds them and records the app
transaction ``(app_id, batch_id)`` plus our metadata. A replayed batch (Spark re-runs the last
batch after a crash) whose id the table's transaction already covers is skipped, so a crash
anywhere loses nothing and duplicates nothing. The files of an attempt that crashed before its
commit are never referenced; they are named after their batch and deleted when the batch is
committed again.
"""

from __future__ import annotations

import json
import re
import time

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, write_deltalake
from deltalake.transaction import AddAction, create_table_with_add_actions

from ..faults import fault_point
from .history import KEEP_LOG, META_KEY, tidy
from .log import add_action_table
from .writer import WRITTEN, absolute, write_files


def create_table(
    path: str, schema: pa.Schema, metadata: dict, configuration: dict | None = None
) -> None:
    """Create an empty Delta table whose first commit carries `metadata`, with the table
    properties `configuration`."""
    DeltaTable.create(
        path,
        schema=schema,
        mode="error",
        configuration=configuration,
        commit_properties=CommitProperties(custom_metadata={META_KEY: json.dumps(metadata)}),
    )


def rewrite_columns(path: str, columns: list, added: pa.Schema, metadata: dict) -> int:
    """Rewrite the Delta table at `path` with the columns `columns`, [new name, the table's
    column it continues, or None for a new one of `added`'s type, NULL], in one overwrite
    commit carrying `metadata`: readers see the old table until it commits, and a crash before
    leaves it as it was. delta-rs renames, adds in place or drops no column without rewriting
    the files (that needs column mapping), so the rows pass through this process, batch by
    batch. Returns their number."""
    data = DeltaTable(path).to_pyarrow_dataset()
    schema = pa.schema(
        [
            data.schema.field(old).with_name(new) if old is not None else added.field(new)
            for new, old in columns
        ]
    )
    rows = 0

    def batches():
        nonlocal rows
        for batch in data.to_batches():
            rows += batch.num_rows
            arrays = [
                batch.column(old) if old is not None else pa.nulls(batch.num_rows, field.type)
                for field, (_, old) in zip(schema, columns, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    write_deltalake(
        path,
        pa.RecordBatchReader.from_batches(schema, batches()),
        mode="overwrite",
        schema_mode="overwrite",
        commit_properties=CommitProperties(custom_metadata={META_KEY: json.dumps(metadata)}),
        post_commithook_properties=KEEP_LOG,
    )
    return rows


def add_actions(files: list[dict]) -> list[AddAction]:
    """Delta add actions for files written by `writer.write_files` (unpartitioned)."""
    now = int(time.time() * 1000)
    return [AddAction(f["path"], f["size"], {}, now, True, f["stats"]) for f in files]


def append_files(
    path: str, files: list[dict], schema, properties: CommitProperties, model: bool = False
) -> None:
    """Commit `files` to the Delta table at `path` as one append (`schema`: the table's). A
    `model` table's commits carry our metadata, kept beyond the log's retention
    (delta/history.py); another's log is cleaned up as delta-rs does."""
    table = DeltaTable(path)
    table.create_write_transaction(  # [*...]: delta-rs types it add | remove
        [*add_actions(files)],
        mode="append",
        schema=schema,
        commit_properties=properties,
        post_commithook_properties=KEEP_LOG if model else None,
    )
    if model:
        tidy(path, table.version() + 1, table.metadata().configuration)


def replace_files(path: str, files: list[dict], schema: pa.Schema) -> None:
    """Make `files` the whole content of the table at `path` in one commit, creating the table
    or changing its schema if need be (unpartitioned). The same schema: an overwrite that
    removes every current file (the table keeps its id and properties). A new table, a new
    schema or partitioning: CREATE OR REPLACE with the table's properties (delta-rs's overwrite
    transaction would write a schema without upgrading the protocol it needs)."""
    new = Schema.from_arrow(schema)
    if DeltaTable.is_deltatable(path):
        dt = DeltaTable(path)
        same = dt.schema().to_json() == new.to_json() and not dt.metadata().partition_columns
        if same:
            dt.create_write_transaction([*add_actions(files)], mode="overwrite", schema=new)
            return
        configuration = dt.metadata().configuration
    else:
        configuration = None
    create_table_with_add_actions(
        path, new, add_actions(files), mode="overwrite", configuration=configuration
    )


def remove_orphans(path: str, prefix: str, keep: set[str]) -> list[str]:
    """Delete the data files at the table's root whose names start with `prefix`, except `keep`
    and any file the table references: the files of an attempt at a micro-batch that crashed
    before its commit. Returns their names."""
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(absolute(path))
    referenced = set(add_action_table(DeltaTable(path), flatten=False).column("path").to_pylist())
    ours = re.compile(re.escape(prefix) + WRITTEN)  # not delta-rs's part-00001-<uuid>-c000...
    gone = [
        info.base_name
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=False))
        if info.type == pafs.FileType.File
        and ours.fullmatch(info.base_name)
        and info.base_name not in keep
        and info.base_name not in referenced
    ]
    for name in gone:
        fs.delete_file(f"{root.rstrip('/')}/{name}")
    return gone


def batch_prefix(batch_id: int) -> str:
    """The name prefix of the data files of micro-batch `batch_id`."""
    return f"part-{batch_id:05d}-"


class Applied:
    """The last batch id whose commit to the table at `path` carries app `app_id`'s
    transaction: read from the table's log at the first look, then kept by its only writer (a
    model's run holds the model's lock; a compaction's commit carries no transaction), so a
    micro-batch does not load the table to ask. Forgotten while a commit is under way: after a
    failed one, it is read again."""

    def __init__(self, path: str, app_id: str):
        self.path, self.app_id = path, app_id
        self._last: int | None = None

    def last(self) -> int:
        """-1 if none."""
        if self._last is None:
            found = DeltaTable(self.path).transaction_version(self.app_id)
            self._last = -1 if found is None else found
        return self._last

    def committing(self) -> None:
        self._last = None

    def committed(self, batch_id: int) -> None:
        self._last = batch_id


class BatchCommitter:
    """Commits foreachBatch output to the Delta table at `path`, exactly once per batch id:
    Spark tasks write the files (delta/writer.py), this process commits them."""

    def __init__(self, path: str, app_id: str, schema: pa.Schema):
        self.path, self.app_id, self.schema = path, app_id, schema
        self._swept = False  # orphans of a crashed attempt are looked for once per run
        self.written: dict[str, list[dict]] = {}  # per table, the files its last commit added
        self.applied = Applied(path, app_id)

    def committed(self, batch_id: int) -> bool:
        return batch_id <= self.applied.last()

    def commit(self, batch_df, batch_id: int, metadata: dict) -> int:
        """Append the rows of `batch_df` (a Spark DataFrame) as the commit of `batch_id`;
        returns the number of rows written."""
        fault_point("before_write", batch_id)
        files = write_files(batch_df, self.path, self.schema, batch_prefix(batch_id))
        fault_point("during_write", batch_id)
        if not self._swept:
            # Only the first batch of a run can be the replay of one that crashed mid-write:
            # Spark re-runs that batch first. (Files of task attempts that failed and were
            # retried in a run that went on are left to VACUUM: nothing references them.)
            remove_orphans(self.path, batch_prefix(batch_id), {f["path"] for f in files})
            self._swept = True
        self.applied.committing()
        append_files(
            self.path,
            files,
            self.schema,
            CommitProperties(
                app_transactions=[Transaction(self.app_id, batch_id)],
                custom_metadata={META_KEY: json.dumps(metadata)},
            ),
            model=True,
        )
        self.applied.committed(batch_id)
        self.written = {self.path: files}
        fault_point("after_delta_commit", batch_id)
        return sum(f["rows"] for f in files)
