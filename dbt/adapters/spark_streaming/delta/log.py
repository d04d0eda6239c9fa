"""The data files of a Delta table's versions, in the order the streaming source reads them
(delta/offsets.py): the snapshot of a version by modification time, then path (as Delta's
source), the files a version adds in log order. Read from the Delta log with delta-rs
(snapshots) and the commit JSON (versions).

Imported by Spark's Python workers through delta/source.py: no dbt, no sqlglot at import.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import pyarrow as pa

from . import offsets, storage
from .offsets import File, Position


def commit_path(root: str, version: int) -> str:
    """The log file of version `version` of the table at `root`."""
    return storage.join(root, "_delta_log", f"{version:020d}.json")


def commit_actions(root: str, version: int) -> list[dict]:
    """The actions of the log's commit `version`, in order; FileNotFoundError if the log no
    longer has it."""
    text = storage.read_text(commit_path(root, version))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def commit_info(root: str, version: int) -> dict:
    """The commitInfo of the log's commit `version` ({} if none); FileNotFoundError if the log
    no longer has it. (Parsed up to it: it comes first, before the add actions and their
    statistics.)"""
    for line in storage.read_text(commit_path(root, version)).splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            return action["commitInfo"]
    return {}


def _abs(root: str, path: str) -> str:
    from urllib.parse import unquote

    if path.startswith("file://"):
        return unquote(path[len("file://") :])
    return path if path.startswith("/") or "://" in path else storage.join(root, unquote(path))


def add_action_table(table: Any, flatten: bool = True) -> pa.Table:
    """A DeltaTable's add actions as a pyarrow Table. Not through `pa.table()`: it first asks
    whether its argument is a pandas DataFrame, which imports pandas (~40 MB more in each
    process that reads a log, such as every streaming query's offsets process)."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=flatten)).read_all()


def _snapshot_actions(root: str, version: int | None) -> list[dict]:
    """The add actions of the snapshot at `version` (latest if None): path as in the log,
    size_bytes, modification_time (ms), partition.<column> values."""
    from deltalake import DeltaTable

    actions = add_action_table(DeltaTable(root, version=version))
    return actions.select(
        [
            c
            for c in actions.column_names
            if c in ("path", "size_bytes", "modification_time") or c.startswith("partition.")
        ]
    ).to_pylist()


def _file(root: str, action: dict, tag: dict | None = None) -> File:
    values = {k[len("partition.") :]: v for k, v in action.items() if k.startswith("partition.")}
    return File(
        _abs(root, action["path"]), {**values, **(tag or {})}, action.get("size_bytes") or 0
    )


def snapshot_files(root: str, version: int | None, by_path: bool = False) -> list[File]:
    """Data files of the snapshot at `version` (latest if None) in the order a stream reads a
    snapshot: by modification time, then path, as Delta's source (the files of appends are read
    in the order they were written); `by_path`: by path alone, the order of old offsets."""
    timed = [
        (a.get("modification_time") or 0, _file(root, a)) for a in _snapshot_actions(root, version)
    ]
    if by_path:
        return sorted((f for _, f in timed), key=lambda f: f.path)
    return [f for _, f in sorted(timed, key=lambda p: (p[0], p[1].path))]


def files_named(root: str, version: int | None, names: list[str], column: str) -> list[File]:
    """The files of the snapshot at `version` whose paths (as in the log) are in `names`, each
    tagged with that path under `column` (a copy-on-write MERGE's read: delta/upsert.py)."""
    wanted = set(names)
    return [
        _file(root, a, {column: a["path"]})
        for a in _snapshot_actions(root, version)
        if a["path"] in wanted
    ]


OP = "_op"  # the change column of a change feed read (+I/-U/+U/-D, as sql/retract.py reads)


def change_files(root: str, actions: list[dict]) -> list[File]:
    """The files holding a commit's changes (its `actions`), as Delta's change data feed: its
    cdc files (with `_change_type`) if it has any; else its added files as inserts and its
    removed files (dataChange) as deletes, each tagged with the change under OP."""
    cdc, changes = [], []
    for action in actions:
        if "cdc" in action:
            c = action["cdc"]
            cdc.append(File(_abs(root, c["path"]), c.get("partitionValues") or {}, c["size"]))
        for kind, op in (("add", "+I"), ("remove", "-D")):
            if kind in action and action[kind].get("dataChange", True):
                a = action[kind]
                values = {**(a.get("partitionValues") or {}), OP: op}
                changes.append(File(_abs(root, a["path"]), values, a.get("size") or 0))
    return cdc or changes


def version_files(
    root: str, version: int, skip_change_commits: bool = False, change_feed: bool = False
) -> list[File]:
    """Files added (dataChange) by commit `version`, in log order. A commit that removes data
    (dataChange: an overwrite, delete, update or MERGE) fails with SSD401, or with
    `skip_change_commits` is passed over whole, its added files too (as Delta's
    skipChangeCommits). A commit that changes no data (OPTIMIZE, compaction: dataChange false)
    adds nothing to read. With `change_feed`, the files of its changes (change_files). SSD404
    if the log no longer has the version."""
    out = []
    try:
        actions = commit_actions(root, version)
    except FileNotFoundError:
        raise expired_version(root, version) from None
    if change_feed:
        return change_files(root, actions)
    for action in actions:
        if "add" in action and action["add"].get("dataChange", True):
            add = action["add"]
            out.append(File(_abs(root, add["path"]), add.get("partitionValues") or {}, add["size"]))
        elif "remove" in action and action["remove"].get("dataChange", True):
            if skip_change_commits:
                return []
            raise change_commit(root, version)
    return out


def rearranged(root: str, after: int, upto: int) -> tuple[set[str], set[str]]:
    """The files (absolute paths) that commits (after, upto] added and removed without changing
    data (dataChange false: OPTIMIZE, compaction)."""
    added: set[str] = set()
    removed: set[str] = set()
    for version in range(after + 1, upto + 1):
        try:
            actions = commit_actions(root, version)
        except FileNotFoundError:
            raise expired_version(root, version) from None
        for action in actions:
            for kind, files in (("add", added), ("remove", removed)):
                if kind in action and not action[kind].get("dataChange", True):
                    files.add(_abs(root, action[kind]["path"]))
    return added, removed


def change_commit(root: str, version: int):
    """SSD401: version `version` of the source at `root` removes data."""
    from ..errors import StreamingError

    return StreamingError(
        "SSD401",
        f"source table {root} is not append-only",
        f"Delta version {version} removes data (an overwrite, delete, update or MERGE), which a "
        "stream of appends cannot retract",
        "Choose: only append to streaming sources (restore the table to version "
        f"{version - 1} if the change was a mistake); or set `skip_change_commits: true` on the "
        "model to pass over such versions (the rows they add or remove are not read); or "
        "rebuild the model from the source as it is now with `dbt run --full-refresh`.",
    )


def expired_version(root: str, version: int):
    """SSD404: version `version` of the source at `root` is no longer in its log."""
    from ..errors import StreamingError

    return StreamingError(
        "SSD404",
        f"version {version} of source table {root} is no longer in its Delta log",
        "a stream reads a source version by version, and a Delta table's log keeps the "
        "versions of its last `delta.logRetentionDuration` (30 days by default; older ones are "
        "removed as the table is checkpointed): the stream has still to read an older one (its "
        "last run, or its starting_version, is older than that)",
        "Rebuild the model from the source as it is now: `dbt run --full-refresh -s <model>`. "
        "For a model that runs less often than that, raise the source's "
        "delta.logRetentionDuration.",
    )


def added_files(
    root: str, start_exclusive: int, end_inclusive: int, skip_change_commits: bool = False
) -> list[File]:
    """Files added (dataChange) by commits (start, end]; fails (SSD401) if a commit removes
    data, unless `skip_change_commits`."""
    return [
        f
        for v in range(start_exclusive + 1, end_inclusive + 1)
        for f in version_files(root, v, skip_change_commits)
    ]


class Log:
    """The files of a table's versions in reading order (offsets.Files), cached: a batch's
    partitions read again the versions its latestOffset listed, and the oracle's batches the
    versions (or the snapshot) the previous batch read. Keeps one snapshot and the last
    KEEP versions."""

    KEEP = 4096

    def __init__(self, root: str, skip_change_commits: bool = False, change_feed: bool = False):
        self.root, self.skip_change_commits = root, skip_change_commits
        self.change_feed = change_feed  # read the changes of each version (change_files)
        self._snapshot: tuple[int, bool | str, list[File]] | None = None
        self._versions: dict[int, list[File]] = {}
        self._table: Any = None  # the DeltaTable, for `latest`

    def files(self, version: int, snapshot: bool | str) -> list[File]:
        if snapshot:
            if self._snapshot is None or self._snapshot[:2] != (version, snapshot):
                files = snapshot_files(self.root, version, snapshot == offsets.BY_PATH)
                if self.change_feed:  # a change feed starts with the snapshot's rows inserted
                    files = [
                        f._replace(partition_values={**f.partition_values, OP: "+I"}) for f in files
                    ]
                self._snapshot = (version, snapshot, files)
            return self._snapshot[2]
        if version not in self._versions:
            if len(self._versions) >= self.KEEP:
                del self._versions[next(iter(self._versions))]
            self._versions[version] = version_files(
                self.root, version, self.skip_change_commits, self.change_feed
            )
        return self._versions[version]

    def latest(self) -> int:
        """The table's latest version. The log is read again from the version last seen on
        (a continuous query asks at every trigger: ~2 ms instead of ~13 ms to load the table)."""
        if self._table is None:
            self._table = table(self.root)
        else:
            self._table.update_incremental()
        return self._table.version()

    def await_version(
        self, after: int, until: float, stop: str | None = None, others: dict | None = None
    ) -> str | None:
        """This table's root if it commits a version after `after` before `until`
        (time.monotonic()) and before a file at local path `stop` exists (the query is
        stopping); or, as soon, the root of one of `others` (root -> the version last seen
        there) that commits; None if none does: await_commit."""
        return await_commit({self.root: after, **(others or {})}, until, stop)


def await_commit(tables: dict[str, int], until: float, stop: str | None = None) -> str | None:
    """The first of `tables` (root -> the version last seen) found to commit a later version
    before `until` (time.monotonic()) and before a file at local path `stop` exists, or None:
    looks for each one's next log file every AWAIT_POLL seconds (a stat; on object storage a
    HEAD request, every AWAIT_POLL_REMOTE). A writer commits a version by creating that file
    whole (put-if-absent), so once it is there the version can be read."""
    names = {root: commit_path(root, v + 1) for root, v in tables.items()}
    poll = AWAIT_POLL_REMOTE if any(storage.is_remote(root) for root in tables) else AWAIT_POLL
    while True:
        landed = next((root for root, name in names.items() if storage.exists(name)), None)
        if landed is not None:
            return landed
        left = until - time.monotonic()
        if left <= 0 or stop is not None and os.path.exists(stop):
            return None
        time.sleep(min(poll, left))


AWAIT_POLL, AWAIT_POLL_REMOTE = 0.1, 0.5  # seconds between looks for a source's next version


def starting_position(root: str, options: dict) -> Position:
    """Where a new stream starts: the snapshot (offsets.ORIGIN), or option `startingVersion`
    (a version or 'latest') or `startingTimestamp` (ISO; the first version committed at or
    after it), as Delta's. SSC201 if the table has no such version yet."""
    version, timestamp = options.get("startingVersion"), options.get("startingTimestamp")
    if version is None and timestamp is None:
        return offsets.ORIGIN
    latest = latest_version(root)
    got: object
    if version == "latest":
        return offsets.starting(latest + 1)
    if version is not None:
        if int(version) <= latest:
            return offsets.starting(int(version))
        got, key, expected = int(version), "starting_version", f"0..{latest} or 'latest'"
    else:
        from datetime import datetime, timezone

        from deltalake import DeltaTable

        at = datetime.fromisoformat(str(timestamp))
        ms = (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp() * 1000

        after = [h["version"] for h in DeltaTable(root).history() if h["timestamp"] >= ms]
        if after:
            return offsets.starting(min(after))
        got, key, expected = timestamp, "starting_timestamp", "at or before the last commit"
    from ..errors import config_error

    raise config_error(
        key,
        got,
        f"{expected} of the Delta table {root} (latest version {latest})",
        "Pick a version the table has, or `starting_version: latest` to read only what is "
        "appended from now on.",
    )


_pinned = threading.local()  # read_once's tables of this thread: normalized path -> DeltaTable


@contextmanager
def read_once(*own: str) -> Iterator[None]:
    """Within it, on this thread, each Delta table read through `table()` (a source's latest
    version, id and columns) is loaded once, as of its first read, except the tables at or
    under `own` (those the caller writes): a run's compile, checks and plan read each source's
    log once, not up to nine times (~5-15 ms a load locally, LIST and GET requests on object
    storage). `release()` ends it early."""
    _pinned.tables = {}
    _pinned.own = tuple(storage.normalize(p).rstrip("/") + "/" for p in own)
    try:
        yield
    finally:
        release()


def release() -> None:
    """Tables are read afresh again on this thread (the end of `read_once`)."""
    _pinned.tables = None


def table(root: str, version: int | None = None):
    """The DeltaTable at `root` at `version` (None: its latest); within `read_once`, the latest
    is the one loaded first."""
    from deltalake import DeltaTable

    tables = getattr(_pinned, "tables", None)
    key = storage.normalize(root).rstrip("/") + "/"
    if tables is None or key.startswith(_pinned.own) or version is not None and key not in tables:
        return DeltaTable(root, version=version)
    if key not in tables:
        tables[key] = DeltaTable(root)
    pinned = tables[key]
    return pinned if version in (None, pinned.version()) else DeltaTable(root, version=version)


def latest_version(root: str) -> int:
    return table(root).version()


def table_id(root: str) -> str:
    """The Delta table's id (its metaData id): a table dropped and created again, or rebuilt
    aside and swapped in, has a new one, and versions that say nothing of the old table's."""
    return str(table(root).metadata().id)
