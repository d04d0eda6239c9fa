"""Parquet data files of a Delta table, written by Spark tasks on the executors.

`write_files(df, location, schema, prefix)` runs one Spark job, ``df.mapInArrow(FileWriter)``:
each task streams its partition's rows into one Parquet file at the table's location, through
a pyarrow filesystem (so `location` may be a local path or an object-store URI), and returns
one small row: the file's name, size, row count and Delta statistics (numRecords, minValues,
maxValues, nullCount). Only those rows reach the driver, which commits the files as one Delta
transaction (delta/sink.py). Rows never pass through the driver.

File names say who wrote them: ``<prefix><task:05d>-<uuid>.snappy.parquet``; the streaming sink's
prefix is ``part-<batch_id:05d>-``, so the files of a micro-batch that crashed before its commit
can be found and deleted when the batch is committed again.

Spark's Python workers import this module to run the tasks: it imports neither dbt nor
deltalake (see tests/unit/test_worker_imports.py).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

# What each task returns per file it wrote (the mapInArrow output schema).
FILES_SCHEMA = "path string, size bigint, rows bigint, stats string"
_FILES_ARROW = pa.schema(
    [("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64()), ("stats", pa.string())]
)
# What a Concatenator task returns per output: also its name's stem and each input's row
# count (a JSON list)
CONCAT_SCHEMA = FILES_SCHEMA + ", stem string, counts string"
_CONCAT_ARROW = _FILES_ARROW.append(pa.field("stem", pa.string())).append(
    pa.field("counts", pa.string())
)
# Rows buffered before a Parquet row group is written (Spark hands over 10,000-row batches).
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 << 20
# The end of the names FileWriter gives its files, after their prefix.
WRITTEN = r"\d{5}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.snappy\.parquet"


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s columns (matched by name, case-insensitively), cast to
    their types; a column `batch` lacks is all NULL."""
    index = {n.lower(): i for i, n in enumerate(batch.schema.names)}
    columns = []
    for f in schema:
        i = index.get(f.name.lower())
        if i is None:
            columns.append(pa.nulls(batch.num_rows, f.type))
        else:
            column = batch.column(i)
            columns.append(column if column.type.equals(f.type) else column.cast(f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _has_min_max(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.tz is not None)  # Spark's timestamp, UTC
    )


def _stat(value, upper: bool):
    """A min (or max, `upper`) as Delta's JSON statistics hold it: dates as ISO dates, timestamps
    in UTC at millisecond precision, rounded outwards so the bounds still hold."""
    if isinstance(value, dt.datetime):
        ms = value.astimezone(dt.timezone.utc)
        ms = ms.replace(microsecond=ms.microsecond // 1000 * 1000)
        if upper and ms != value:
            ms += dt.timedelta(milliseconds=1)  # OverflowError past 9999-12-31: no max
        return f"{ms.year:04d}-" + ms.strftime("%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _bounds(values: dict, upper: bool) -> dict:
    """Delta's minValues (maxValues, `upper`) of `values`, leaving out a bound past the
    representable range (a max of 9999-12-31 23:59:59.999999 cannot be rounded up)."""
    out = {}
    for name, value in values.items():
        try:
            out[name] = _stat(value, upper)
        except OverflowError:
            pass
    return out


class FileStats:
    """Delta statistics of one data file, accumulated batch by batch."""

    def __init__(self, schema: pa.Schema):
        self.rows = 0
        self.mins: dict = {}
        self.maxs: dict = {}
        self.nulls = {n: 0 for n in schema.names}
        self._unknown: set[str] = set()  # columns with a NaN/infinite bound: no min/max at all

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            self.nulls[name] += column.null_count
            if name in self._unknown or not _has_min_max(column.type) or not batch.num_rows:
                continue
            mm = pc.min_max(column)
            if not mm["min"].is_valid:
                continue
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)):
                self._unknown.add(name)  # JSON has no NaN/Infinity; no bound is a safe bound
                self.mins.pop(name, None)
                self.maxs.pop(name, None)
                continue
            self.mins[name] = lo if name not in self.mins else min(self.mins[name], lo)
            self.maxs[name] = hi if name not in self.maxs else max(self.maxs[name], hi)

    def json(self) -> str:
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": _bounds(self.mins, False),
                "maxValues": _bounds(self.maxs, True),
                "nullCount": self.nulls,
            }
        )


