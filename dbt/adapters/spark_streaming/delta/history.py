"""Our metadata of a model table's commits, kept beside the table so that it outlives the
Delta log.

Each micro-batch's commit records what it read and its watermark (runtime/sink.py):
snapshot_equivalence rebuilds each batch's input from them, a model's next run reads the last.
A Delta log keeps a commit for `delta.logRetentionDuration` (30 days by default) once a
checkpoint follows it, and whoever cleans the log up knows nothing of what our commits carry. So
the adapter's commits to a model table are made without delta-rs's cleanup (KEEP_LOG), and every
`delta.checkpointInterval` versions `tidy` first copies the commits since the last copy into a
segment, ``<table>/_dbt_streaming/history/<first>-<last>.json`` (the newest segment, named by
the hint file ``newest``, is rewritten with them until it covers 100 versions), then removes the
expired log (unless `delta.enableExpiredLogCleanup` is false). A crash between the two leaves
the log; a crash before both leaves both for the next checkpoint.

A segment lists every version it covers, with our metadata or null, so a reader tells a whole
history from one with a gap (the log cleaned up by another writer, such as an OPTIMIZE with
delta-rs's defaults): `commit_history` raises HistoryGone on a gap. Versions are read from the
log's file names, not from delta-rs's `history()`, which numbers its entries down from the
version the DeltaTable was loaded at, also when a commit landed after that.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping

from deltalake import DeltaTable, PostCommitHookProperties

from ..layout import history_path
from . import storage

META_KEY = "dbt_spark_streaming"  # commitInfo key holding our JSON metadata
REBUILT = "rebuilt"  # a full refresh's swap commit: the rebuild's earlier commits (swap.py)
CHECKPOINT_INTERVAL = 100  # delta.checkpointInterval's default in delta-rs
# our tables' default: Delta's own (Spark's), so a load replays at most 10 commits (~3 ms), not 100
LOG_DEFAULTS = {"delta.checkpointInterval": "10"}
SEGMENT_VERSIONS = 100  # a segment is rewritten with the next versions until it has as many
NEWEST = "newest"  # the history folder's hint file: the newest segment's name
KEEP_LOG = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)

_COMMIT = re.compile(r"(\d{20})\.json")
_SEGMENT = re.compile(r"(\d{20})-(\d{20})\.json")


class HistoryGone(Exception):
    """Our metadata of the table's commits no longer reaches back to its first commit."""


def _commit_meta(path: str, version: int) -> str | None:
    """Our metadata (JSON text) in the log's commit `version`, or None; FileNotFoundError if
    the log no longer has it."""
    from .log import commit_info

    return commit_info(path, version).get(META_KEY)


def _listed(path: str) -> list[int]:
    """The versions whose commits the table's log has, ascending (a listing of the log: done
    once per table, before its first segment)."""
    log = storage.join(path, "_delta_log")
    return sorted(int(m[1]) for n in storage.list_files(log) if (m := _COMMIT.fullmatch(n)))


def _segments(path: str) -> list[tuple[int, int, str]]:
    """(first, last, name) of the table's segments, by first version."""
    found = [(_SEGMENT.fullmatch(n), n) for n in storage.list_files(history_path(path))]
    return sorted((int(m[1]), int(m[2]), n) for m, n in found if m)


def _segment_text(path: str, first: int, name: str) -> str | None:
    """The text of segment `name` (from version `first`), or, if _keep has rewritten it with
    later versions since it was listed, of the segment that replaced it (the same first
    version, a later last); None if neither is there (a gap)."""
    for _ in range(100):
        try:
            return storage.read_text(storage.join(history_path(path), name))
        except FileNotFoundError:
            later = [n for f, _, n in _segments(path) if f == first and n > name]
            if not later:
                return None
            name = later[-1]
    return None


def _read(path: str, versions) -> dict[int, str | None]:
    """Our metadata of the log's commits `versions` that it still has."""
    out = {}
    for version in versions:
        try:
            out[version] = _commit_meta(path, version)
        except FileNotFoundError:  # expired: a gap, unless a segment has it
            pass
    return out


def _after(path: str, done: int, upto: int) -> list[int]:
    """The versions after `done` up to `upto` to read from the log: by name after a segment,
    else those a listing finds (a log cleaned up before the first segment starts later)."""
    if done >= 0:
        return list(range(done + 1, upto + 1))
    return [v for v in _listed(path) if v <= upto]


def entries(path: str) -> dict[int, str | None]:
    """Every version known, from the segments and the log, with our metadata (JSON) or None."""
    from .log import latest_version

    out: dict[int, str | None] = {}
    segments = _segments(path)
    for first, _, name in segments:
        text = _segment_text(path, first, name)
        if text is not None:
            out.update((v, m) for v, m in json.loads(text)["commits"])
    done = max((last for _, last, _ in segments), default=-1)
    out.update(_read(path, _after(path, done, latest_version(path))))
    return out


