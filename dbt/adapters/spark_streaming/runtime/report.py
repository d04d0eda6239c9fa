"""What one `dbt run` of a streaming model reports: its AdapterResponse (also in
run_results.json) and its log line, from Spark's progress reports and the sink's counts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from dbt.adapters.contracts.connection import AdapterResponse

from ..delta.offsets import versions_read
from ..delta.source import latest_version
from .model import StreamingModel
from .upsert import UPSERT_TABLE


@dataclass
class StreamingAdapterResponse(AdapterResponse):
    """What one `dbt run` of a streaming model did (also in run_results.json)."""

    rows_read: int = 0
    versions_read: dict = field(default_factory=dict)  # source -> [first, last] version read
    batches: int = 0
    rows_written: int = 0
    late_rows: int = 0
    watermark: Optional[str] = None
    state_rows: int = 0  # rows in Spark's state store after the run (all stateful operators)
    state_bytes: int = 0  # memory of Spark's state store after the run
    event_time_lag_s: Optional[float] = None  # newest event time read - watermark (progress.py)
    versions_behind: dict = field(default_factory=dict)  # source -> versions not read yet
    duration_s: float = 0.0


def _offset(offset) -> dict:
    """A source offset of a progress report, parsed ({} when absent)."""
    if isinstance(offset, str) and offset.strip().startswith("{"):
        offset = json.loads(offset)
    return offset if isinstance(offset, dict) else {}


def summarise(progress: list[dict]) -> tuple[int, dict, int, int | None, int]:
    """Rows read, versions read per source, late rows (as Spark counts them), the watermark,
    and the rows in Spark's state store after the last batch."""
    rows, late, versions, watermark = 0, 0, {}, None
    state_rows = (
        sum(op.get("numRowsTotal", 0) for op in progress[-1].get("stateOperators", []))
        if progress
        else 0
    )
    for p in progress:
        rows += p.get("numInputRows", 0)
        late += sum(op.get("numRowsDroppedByWatermark", 0) for op in p.get("stateOperators", []))
        for s in p.get("sources", []):
            start_offset, end_offset = _offset(s.get("startOffset")), _offset(s.get("endOffset"))
            label = end_offset.get("table")
            read = versions_read(start_offset, end_offset) if label else None
            if read:
                first, end = read
                prev = versions.get(label)
                versions[label] = [min(prev[0], first) if prev else first, end]
        wm = p.get("eventTime", {}).get("watermark")
        watermark = wm or watermark
    return rows, versions, late, watermark, state_rows


def log_line(model: StreamingModel, r: StreamingAdapterResponse, sources: dict[str, str]) -> str:
    """The run's one log line: what the model read and wrote (`sources`: name -> path)."""
    if not r.batches:
        at = ", ".join(f"{n} at v{latest_version(p)}" for n, p in sources.items())
        return f"{model.name}: no new data ({at}); nothing committed"
    read = (
        ", ".join(f"{n} v{a}..v{b}" for n, (a, b) in r.versions_read.items()) or "no new versions"
    )
    wrote = (
        f"{r.rows_written} changes (changelog)"
        if model.materialization == UPSERT_TABLE
        else f"{r.rows_written} rows"
    )
    return (
        f"{model.name}: read {r.rows_read} rows ({read}) in {r.batches} batches, wrote {wrote}, "
        f"{r.late_rows} late rows dropped, watermark {r.watermark or 'none'}, {r.duration_s}s"
    )


def message(model: StreamingModel, r: StreamingAdapterResponse) -> str:
    """The run's status as dbt prints it beside the model."""
    written = "changes" if model.materialization == UPSERT_TABLE else "rows written"
    return f"{r.rows_written} {written}, {r.rows_read} read" if r.batches else "no new data"
