"""Where the rows of the files a compaction replaced are now, so that those files can be
vacuumed and still be read as they were.

A compaction (delta/compaction.py) writes the rows of a run of files, in order, into one file:
the rows of its i-th input are the output's rows [offset_i, offset_i + rows_i). Before it
commits, it records that in ``<table>/_dbt_streaming/compacted/pending/<version>.<token>.json``
({"token": ..., "outputs": {output: [[input, rows], ...]}}); once its commit (whose commitInfo
carries the token) is in the log, it writes the record as ``compacted/<version>.json`` and
deletes the pending one. A record left pending by a crash is settled by the next compaction or
vacuum (`settle`, which lists the pending folder only: the final records grow with the table's
age): made final if the log's commit of that version carries its token, deleted if another
commit took the version (another attempt at the version has another token, so another pending
record).

The snapshot-equivalence oracle reads every file a stream ever read (delta/source.py
`files_by_batch`): `moved` tells it where each compacted file's rows are, following outputs
compacted again, and it reads them there (source.py `_read`), whether or not the file is
still on storage. Paths are as in the log (relative to the table, unquoted).

Imported by Spark's Python workers through delta/source.py: storage and the log's files only,
no deltalake.
"""

from __future__ import annotations

import json
import re

from ..layout import compacted_path
from . import storage
from .log import commit_info

TOKEN = "compactionToken"  # the commitInfo key of a compaction's token
_FINAL = re.compile(r"(\d{20})\.json")
_PENDING = re.compile(r"(\d{20})\.([0-9a-f]+)\.json")
# a pending record as once written beside the final ones: `moved` reads it if the log has it
_BESIDE = re.compile(r"(\d{20})\.([0-9a-f]+)\.pending\.json")
BESIDE_SETTLED = "beside-settled"  # the pending folder's marker: those records are settled


def _pending(table: str, version: int, token: str) -> str:
    return storage.join(compacted_path(table), "pending", f"{version:020d}.{token}.json")


def _final(table: str, version: int) -> str:
    return storage.join(compacted_path(table), f"{version:020d}.json")


def record(table: str, version: int, token: str, outputs: dict[str, list]) -> None:
    """Record, before its commit, that compaction `version` (with `token`) writes each input's
    rows into `outputs` ({output: [[input, rows], ...]}, inputs in order)."""
    text = json.dumps({"token": token, "outputs": outputs})
    storage.write_text(_pending(table, version, token), text)


def committed(table: str, version: int, token: str, outputs: dict[str, list]) -> None:
    """Compaction `version` (with `token`) is in the log: its record is final (also when a
    `settle` made it so meanwhile)."""
    _write_final(table, version, token, outputs)
    storage.remove(_pending(table, version, token))


def _write_final(table: str, version: int, token: str, outputs: dict[str, list]) -> None:
    storage.write_text(_final(table, version), json.dumps({"token": token, "outputs": outputs}))


def settle(table: str) -> None:
    """Make final each pending record whose commit is in the log, delete those whose version
    another commit took; leave those whose version is not committed yet (a compaction under
    way, or one that crashed before its commit: a later attempt at the version has another
    token). The records of the layout before the pending folder are settled once, then a
    marker there says so."""
    folder = compacted_path(table)
    pending = storage.join(folder, "pending")
    for name in storage.list_files(pending):
        if m := _PENDING.fullmatch(name):
            _settle(table, int(m[1]), m[2], storage.join(pending, name))
    marker = storage.join(pending, BESIDE_SETTLED)
    if not storage.exists(marker):
        for name in storage.list_files(folder):
            if m := _BESIDE.fullmatch(name):
                _settle(table, int(m[1]), m[2], storage.join(folder, name))
        storage.write_text(marker, "")


def _settle(table: str, version: int, token: str, record_path: str) -> None:
    try:
        outputs = json.loads(storage.read_text(record_path))["outputs"]
        info = commit_info(table, version)
    except FileNotFoundError:
        return
    if info.get(TOKEN) == token:
        _write_final(table, version, token, outputs)
    storage.remove(record_path)


def moved(table: str) -> dict[str, tuple[str, int, int]]:
    """{file: (the file its rows are in now, first row, rows)} for every file a compaction of
    the table replaced (final records, not pending ones), following outputs compacted again."""
    folder = compacted_path(table)
    records: dict[int, str] = {}
    for name in storage.list_files(folder):
        if m := _FINAL.fullmatch(name):
            records[int(m[1])] = name
        elif (m := _BESIDE.fullmatch(name)) and _in_log(table, m):
            records.setdefault(int(m[1]), name)
    where: dict[str, tuple[str, int, int]] = {}
    holds: dict[str, list[str]] = {}  # output -> the files whose rows it holds
    for version, name in sorted(records.items()):
        for output, inputs in _outputs(table, version, name).items():
            offset, held = 0, holds.setdefault(output, [])
            for path, rows in inputs:
                for earlier in holds.pop(path, []):  # an output compacted again
                    _, start, n = where[earlier]
                    where[earlier] = (output, offset + start, n)
                    held.append(earlier)
                where[path] = (output, offset, rows)
                held.append(path)
                offset += rows
    return where


def _outputs(table: str, version: int, name: str) -> dict[str, list]:
    """The outputs of record `name` of compaction `version`: a pending record of the old
    layout that a `settle` made final since the folder was listed is read where it is now."""
    try:
        text = storage.read_text(storage.join(compacted_path(table), name))
    except FileNotFoundError:
        if not _BESIDE.fullmatch(name):
            raise
        text = storage.read_text(_final(table, version))
    return json.loads(text)["outputs"]


def _in_log(table: str, record: re.Match) -> bool:
    """Whether the log's commit of a pending record's version carries its token."""
    try:
        return commit_info(table, int(record[1])).get(TOKEN) == record[2]
    except FileNotFoundError:
        return False
