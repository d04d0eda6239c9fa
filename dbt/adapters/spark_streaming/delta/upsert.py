"""Exactly-once upserts of micro-batches into a keyed Delta table, with its changelog: a
copy-on-write MERGE, in the dbt process for a small batch, else as Spark jobs on the executors.

A micro-batch of an updating query holds the new version of every key it changed (Spark's
update mode), with a boolean ``keep`` column when the query has HAVING (False: the key no
longer qualifies). Each new row is matched with the table's current row of its key (NULL
keys match NULL keys), and the changes follow, in the retract encoding of Flink's retract streams:

    new key, kept ........................ +I new
    existing key, kept, values changed ... -U old, +U new
    existing key, kept, values equal ..... nothing
    existing key, not kept ............... -D old

Per batch, on the executors (delta/writer.py writes the files; only their names, sizes and
statistics come back): the batch's rows are matched with the rows of the table files whose
statistics admit the batch's keys (read by the delta_rs source, each row tagged with its
file); the changes are written to the changelog table (``<table>/_dbt_streaming/changelog``:
the result columns, ``_op``, ``_batch_id``, ``_commit_version``); and each file holding a row
that changes is rewritten without it, with the new rows in new files. The driver commits the
changelog's files, then the table's removes and adds as one Delta commit.

A batch of at most `driver_rows` rows (DRIVER_ROWS, config `driver_merge_max_rows`) whose
candidate files hold at most `driver_bytes` of Parquet is collected by one Spark job and
MERGEd in this process instead (delta/upsert_driver.py: the same changes and files, no further
Spark job). The four Spark jobs cost seconds per batch on a small machine; collecting a
100,000-row batch and its candidate files costs tens of MB of the driver's memory, which a
larger batch would not be bounded by.

Both commits carry the Delta app transaction ``(app_id, batch_id)``, changelog first: a
batch is done when the table has it; a crash between the two commits leaves the table as it
was, so the replayed batch derives the same changes, skips the changelog commit and commits
the table's. Files of a crashed attempt are named after their batch
(delta/sink.py batch_prefix) and deleted when the batch is committed again.
``_commit_version`` is the table version the batch's commit creates (the run lock makes this
process the table's only writer).

Replaying the changelog in ``(_commit_version, deletes first)`` order, applying ``+I``/``+U``
as upserts and ``-U``/``-D`` as deletes by key, reproduces the table.

A table with Delta's Change Data Feed on (delta/cdf.py) also gets the batch's changes as change
data files, written beside the rewritten files, and a batch that updates or deletes commits
them as cdc actions in its one table commit (delta/cdf.py writes that commit).
"""

from __future__ import annotations

import json
import time
from typing import Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import RemoveAction

from ..faults import fault_point
from ..layout import changelog_path
from . import cdf
from . import upsert_driver as driver
from .history import KEEP_LOG, LOG_DEFAULTS, META_KEY, tidy
from .pruning import candidate_actions, candidate_files
from .sink import (
    Applied,
    add_actions,
    append_files,
    batch_prefix,
    remove_orphans,
    rewrite_columns,
)
from .source import FORMAT
from .upsert_driver import KEEP, RESTARTED_FLAG, SEQ
from .writer import write_files

OP, BATCH, VERSION = "_op", "_batch_id", "_commit_version"
RESTARTED = "_restarted"  # state_ttl models: the change restarted a key whose state had expired
FILE = "__dss_file"  # the table file a current row was read from
OLD = "__dss_old_"  # prefix of the current row's columns, matched with the new row's
# Batches of at most DRIVER_ROWS rows whose candidate files hold at most DRIVER_BYTES (Parquet)
# are MERGEd in the dbt process (delta/upsert_driver.py), larger ones by Spark jobs.
DRIVER_ROWS = 100_000
DRIVER_BYTES = 64 << 20


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


