"""Spark's checkpoint of a model's query: completed before the query starts when a crash left a
stateful query's watermark ahead of what its state emitted (`plan_no_data_batch`), and read to
tell whether the query would run any batch at all (`caught_up`: a run with nothing to read does
not start it).

After a data micro-batch N, Spark writes ``commits/N`` with the watermark the next batch uses
(``nextBatchWatermarkMs``). A stateful query whose watermark advanced then runs a batch N+1 without
new data that emits the windows this watermark closes (MicroBatchExecution.constructNextBatch
asks the last batch's plan, ``shouldRunAnotherBatch``). A process killed between ``commits/N``
and ``offsets/N+1`` leaves that batch unplanned, and a restarted query has no last plan to ask:
without new source data it runs nothing, and the closed windows stay missing until data arrives.

`plan_no_data_batch` plans that batch as Spark would have: ``offsets/N+1`` with the source offsets
of N and N's metadata, its ``batchWatermarkMs`` the watermark of ``commits/N`` and its
``batchTimestampMs`` now. On start Spark finds batch N+1 planned and not committed and runs it
(MicroBatchExecution.populateStartOffsets), with start offsets equal to end offsets (no source
rows) and the restored watermark; the sink commits it like any batch (exactly once).

The offset log (OffsetSeqLog): line 1 the version (``v1``, ``v2``), line 2 the metadata JSON
(OffsetSeqMetadata), then one line per source offset; no trailing newline. The commit log
(CommitLog): line 1 the version, line 2 ``{"nextBatchWatermarkMs": ...}``. Spark reads only files
named by a batch id, so a temporary file beside them is ignored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Optional


def plan_no_data_batch(checkpoint: str, now_ms: Optional[int] = None) -> Optional[int]:
    """Write ``offsets/N+1`` for the no-data batch a stateful query's committed batch N left
    unplanned (see the module doc); returns N+1, or None when there is nothing to plan: no
    checkpoint, N not committed (Spark runs it again itself), a query without state (Spark runs
    no such batch for it), or a watermark that did not advance in N."""
    latest = _latest_batch(os.path.join(checkpoint, "offsets"))
    if latest is None or not _has_state(checkpoint):
        return None
    commit = os.path.join(checkpoint, "commits", str(latest))
    if not os.path.isfile(commit):
        return None
    with open(commit, encoding="utf-8") as fh:
        commit_lines = fh.read().split("\n")
    next_ms = json.loads(commit_lines[1]).get("nextBatchWatermarkMs", 0)
    with open(os.path.join(checkpoint, "offsets", str(latest)), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    metadata = json.loads(lines[1])
    if next_ms <= metadata.get("batchWatermarkMs", 0):
        return None
    metadata["batchWatermarkMs"] = next_ms
    metadata["batchTimestampMs"] = int(time.time() * 1000) if now_ms is None else now_ms
    lines[1] = json.dumps(metadata, separators=(",", ":"))
    _write_atomically(os.path.join(checkpoint, "offsets"), latest + 1, "\n".join(lines))
    return latest + 1


def committed_offsets(checkpoint: str) -> Optional[list]:
    """The source offsets (one per line of the offset log) of the checkpoint's last batch, when
    a query started now would run no batch unless a source has new data: that batch is
    committed, and owes no batch without data for a watermark it advanced (what
    `plan_no_data_batch` plans). None otherwise, or without a checkpoint."""
    latest = _latest_batch(os.path.join(checkpoint, "offsets"))
    commit = os.path.join(checkpoint, "commits", str(latest))
    if latest is None or not os.path.isfile(commit):
        return None
    with open(commit, encoding="utf-8") as fh:
        next_ms = json.loads(fh.read().split("\n")[1]).get("nextBatchWatermarkMs", 0)
    with open(os.path.join(checkpoint, "offsets", str(latest)), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    if _has_state(checkpoint) and next_ms > json.loads(lines[1]).get("batchWatermarkMs", 0):
        return None
    return [json.loads(line) for line in lines[2:] if line.strip()]


def caught_up(
    checkpoint: str,
    streams: Mapping[str, str],
    skip_change_commits: bool = False,
    change_feed: bool = False,
) -> bool:
    """Whether the query of `checkpoint`, started now, would run no batch: its last batch is
    committed and owes none (`committed_offsets`), and no source (`streams`: label -> Delta
    table) has a file after the offset that batch ended at, the test the source's latestOffset
    makes (delta/offsets.py advance), reading the log as the source does (a version removing
    data fails with SSD401 unless `skip_change_commits`)."""
    from ..delta.log import Log
    from ..delta.offsets import Position, advance

    ended = committed_offsets(checkpoint)
    if ended is None:
        return False
    by_label = {o.get("table"): o for o in ended if isinstance(o, dict)}
    if set(by_label) != set(streams):
        return False
    for label, path in streams.items():
        log = Log(path, skip_change_commits, change_feed)
        end = Position.parse(by_label[label])
        if advance(end, log.latest(), log.files) != end:
            return False
    return True


def _latest_batch(log: str) -> Optional[int]:
    """The highest batch id with a file in the metadata log directory `log` (HDFSMetadataLog:
    files named by their batch id; others, such as Hadoop's ``.<id>.crc``, are not batches)."""
    try:
        names = os.listdir(log)
    except FileNotFoundError:
        return None
    ids = [int(n) for n in names if n.isdigit()]
    return max(ids) if ids else None


def _has_state(checkpoint: str) -> bool:
    """Whether the query has stateful operators: their state stores live under
    ``state/<operator id>/``; a stateless query has none."""
    try:
        return any(n.isdigit() for n in os.listdir(os.path.join(checkpoint, "state")))
    except FileNotFoundError:
        return False


def _write_atomically(log: str, batch_id: int, text: str) -> None:
    """Write the log file of `batch_id` whole or not at all. A Hadoop checksum left by an
    earlier file of that name would fail the read: removed."""
    stale_crc = os.path.join(log, f".{batch_id}.crc")
    if os.path.exists(stale_crc):
        os.remove(stale_crc)
    write_file_atomically(log, str(batch_id), text)


def write_file_atomically(directory: str, name: str, text: str) -> None:
    """Write `directory`/`name` whole or not at all: a temporary file renamed into place."""
    tmp = os.path.join(directory, f".{name}.dbt-streaming.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(directory, name))
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def has_batches(checkpoint: str) -> bool:
    """Whether the query of `checkpoint` has planned any micro-batch."""
    return _latest_batch(os.path.join(checkpoint, "offsets")) is not None


def planned(checkpoint: str, batch_id: int) -> bool:
    """Whether Spark has written the offsets of micro-batch `batch_id` of `checkpoint`."""
    return os.path.isfile(os.path.join(checkpoint, "offsets", str(batch_id)))


def committed(checkpoint: str, batch_id: int) -> bool:
    """Whether Spark has committed micro-batch `batch_id` of the query of `checkpoint`."""
    return os.path.isfile(os.path.join(checkpoint, "commits", str(batch_id)))


def query_app_id(checkpoint: str) -> str:
    """The Delta app id of the commits of the query whose checkpoint is at `checkpoint`: its
    query id, which survives restarts."""
    with open(os.path.join(checkpoint, "metadata")) as fh:
        return f"dbt-spark-streaming-{json.load(fh)['id']}"