class ParquetOut:
    """One Parquet file being written at `path` on `fs`, with `schema`: rows are conformed to
    it, buffered into row groups of up to ROW_GROUP_ROWS rows or ROW_GROUP_BYTES, and their
    Delta statistics kept. `close()` returns the file's metadata row (None if no row came: no
    file); a failure deletes the file (`abort()`)."""

    def __init__(self, fs, root: str, name: str, schema: pa.Schema):
        self.fs, self.name, self.schema = fs, name, schema
        self.path = f"{root.rstrip('/')}/{name}"
        self.stats = FileStats(schema)
        self.writer: Any = None  # a pyarrow ParquetWriter once a row came
        self.pending: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.pending.append(conform(batch, self.schema))
        self.stats.add(self.pending[-1])
        if sum(b.num_rows for b in self.pending) >= ROW_GROUP_ROWS or (
            sum(b.nbytes for b in self.pending) >= ROW_GROUP_BYTES
        ):
            self._flush()

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(
                self.path, self.schema, filesystem=self.fs, compression="snappy"
            )
        self.writer.write_table(pa.Table.from_batches(self.pending), row_group_size=ROW_GROUP_ROWS)
        self.pending = []

    def close(self) -> dict | None:
        if self.pending:
            self._flush()
        if self.writer is None:  # no row: no file
            return None
        self.writer.close()
        size = self.fs.get_file_info(self.path).size
        return {
            "path": self.name,
            "size": size,
            "rows": self.stats.rows,
            "stats": self.stats.json(),
        }

    def abort(self) -> None:
        if self.writer is not None:  # a failed attempt leaves no file behind (when it can)
            self.writer.close()
            self.fs.delete_file(self.path)


@dataclass(frozen=True)
class FileWriter:
    """The task of `write_files`: writes the rows of one Spark partition as one Parquet file
    (none if the partition is empty) and yields its metadata row. Pickled to the executors."""

    location: str  # the table's root: a local path or a URI pyarrow.fs understands
    schema: pa.Schema  # the table's Arrow schema; rows are conformed to it
    prefix: str  # file name prefix (e.g. the micro-batch's)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.fs as pafs
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        fs, root = pafs.FileSystem.from_uri(self.location)
        out = ParquetOut(
            fs, root, f"{self.prefix}{task:05d}-{uuid.uuid4()}.snappy.parquet", self.schema
        )
        try:
            for batch in batches:
                out.write(batch)
            row = out.close()
        except BaseException:
            out.abort()
            raise
        if row is not None:
            yield pa.RecordBatch.from_pylist([row], schema=_FILES_ARROW)


@dataclass(frozen=True)
class Concatenator:
    """The task of `concatenate_files`: for each id it is given, writes the rows of
    `bins[id]`'s input files, in their order, into one Parquet file named
    ``<bins[id][0]>-<8 hex digits of its own>.snappy.parquet`` (a retried or duplicate
    attempt writes another file), and yields its metadata row with its stem and each input's
    row count. Pickled to the executors."""

    location: str  # the table's root
    schema: pa.Schema
    bins: tuple  # ((output name, (input paths relative to location, ...)), ...)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        fs, root = pafs.FileSystem.from_uri(self.location)
        for batch in batches:
            for i in batch.column("id").to_pylist():
                stem, inputs = self.bins[i]
                name = f"{stem}-{uuid.uuid4().hex[:8]}.snappy.parquet"
                out, counts = ParquetOut(fs, root, name, self.schema), []
                try:
                    for path in inputs:
                        with fs.open_input_file(f"{root.rstrip('/')}/{path}") as f:
                            counts.append(0)
                            for piece in pq.ParquetFile(f).iter_batches(batch_size=65536):
                                out.write(piece)
                                counts[-1] += piece.num_rows
                    row = out.close()
                except BaseException:
                    out.abort()
                    raise
                if row is not None:
                    row.update(stem=stem, counts=json.dumps(counts))
                    yield pa.RecordBatch.from_pylist([row], schema=_CONCAT_ARROW)


def absolute(location: str) -> str:
    """`location` as executors can use it: URIs as they are, local paths made absolute."""
    return location if "://" in location else os.path.abspath(location)


def write_files(df, location: str, schema: pa.Schema, prefix: str) -> list[dict]:
    """Write `df`'s rows as Parquet files at `location`, one per Spark task (on the executors);
    returns the files' metadata: [{path (relative to location), size, rows, stats}, ...]."""
    import pyarrow.fs as pafs

    location = absolute(location)
    fs, root = pafs.FileSystem.from_uri(location)
    fs.create_dir(root, recursive=True)
    files = df.mapInArrow(FileWriter(location, schema, prefix), FILES_SCHEMA).collect()
    return [row.asDict() for row in files]


def concatenate_files(spark, location: str, schema: pa.Schema, bins: list) -> list[dict]:
    """Write, for each (output stem, [input paths]) of `bins`, the rows of its input files (of
    the table at `location`, paths relative to it) in their order into one Parquet file, one
    Spark task per output (on the executors); returns the outputs' metadata as write_files,
    with `stem` and `counts`: each input's rows (JSON)."""
    location = absolute(location)
    task = Concatenator(location, schema, tuple((n, tuple(i)) for n, i in bins))
    ids = spark.range(0, len(bins), numPartitions=len(bins))
    return [row.asDict() for row in ids.mapInArrow(task, CONCAT_SCHEMA).collect()]