class UpsertCommitter:
    """Applies update-mode micro-batches to the keyed table at `path` and its changelog."""

    def __init__(
        self,
        path: str,
        app_id: str,
        schema: pa.Schema,
        keys: Sequence[str],
        keep: str | None,
        restarts: bool = False,
        driver_rows: int = DRIVER_ROWS,
        driver_bytes: int = DRIVER_BYTES,
    ):
        self.path, self.app_id, self.schema = path, app_id, schema
        self.keys, self.keep, self.restarts = list(keys), keep, restarts
        self.driver_rows, self.driver_bytes = driver_rows, driver_bytes
        self.changelog = changelog_path(path)
        self.cdf = cdf.enabled(DeltaTable(path))  # write change data files (delta/cdf.py)
        # the change data files' name prefix per batch: the query's, as cdc files outlive it
        self.cdc_prefix = f"cdc-{app_id.rsplit('-', 1)[-1][:12]}-"
        self._swept = False  # orphans of a crashed attempt are looked for once per run
        self.written: dict[str, list[dict]] = {}  # per table, the files its last commit added
        self.paths: list[str] = []  # the path each batch of this run took ("driver", "executors")
        self.applied, self.logged = Applied(path, app_id), Applied(self.changelog, app_id)

    def committed(self, batch_id: int) -> bool:
        return batch_id <= self.applied.last()

    def _read(self, spark, version: int, files: list[str]):
        """The rows of `files` (paths as in the log) at `version`, with FILE."""
        return (
            spark.read.format(FORMAT)
            .option("versionAsOf", version)
            .option("files", json.dumps(files))
            .option("fileColumn", FILE)
            .load(self.path)
        )

    def _rows(self, batch_df):
        """The batch as the table's columns, with `__keep`, RESTARTED_FLAG (state_ttl) and
        `__seq` (the batch's order)."""
        from pyspark.sql import functions as F

        keep = F.coalesce(F.col(self.keep), F.lit(False)) if self.keep else F.lit(True)
        columns = [F.col(c) for c in self.schema.names] + [keep.alias(KEEP)]
        if self.restarts:
            flag = F.coalesce(F.col(RESTARTED_FLAG), F.lit(False))
            columns.append(flag.alias(RESTARTED_FLAG))
        return batch_df.select(*columns, F.monotonically_increasing_id().alias(SEQ))

    def _local_rows(self, batch: pa.Table) -> pa.Table:
        """`_rows` of a batch already in this process (Arrow), one row per key: the last."""
        out = driver.conform_rows(batch, self.schema)
        keep = (
            pc.fill_null(batch.column(self.keep), False)
            if self.keep
            else pa.array([True] * batch.num_rows, pa.bool_())
        )
        out = out.append_column(KEEP, keep)
        if self.restarts:
            flag = pc.fill_null(batch.column(RESTARTED_FLAG), False)
            out = out.append_column(RESTARTED_FLAG, flag)
        return driver.last_per_key(out, self.keys)

    def _new_rows(self, rows):
        """`_rows` with one row per key: the last (an append-only query's rows may repeat a
        unique_key; update-mode batches hold each key once)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        last = Window.partitionBy(*self.keys).orderBy(F.col(SEQ).desc())
        return (
            rows.withColumn("__last", F.row_number().over(last))
            .where("__last = 1")
            .drop("__last", SEQ)
        )

    def _matched(self, new, table: DeltaTable, candidates: list[str]):
        """`new` with the table's current row of each key (OLD columns, FILE; NULL if none)
        and the flags __ins, __upd, __del."""
        from pyspark.sql import functions as F

        current = self._read(new.sparkSession, table.version(), candidates).select(
            *[F.col(c).alias(OLD + c) for c in self.schema.names], FILE
        )
        on = [new[k].eqNullSafe(current[OLD + k]) for k in self.keys]
        joined = new.join(current, on, "left")
        found = F.col(FILE).isNotNull()
        changed = F.lit(False)
        for f in self.schema:
            if f.name not in self.keys:
                differs = (
                    F.lit(True)
                    if pa.types.is_map(f.type)  # maps are not comparable
                    else ~F.col(f.name).eqNullSafe(F.col(OLD + f.name))
                )
                changed = changed | differs
        if self.restarts:  # the changelog marks a restart, even of an unchanged row
            changed = changed | F.col(RESTARTED_FLAG)
        keep = F.col(KEEP)
        return joined.select(
            "*",
            (~found & keep).alias("__ins"),
            (found & changed & keep).alias("__upd"),
            (found & ~keep).alias("__del"),
        )

    def _changes(self, matched, batch_id: int, version: int):
        """The changelog rows of the batch: -U/-D the current rows, +I/+U the new ones."""
        from pyspark.sql import functions as F

        names = self.schema.names
        extra = [
            F.lit(batch_id).cast("bigint").alias(BATCH),
            F.lit(version).cast("bigint").alias(VERSION),
        ]
        if self.restarts:
            extra.append(F.col(RESTARTED_FLAG).alias(RESTARTED))

        def part(flag: str, op: str, old: bool):
            values = [F.col(OLD + c if old else c).alias(c) for c in names]
            return matched.where(flag).select(*values, F.lit(op).alias(OP), *extra)

        return (
            part("__upd", "-U", True)
            .unionByName(part("__del", "-D", True))
            .unionByName(part("__ins", "+I", False))
            .unionByName(part("__upd", "+U", False))
        )

    def _rewrite(self, matched, table: DeltaTable, touched: list[str]):
        """The table's new files' rows: the rows of `touched` files but those of the keys that
        change, and the new rows of inserted and updated keys."""
        from pyspark.sql import functions as F

        names = self.schema.names
        gone = matched.where("__upd OR __del").select(*[F.col(k).alias(OLD + k) for k in self.keys])
        kept = self._read(matched.sparkSession, table.version(), touched).select(*names)
        kept = kept.join(gone, [kept[k].eqNullSafe(gone[OLD + k]) for k in self.keys], "left_anti")
        return kept.unionByName(matched.where("__ins OR __upd").select(*names))

    def commit(self, batch, batch_id: int, metadata: dict) -> int:
        """Apply the rows of `batch` (a Spark DataFrame, or an Arrow table already in this
        process) as the commit of `batch_id`; returns the number of changelog rows. A state_ttl
        model's batch has a RESTARTED_FLAG column (True: the key's state had expired), which the
        changelog records. A batch of at most `driver_rows` rows whose candidate files hold at
        most `driver_bytes` is MERGEd here (delta/upsert_driver.py), a larger one by Spark jobs
        on the executors."""
        from pyspark import StorageLevel

        fault_point("before_write", batch_id)
        self.written = {}
        table = DeltaTable(self.path)
        rows = local = None
        if isinstance(batch, pa.Table):
            if batch.num_rows <= self.driver_rows:
                local = self._local_rows(batch)
            else:
                from pyspark.sql import SparkSession

                spark = SparkSession.active()
                rows = self._rows(spark.createDataFrame(batch))
        else:
            rows = self._rows(batch)
            if self.driver_rows > 0:
                rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
                head = rows.limit(self.driver_rows + 1).toArrow()  # one Spark job
                if head.num_rows <= self.driver_rows:
                    others = [KEEP, SEQ] + ([RESTARTED_FLAG] if self.restarts else [])
                    head = driver.conform_rows(head, self.schema, others)
                    local = driver.last_per_key(head, self.keys)
        try:
            bounds = candidates = None
            if local is not None:
                bounds = driver.bounds(local, self.keys)
                candidates = candidate_actions(table, bounds, self.keys) if local.num_rows else None
                size = pc.sum(candidates.column("size_bytes")).as_py() if candidates else 0
                if (size or 0) <= self.driver_bytes:
                    self.paths.append("driver")
                    files = [] if candidates is None else candidates.column("path").to_pylist()
                    return self._commit_local(local, table, files, batch_id, metadata)
                if rows is None:
                    from pyspark.sql import SparkSession

                    rows = self._rows(SparkSession.active().createDataFrame(batch))
            self.paths.append("executors")
            return self._commit_spark(rows, table, bounds, batch_id, metadata)
        finally:
            if rows is not None:
                rows.unpersist()

    def _commit_local(
        self, new: pa.Table, table: DeltaTable, files: list[str], batch_id: int, metadata: dict
    ) -> int:
        """The batch MERGEd in this process (delta/upsert_driver.py)."""
        version, prefix = table.version() + 1, batch_prefix(batch_id)
        merge = driver.Merge(
            new, files, driver.read_files(self.path, files, self.schema), self.schema, self.keys
        )
        count, touched = merge.count(), merge.touched()
        changes = None
        if count:
            n = new.num_rows
            extra = {
                BATCH: pa.array([batch_id] * n, pa.int64()),
                VERSION: pa.array([version] * n, pa.int64()),
            }
            if self.restarts:
                extra[RESTARTED] = new.column(RESTARTED_FLAG).combine_chunks()
            changes = merge.changes(extra)
        if changes is not None and self.logged.last() < batch_id:
            schema = changelog_schema(self.schema, self.restarts)
            self._commit_log(driver.write(changes, self.changelog, schema, prefix), batch_id)
        cdc = []
        if changes is not None and self.cdf and (merge.upd.any() or merge.dele.any()):
            rows = cdf.change_rows(changes, self.schema, OP)
            cdc = driver.write(
                rows, cdf.location(self.path), cdf.cdc_schema(self.schema), self._cdc(batch_id)
            )
        written = []
        if touched or count:
            written = driver.write(merge.rewritten(), self.path, self.schema, prefix)
        self._commit_table(table, written, touched, batch_id, metadata, cdc)
        return count

    def _commit_spark(
        self, rows, table: DeltaTable, bounds: pa.Table | None, batch_id: int, metadata: dict
    ) -> int:
        """The batch MERGEd by Spark jobs on the executors."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        version = table.version() + 1
        new = self._new_rows(rows).persist(StorageLevel.MEMORY_AND_DISK)
        matched = None
        try:
            if bounds is None:
                aggregates = [F.count(F.lit(1)).alias("rows")]
                for k in self.keys:
                    aggregates += [
                        F.min(k).alias(f"min_{k}"),
                        F.max(k).alias(f"max_{k}"),
                        F.count_if(F.col(k).isNull()).alias(f"nulls_{k}"),
                    ]
                bounds = new.agg(*aggregates).toArrow()
            touched: list[str] = []
            count, cdc = 0, []
            if bounds.column("rows")[0].as_py():
                candidates = candidate_files(table, bounds, self.keys)
                matched = self._matched(new, table, candidates)
                matched = matched.persist(StorageLevel.MEMORY_AND_DISK)
                per_file = (
                    matched.groupBy(FILE)
                    .agg(
                        F.count_if("__ins").alias("ins"),
                        F.count_if("__upd").alias("upd"),
                        F.count_if("__del").alias("del"),
                    )
                    .collect()
                )
                touched = [r[FILE] for r in per_file if r[FILE] is not None and r.upd + r["del"]]
                count = sum(r.ins + 2 * r.upd + r["del"] for r in per_file)
                changes = self._changes(matched, batch_id, version)
                if count and self.logged.last() < batch_id:
                    self._log(changes, batch_id)
                if self.cdf and sum(r.upd + r["del"] for r in per_file):
                    rows = changes.select(*self.schema.names, cdf.change_column(OP))
                    cdc = write_files(
                        rows,
                        cdf.location(self.path),
                        cdf.cdc_schema(self.schema),
                        self._cdc(batch_id),
                    )
            files = []
            if touched or count:
                prefix = batch_prefix(batch_id)
                files = write_files(
                    self._rewrite(matched, table, touched), self.path, self.schema, prefix
                )
            self._commit_table(table, files, touched, batch_id, metadata, cdc)
            return count
        finally:
            new.unpersist()
            if matched is not None:
                matched.unpersist()

    def _commit_table(
        self,
        table: DeltaTable,
        files: list[dict],
        touched: list[str],
        batch_id: int,
        meta: dict,
        cdc: Sequence[dict] = (),
    ) -> None:
        """Commit the removes of `touched`, the adds of `files` and the change data files `cdc`
        (if any: delta/cdf.py writes that commit) as the batch's table commit."""
        fault_point("during_write", batch_id)  # changelog committed, table files written
        self._sweep(self.path, batch_prefix(batch_id), files)
        if self.cdf and not self._swept:
            cdf.sweep(cdf.location(self.path), self._cdc(batch_id), cdc)
        app = (self.app_id, batch_id)
        version, config = table.version() + 1, table.metadata().configuration
        self.applied.committing()
        if cdc:
            actions = {"add": files, "remove": touched, "cdc": cdc}
            cdf.commit(self.path, version, actions, app, {META_KEY: json.dumps(meta)}, config)
        else:
            # the log's paths are URL-encoded; delta-rs encodes a remove's path itself
            now = int(time.time() * 1000)
            removes = [RemoveAction(unquote(p), True, now) for p in touched]
            table.create_write_transaction(  # every batch commits: the table records what was read
                [*add_actions(files), *removes],
                mode="append",
                schema=self.schema,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(*app)],
                    custom_metadata={META_KEY: json.dumps(meta)},
                ),
                post_commithook_properties=KEEP_LOG,
            )
            tidy(self.path, version, config)
        self.applied.committed(batch_id)
        self._swept = True
        self.written[self.path] = files
        fault_point("after_delta_commit", batch_id)

    def _cdc(self, batch_id: int) -> str:
        """The name prefix of the change data files of `batch_id`."""
        return f"{self.cdc_prefix}{batch_id:05d}-"

    def _log(self, changes, batch_id: int) -> None:
        """Write and commit the batch's changelog rows."""
        schema = changelog_schema(self.schema, self.restarts)
        self._commit_log(
            write_files(changes, self.changelog, schema, batch_prefix(batch_id)), batch_id
        )

    def _commit_log(self, files: list[dict], batch_id: int) -> None:
        """Commit the batch's changelog files."""
        self._sweep(self.changelog, batch_prefix(batch_id), files)
        self.logged.committing()
        append_files(
            self.changelog,
            files,
            changelog_schema(self.schema, self.restarts),
            CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)]),
        )
        self.logged.committed(batch_id)
        self.written[self.changelog] = files

    def _sweep(self, path: str, prefix: str, files: list[dict]) -> None:
        """Delete the files a crashed attempt at this batch left at `path`. Only the first
        batch of a run can be the replay of one that crashed mid-write (Spark re-runs it
        first)."""
        if not self._swept:
            remove_orphans(path, prefix, {f["path"] for f in files})


def rewrite_changelog(table_path: str, columns: list, added: pa.Schema) -> None:
    """Rewrite the changelog of the upsert_table at `table_path` with its table's new
    `columns` (sink.rewrite_columns), its own columns as they are; nothing if it has them
    already (a run that crashed between this and the table's rewrite)."""
    path = changelog_path(table_path)
    names = DeltaTable(path).to_pyarrow_dataset().schema.names
    own = [c for c in (OP, BATCH, VERSION, RESTARTED) if c in names]
    if [n for n in names if n not in own] != [new for new, _ in columns]:
        rewrite_columns(path, columns + [[c, c] for c in own], added, {})


def create_changelog(table_path: str, schema: pa.Schema, restarts: bool = False) -> None:
    DeltaTable.create(
        changelog_path(table_path),
        schema=changelog_schema(schema, restarts),
        mode="error",
        configuration=LOG_DEFAULTS,
    )