def commit_history(path: str) -> list[dict]:
    """Our metadata of every commit that has it, oldest first, with its table version. From a
    full refresh's swap commit on (delta/swap.py), the rebuild's commits, each with the swap's
    version, stand for the commits before it. HistoryGone if a version from the first (or the
    last swap commit) on is known neither in the log nor in a segment (read twice: a segment
    written, and the log cleaned up, while it was read leaves no gap the second time)."""
    try:
        return _history(entries(path))
    except HistoryGone:
        return _history(entries(path))


def _history(known: dict[int, str | None]) -> list[dict]:
    out, start = [], 0
    for version in sorted(known):
        text = known[version]
        if text is None:
            continue
        meta = json.loads(text)
        if REBUILT in meta:
            out, start = [{**m, "table_version": version} for m in meta.pop(REBUILT)], version
        out.append({**meta, "table_version": version})
    latest = max(known, default=-1)
    if sum(1 for v in known if v >= start) != latest - start + 1:
        raise HistoryGone()
    return out


def last_metadata(path: str) -> dict | None:
    """Our metadata of the most recent commit that has it (None if the table has none)."""
    from deltalake import DeltaTable

    from .log import latest_version

    if not DeltaTable.is_deltatable(path):
        return None
    latest = latest_version(path)
    for version in range(latest, max(latest - 100, -1), -1):
        try:
            meta = _commit_meta(path, version)
        except FileNotFoundError:
            break  # the log was cleaned up before it
        if meta is not None:
            return _last(meta, version)
    # none in the log's last 100 commits (another writer's, or the log cleaned up): all known
    known = entries(path)
    for version in sorted(known, reverse=True):
        if (text := known[version]) is not None:
            return _last(text, version)
    return None


def _last(meta: str, version: int) -> dict:
    out = json.loads(meta)
    out.pop(REBUILT, None)
    return {**out, "table_version": version}


def tidy(
    path: str,
    version: int,
    configuration: Mapping[str, str | None],
    checkpoint: bool = False,
    keep: bool = True,
) -> None:
    """After the adapter's commit of `version` to the model table at `path` (with the table
    properties `configuration`): at every `delta.checkpointInterval`-th version, make a
    checkpoint there if `checkpoint` (delta-rs's commits make their own), copy our metadata of
    the commits since the last segment into a new one (unless not `keep`: another table than a
    model's), then remove the expired log. A failure is logged, not raised: the version is
    committed, a later checkpoint will do."""
    interval = str(configuration.get("delta.checkpointInterval") or CHECKPOINT_INTERVAL)
    if not interval.isdigit() or version % max(int(interval), 1) != 0:
        return
    try:
        table = DeltaTable(path, version=version)
        if checkpoint:
            table.create_checkpoint()
        if keep:
            _keep(path, version)
        if (configuration.get("delta.enableExpiredLogCleanup") or "true").lower() != "false":
            table.cleanup_metadata()
    except Exception as exc:  # noqa: BLE001 - the commit stands; the next checkpoint tries again
        logging.getLogger(__name__).warning(f"{path}: no checkpoint at version {version}: {exc}")


def _newest(path: str) -> tuple[int, int, str] | None:
    """(first, last, name) of the table's newest segment: named by the hint file (written after
    each segment, so the history folder is listed only for a table that has none yet)."""
    try:
        name = storage.read_text(storage.join(history_path(path), NEWEST)).strip()
    except FileNotFoundError:
        return max(_segments(path), key=lambda s: s[1], default=None)
    m = _SEGMENT.fullmatch(name)
    return (int(m[1]), int(m[2]), name) if m else None


def _keep(path: str, upto: int) -> None:
    """Write the segment of the versions after the newest segment's up to `upto`: those the
    log has (a gap is a gap: commit_history finds it). A newest segment of fewer than
    SEGMENT_VERSIONS versions is rewritten with them, then removed, so the segments stay few at
    a short `delta.checkpointInterval`. A crash between the writes leaves segments that
    overlap, with the same entries: harmless."""
    folder = history_path(path)
    newest = _newest(path)
    commits = sorted(_read(path, _after(path, newest[1] if newest else -1, upto)).items())
    if not commits:
        return
    grown = None  # the newest segment's name, if rewritten with them
    if newest is not None and newest[1] - newest[0] + 1 < SEGMENT_VERSIONS:
        grown = newest[2]
        try:
            text = storage.read_text(storage.join(folder, grown))
        except FileNotFoundError:  # a hint naming a segment gone: dropped, the folder listed
            storage.remove(storage.join(folder, NEWEST))
            return _keep(path, upto)
        commits = json.loads(text)["commits"] + commits
    name = f"{commits[0][0]:020d}-{upto:020d}.json"
    storage.write_text(storage.join(folder, name), json.dumps({"commits": commits}))
    storage.write_text(storage.join(folder, NEWEST), name)
    if grown is not None:
        storage.remove(storage.join(folder, grown))
