"""Progress of a run of a streaming model: one log line per micro-batch while the query runs
(batch k of about n, input rows, rows/s, watermark, state rows), from Spark's progress
reports, and the figures of the run's end that run_results.json holds beside report.py's
(event-time lag, source versions behind, state bytes).

The number of batches is known ahead when the read limit (`max_files_per_trigger`, by default
1000 files, or `max_bytes_per_trigger`) is set: the files waiting in each source, divided by
the limit. It is "about n": a stateful query may add a batch without data that closes
windows, and a source may grow while the query runs."""

from __future__ import annotations

import datetime as dt
import math
from typing import Callable, Optional

from ..delta import offsets
from ..delta.log import Log, latest_version, starting_position
from ..delta.source import read_limits, skip_change_commits
from .preflight import resume_positions


def expected_batches(streams: dict[str, str], checkpoint: str, options: dict) -> Optional[int]:
    """About how many micro-batches the query reads what its `streams` (name -> Delta table)
    hold after the checkpoint, under the read limit in `options`; None if unknown."""
    max_files, max_bytes = read_limits(options)
    try:
        done, _ = resume_positions(checkpoint)
        n = 0
        for name, path in streams.items():
            log = Log(path, skip_change_commits(options))
            start = done.get(name) or starting_position(path, options)
            end = offsets.Position(log.latest(), start=start.start)
            files = offsets.between(start, end, log.files)
            if not files:
                continue
            by_files = math.ceil(len(files) / max_files) if max_files else 1
            by_bytes = math.ceil(sum(f.size for f in files) / max_bytes) if max_bytes else 1
            n = max(n, by_files, by_bytes)
    except Exception:  # noqa: BLE001 - an estimate never fails a run
        return None
    return n or None


def state_figures(progress: dict) -> tuple[int, int]:
    """(rows, bytes) in Spark's state store after the batch of `progress`."""
    ops = progress.get("stateOperators", [])
    return (
        sum(op.get("numRowsTotal", 0) for op in ops),
        sum(op.get("memoryUsedBytes", 0) for op in ops),
    )


def batch_line(name: str, progress: dict, k: int, n: Optional[int]) -> str:
    """The log line of one micro-batch (`progress`: Spark's report of it), the k-th of the run."""
    rows, _ = state_figures(progress)
    rate = progress.get("processedRowsPerSecond") or 0.0
    watermark = progress.get("eventTime", {}).get("watermark")
    if watermark and watermark.startswith("1970-01-01T00:00:00"):
        watermark = None  # Spark's watermark before any event time is seen
    of = f" of about {max(n, k)}" if n else ""
    return (
        f"{name}: batch {k}{of}: {progress.get('numInputRows', 0)} input rows, {rate:.0f} rows/s, "
        f"watermark {watermark or 'none'}, {rows} state rows"
    )


def follow(
    query,
    log: Callable[[str], None],
    name: str,
    n: Optional[int],
    counted: Callable[[list[dict]], list[dict]],
    every_s=1.0,
) -> None:
    """Wait for `query` to end (available now), logging a line per micro-batch as it ends,
    from its progress reports as `counted` counts them. A failure of the query raises, as
    awaitTermination does."""
    seen, k = -1, 0
    while True:
        ended = query.awaitTermination(every_s)
        for p in counted(query.recentProgress):
            if p.get("batchId", -1) > seen:
                seen, k = p["batchId"], k + 1
                log(batch_line(name, p, k, n))
        if ended:
            return


def _instant(text: Optional[str]) -> Optional[dt.datetime]:
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def event_time_lag_s(progress: list[dict]) -> Optional[float]:
    """Seconds from the watermark to the newest event time the run read (None without a
    watermark): how far the closed windows lag behind the newest input."""
    newest = [_instant(p.get("eventTime", {}).get("max")) for p in progress]
    newest = [t for t in newest if t is not None]
    watermark = _instant(progress[-1].get("eventTime", {}).get("watermark")) if progress else None
    if not newest or watermark is None:
        return None
    return round((max(newest) - watermark).total_seconds(), 3)


def versions_behind(streams: dict[str, str], checkpoint: str) -> dict[str, int]:
    """Per source read as a stream, how many of its Delta versions the model has not read
    entirely yet (0: caught up)."""
    out: dict[str, int] = {}
    try:  # a figure of a run that is done: never its failure
        done, _ = resume_positions(checkpoint)
        for name, path in streams.items():
            at = done.get(name)
            read = -1 if at is None else at.version if at.index is None else at.version - 1
            out[name] = max(latest_version(path) - read, 0)
    except Exception:  # noqa: BLE001
        pass
    return out
