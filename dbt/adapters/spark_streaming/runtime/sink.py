"""The foreachBatch sink of a streaming model's query (`ModelSink`): each micro-batch becomes one
exactly-once commit of the model's Delta table (delta/sink.py, delta/upsert.py for an
upsert_table, and delta/partials.py for a state_ttl model's partial aggregates).

Every Delta commit records, in commitInfo key `dbt_spark_streaming`: the source versions
consumed so far, the batch's watermark, the Spark batch id and the query fingerprint. Source
versions and watermark come from Spark's offset log, which Spark writes before it runs the
batch, so a replayed batch records the same.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from functools import lru_cache
from typing import Optional

from dbt.adapters.events.logging import AdapterLogger

from ..delta import types
from ..delta.history import KEEP_LOG, LOG_DEFAULTS
from ..delta.log import table_id
from ..delta.offsets import Position
from ..delta.partials import PartialsCommitter
from ..delta.sink import BatchCommitter, create_table
from ..delta.storage import is_delta
from ..delta.upsert import UpsertCommitter, create_changelog
from ..errors import config_error
from . import partials as state
from . import upsert
from .checkpoint import query_app_id
from .continuous.runner import Monitor
from .maintenance import Upkeep
from .model import Places, StreamingModel

logger = AdapterLogger("SparkStreaming")


class ModelSink:
    """Commits the micro-batches of a model's query to its table at `places.build`, exactly once;
    call it as foreachBatch(batch_df, batch_id). Counts what this run wrote.

    Per batch: create the table on the first one; make the committers (their Delta app id is
    the query's id, in the checkpoint); skip a batch already committed (a replay after a crash);
    read the batch's source versions and watermark from the checkpoint; commit its rows; report
    progress (to the runner's `monitor`)."""

    def __init__(
        self,
        spark,
        model: StreamingModel,
        plan,
        places: Places,
        stream_schema,
        started: float,
        monitor: Optional[Monitor] = None,
        warehouse: Optional[str] = None,
    ):
        self.model, self.plan, self.monitor, self.started = model, plan, monitor, started
        self.build, self.checkpoint = places.build, places.checkpoint
        self.keep = plan.upsert.keep_column if plan.upsert else None
        self.ranked = plan.upsert is not None and plan.upsert.rank_sql is not None
        # state_ttl: partial aggregates in Delta
        self.partials = plan.upsert.partials if plan.upsert else None
        schema = (
            state.result_schema(plan, spark, stream_schema, model.name)
            if self.partials
            else stream_schema
        )
        self.aggregate_columns = schema.fieldNames()  # state_ttl: the keys' result rows
        if self.ranked:  # a Top-N (over the aggregate: sql/aggtopn.py)
            schema = upsert.ranked(plan, spark.createDataFrame([], schema), model.name).schema
        columns = [
            (f.name, f.dataType.simpleString()) for f in schema.fields if f.name != self.keep
        ]
        self.arrow_schema = types.arrow_schema(columns)
        self.keys = upsert.key_columns(plan, [c for c, _ in columns])  # [] for a streaming_view
        self.driver_rows = upsert.driver_merge_rows(model.config)  # before the stream starts
        self.cdf = bool(self.keys) and upsert.change_data_feed(model.config)
        self.properties = table_properties(model.config)
        self.upkeep = Upkeep(model, self.build, bool(self.keys), warehouse)
        self.base_meta = {
            "fingerprint": plan.fingerprint,
            "model": model.name,
            "materialization": model.materialization,
            # which Delta tables the positions are versions of (preflight.check_source_ids)
            "source_ids": {name: table_id(path) for name, path in places.sources.items()},
        }
        self.committers: list = []  # BatchCommitter | UpsertCommitter [, PartialsCommitter]
        self.rows_written, self.commits, self.replayed = 0, 0, 0
        self.batches: list[dict] = []  # sources and watermark of each batch committed by this run

    def ensure_table(self) -> None:
        """Create the model's table, empty, unless it exists (and an upsert_table's changelog);
        its first commit carries the query's metadata."""
        if is_delta(self.build):
            return
        create_table(
            self.build,
            self.arrow_schema,
            {**self.base_meta, "batch_id": None, "sources": {}},
            {**self.properties, **({"delta.enableChangeDataFeed": "true"} if self.cdf else {})},
        )
        if self.keys:
            create_changelog(self.build, self.arrow_schema, restarts=self.partials is not None)
        self.upkeep.created()

    def __call__(self, batch_df, batch_id: int) -> None:
        if self.monitor is not None:
            self.monitor.pool(batch_df.sparkSession.sparkContext)
            self.monitor.progressed()  # the previous batch's report
        self.ensure_table()
        if not self.committers:
            self.committers = self._committers()
        if self.committers[-1].committed(batch_id):
            # Replay of a batch already in Delta: Spark (4.2+) still needs the plan executed.
            batch_df.write.format("noop").mode("overwrite").save()
            self.replayed += 1
            return
        versions, watermark_ms, batch_ts_ms, exact = _read_offsets(self.checkpoint, batch_id)
        meta = {
            **self.base_meta,
            "batch_id": batch_id,
            "sources": versions,
            **exact,  # positions and late-row watermark, for the oracle (runtime/equivalence.py)
            "watermark_ms": watermark_ms,
            "watermark": _iso(watermark_ms) if self.plan.watermark_delay_us is not None else None,
        }
        count = self._commit(batch_df, batch_id, meta, batch_ts_ms)
        self._upkeep(batch_df.sparkSession, batch_id)
        self.rows_written += count
        self.commits += 1
        self.batches.append({"sources": versions, "watermark_ms": watermark_ms, **exact})
        self._progress(batch_id, count, versions, meta["watermark"])

    def _upkeep(self, spark, batch_id: int) -> None:
        """The tables' maintenance after the batch's commits (runtime/maintenance.py)."""
        written: dict[str, list[dict]] = {}
        for committer in self.committers:
            written.update(getattr(committer, "written", {}))
            committer.written = {}
        self.upkeep.after_batch(spark, written, batch_id)

    def _committers(self) -> list:
        app_id = query_app_id(self.checkpoint)
        committers: list = [
            UpsertCommitter(
                self.build,
                app_id,
                self.arrow_schema,
                self.keys,
                self.keep,
                restarts=self.partials is not None,
                driver_rows=self.driver_rows,
            )
            if self.keys
            else BatchCommitter(self.build, app_id, self.arrow_schema)
        ]
        if self.partials:  # its commit is the batch's last: the one that says the batch is done
            committers.append(PartialsCommitter(self.build, app_id, list(self.partials.keys)))
        return committers

    def _commit(self, batch_df, batch_id: int, meta: dict, batch_ts_ms: int) -> int:
        """Commit the batch's rows with `meta`; the number of rows (an upsert_table: changes)."""
        plan, name, table = self.plan, self.model.name, self.committers[0]
        if self.partials:  # state_ttl: merged with the stored partials of the keys it touches
            rows, merged, restarted = state.batch(
                plan,
                batch_df,
                self.build,
                batch_ts_ms,
                name,
                self.aggregate_columns if self.ranked else self.keys,
            )
            meta["restarted_keys"] = restarted
            if self.ranked:  # a Top-N over the aggregate: its touched partitions re-ranked
                rows = state.reranked(
                    plan, batch_df.sparkSession, merged, self.build, name, upsert.ranked
                )
            # a crash after the table's commit replays the batch: only the partials are left
            # to store
            count = 0 if table.committed(batch_id) else table.commit(rows, batch_id, meta)
            self.committers[1].commit(merged, batch_id, batch_ts_ms - self.partials.ttl_ms)
            return count
        if self.ranked:  # a Top-N: re-ranked with the table's rows of the partitions it touches
            batch_df = upsert.rerank(plan, batch_df, self.build, self.keys, name)
        return table.commit(batch_df, batch_id, meta)  # Spark tasks write the files

    def _progress(self, batch_id: int, count: int, versions: dict, watermark) -> None:
        """Tell the runner's monitor; a `dbt run` logs each batch from Spark's progress
        (runtime/progress.py)."""
        if self.monitor is not None:
            self.monitor.batch(batch_id, count, watermark)


def _read_offsets(checkpoint: str, batch_id: int) -> tuple[dict[str, int], int, int, dict]:
    """Source versions (by table label), watermark and processing time (ms) of `batch_id`, from
    Spark's offset log, which Spark writes before it runs the batch (so a replay reads the same).
    Also, for the oracle: the exact source positions (delta/offsets.py), and the watermark the
    batch drops late rows against, which is the previous batch's (Spark's IncrementalExecution
    eventTimeWatermarkForLateEvents) and differs when data batches follow each other."""
    with open(os.path.join(checkpoint, "offsets", str(batch_id))) as fh:
        lines = fh.read().splitlines()
    header = json.loads(lines[1])
    late_ms = header.get("batchWatermarkMs", 0)
    previous = os.path.join(checkpoint, "offsets", str(batch_id - 1))
    if os.path.exists(previous):
        with open(previous) as fh:
            late_ms = json.loads(fh.read().splitlines()[1]).get("batchWatermarkMs", 0)
    watermark_ms, batch_ts_ms = header.get("batchWatermarkMs", 0), header.get("batchTimestampMs", 0)
    versions, positions = {}, {}
    for line in lines[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and "table" in offset:
            versions[offset["table"]] = offset["version"]
            positions[offset["table"]] = Position.parse(offset).record()
    exact = {"positions": positions, "late_watermark_ms": late_ms}
    return versions, watermark_ms, batch_ts_ms, exact


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[
        :-3
    ]


_DURATION = re.compile(r"interval \d+ (second|minute|hour|day|week)s?")  # delta-rs reads these
# properties the adapter decides: a change of them would break its own writes
_OWN = ("delta.enableChangeDataFeed", "delta.appendOnly", "delta.columnMapping.mode")
_OWN_PREFIXES = ("delta.minReaderVersion", "delta.minWriterVersion", "delta.feature.")


def table_properties(config) -> dict[str, str]:
    """Config `tblproperties`: Delta table properties of the model's table (e.g.
    `delta.logRetentionDuration`), over our default `delta.checkpointInterval` 10, set when it
    is created and on a later run that finds them changed (`apply_table_properties`; one
    removed from the config is not unset, unless it has that default). SSC201 if not
    a mapping of Delta's properties to values, one the adapter decides (change data feed:
    config `change_data_feed`), or a duration or interval of another form."""
    value = config.get("tblproperties") or {}
    expected = (
        "a mapping of Delta table properties to values, "
        "e.g. {delta.logRetentionDuration: 'interval 60 days'}"
    )
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise config_error("tblproperties", value, expected)
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    for key, text in out.items():
        if key in _OWN or key.startswith(_OWN_PREFIXES):
            raise config_error(
                "tblproperties", value, f"{expected}; not {key}, which the adapter sets itself"
            )
        if key.endswith("Duration") and not _DURATION.fullmatch(text):
            raise config_error(
                "tblproperties", value, f"{key}: 'interval <n> days' (or hours, ...)"
            )
        if key == "delta.checkpointInterval" and not (text.isdigit() and int(text) > 0):
            raise config_error("tblproperties", value, f"{key}: a positive number of versions")
    unknown = _unknown_to_delta(tuple(sorted(out.items())))
    if unknown:
        raise config_error("tblproperties", value, f"{expected} ({unknown})")
    return {**LOG_DEFAULTS, **out}


@lru_cache(maxsize=64)
def _unknown_to_delta(properties: tuple) -> str:
    """delta-rs's refusal of `properties` (it knows Delta's own only), '' if none."""
    if not properties:
        return ""
    import tempfile

    from deltalake import DeltaTable, Schema
    from deltalake.schema import Field, PrimitiveType

    with tempfile.TemporaryDirectory() as scratch:
        try:
            DeltaTable.create(
                scratch,
                schema=Schema([Field("x", PrimitiveType("long"))]),
                configuration=dict(properties),
            )
        except Exception as exc:  # noqa: BLE001 - delta-rs's DeltaError names the property
            return str(exc)
    return ""


def apply_table_properties(path: str, config) -> None:
    """Set the model's `tblproperties` on its existing table at `path` where they differ, in
    one commit that leaves its log to the adapter's cleanup (delta/history.py)."""
    wanted = table_properties(config)
    if not wanted or not is_delta(path):
        return
    from deltalake import DeltaTable

    table = DeltaTable(path)
    current = table.metadata().configuration
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if changed:
        table.alter.set_table_properties(changed, post_commithook_properties=KEEP_LOG)
        logger.info(f"{path}: table properties set: {changed}")
