"""VACUUM of a table the adapter writes: the data files removed from it (by a compaction, an
upsert_table's copy-on-write, a full refresh's swap) are deleted from storage once removed for
longer than the retention, except those a downstream stream has still to read.

A stream that has read a table up to version v reads next the files versions after v add, and
the change data files of those versions (a `read_change_feed` model); a file those versions add
and a later one removes is in no current snapshot, but the stream still reads it. So every file
that a version after `keep_after` (the lowest position of the table's readers) removes, or whose
changes it holds, stays. Files a compaction replaced can go even though the snapshot-equivalence
oracle reads every file its stream ever read: it reads their rows where the compaction put them
(delta/origins.py). The removed and change data files a `read_change_feed` reader has read do
go: its snapshot_equivalence then fails with SST510 (delta/source.py files_by_batch).

Two listings of delta-rs's VACUUM, not run by it: the files removed longer than the retention
ago (the tombstones the log still has), and every file at the table's root or under
`_change_data` that the table does not reference and that is older than the retention, and
than ORPHAN_HOURS (a file a writer is writing is referenced by no commit yet): the removed
files whose tombstones a checkpoint dropped once they expired, a crashed attempt's files, the
change data files of old versions. Nothing under `_dbt_streaming` is touched.
"""

from __future__ import annotations

import math
import re
from urllib.parse import unquote

from . import origins, storage

ORPHAN_HOURS = 1  # a file no commit references is deleted only once this old
RETENTION = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION_HOURS = 7 * 24  # Delta's default
_INTERVAL = re.compile(r"interval (\d+) (second|minute|hour|day|week)s?")
_HOURS = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1, "day": 24, "week": 168}


def retention_hours(configuration) -> float:
    """The table's `delta.deletedFileRetentionDuration`, in hours (Delta's 7 days if unset or
    unreadable)."""
    m = _INTERVAL.fullmatch(str(configuration.get(RETENTION) or "").strip().lower())
    return int(m[1]) * _HOURS[m[2]] if m else DEFAULT_RETENTION_HOURS


def still_read(path: str, version: int) -> set[str]:
    """The files (paths as in the log, unquoted) that versions after `version` remove or whose
    changes they hold (cdc): those the log still has (a reader older than the log cannot resume:
    SSD404)."""
    from .log import commit_actions, latest_version

    out: set[str] = set()
    for v in range(version + 1, latest_version(path) + 1):
        try:
            actions = commit_actions(path, v)
        except FileNotFoundError:
            continue
        for action in actions:
            for kind in ("remove", "cdc"):
                if kind in action:
                    out.add(unquote(action[kind]["path"]))
    return out


def vacuum(
    path: str, hours: float | None, keep_after: int | None, dry_run: bool = False
) -> list[str]:
    """Delete the files removed from the Delta table at `path` more than `hours` ago (None:
    the table's retention; rounded up to whole hours) and the files it does not reference
    older than that (and than ORPHAN_HOURS), but those a reader at version `keep_after` (None:
    no reader) still reads.
    Returns them (paths as in the log); `dry_run` deletes nothing."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    # after the load: a compaction committed since is not in this snapshot, so its inputs are
    # not deleted; one committed before has its record made final first
    origins.settle(path)
    if hours is None:
        hours = retention_hours(table.metadata().configuration)
    listed = set()
    for full, age in ((False, hours), (True, max(hours, ORPHAN_HOURS))):
        listed |= set(  # delta-rs counts whole hours: rounded up
            table.vacuum(math.ceil(age), dry_run=True, enforce_retention_duration=False, full=full)
        )
    keep = still_read(path, keep_after) if keep_after is not None else set()
    doomed = sorted(f for f in listed if unquote(f) not in keep)
    if not dry_run:
        for f in doomed:
            storage.remove(storage.join(path, unquote(f)))
    return doomed
