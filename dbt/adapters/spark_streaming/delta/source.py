"""A PySpark Python data source over a Delta table, read with delta-rs and pyarrow.

Batch: the snapshot at the latest version or at option `versionAsOf`. With option
`batchWatermarks` (the snapshot-equivalence oracle and the late-row listing), each row also
carries, in the column the option names (sql/oracle.py LATE_COLUMN), the watermark of the
micro-batch that read it: see `files_by_batch`.
Streaming: offsets are Delta versions, ``{"table": label, "version": v}``. The first
micro-batch reads the snapshot of the latest version; later ones read the files added
by versions (start, end]. A version that removes data (overwrite, delete, MERGE) makes
the input non-append-only and fails the stream with SSD401. Supports the available-now
trigger natively (pyspark 4.3), so `dbt run` processes what is there and stops.

This module is imported by every Python worker that reads a source, so it imports no dbt and
no sqlglot (the package's __init__ defers its dbt imports).

Catalog tables backed by a Python data source receive no options on read (Spark 4.3), so
`bound_source()` makes one subclass per table with its path baked in; the catalog then
resolves `schema.identifier` to it (see runtime/catalog.py).
"""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

from . import storage, types

FORMAT = "delta_rs"
MAX_PARTITIONS = 8  # files of one read are grouped into at most this many Spark partitions


class FilesPartition(InputPartition):
    def __init__(self, files: list[tuple[str, dict]]):
        self.files = files  # (absolute parquet path, partition values)


def _abs(root: str, path: str) -> str:
    from urllib.parse import unquote

    if path.startswith("file://"):
        return unquote(path[len("file://") :])
    return path if path.startswith("/") or "://" in path else storage.join(root, unquote(path))


def snapshot_files(root: str, version: int | None) -> list[tuple[str, dict]]:
    """Data files of the snapshot at `version` (latest if None), with partition values."""
    from deltalake import DeltaTable

    dt = DeltaTable(root, version=version)
    actions = pa.table(dt.get_add_actions(flatten=True))
    actions = actions.select(
        [c for c in actions.column_names if c == "path" or c.startswith("partition.")]
    ).to_pylist()
    return [
        (
            _abs(root, a["path"]),
            {k[len("partition.") :]: v for k, v in a.items() if k.startswith("partition.")},
        )
        for a in actions
    ]


def added_files(root: str, start_exclusive: int, end_inclusive: int) -> list[tuple[str, dict]]:
    """Files added (dataChange) by commits (start, end]; fails (SSD401) if a commit removes data."""
    from ..errors import StreamingError

    out = []
    for v in range(start_exclusive + 1, end_inclusive + 1):
        log = storage.read_text(storage.join(root, "_delta_log", f"{v:020d}.json"))
        for line in log.splitlines():
            if line.strip():
                action = json.loads(line)
                if "add" in action and action["add"].get("dataChange", True):
                    out.append(
                        (
                            _abs(root, action["add"]["path"]),
                            action["add"].get("partitionValues") or {},
                        )
                    )
                elif "remove" in action and action["remove"].get("dataChange", True):
                    raise StreamingError(
                        "SSD401",
                        f"source table {root} is not append-only",
                        f"Delta version {v} removes data (an overwrite, delete or MERGE), which a "
                        "streaming_view cannot retract",
                        "Only append to streaming sources, or rebuild the model with `dbt run --full-refresh`.",
                    )
    return out


def files_by_batch(
    root: str, after: int, batches: list[list[int]], column: str
) -> list[tuple[str, dict]]:
    """The files micro-batches read, each tagged with its batch's watermark (ms) under
    `column`. `batches` is [[end version, watermark ms], ...] in batch order, as recorded in
    the model's commits; reading starts after version `after` (-1: the first batch read the
    snapshot of its end version, as DeltaStreamReader does). From the start, the files must
    be exactly the snapshot at the last end version (SSD402 otherwise)."""
    from ..errors import StreamingError

    out, start = [], after
    for end, watermark_ms in batches:
        if end <= start:
            continue
        files = snapshot_files(root, end) if start < 0 else added_files(root, start, end)
        out += [(path, {**constants, column: watermark_ms}) for path, constants in files]
        start = end
    if after < 0 and start >= 0:
        read, snapshot = {f for f, _ in out}, {f for f, _ in snapshot_files(root, start)}
        if read != snapshot:
            raise StreamingError(
                "SSD402",
                f"the files of {root} at version {start} are not the ones the stream read",
                f"{len(read - snapshot)} file(s) read are gone and {len(snapshot - read)} are new "
                "(the table was rewritten, e.g. compacted)",
                "Rebuild the model with `dbt run --full-refresh`.",
            )
    return out


