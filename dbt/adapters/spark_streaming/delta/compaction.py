"""Auto-compaction of the tables a model writes every micro-batch (its table, an upsert_table's
table and changelog): once `min_files` of their files are smaller than `target_size`, runs of
neighbouring small files are concatenated into files of about that size, in one commit whose
removes and adds are `dataChange: false`. Delta's streaming readers, and ours (delta/log.py),
skip such a commit: a downstream model reads no row twice; the change data feed has no change in
it; the rows a version holds are the same.

It keeps the order in which a stream reads the table. A new stream reads a snapshot's files by
modification time, then path (Delta's source and ours: log.snapshot_files), and the rows of a
file in order; that order is the order of arrival, which decides what a watermark drops as late
and which of an append-only key's rows is last. So a compaction (unlike delta-rs's OPTIMIZE,
which reorders rows and stamps its files with its own time) bins only files that are neighbours
in that order, writes their rows in it, and gives each output the modification time of its
first input and a name that sorts where that input did (`<first input>.c<version>-<id>...`):
the snapshot reads the same rows in the same order after it as before.

The files are written by Spark tasks, one per output (delta/writer.py `concatenate_files`), and
committed here as one put-if-absent log entry (delta/cdf.py `put_if_absent`). It runs in the
model's own query, after a micro-batch's commits and before the next batch, so it never races
the model's commits. A crash in it leaves the table as it was (the outputs unreferenced, for
VACUUM).

The small files are counted from the table's add actions once per run, then followed by the
files each commit adds (an upsert_table's copy-on-write also removes some: the count is checked
against the table before compacting). A compaction's own outputs below the target stay small:
the next one waits for `min_files` more, and at the table's end joins an earlier output only
with as many bytes (`bins(tiered)`), so that each row is rewritten a few times, not with every
compaction.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import unquote

from ..faults import fault_point
from . import origins
from .history import tidy
from .log import add_action_table, commit_path
from .types import arrow_schema, delta_to_spark_type
from .writer import concatenate_files

MIN_FILES = 50  # Databricks' auto compaction's default (minNumFiles)
TARGET_SIZE = 128 * 1024 * 1024  # bytes: delta.targetFileSize's default in Databricks' OPTIMIZE
_SUFFIX = re.compile(r"(\.c\d{20}-[0-9a-f]{8})?(\.snappy)?\.parquet$")


def output_stem(first: str, version: int) -> str:
    """The start of the name of a compaction's output whose first input is `first` (a path as
    in the log), committed as `version`; the task that writes it adds
    ``-<8 hex digits>.snappy.parquet`` (its own, so that two attempts never share a file).
    The name sorts where `first` did among the table's files, also when `first` is itself an
    output."""
    return f"{_SUFFIX.sub('', first)}.c{version:020d}"


def bins(actions: list[dict], target: int, tiered: bool = True) -> list[list[dict]]:
    """Runs of at least two neighbouring files in reading order (modification time, then path),
    each file smaller than `target` and each run's total at most `target`; `tiered`: no file in
    the last run (the table's end, which new files join) larger than the rest of it together
    (see `_tiered`; an earlier run no longer grows: it is joined whole, once). `actions`: add
    actions (path, size_bytes, modification_time)."""
    ordered = sorted(actions, key=lambda a: (a["modification_time"] or 0, a["path"]))
    out: list[list[dict]] = []
    run: list[dict] = []
    size = 0
    for a in ordered:
        small = a["size_bytes"] < target
        if small and run and size + a["size_bytes"] <= target:
            run.append(a)
            size += a["size_bytes"]
            continue
        out.append(run)
        run, size = ([a], a["size_bytes"]) if small else ([], 0)
    out += _tiered(run, target // 128) if tiered else [run]
    return [r for r in out if len(r) > 1]


def _tiered(run: list[dict], floor: int) -> list[list[dict]]:
    """`run` without each file larger than the rest of its run together, split there: so each
    file a compaction rewrites at the table's end goes into an output at least twice its size,
    and a byte is rewritten there at most log2(target / the smallest file) times, then once more
    when its run is closed. (Without it, the output at the table's end, joined by each
    compaction's new small files, is rewritten whole every time: the bytes written grow with
    the square of the table's.) A run of files all below `floor` is joined whole: rewriting
    them costs little."""
    if len(run) < 2:
        return [run]
    i = max(range(len(run)), key=lambda k: run[k]["size_bytes"])
    big = run[i]["size_bytes"]
    if big < floor or 2 * big <= sum(a["size_bytes"] for a in run):
        return [run]
    return _tiered(run[:i], floor) + _tiered(run[i + 1 :], floor)


@dataclass
class Compaction:
    """Auto-compaction of the Delta table at `path` (`model`: a model's own table, whose log the
    adapter cleans up itself: delta/history.py)."""

    path: str
    min_files: int = MIN_FILES
    target_size: int = TARGET_SIZE
    model: bool = False
    tiered: bool = True  # bins(tiered): an explicit optimize compacts every run
    small: int | None = field(default=None)  # its files smaller than target_size (estimate)
    left: int = 0  # small files the last compaction left (its own outputs below the target)

    def added(self, spark, files: list[dict]) -> dict | None:
        """After a commit that added `files` (each with `size`): compact once `min_files` small
        files came since the last compaction. Returns what it did ({files_removed,
        files_added, version}), or None."""
        if self.small is not None:
            self.small += sum(1 for f in files if f["size"] < self.target_size)
            if self.small - self.left < self.min_files:
                return None
        table, actions = self._load()
        self.small = sum(1 for a in actions if a["size_bytes"] < self.target_size)
        if self.small - self.left < self.min_files:
            return None
        return self.compact(spark, table, actions)

    def compact(self, spark, table=None, actions=None) -> dict | None:
        """Concatenate the table's runs of neighbouring small files, in one dataChange=false
        commit (then, on a model's table, its log kept and cleaned up as after its own
        commits). None if there is nothing to compact."""
        from .cdf import put_if_absent

        if table is None:
            table, actions = self._load()
        small = sum(1 for a in actions if a["size_bytes"] < self.target_size)
        version = table.version() + 1
        runs = [
            (r, output_stem(r[0]["path"], version))
            for r in bins(actions, self.target_size, self.tiered)
        ]
        columns = [(f.name, delta_to_spark_type(f.type)) for f in table.schema().fields]
        named = [(stem, [unquote(a["path"]) for a in run]) for run, stem in runs]
        written = (  # stem -> the output's metadata (its `path`: its name)
            {
                f["stem"]: f
                for f in concatenate_files(spark, self.path, arrow_schema(columns), named)
            }
            if runs
            else {}
        )
        done = [(run, written[stem]) for run, stem in runs if stem in written]  # not empty
        if not done:
            self.small = self.left = small
            return None
        token = uuid.uuid4().hex
        moved = {
            out["path"]: [
                [unquote(a["path"]), n] for a, n in zip(run, json.loads(out["counts"]), strict=True)
            ]
            for run, out in done
        }
        origins.settle(self.path)
        origins.record(self.path, version, token, moved)
        fault_point("compaction_written", -1)
        put_if_absent(
            commit_path(self.path, version),
            _commit(version, token, self.target_size, done),
        )
        fault_point("compaction_committed", -1)
        origins.committed(self.path, version, token, moved)
        removed = sum(len(run) for run, _ in done)
        outputs_small = sum(1 for _, out in done if out["size"] < self.target_size)
        self.small = self.left = small - removed + outputs_small
        # a model table's log is kept and cleaned up by tidy; another's by the same hook
        tidy(self.path, version, table.metadata().configuration, checkpoint=True, keep=self.model)
        logging.getLogger(__name__).info(
            f"{self.path}: compacted {removed} files into {len(done)} (version {version})"
        )
        return {"files_removed": removed, "files_added": len(done), "version": version}

    def _load(self):
        """The table and its add actions (path, size_bytes, modification_time); none of a
        partitioned table's (the adapter's streaming tables have no partitions)."""
        from deltalake import DeltaTable

        table = DeltaTable(self.path)
        if table.metadata().partition_columns:
            return table, []
        actions = add_action_table(table).select(["path", "size_bytes", "modification_time"])
        return table, actions.to_pylist()


def _commit(version: int, token: str, target: int, outputs: list[tuple[list[dict], dict]]) -> str:
    """The log entry of compaction `version`: per (run, output written), the output's add
    (its first input's modification time) and the run's removes, all dataChange=false."""
    from .cdf import ENGINE

    now = int(time.time() * 1000)
    info = {
        "timestamp": now,
        "operation": "OPTIMIZE",
        "operationParameters": {"targetSize": str(target)},
        "readVersion": version - 1,
        "isBlindAppend": False,
        "engineInfo": ENGINE,
        "clientVersion": ENGINE,
        origins.TOKEN: token,
    }
    lines: list[dict] = [{"commitInfo": info}]
    for run, f in outputs:
        add = {"path": f["path"], "partitionValues": {}, "size": f["size"]}
        add.update({"modificationTime": run[0]["modification_time"], "dataChange": False})
        lines.append({"add": {**add, "stats": f["stats"]}})
        for a in run:
            remove = {"path": a["path"], "dataChange": False, "deletionTimestamp": now}
            remove.update({"extendedFileMetadata": True, "partitionValues": {}})
            lines.append({"remove": {**remove, "size": a["size_bytes"]}})
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
