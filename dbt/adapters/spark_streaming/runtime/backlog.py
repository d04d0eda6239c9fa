"""A new stream's backlog, split: the windows its first micro-batch closes are aggregated in
batch, the stream keeps only the others in its state (sql/backlog.py says why that is exact).

When a streaming_view whose only state is a TUMBLE, HOP or CUMULATE window aggregate starts
without a checkpoint (its first run, or `--full-refresh`) over a source snapshot that one
micro-batch reads (no admission configs, at most `maxFilesPerTrigger` files):

- the split point is the watermark that batch will set, from the Delta statistics of that
  snapshot (the largest event time of its files, milliseconds as Spark's watermark, less the
  watermark delay), and the snapshot's version; both are written to the checkpoint (a file
  Spark does not read) before the query starts, so a restarted query plans the same split;
- the stream's first batch (0) reads exactly that version's snapshot, its rows marked, and the
  batch after it (1) has no data: it emits the windows batch 0's watermark closes (source
  options `backlogVersion` and, until batch 1 is planned, `backlogHold`: delta/source.py).
  Spark drops a batch's rows against the previous batch's watermark, so batch 1 would still
  take rows of the windows batch 0 closed; from batch 2 on they are late. A restart after
  batch 1 is planned replays it from Spark's offset log and holds nothing;
- the stream leaves batch 0's rows of the windows ending at or before the split out of its
  windowed input; its source does not even read the rows whose every window ends by then
  (event time at or before the split less the window's size: option `backlogAfter`), nor the
  row groups that hold only such rows. The watermark is unchanged: the latest row is read.
  The run still reports the snapshot's rows as read (the batch query reads them);
- the sink commits, with batch 1 (where the stream emits the windows batch 0 closed), the batch
  query's windows over the snapshot: those ending at or before the split. One Delta commit,
  exactly once as every batch's.

Until batch 1 is committed every run of the query plans the same split; after it, none (the
rows of those windows are late). Everything else (a checkpoint without the file, other
queries, a snapshot without statistics for the event time column or of more files than a batch
reads) runs as before, and so does a model with config `split_backlog: false`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

from ..delta.source import (
    BACKLOG_AFTER,
    BACKLOG_COLUMN,
    BACKLOG_HOLD,
    BACKLOG_VERSION,
    read_limits,
)
from ..errors import config_error
from ..faults import fault_point
from .checkpoint import committed, has_batches, planned, write_file_atomically

if TYPE_CHECKING:
    from ..sql.analysis import WindowSpec

FILE = "dbt_backlog"  # in the checkpoint directory, beside Spark's logs


@dataclass(frozen=True)
class Backlog:
    source: str  # the plan's source name (its stream's label)
    version: int  # the snapshot the first batch reads
    closed_us: int  # windows ending at or before this are the batch query's
    rows: Optional[int] = None  # the snapshot's (from its statistics; not in older records)
    hold: bool = field(default=True, compare=False)  # batch 1 is yet to be planned (not recorded)

    def reader_options(self, window: WindowSpec) -> dict[str, str]:
        """The options of the source's stream reader (delta/source.py): the first batch reads
        the snapshot; if the split knows its rows (to count them as read: `counted`), only
        those of a window of `window` (the plan's) ending after the split (or without an event
        time)."""
        options = {BACKLOG_VERSION: str(self.version), BACKLOG_HOLD: str(self.hold).lower()}
        if self.rows is not None:
            after = self.closed_us - window.size_us
            options[BACKLOG_AFTER] = json.dumps([window.time_column, after])
        return options

    def counted(self, progress: list[dict]) -> list[dict]:
        """Spark's progress reports of the run, batch 0's with the snapshot's rows as its input
        rows (the stream read only some of them, the batch query reads all); not a report of a
        trigger that ran no batch."""
        if self.rows is None:
            return progress
        return [
            {**p, "numInputRows": self.rows}
            if p.get("batchId") == 0 and "addBatch" in (p.get("durationMs") or {})
            else p
            for p in progress
        ]

    def stream_sql(self, plan, bindings: dict) -> str:
        return plan.backlog_sql_for(bindings, self.closed_us, BACKLOG_COLUMN)

    def with_closed_windows(self, write, plan, path: str, view: str, log):
        """foreachBatch function: `write`, which gets with batch 1's rows the batch query's
        windows over the snapshot (one commit); `log` says so."""
        from ..delta.source import FORMAT

        def closing_batch(batch, batch_id: int) -> None:
            if batch_id == 1:
                log(self.describe())
                spark = batch.sparkSession
                reader = spark.read.format(FORMAT).option("versionAsOf", self.version)
                reader.load(path).createOrReplaceTempView(view)
                sql = plan.backlog_sql_for({self.source: view}, self.closed_us)
                batch = batch.unionByName(spark.sql(sql))
            write(batch, batch_id)

        return closing_batch

    def describe(self) -> str:
        closed = datetime.fromtimestamp(self.closed_us / 1e6, timezone.utc)
        return (
            f"the windows of {self.source} (version {self.version}) ending by "
            f"{closed.isoformat(sep=' ', timespec='milliseconds')} are aggregated in batch, "
            "the rest by the stream"
        )


def enabled(config: Mapping[str, Any]) -> bool:
    """Config `split_backlog` (default true; SSC201 unless a boolean)."""
    value = config.get("split_backlog", True)
    if not isinstance(value, bool):
        raise config_error("split_backlog", value, "true or false")
    return value


def plan_split(
    plan, config: Mapping[str, Any], streams: dict[str, str], checkpoint: str, options: dict
) -> Optional[Backlog]:
    """The split of this run: none once batch 1 is committed; the one its checkpoint records;
    else a new one for a stream without a checkpoint that qualifies (module doc) unless config
    `split_backlog` is false, recorded before the query starts."""
    window = plan.backlog_window
    if window is None or list(streams) != [window.source]:
        return None
    recorded = os.path.join(checkpoint, FILE)
    if committed(checkpoint, 1):
        return None
    if os.path.isfile(recorded):
        with open(recorded, encoding="utf-8") as fh:
            return replace(Backlog(**json.load(fh)), hold=not planned(checkpoint, 1))
    if not enabled(config) or has_batches(checkpoint) or set(options) - {"maxFilesPerTrigger"}:
        return None
    split = _split_point(streams[window.source], window.time_column, read_limits(options)[0])
    if split is None:
        return None
    record = {"source": window.source, "version": split[0], "rows": split[2]}
    record["closed_us"] = split[1] - plan.watermark_delay_us
    os.makedirs(checkpoint, exist_ok=True)
    write_file_atomically(checkpoint, FILE, json.dumps(record))
    fault_point("backlog_split", -1)
    return Backlog(**record)


def _split_point(
    path: str, column: str, max_files: Optional[int]
) -> Optional[tuple[int, int, Optional[int]]]:
    """(version, its largest event time in µs, truncated to ms as Spark's watermark, its rows if
    every file's statistics count them) of the source's latest snapshot, if one micro-batch
    reads all of it and every file has statistics for `column` (a `timestamp`)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from ..delta.log import add_action_table
    from ..delta.types import table_columns

    table = DeltaTable(path)
    if dict(table_columns(path, table.version())).get(column) != "timestamp":
        return None
    actions = add_action_table(table)
    stat = f"max.{column}"
    if actions.num_rows == 0 or (max_files is not None and actions.num_rows > max_files):
        return None
    if stat not in actions.column_names or actions.column(stat).null_count:
        return None
    largest = pc.max(actions.column(stat).cast(pa.timestamp("us", tz="UTC"))).value
    counts = actions.column("num_records") if "num_records" in actions.column_names else None
    rows = None if counts is None or counts.null_count else pc.sum(counts).as_py()
    return table.version(), largest // 1000 * 1000, rows
