"""A PySpark Python data source over a Delta table, read with delta-rs and pyarrow.

Batch: the snapshot at the latest version or at option `versionAsOf`. With options `files` (a
JSON list of data file paths as in the Delta log) and `fileColumn`, only those files, each row
with its file's path in that column (a copy-on-write MERGE: delta/upsert.py). With option
`batchWatermarks` (the snapshot-equivalence oracle and the late-row listing), each row also
carries, in the column the option names (sql/oracle.py LATE_COLUMN), the watermark of the
micro-batch that read it: see `files_by_batch`.
Streaming: a stream starts with the snapshot of the latest version (or, with option
`startingVersion` / `startingTimestamp`, with the changes from that version on), then reads
the files later versions add. Admission control (options `maxFilesPerTrigger`, default 1000,
and `maxBytesPerTrigger`) splits a large snapshot or version into several micro-batches;
offsets are positions in a fixed file order (delta/offsets.py), and the old offsets
``{"table": label, "version": v}`` of existing checkpoints still read as "v fully read". A
version that removes data (overwrite, delete, MERGE) makes the input non-append-only and
fails the stream with SSD401, or with option `skipChangeCommits` is passed over whole;
a version that changes no data (OPTIMIZE) adds nothing to read. Supports the available-now
trigger natively (pyspark 4.3): `dbt run` processes what is there when it starts, in as
many batches as the limits need, and stops.

This module is imported by every Python worker that reads a source, so it imports no dbt and
no sqlglot (the package's __init__ defers its dbt imports).

Catalog tables backed by a Python data source receive no options on read (Spark 4.3), so
`bound_source()` makes one subclass per table with its path baked in; the catalog then
resolves `schema.identifier` to it (see runtime/catalog.py).
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from . import offsets, origins, storage, types
from .log import OP, Log, files_named, rearranged, snapshot_files, starting_position
from .log import added_files as added_files  # the runtime imports these from here
from .log import latest_version as latest_version
from .offsets import Position

FORMAT = "delta_rs"
# The files of one read are grouped into as many Spark partitions as the application has cores
# (this variable, set by runtime/session.py for Spark's Python processes), at most MAX_PARTITIONS:
# each partition is a Python task with a fixed cost: on 2 cores, 8 partitions cost a cold
# 1M-event `dbt run` ~1.4 s more than 2 (bench/README)
PARTITIONS_ENV = "DBT_SPARK_STREAMING_READ_PARTITIONS"
MAX_PARTITIONS = 8
DEFAULT_MAX_FILES = 1000  # files per micro-batch, as Delta's maxFilesPerTrigger
READ_ALL = "readAllAvailable"  # option: no admission limit (read_limits)
# A backlog split between a batch query and the stream (runtime/backlog.py): the stream's
# first batch ends at this version's snapshot, its rows true in a column of this name (false
# after it); with the hold option 'true' (batch 1 not planned yet) the next batch is one
# without data (the first call after the snapshot finds none)
BACKLOG_VERSION, BACKLOG_COLUMN = "backlogVersion", "__dss_backlog"
BACKLOG_HOLD = "backlogHold"
# and with this one (a JSON [time column, µs]) that first batch reads only the rows after that
# time (and those without one): the others are of windows the batch query aggregates
BACKLOG_AFTER = "backlogAfter"
# DeltaStreamReader.latestOffset: how long to wait for a commit, how long once IDLE_AFTER
# calls in a row found nothing new, a file that ends the wait, whether the query has a watermark
AWAIT_COMMIT_MS, AWAIT_IDLE_MS = "awaitCommitMs", "awaitIdleMs"
AWAIT_STOP_FILE, AWAIT_WATERMARK = "awaitStopFile", "awaitWatermark"
AWAIT_TABLES = "awaitTables"  # a JSON list: the tables of every stream of the query (a join)
IDLE_AFTER = 5
CHANGE_TYPE = "_change_type"  # the change column of Delta's change data files


class FilesPartition(InputPartition):
    def __init__(self, files: list[tuple[str, dict]], after: tuple[str, int] | None = None):
        self.files = files  # (absolute parquet path, partition values)
        self.after = after  # (a timestamp column, µs): only the rows after it or NULL there


def files_by_batch(
    root: str, after, batches: list[list], column: str, change_feed: bool = False
) -> list[tuple[str, dict]]:
    """The files micro-batches read, each tagged with its batch's watermark (ms) under `column`.
    `batches` is [[end position, watermark ms], ...] in batch order, as recorded in the model's
    commits (`consumed`); reading starts after position `after` (-1: the stream's start). The
    same `offsets.between` over the same file order as the stream gives each batch exactly its
    files. From the start, the files must be exactly the snapshot at the last end version
    (minus the versions before `starting_version`; a compaction since the stream began counted
    back to the files it replaced), or SSD402. With `change_feed`, the files of each version's
    changes (delta/log.py change_files) after the first snapshot."""
    from ..errors import StreamingError

    log, out = Log(root, change_feed=change_feed), []
    start = first = Position.parse(after)
    from_start = first.is_origin  # else the batches of a later run (its late rows only)
    began = None  # the version whose snapshot the stream read first (or the one before its start)
    for end_offset, watermark_ms in batches:
        end = Position.parse(end_offset)
        if began is None:
            began = end.version if end.start is None else end.start - 1
        if start.is_origin and end.start is not None:
            start = first = offsets.starting(end.start)
        out += [
            (f.path, {**f.partition_values, column: watermark_ms})
            for f in offsets.between(start, end, log.files)
        ]
        start = max(start, end, key=lambda p: p.key)
    if change_feed:
        gone = [f for f, _ in out if not storage.exists(f)]
        if gone:
            raise StreamingError(
                "SST510",
                f"{len(gone)} file(s) of {root}'s change feed that the stream read are gone",
                "the batch query reads again the changes each micro-batch read: a version's "
                "removed files and change data files, which a VACUUM of the source deletes once "
                "they are older than its delta.deletedFileRetentionDuration",
                "Test the model before the source is vacuumed past what it read, or rebuild it "
                "(`dbt run --full-refresh -s <model>`) to test it over the source as it is.",
            )
    if from_start and start.index is None and start.version >= 0 and not change_feed:
        expected = {f.path for f in log.files(start.version, True)}
        if began is not None and began < start.version:
            compacted, replaced = rearranged(root, began, start.version)
            expected = (expected | replaced) - compacted
        if first.start:  # began at a version: the snapshot before it was never read
            expected -= {f.path for f in log.files(first.start - 1, True)}
        read = {f for f, _ in out}
        if read != expected:
            raise StreamingError(
                "SSD402",
                f"the files of {root} at version {start.version} are not the ones the stream read",
                f"{len(read - expected)} file(s) read are gone and {len(expected - read)} are new "
                "(the table was rewritten, e.g. compacted)",
                "Rebuild the model with `dbt run --full-refresh`.",
            )
    return _moved(root, out)


ROWS = "__dss_rows"  # a file entry's [first row, rows] in the file that holds its rows now


def _moved(root: str, files: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """`files` with each file a compaction replaced read where its rows are now
    (delta/origins.py), on storage or not: [first row, rows] under ROWS."""
    where = {storage.join(root, f): m for f, m in origins.moved(root).items()}
    out = []
    for path, constants in files:
        if path in where:
            output, first, rows = where[path]
            out.append((storage.join(root, output), {**constants, ROWS: [first, rows]}))
        else:
            out.append((path, constants))
    return out


def consumed(meta: dict) -> dict:
    """Per source, the position a model's commit (its metadata) had read up to: its recorded
    offset, or for commits written before positions were recorded, its version."""
    return {**meta.get("sources", {}), **meta.get("positions", {})}


def _partitions(files: list, after: tuple[str, int] | None = None) -> list[FilesPartition]:
    """(path, partition values) of `files` (File or pairs) in <= MAX_PARTITIONS runs that keep
    their order (partition i holds files before partition i+1's): a batch's rows are in reading
    order, which decides the last of an append-only upsert_table's repeated keys."""
    pairs = [(f[0], f[1]) for f in files]
    cores = max(int(os.environ.get(PARTITIONS_ENV) or MAX_PARTITIONS), 1)
    n = min(cores, MAX_PARTITIONS, len(pairs))
    bounds = [len(pairs) * i // n for i in range(n + 1)] if n else []
    return [FilesPartition(pairs[bounds[i] : bounds[i + 1]], after) for i in range(n)]


def _read(
    files: list[tuple[str, dict]],
    schema,
    late: str | None = None,
    after: tuple[str, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of `files` as `schema`; with `late`, that last column holds each file's batch
    watermark (files_by_batch); with `after` (a timestamp column, µs), only the rows after that
    time or NULL there, the row groups whose statistics say they have none not read. A file
    whose rows a compaction moved (ROWS) is read from where they are now; neighbours moved to
    one file are read in one pass."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    target = types.arrow_schema([(f.name, f.dataType.simpleString()) for f in schema.fields])
    data = pa.schema([f for f in target if f.name != late])
    for path, start, parts in _runs(files):
        filesystem, file_path = storage.filesystem(path)
        pf = pq.ParquetFile(filesystem.open_input_file(file_path))
        present = [n for n in data.names if n in pf.schema_arrow.names]
        changes = OP in data.names and CHANGE_TYPE in pf.schema_arrow.names  # a cdc file
        columns = present + [CHANGE_TYPE] if changes else present
        groups = _groups_after(pf, *after) if after and start is None else None
        for batch, constants in _pieces(pf, columns, start, parts, groups):
            if changes:
                batch = _with_op(batch)
            batch = types.conform(batch, data, constants)
            if after:
                at = batch.column(after[0]).cast(pa.int64())
                batch = batch.filter(pc.or_kleene(pc.greater(at, after[1]), pc.is_null(at)))
            if late:
                watermark = pa.array([constants[late] * 1000] * batch.num_rows, pa.int64())
                batch = pa.RecordBatch.from_arrays(
                    batch.columns + [watermark.cast(target.field(late).type)], schema=target
                )
            yield batch


def _runs(files: list[tuple[str, dict]]) -> list[tuple[str, int | None, list]]:
    """`files` as (path, first row or None for the whole file, [(constants, rows), ...]): the
    consecutive entries whose rows follow each other in one file (ROWS) make one run."""
    runs: list[tuple[str, int | None, list]] = []
    end = None  # the row after the last run's
    for path, constants in files:
        rows = constants.get(ROWS)
        if rows is None:
            runs.append((path, None, [(constants, None)]))
            end = None
            continue
        constants = {k: v for k, v in constants.items() if k != ROWS}
        if runs and runs[-1][0] == path and end == rows[0]:
            runs[-1][2].append((constants, rows[1]))
        else:
            runs.append((path, rows[0], [(constants, rows[1])]))
        end = rows[0] + rows[1]
    return runs


def _groups_after(pf, column: str, after_us: int) -> list[int] | None:
    """The row groups of `pf` that may hold a row whose `column` (a timestamp) is after
    `after_us` or NULL, by their statistics; None: all of them."""
    per_us = {"milliseconds": (1000, 1), "microseconds": (1, 1), "nanoseconds": (1, 1000)}
    leaves = [pf.metadata.schema.column(j).path for j in range(pf.metadata.num_columns)]
    if column not in leaves:
        return None
    at, kept = leaves.index(column), []
    for i in range(pf.metadata.num_row_groups):
        chunk = pf.metadata.row_group(i).column(at)
        stats = chunk.statistics
        if stats is None or not stats.has_min_max or not stats.has_null_count:
            return None
        unit = json.loads(stats.logical_type.to_json()).get("timeUnit")
        if chunk.physical_type != "INT64" or unit not in per_us:
            return None
        times, by = per_us[unit]  # max_raw * times / by µs, compared exactly
        if stats.null_count or stats.max_raw * times > after_us * by:
            kept.append(i)
    return kept


def _pieces(
    pf, columns: list[str], start: int | None, parts: list, groups: list[int] | None = None
) -> Iterator[tuple]:
    """(batch, constants) of a run (_runs): the whole file (its row `groups` if given), or from
    row `start` each part's rows in turn (from the row group that holds `start` on)."""
    if start is None:
        if groups != []:
            for batch in pf.iter_batches(batch_size=65536, columns=columns, row_groups=groups):
                yield batch, parts[0][0]
        return
    first, skip = 0, start
    while first < pf.metadata.num_row_groups and skip >= pf.metadata.row_group(first).num_rows:
        skip -= pf.metadata.row_group(first).num_rows
        first += 1
    groups = list(range(first, pf.metadata.num_row_groups))
    batches = (
        pf.iter_batches(batch_size=65536, columns=columns, row_groups=groups)
        if groups
        else iter(())
    )
    queue = [(c, n) for c, n in parts if n]
    for batch in batches:
        if skip:
            batch, skip = batch.slice(min(skip, batch.num_rows)), max(skip - batch.num_rows, 0)
        while batch.num_rows and queue:
            constants, n = queue[0]
            take = min(n, batch.num_rows)
            yield batch.slice(0, take), constants
            batch = batch.slice(take)
            queue[0] = (constants, n - take)
            if not queue[0][1]:
                queue.pop(0)
        if not queue:
            return
    if queue:
        raise ValueError("a compacted file has fewer rows than its compaction recorded")


def _with_op(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A change data file's batch with OP (+I/-U/+U/-D) for its CHANGE_TYPE."""
    import pyarrow.compute as pc

    kinds = ["insert", "update_preimage", "update_postimage", "delete"]
    index = pc.index_in(batch.column(CHANGE_TYPE).cast(pa.string()), pa.array(kinds))
    op = pc.take(pa.array(["+I", "-U", "+U", "-D"]), index)
    return pa.RecordBatch.from_arrays([*batch.columns, op], names=[*batch.schema.names, OP])


class DeltaBatchReader(DataSourceReader):
    def __init__(
        self,
        path: str,
        schema,
        version: int | None,
        batch_watermarks: dict | None,
        named: tuple[list[str], str] | None = None,
        change_feed: bool = False,
    ):
        self.path, self.schema, self.version = path, schema, version
        self.batch_watermarks, self.named = batch_watermarks, named
        self.change_feed = change_feed
        self.late = batch_watermarks["column"] if batch_watermarks else None

    def partitions(self):
        if self.named is not None:
            files = files_named(self.path, self.version, *self.named)
        elif self.batch_watermarks is not None:
            files = files_by_batch(
                self.path,
                self.batch_watermarks["after"],
                self.batch_watermarks["batches"],
                self.late,
                self.change_feed,
            )
        else:
            files = snapshot_files(self.path, self.version)
        return _partitions(files) or [FilesPartition([])]

    def read(self, partition):
        return _read(partition.files, self.schema, self.late)


def read_limits(options) -> tuple[int | None, int | None]:
    """(max files, max bytes) per micro-batch from options `maxFilesPerTrigger` and
    `maxBytesPerTrigger` (bytes). As Delta's: 1000 files unless only a byte limit is set; none
    with option READ_ALL 'true' (a batch reads whole versions: a table read as changes whose
    pairs must not be split, runtime/temporaljoin.py)."""
    if str(options.get(READ_ALL, "false")).lower() == "true":
        return None, None
    files, size = options.get("maxFilesPerTrigger"), options.get("maxBytesPerTrigger")
    if files is None and size is None:
        return DEFAULT_MAX_FILES, None
    return (None if files is None else int(files)), (None if size is None else int(size))


def skip_change_commits(options) -> bool:
    """Option `skipChangeCommits` ('true'): versions that remove data are passed over, not
    refused (delta/log.py version_files)."""
    return str(options.get("skipChangeCommits", "false")).lower() == "true"


def read_change_feed(options) -> bool:
    """Option `readChangeFeed` ('true'): each version's changes are read (delta/log.py
    change_files), every row with OP, as Delta's readChangeFeed."""
    return str(options.get("readChangeFeed", "false")).lower() == "true"


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and admission control: delta/offsets.py. The available-now trigger freezes the
    target version; each latestOffset then admits up to the limits, so a large backlog runs as
    several micro-batches, the last of them ending exactly at the target."""

    def __init__(self, path: str, label: str, schema, options):
        self.path, self.label, self.schema, self.options = path, label, schema, options
        self.max_files, self.max_bytes = read_limits(options)
        self.log = Log(path, skip_change_commits(options), read_change_feed(options))
        self._target: int | None = None  # version frozen by prepareForTriggerAvailableNow
        self._held = False  # a backlog split's second batch has been held without data
        self._idle: int | None = None  # latestOffset calls in a row that found nothing new
        # (0: the last one found data; None: none yet)
        others = [t for t in json.loads(options.get(AWAIT_TABLES, "[]")) if t != path]
        self._others = {root: Log(root) for root in others}  # the query's other streams' tables
        self._seen: dict[str, int] = {}  # their versions at the last latestOffset

    def initialOffset(self):
        return starting_position(self.path, self.options).offset(self.label)

    def getDefaultReadLimit(self):
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        return ReadMaxBytes(self.max_bytes) if self.max_bytes is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        self._target = self.log.latest()

    def latestOffset(self, start=None, limit=None):
        """The end of the next batch; `start` itself if there is nothing new. Any limit but
        ReadAllAvailable (Spark's, e.g. for Trigger.Once) applies both configured limits: Python
        sources cannot return Spark's composite limit. With option `awaitCommitMs` (a
        processing-time query of one stream: runtime/streaming.py), when there is nothing new
        it waits up to that long for the source's next commit and reads it as soon as it
        lands, instead of at the next trigger; up to option `awaitIdleMs` once IDLE_AFTER calls
        in a row found nothing (an idle query then costs a trigger per that time, not per
        interval; Spark starts the next trigger at once when one overruns its interval); not
        when `_may_wait` says not, nor once a file is at option `awaitStopFile` (the runner
        stops the query: Spark cannot interrupt this call). A query of several streams (a join)
        gives each one option `awaitTables`: then a source waits only if none of the other
        streams' tables has committed since its last call (else that stream has data for this
        trigger), and a commit to any of them ends the wait (Spark asks the sources in turn:
        the others, asked after it, read theirs)."""
        begin = Position.parse(start)
        hold = BACKLOG_VERSION in self.options and self.options.get(BACKLOG_HOLD) == "true"
        if hold and not self._held and begin == Position(int(self.options[BACKLOG_VERSION])):
            self._held = True  # a backlog split's second batch has no data
            return start
        latest = self._target if self._target is not None else self.log.latest()
        end = self._advance(begin, latest, limit)
        wait = self.options.get(AWAIT_COMMIT_MS) if self._target is None else None
        if wait is not None and (self._idle or 0) >= IDLE_AFTER:
            wait = self.options.get(AWAIT_IDLE_MS, wait)
        seen = self._seen
        if wait is not None and self._others:
            self._seen = {root: log.latest() for root, log in self._others.items()}
        if end == begin and wait is not None and self._seen == seen and self._may_wait():
            until, after = time.monotonic() + int(wait) / 1000, latest
            stop = self.options.get(AWAIT_STOP_FILE)
            while end == begin:
                if self.log.await_version(after, until, stop, self._seen) != self.log.root:
                    break  # none, or another stream's commit: its source is asked after this one
                latest = self.log.latest()
                after = max(after + 1, latest)  # not read yet, or nothing new: the next
                end = self._advance(begin, latest, limit)
        self._idle = 0 if end != begin else (self._idle or 0) + 1
        return start if end == begin else end.offset(self.label)

    def _may_wait(self) -> bool:
        """Not at the query's first trigger (it reports at once what there is); with option
        `awaitWatermark` (the query has an event-time watermark), not at the trigger after one
        that read data: Spark may have to run a batch without data there, to apply the
        watermark the last batch moved (emitting the windows it closed), and asks the sources
        first."""
        if self._idle is None:
            return False
        return not (self._idle == 0 and self.options.get(AWAIT_WATERMARK) == "true")

    def _advance(self, begin: Position, latest: int, limit) -> Position:
        """The end of a batch from `begin` with the source at version `latest`."""
        if BACKLOG_VERSION in self.options and begin.is_origin:  # runtime/backlog.py
            latest = min(latest, int(self.options[BACKLOG_VERSION]))  # reads that snapshot
        limited = limit is not None and not isinstance(limit, ReadAllAvailable)
        return offsets.advance(
            begin,
            latest,
            self.log.files,
            self.max_files if limited else None,
            self.max_bytes if limited else None,
        )

    def reportLatestOffset(self):
        return Position(self.log.latest()).offset(self.label)

    def partitions(self, start, end):
        begin = Position.parse(start)
        files = offsets.between(begin, Position.parse(end), self.log.files)
        if BACKLOG_VERSION in self.options:  # the first batch's rows are marked
            mark = {BACKLOG_COLUMN: "true" if begin.is_origin else "false"}
            files = [(f.path, {**f.partition_values, **mark}) for f in files]
            if begin.is_origin and BACKLOG_AFTER in self.options:
                column, after_us = json.loads(self.options[BACKLOG_AFTER])
                return _partitions(files, (column, int(after_us)))
        return _partitions(files)

    def read(self, partition):
        return _read(partition.files, self.schema, after=partition.after)

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

    def _named(self) -> tuple[list[str], str] | None:
        files, column = self.options.get("files"), self.options.get("fileColumn")
        return (json.loads(files), column) if files is not None and column else None

    def schema(self):
        columns = types.table_columns(self.path, self._version())
        watermarks, named = self._batch_watermarks(), self._named()
        if read_change_feed(self.options):
            columns = columns + [(OP, "string")]
        if watermarks is not None:  # last: _read appends it
            columns = columns + [(watermarks["column"], "timestamp")]
        if named is not None:
            columns = columns + [(named[1], "string")]
        if BACKLOG_VERSION in self.options:
            columns = columns + [(BACKLOG_COLUMN, "boolean")]
        return types.ddl(columns)

    def reader(self, schema):
        return DeltaBatchReader(
            self.path,
            schema,
            self._version(),
            self._batch_watermarks(),
            self._named(),
            read_change_feed(self.options),
        )

    def streamReader(self, schema):
        return DeltaStreamReader(
            self.path,
            self.fixed_label or self.options.get("table", self.path),
            schema,
            self.options,
        )


def bound_source(name: str, label: str, path: str) -> type[DeltaSource]:
    """A DeltaSource registered as format `name` that always reads `path` (for catalog tables)."""
    return type(
        f"DeltaSource_{name}",
        (DeltaSource,),
        {"fixed_path": path, "fixed_label": label, "name": classmethod(lambda cls: name)},
    )
