"""Offsets of the Delta streaming source, and the arithmetic of admission control.

A position in a source says which of its data files the stream has read. The files of a
Delta version are read in a fixed order: the snapshot of a version by the files' modification
time, then path (as Delta's source: a table appended in event-time order is read in that
order), the files a version adds in the order of its log. Offsets written before that order
(``snapshot`` without ``"order": "time"``) count the snapshot sorted by path alone
(``snapshot`` is then BY_PATH), so an old checkpoint in the middle of a snapshot goes on with
the files it had not read. Like Delta's own DeltaSourceOffset
(reservoirVersion, index, isStartingVersion), an offset is:

- ``{"table": t, "version": v}``: every version up to v is read (the format from before
  admission control, so old checkpoints still parse; still written when a batch ends at the
  end of a version). ``version`` -1 is the start of a stream: its first batch reads the
  snapshot of the version that is latest then.
- ``{"table": t, "version": v, "index": i, "snapshot": s}``: files 0..i of version v are read
  (i = -1: none yet), of the snapshot at v when ``snapshot`` (and nothing before it; with
  ``"order": "time"``, see above), else of the files v added (and every version before v).
- ``"start": s`` on every offset of a stream that began at version s (config
  `starting_version` / `starting_timestamp`) instead of a snapshot: the oracle needs it.

Pure functions over a ``files(version, snapshot) -> [File]`` lookup, unit-tested without Delta.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Union


class File(NamedTuple):
    path: str  # absolute
    partition_values: dict
    size: int  # bytes


Files = Callable[[int, Union[bool, str]], list]  # (version, snapshot) -> [File], reading order
BY_PATH = "path"  # Position.snapshot of offsets from before the modification-time order


@dataclass(frozen=True)
class Position:
    version: int
    index: Optional[int] = None  # None: all of `version` read; else its files 0..index (-1: none)
    # index counts the snapshot at `version` (True, or BY_PATH), not the files it added
    snapshot: Union[bool, str] = False
    start: Optional[int] = None  # the version the stream began at (None: at a snapshot)

    @classmethod
    def parse(cls, offset: Union[dict, int, str, None]) -> "Position":
        """An offset (dict, its JSON, or a bare version as in commits before positions)."""
        if offset is None:
            return ORIGIN
        parsed = json.loads(offset) if isinstance(offset, str) else offset
        if isinstance(parsed, int):
            return cls(parsed)
        index, start = parsed.get("index"), parsed.get("start")
        snapshot: Union[bool, str] = bool(parsed.get("snapshot", False)) and index is not None
        if snapshot and parsed.get("order") != "time":
            snapshot = BY_PATH
        return cls(
            int(parsed["version"]),
            None if index is None else int(index),
            snapshot,
            None if start is None else int(start),
        )

    def offset(self, label: str) -> dict:
        out: dict = {"table": label, "version": self.version}
        if self.index is not None:
            out.update(index=self.index, snapshot=bool(self.snapshot))
            if self.snapshot is True:
                out["order"] = "time"
        if self.start is not None:
            out["start"] = self.start
        return out

    def record(self) -> dict:
        """The offset without its table label, as commit metadata records it."""
        out = self.offset("")
        del out["table"]
        return out

    @property
    def is_origin(self) -> bool:
        """Nothing read yet, and the first batch reads a snapshot."""
        return self.version < 0 and self.index is None

    @property
    def key(self) -> tuple[int, float]:
        """Sort key: later positions are greater."""
        return (self.version, float("inf") if self.index is None else self.index)


ORIGIN = Position(-1)


def starting(version: int) -> Position:
    """The first position of a stream that reads the changes from `version` on."""
    return Position(version, -1, False, version)


def _cursor(start: Position, snapshot_version: int) -> tuple[int, int, Union[bool, str]]:
    """Where reading after `start` continues: the version, the last index read, snapshot or not."""
    if start.is_origin:
        return snapshot_version, -1, True
    if start.index is None:
        return start.version + 1, -1, False
    return start.version, start.index, start.snapshot


def advance(
    start: Position,
    target: int,
    files: Files,
    max_files: Optional[int] = None,
    max_bytes: Optional[int] = None,
) -> Position:
    """The end of the next batch after `start`, reading at most up to version `target`: at most
    `max_files` files and `max_bytes` bytes (soft: a batch takes at least one file). Versions
    without data files are passed over. Returns `start` itself when there is nothing to read."""
    version, index, snapshot = _cursor(start, target)
    last, n, size = start, 0, 0
    while version <= target:
        entries = files(version, snapshot)
        for i in range(index + 1, len(entries)):
            if max_files is not None and n >= max_files:
                return last
            if max_bytes is not None and n > 0 and size + entries[i].size > max_bytes:
                return last
            n, size = n + 1, size + entries[i].size
            last = Position(version, i, snapshot, start.start)
        last = Position(version, None, False, start.start)
        version, index, snapshot = version + 1, -1, False
    return last


def between(start: Position, end: Position, files: Files) -> list:
    """The files a batch from `start` to `end` reads, in reading order."""
    if end.key <= start.key:
        return []
    version, index, snapshot = _cursor(start, end.version)
    if start.is_origin and end.snapshot:  # the first batch ends inside the snapshot: its order
        snapshot = end.snapshot  # (BY_PATH for an offset written before the time order)
    out: list = []
    while version <= end.version:
        entries = files(version, snapshot)
        stop = len(entries) if version < end.version or end.index is None else end.index + 1
        out += entries[index + 1 : stop]
        version, index, snapshot = version + 1, -1, False
    return out


def versions_read(start, end) -> Optional[tuple[int, int]]:
    """(first, last) Delta version a batch from offset `start` to `end` read from, or None."""
    s, e = Position.parse(start or None), Position.parse(end)
    if s.is_origin and e.start is not None:  # Spark reports no start for a stream's first batch
        s = starting(e.start)
    if e.key <= s.key:
        return None
    first = 0 if s.is_origin else s.version + 1 if s.index is None else s.version
    return (first, e.version)
