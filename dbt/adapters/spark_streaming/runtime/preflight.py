"""Checks before a model's stream starts, of what the stream would resume from and read: its
checkpoint, its sources and the places it writes. Each refuses with a coded error that says
what is wrong and which way out works, instead of a Spark failure that every `dbt run` repeats.

- The checkpoint (SSR323): its query id (``metadata``) and every offset and commit log file
  must be readable as Spark wrote them; a log file truncated, emptied or deleted by hand leaves
  a checkpoint that cannot be resumed or repaired safely (the batch it names may be in the
  table already), so the way out is `--full-refresh`.
- The sources, from the position of the last batch the checkpoint committed (or the stream's
  start) to their latest version: a version that removes data (SSD401, or passed over with
  `skip_change_commits`), a column whose type changed or that was dropped since that position
  (SSR320: the checkpoint's state holds the old type), a data file the stream has still to read
  that is gone (SSR322: vacuumed or deleted; on object storage only when it is at most
  REMOTE_CHECKS files, one request each).
- The sources' identity (SSR327): a source whose Delta table id is not the one the last batch
  read (the upstream rebuilt by `--full-refresh`, or dropped and created again) has a new
  history; the checkpoint's positions are versions of the old one.
- The model's columns (SSR321): a query over a source that gained a column (a ``SELECT *``)
  would write columns its table does not have.
- The places written (SSR325): the table's directory and the control root (locks) must be
  writable; a read-only file system or a directory without write permission fails here.
- The model's state (`check_state`): a changed query (runtime/changes.py), a table without its
  checkpoint (SSR305) or a checkpoint without its table (SSR308).

The offset log format: runtime/checkpoint.py.
"""

from __future__ import annotations

import json
import os
import re
from itertools import pairwise
from typing import Optional

from .. import layout
from ..delta import offsets, storage, types
from ..delta.history import last_metadata
from ..delta.log import Log, starting_position, table_id
from ..delta.offsets import Position
from ..delta.source import read_change_feed, skip_change_commits
from ..delta.storage import is_delta
from ..errors import StreamingError
from .catalog import Catalog
from .changes import check_query_change
from .model import Places, StreamingModel

_VERSION_LINE = re.compile(r"^v\d+$")
REMOTE_CHECKS = 256  # files of a source on object storage checked to exist, at most


def _full_refresh(identifier: str) -> str:
    return f"`dbt run --full-refresh -s {identifier}`"


def _log_ids(log: str) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(log) if n.isdigit())
    except FileNotFoundError:
        return []