def latest_version(root: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(root).version()


def _partitions(files: list[tuple[str, dict]]) -> list[FilesPartition]:
    n = min(MAX_PARTITIONS, len(files))
    return [FilesPartition(files[i::n]) for i in range(n)]


def _read(
    files: list[tuple[str, dict]], schema, late: str | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of `files` as `schema`; with `late`, that last column holds each file's batch
    watermark (files_by_batch)."""
    import pyarrow.parquet as pq

    target = types.arrow_schema([(f.name, f.dataType.simpleString()) for f in schema.fields])
    data = pa.schema([f for f in target if f.name != late])
    for path, constants in files:
        filesystem, file_path = storage.filesystem(path)
        pf = pq.ParquetFile(filesystem.open_input_file(file_path))
        present = [n for n in data.names if n in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=65536, columns=present):
            batch = types.conform(batch, data, constants)
            if late:
                watermark = pa.array([constants[late] * 1000] * batch.num_rows, pa.int64())
                batch = pa.RecordBatch.from_arrays(
                    batch.columns + [watermark.cast(target.field(late).type)], schema=target
                )
            yield batch


class DeltaBatchReader(DataSourceReader):
    def __init__(self, path: str, schema, version: int | None, batch_watermarks: dict | None):
        self.path, self.schema, self.version = path, schema, version
        self.batch_watermarks = batch_watermarks
        self.late = batch_watermarks["column"] if batch_watermarks else None

    def partitions(self):
        if self.batch_watermarks is not None:
            files = files_by_batch(
                self.path,
                self.batch_watermarks["after"],
                self.batch_watermarks["batches"],
                self.late,
            )
        else:
            files = snapshot_files(self.path, self.version)
        return _partitions(files) or [FilesPartition([])]

    def read(self, partition):
        return _read(partition.files, self.schema, self.late)


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str, label: str, schema):
        self.path, self.label, self.schema = path, label, schema
        self._target: int | None = None  # version frozen by prepareForTriggerAvailableNow

    def _offset(self, version: int) -> dict:
        return {"table": self.label, "version": version}

    def _latest(self) -> int:
        return latest_version(self.path)

    def initialOffset(self):
        return self._offset(-1)

    def getDefaultReadLimit(self):
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        self._target = self._latest()

    def latestOffset(self, start=None, limit=None):
        latest = self._target if self._target is not None else self._latest()
        if start is not None and latest <= start["version"]:
            return start
        return self._offset(latest)

    def reportLatestOffset(self):
        return self._offset(self._latest())

    def partitions(self, start, end):
        s, e = start["version"], end["version"]
        if e <= s:
            return []
        files = snapshot_files(self.path, e) if s < 0 else added_files(self.path, s, e)
        return _partitions(files)

    def read(self, partition):
        return _read(partition.files, self.schema)

    def commit(self, end):
        pass


class DeltaSource(DataSource):
    """`spark.read(Stream).format("delta_rs").option("table", name).load(path)`."""

    fixed_path: str | None = None
    fixed_label: str | None = None

    @classmethod
    def name(cls):
        return FORMAT

    @property
    def path(self) -> str:
        return self.fixed_path or self.options["path"]

    def _version(self) -> int | None:
        v = self.options.get("versionAsOf")
        return int(v) if v is not None else None

    def _batch_watermarks(self) -> dict | None:
        value = self.options.get(
            "batchWatermarks"
        )  # {"after": v, "batches": [[end, wm ms], ...], "column": c}
        return json.loads(value) if value else None

    def schema(self):
        columns = types.table_columns(self.path, self._version())
        watermarks = self._batch_watermarks()
        if watermarks is not None:
            columns = columns + [(watermarks["column"], "timestamp")]
        return types.ddl(columns)

    def reader(self, schema):
        return DeltaBatchReader(self.path, schema, self._version(), self._batch_watermarks())

    def streamReader(self, schema):
        return DeltaStreamReader(
            self.path, self.fixed_label or self.options.get("table", self.path), schema
        )


def bound_source(name: str, label: str, path: str) -> type[DeltaSource]:
    """A DeltaSource registered as format `name` that always reads `path` (for catalog tables)."""
    return type(
        f"DeltaSource_{name}",
        (DeltaSource,),
        {"fixed_path": path, "fixed_label": label, "name": classmethod(lambda cls: name)},
    )
