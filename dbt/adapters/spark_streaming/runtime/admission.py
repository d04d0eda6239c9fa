"""Admission control configs of a streaming model: how much of its sources one micro-batch
reads, and where a new stream starts. They become options of the Delta streaming source
(delta/source.py, delta/offsets.py), for every source the model reads as a stream.

- `max_files_per_trigger`: files per micro-batch, a positive integer; default 1000 (as
  Delta), none when only `max_bytes_per_trigger` is set.
- `max_bytes_per_trigger`: bytes per micro-batch, an integer or a size such as '512m', '1g'
  (binary units); soft: a batch reads at least one file.
- `starting_version`: a Delta version, or 'latest': read the changes from that version on
  instead of the initial snapshot.
- `starting_timestamp`: an ISO date or timestamp (UTC unless it has a zone): as
  `starting_version` with the first version committed at or after it.

- `skip_change_commits`: true to pass over source versions that remove data (overwrite,
  delete, update, MERGE) instead of failing with SSD401, as Delta's skipChangeCommits: the
  rows such a version adds or removes are not read.

- `read_change_feed`: true to read each source version's changes (Delta's Change Data Feed:
  its cdc files, else its added files as inserts and removed files as deletes), every row with
  `_op` (+I/-U/+U/-D): an upsert_table aggregate over the source is then maintained with
  retractions (sql/retract.py), as over an upsert_table's changelog.

The starting configs only apply to a stream without a checkpoint (a new table, or
`--full-refresh`), as Delta's startingVersion / startingTimestamp.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from typing import Any

from ..delta.source import starting_position
from ..errors import config_error

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
SIZE_EXPECTED = "a positive number of bytes or a size such as '512k', '64m', '1g', '1t'"


def parse_size(value: Any) -> int | None:
    """Bytes of `value` (an int, or '10k', '64m', '1g', '1gb', ...; binary units), None if it is
    not a positive size."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    match = _SIZE.match(str(value))
    if not match:
        return None
    size = int(match.group(1)) * _UNITS[match.group(2).lower()]
    return size if size > 0 else None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def _timestamp(value: Any) -> str | None:
    """ISO text of a date or timestamp (a YAML date / datetime, or text), None if not one."""
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    try:
        return dt.datetime.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        return None


def source_options(config: Mapping[str, Any]) -> dict[str, str]:
    """The Delta streaming source options of a model's admission control configs (SSC201 for a
    value the source cannot take, naming the allowed values)."""
    options = {}
    files = config.get("max_files_per_trigger")
    if files is not None:
        if _count(files) is None:
            raise config_error("max_files_per_trigger", files, "a positive integer (files)")
        options["maxFilesPerTrigger"] = str(_count(files))
    size = config.get("max_bytes_per_trigger")
    if size is not None:
        if parse_size(size) is None:
            raise config_error("max_bytes_per_trigger", size, SIZE_EXPECTED)
        options["maxBytesPerTrigger"] = str(parse_size(size))
    version, timestamp = config.get("starting_version"), config.get("starting_timestamp")
    if version is not None and timestamp is not None:
        raise config_error(
            "starting_timestamp",
            timestamp,
            "unset when `starting_version` is set: only one of them",
            "Keep either `starting_version` or `starting_timestamp`.",
        )
    if version is not None:
        if version != "latest" and (_count(version) is None and version not in (0, "0")):
            raise config_error(
                "starting_version", version, "a Delta version (0, 1, ...) or 'latest'"
            )
        options["startingVersion"] = str(version)
    if timestamp is not None:
        if _timestamp(timestamp) is None:
            raise config_error(
                "starting_timestamp",
                timestamp,
                "an ISO date or timestamp such as '2024-05-01' or '2024-05-01 12:00:00+00:00'",
            )
        options["startingTimestamp"] = _timestamp(timestamp)
    skip = config.get("skip_change_commits")
    if skip is not None:
        if not isinstance(skip, bool):
            raise config_error("skip_change_commits", skip, "true or false")
        options["skipChangeCommits"] = str(skip).lower()
    feed = config.get("read_change_feed")
    if feed is not None:
        if not isinstance(feed, bool):
            raise config_error("read_change_feed", feed, "true or false")
        options["readChangeFeed"] = str(feed).lower()
    return options


def check_start(options: dict[str, str], paths: Mapping[str, str], checkpoint: str) -> None:
    """Before a new stream (no checkpoint offsets yet) starts: each source has the version its
    `starting_version` / `starting_timestamp` names (SSC201 otherwise)."""
    offsets = os.path.join(checkpoint, "offsets")
    if os.path.isdir(offsets) and os.listdir(offsets):
        return
    for path in paths.values():
        starting_position(path, options)