def _damage(path: str, kind: str) -> Optional[str]:
    """What is wrong with the offset ('offsets') or commit ('commits') log file at `path`."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc.__class__.__name__})"
    lines = text.split("\n")
    if not text.strip():
        return "empty"
    if not _VERSION_LINE.match(lines[0]):
        return "its first line is not a log version (v1, v2, ...)"
    try:
        if len(lines) < 2 or not isinstance(json.loads(lines[1]), dict):
            return "its metadata line is missing"
        for line in lines[2:] if kind == "offsets" else []:
            if line != "-":
                json.loads(line)
    except ValueError:
        return "truncated (a line is not complete JSON)"
    return None


def check_checkpoint(checkpoint: str, identifier: str) -> None:
    """SSR323 if the checkpoint at `checkpoint` (local) is damaged; nothing if it has no batch."""
    offsets_log = os.path.join(checkpoint, "offsets")
    planned = _log_ids(offsets_log)
    committed = _log_ids(os.path.join(checkpoint, "commits"))
    if not planned and not committed:
        return
    problems = []
    try:
        with open(os.path.join(checkpoint, "metadata"), encoding="utf-8") as fh:
            if not json.load(fh).get("id"):
                raise ValueError
    except FileNotFoundError:
        problems.append(
            "metadata: missing (it holds the query id, which makes commits exactly once)"
        )
    except (OSError, ValueError, AttributeError):
        problems.append("metadata: unreadable or truncated")
    if committed and committed[-1] not in planned:
        problems.append(f"offsets/{committed[-1]}: missing, but commits/{committed[-1]} is there")
    # what a restart reads: the last two offsets (the sink reads the one before the batch's for
    # its late-row watermark) and the last commit
    for kind, ids in (("offsets", planned[-2:]), ("commits", committed[-1:])):
        for batch in ids:
            damage = _damage(os.path.join(checkpoint, kind, str(batch)), kind)
            if damage:
                problems.append(f"{kind}/{batch}: {damage}")
    if problems:
        raise StreamingError(
            "SSR323",
            f"the checkpoint of {identifier} is damaged beyond use ({checkpoint})",
            "; ".join(problems[:3])
            + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            + ". Spark cannot resume from it, and it cannot be repaired safely: the batch it "
            "names may be in the table already",
            f"Run {_full_refresh(identifier)}: it rebuilds the table and a new checkpoint from "
            "the sources as they are now.",
        )


def _positions(checkpoint: str, batch: int) -> dict[str, Position]:
    """Per source label, the end position of `batch` in the checkpoint's offset log."""
    with open(os.path.join(checkpoint, "offsets", str(batch)), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    out = {}
    for line in lines[2:]:
        offset = None if line == "-" else json.loads(line)
        if isinstance(offset, dict) and "table" in offset:
            out[offset["table"]] = Position.parse(offset)
    return out


def resume_positions(checkpoint: str) -> tuple[dict[str, Position], dict[str, Position]]:
    """Where the next run goes on reading, per source label: the end of the last committed
    batch, and the end of a later batch that is planned but not committed (Spark runs it first,
    with those offsets); {} for either when there is none."""
    committed = _log_ids(os.path.join(checkpoint, "commits"))
    planned = _log_ids(os.path.join(checkpoint, "offsets"))
    done = _positions(checkpoint, committed[-1]) if committed else {}
    later = [b for b in planned if not committed or b > committed[-1]]
    return done, (_positions(checkpoint, later[-1]) if later else {})


def check_sources(
    identifier: str, streams: dict[str, str], checkpoint: str, options: dict[str, str]
) -> None:
    """SSD401, SSR320 or SSR322 (module doc) for the sources read as streams (name -> Delta
    table), from where the checkpoint at `checkpoint` stopped to their latest versions."""
    done, planned = resume_positions(checkpoint)
    skip = skip_change_commits(options)
    for name, path in streams.items():
        start = done.get(name)
        if start is not None and start.version >= 0:
            _check_columns(identifier, name, path, start.version)
        log = Log(path, skip, read_change_feed(options))
        if start is None:
            start = starting_position(path, options)
        steps = [start, planned.get(name), Position(log.latest(), start=start.start)]
        ends = [p for p in steps if p is not None]
        files = [f for a, b in pairwise(ends) for f in offsets.between(a, b, log.files)]
        if storage.is_remote(path) and len(files) > REMOTE_CHECKS:
            continue  # one request per file: not for a large backlog on object storage
        for f in files:
            if not storage.exists(f.path):
                raise StreamingError(
                    "SSR322",
                    f"a data file of source {name} is missing before {identifier} read it",
                    f"{f.path} is in the Delta log of {path} but not on storage (vacuumed, or "
                    "deleted by hand)",
                    "Restore the file and run `dbt run` again. If it is lost, drop it from the "
                    f"source's log (delta-rs: `DeltaTable('{path}').repair()`, as Delta's FSCK "
                    f"REPAIR TABLE) and run {_full_refresh(identifier)}: the model is rebuilt "
                    "without its rows.",
                )


def check_source_ids(identifier: str, streams: dict[str, str], previous: dict) -> None:
    """SSR327 if a source read as a stream is another Delta table than the one the model's
    last batch read (commit metadata `source_ids`; commits without it are not checked)."""
    read = previous.get("source_ids") or {}
    for name, path in streams.items():
        now = table_id(path) if name in read else None
        if now is not None and now != read[name]:
            raise StreamingError(
                "SSR327",
                f"source {name} of {identifier} is another Delta table than the one it read",
                f"its table id was {read[name]} and is {now}: it was rebuilt (a "
                "`--full-refresh` of its model) or dropped and created again, so its versions "
                "are a new history, and the checkpoint's positions, versions of the old one, "
                "would skip or repeat rows",
                f"Rebuild this model from the new history: {_full_refresh(identifier)}, or "
                "with its upstream in one go: `dbt run --full-refresh -s <upstream>+`.",
            )


def _check_columns(identifier: str, name: str, path: str, version: int) -> None:
    """SSR320 if a column of the source at `version` has another type, or none, at its latest."""
    try:
        then = dict(types.table_columns(path, version))
    except Exception:  # that version's log is gone (cleaned up): nothing to compare with
        return
    now = dict(types.table_columns(path))
    changed = [
        f"{c} {t} -> {now[c]}" if c in now else f"{c} {t} dropped"
        for c, t in then.items()
        if now.get(c) != t
    ]
    if changed:
        raise StreamingError(
            "SSR320",
            f"the columns of source {name} changed since {identifier} last read it "
            f"(version {version})",
            ", ".join(changed) + ": the checkpoint holds rows and state of the old types",
            f"Run {_full_refresh(identifier)} to rebuild it from the source as it is now, or "
            "restore the column's type in the source.",
        )


def check_columns(identifier: str, table: str, written) -> None:
    """SSR321 if the query would write columns (an Arrow schema) other than its table's (at
    `table`, if it exists): a `SELECT *` over a source that gained or changed a column."""
    if not storage.is_delta(table):
        return
    try:
        have = types.arrow_schema(types.table_columns(table))
    except TypeError:  # a type the adapter does not map: the sink's own write decides
        return
    if have.equals(written):
        return
    old = {f.name: str(f.type) for f in have}
    new = {f.name: str(f.type) for f in written}
    diff = [f"+{c} {t}" for c, t in new.items() if c not in old]
    diff += [f"-{c}" for c in old if c not in new]
    diff += [f"{c} {old[c]} -> {t}" for c, t in new.items() if c in old and old[c] != t]
    raise StreamingError(
        "SSR321",
        f"the columns of {identifier} would change ({', '.join(diff) or 'order'})",
        "its query now has other columns than its table (a source gained or changed a column "
        "that the query selects, e.g. with *), and a table's columns do not change under a "
        "running stream",
        f"Run {_full_refresh(identifier)} to rebuild it with the new columns, or select the "
        "columns explicitly.",
    )


def column_sources(table: str, written) -> Optional[tuple[list, str]]:
    """For a query that would write the columns `written` (an Arrow schema) other than those
    of the table at `table`: per written column, the table's column it continues (the same
    name and type; or, with as many columns, a new name for the one at its place with its
    type, a rename), or None for a new nullable column; and the change in words. None if a
    column keeps its name and changes its type, or there is no table or no change."""
    if not storage.is_delta(table):
        return None
    try:
        have = types.arrow_schema(types.table_columns(table))
    except TypeError:  # a type the adapter does not map
        return None
    if have.equals(written):
        return None
    old = {f.name: f.type for f in have}
    sources: list = []
    for i, field in enumerate(written):
        if field.name in old:
            if old[field.name] != field.type:
                return None
            sources.append(field.name)
            continue
        at = have[i] if len(have) == len(written) else None
        if at is not None and at.name not in written.names and at.type == field.type:
            sources.append(at.name)  # renamed
        elif field.nullable:
            sources.append(None)  # added
        else:
            return None
    pairs = list(zip(written.names, sources, strict=True))
    words = [f"{old} -> {new}" for new, old in pairs if old not in (None, new)]
    words += [f"+{new}" for new, old in pairs if old is None]
    words += [f"-{f.name}" for f in have if f.name not in sources]
    return sources, ", ".join(words) or "order"


def check_writable(identifier: str, *paths: str) -> None:
    """SSR325 if one of the local `paths` (or, for one that does not exist yet, its nearest
    existing parent) cannot be written by this process."""
    for path in paths:
        if storage.is_remote(path):
            continue
        here = path
        while not os.path.exists(here) and os.path.dirname(here) != here:
            here = os.path.dirname(here)
        if not os.access(here, os.W_OK):
            why = "read-only file system" if _read_only(here) else "no write permission"
            raise StreamingError(
                "SSR325",
                f"{identifier} cannot write to {path}",
                f"{here}: {why}; nothing was started or written",
                "Make that directory writable by this user, or set `warehouse_path` (or "
                "`checkpoint_root`) in the profile to a writable directory.",
            )


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def control_root(control: str) -> str:
    """The directory the model's lock is written in (layout.py)."""
    return layout.warehouse_path(control, "locks")


# The model's sources and state, in the order a run checks them.


def check_sources_and_state(
    model: StreamingModel, plan, places: Places, options: dict, catalog: Catalog
) -> dict:
    """Refuse, before any stream starts, a source without a Delta table (SSR302), then what
    check_state and the checks above refuse. Returns the metadata of the table's last
    commit ({} for a new one)."""
    for name, path in places.sources.items():
        if not is_delta(path):
            raise StreamingError(
                "SSR302",
                f"source {name} of {model.name} has no Delta table",
                f"nothing at {path}",
                "Run `dbt seed` / the upstream model first, or set the source's "
                "`meta: {location: ...}`.",
            )
    previous = check_state(model, plan, places.build, places.checkpoint, catalog) or {}
    check_checkpoint(places.checkpoint, model.identifier)
    check_source_ids(model.identifier, places.streams, previous)
    check_sources(model.identifier, places.streams, places.checkpoint, options)
    return previous


def check_state(
    model: StreamingModel, plan, target: str, checkpoint: str, catalog: Optional[Catalog] = None
) -> Optional[dict]:
    """Refuse, before any stream starts: a changed query over old state (runtime/changes.py:
    one that keeps the state goes on), a table whose checkpoint is gone (SSR305), a checkpoint
    whose table is gone (SSR308). Returns the metadata of the table's last commit (None for a
    new table)."""
    previous = last_metadata(target)
    if previous and previous.get("fingerprint") != plan.fingerprint:
        check_query_change(catalog, model, plan, target, previous["fingerprint"])
    if (
        previous
        and previous.get("batch_id") is not None
        and not os.path.isdir(os.path.join(checkpoint, "offsets"))
    ):
        raise StreamingError(
            "SSR305",
            f"the checkpoint of {model.name} is missing ({checkpoint})",
            "without it the stream would reprocess every source version and duplicate rows",
            "Run `dbt run --full-refresh -s " + model.identifier + "` to rebuild the table.",
        )
    offsets = os.path.join(checkpoint, "offsets")
    if previous is None and os.path.isdir(offsets) and os.listdir(offsets):
        raise StreamingError(
            "SSR308",
            f"the table of {model.name} is missing but its checkpoint is not ({checkpoint})",
            "the stream would resume after the batches it already wrote, into an empty table",
            "Run `dbt run --full-refresh -s " + model.identifier + "` to rebuild the table.",
        )
    return previous
