"""VACUUM of a table the adapter writes: the data files removed from it (by a compaction, an
upsert_table's copy-on-write, a full refresh's swap) are deleted from storage once removed for
longer than the retention, except those a downstream stream has still to read.

A stream that has read a table up to version v reads next the files versions after v add; a
file those versions add and a later one removes is in no current snapshot, but the stream
still reads it. So every file removed by a version after `keep_after` (the lowest position of
the table's readers) stays. Files a compaction replaced can go even though the
snapshot-equivalence oracle reads every file its stream ever read: it reads their rows where the
compaction put them (delta/origins.py). Files the table no longer references that were never
removed (a crashed attempt's), and the change data files, are left alone (delta-rs's VACUUM
without `full`).
"""

from __future__ import annotations

import json
import logging
from urllib.parse import unquote

from . import origins, storage


def removed_after(path: str, version: int) -> set[str] | None:
    """The files (paths as in the log, unquoted) that versions after `version` removed; None if
    the log no longer has one of them."""
    from .log import latest_version

    out: set[str] = set()
    for v in range(version + 1, latest_version(path) + 1):
        try:
            commit = storage.read_text(storage.join(path, "_delta_log", f"{v:020d}.json"))
        except FileNotFoundError:
            return None
        for line in commit.splitlines():
            if '"remove"' in line:
                out.add(unquote(json.loads(line)["remove"]["path"]))
    return out


def vacuum(
    path: str, retention_hours: int | None, keep_after: int | None, dry_run: bool = False
) -> list[str]:
    """Delete the files removed from the Delta table at `path` more than `retention_hours` ago
    (None: the table's `delta.deletedFileRetentionDuration`, 7 days by default) but those
    removed after version `keep_after` (None: no reader). Returns them (paths as in the log);
    `dry_run` deletes nothing."""
    from deltalake import DeltaTable

    origins.settle(path)  # a compaction's record made final before its inputs can go
    table = DeltaTable(path)
    expired = table.vacuum(
        retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False
    )
    keep = removed_after(path, keep_after) if keep_after is not None else set()
    if keep is None:
        logging.getLogger(__name__).warning(
            f"{path}: not vacuumed: a reader has still to read versions its log no longer has"
        )
        return []
    doomed = [f for f in expired if unquote(f) not in keep]
    if not dry_run:
        for f in doomed:
            storage.remove(storage.join(path, unquote(f)))
    return doomed
