"""Running a streaming model: compile its SQL, bind its sources as streaming views, run the
Structured Streaming query that maintains its Delta table, and report what happened.

The checkpoint lives with the table (`<table>/_dbt_streaming/checkpoint`). Every Delta
commit records, in commitInfo key `dbt_spark_streaming`: the source versions consumed so
far, the batch's watermark, the Spark batch id and the query fingerprint.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger

from .. import sql as sqlfront
from ..delta import types
from ..delta.offsets import Position, versions_read
from ..delta.partials import PartialsCommitter
from ..delta.sink import BatchCommitter, create_table, last_metadata
from ..delta.source import FORMAT, added_files, consumed, latest_version
from ..delta.upsert import UpsertCommitter, create_changelog
from ..errors import StreamingError
from . import admission, lifecycle, runner, upsert
from . import partials as state
from .catalog import Catalog, is_delta, registered_locations
from .equivalence import late_rows, query_file, save_query

logger = AdapterLogger("SparkStreaming")

PROGRESS_EVERY_S = 10  # log a progress line per committed batch at most this often

UPSERT_TABLE = upsert.UPSERT_TABLE


@dataclass
class StreamingModel:
    schema: str
    identifier: str
    sql: str
    config: Mapping[str, Any]
    full_refresh: bool
    materialization: str

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.identifier}"


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
    duration_s: float = 0.0


class _Schemas(Mapping):
    """Column types of relations by name, read from Delta on demand (for sql.compile_query)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    def __getitem__(self, name: str) -> dict[str, str]:
        schema, _, identifier = name.rpartition(".")
        path = self.catalog.location(schema or "default", identifier)
        if not is_delta(path):
            raise KeyError(name)
        return dict(types.table_columns(path))

    def __iter__(self):
        return iter(f"{s}.{i}" for s, i in self.catalog._bound)

    def __len__(self) -> int:
        return len(self.catalog._bound)


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
    return (
        versions,
        watermark_ms,
        batch_ts_ms,
        {"positions": positions, "late_watermark_ms": late_ms},
    )


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[
        :-3
    ]


def _offset(offset) -> dict:
    """A source offset of a progress report, parsed ({} when absent)."""
    if isinstance(offset, str) and offset.strip().startswith("{"):
        offset = json.loads(offset)
    return offset if isinstance(offset, dict) else {}


def _summarise(progress: list[dict]) -> tuple[int, dict, int, int | None, int]:
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


def _query_id(checkpoint: str) -> str:
    with open(os.path.join(checkpoint, "metadata")) as fh:
        return json.load(fh)["id"]


def compile_model(catalog: Catalog, model: StreamingModel):
    """The model's QueryPlan (sql/), with SQL errors raised as StreamingError."""
    try:
        return sqlfront.compile_query(
            model.sql,
            schemas=_Schemas(catalog),
            watermark_delay=model.config.get("watermark_delay"),
            materialization=model.materialization,
            unique_key=upsert.unique_key(model.config),
            emit_early=upsert.emit_early(model.config, model.materialization),
            changelogs=upsert.Changelogs(catalog, model.config.get("dimensions")),
            state_ttl=model.config.get("state_ttl"),
            constant_domain=upsert.names_config(model.config, "constant_domain"),
            dimensions=upsert.names_config(model.config, "dimensions"),
        )
    except sqlfront.SqlError as exc:
        raise StreamingError(exc.code, exc.what, exc.why, exc.fix + _position(exc)) from None


def run_streaming_model(
    spark,
    catalog: Catalog,
    model: StreamingModel,
    spark_settings: tuple = ("local[*]", {}),
    monitor: Optional["runner.Monitor"] = None,
) -> StreamingAdapterResponse:
    """Bring `model`'s Delta table up to date with its sources (available-now trigger), or, for a
    continuous model, make sure its runner runs it (runtime/runner.py). Inside a runner
    (`monitor`), run the query with its processing-time trigger until stopped."""
    started = time.time()
    interval = runner.processing_time(model.config)
    plan = compile_model(catalog, model)
    admission.source_options(model.config)  # SSC201 before a runner starts
    if monitor is not None:
        with lifecycle.model_lock(catalog.warehouse, model.name):
            return _run(spark, catalog, model, plan, started, interval, monitor)
    current = runner.status(catalog.warehouse, model.name)
    if current and current["alive"]:
        pid = f"pid {current['pid']} on {current['host']}"
        if interval and not model.full_refresh and current["fingerprint"] == plan.fingerprint:
            logger.info(
                f"{model.name}: running continuously ({pid}, since {current['started']}, every "
                f"{current['interval']}; last batch {current['last_batch']} at "
                f"{current['last_batch_at'] or '-'}); nothing to do"
            )
            return StreamingAdapterResponse(
                _message=f"running ({pid})", duration_s=round(time.time() - started, 2)
            )
        if not model.full_refresh and current["fingerprint"] != plan.fingerprint:
            raise StreamingError(
                "SSR301",
                f"the query of {model.name} changed while its runner ({pid}) runs the old one"
                + _query_change(
                    catalog.location(model.schema, model.identifier),
                    current["fingerprint"],
                    model.sql,
                ),
                "the runner's state belongs to the old query, and reusing it could silently miscount",
                f"Run `dbt run --full-refresh -s {model.identifier}` to stop the runner and rebuild the table, "
                "or revert the change.",
            )
        why = "--full-refresh" if model.full_refresh else "its trigger is now available_now"
        logger.info(f"{model.name}: stopping its runner ({pid}): {why}")
        runner.stop(catalog.warehouse, model.name)
    elif current and current["state"] in ("dead", "failed"):
        reason = (
            runner.error_text(current)
            if current["state"] == "failed"
            else (
                f"process {current['pid']} ended without stopping its query (killed?); last heartbeat "
                f"{current.get('heartbeat')}"
            )
        )
        tail = runner.log_tail(catalog.warehouse, model.name, 3)
        logger.warning(
            f"{model.name}: its runner {current['state']}: {reason}"
            + (f" (log: {tail})" if tail else "")
            + ("; restarting it from its checkpoint" if interval else "")
        )
    if interval is None or model.full_refresh:
        with lifecycle.model_lock(catalog.warehouse, model.name):
            response = _run(spark, catalog, model, plan, started)
        if interval is None:
            return response
    spec = {
        "warehouse": catalog.warehouse,
        "master": spark_settings[0],
        "conf": spark_settings[1],
        "locations": registered_locations(),
        "fingerprint": plan.fingerprint,
        "processing_time": interval,
        "model": {**model.__dict__, "full_refresh": False, "config": dict(model.config)},
    }
    st = runner.start(
        catalog.warehouse,
        model.name,
        spec,
        lambda s: logger.info(
            f"{model.name}: runner pid {s['pid']}: batch {s['last_batch']} committed, {s['rows_written']} rows "
            f"written, watermark {s['watermark'] or 'none'}"
        ),
    )
    logger.info(
        f"{model.name}: running continuously every {interval} (runner pid {st['pid']} on {st['host']}, "
        f"last batch {st['last_batch']}); `dbt run-operation stream_status` shows it, "
        f"`dbt run-operation stream_stop --args '{{model: {model.identifier}}}'` stops it"
    )
    return StreamingAdapterResponse(
        _message=f"running (runner pid {st['pid']})",
        batches=0 if st["last_batch"] is None else 1,
        rows_written=st["rows_written"],
        rows_read=st["rows_read"],
        watermark=st["watermark"],
        duration_s=round(time.time() - started, 2),
    )


def _run(
    spark,
    catalog: Catalog,
    model: StreamingModel,
    plan,
    started: float,
    interval: Optional[str] = None,
    monitor: Optional["runner.Monitor"] = None,
) -> StreamingAdapterResponse:
    from pyspark.errors import PySparkException

    target = catalog.location(model.schema, model.identifier)
    if lifecycle.recover(catalog.warehouse, model.name, target):
        logger.info(
            f"{model.name}: finished a full refresh that was interrupted while swapping tables"
        )
    # A full refresh builds the new table aside; the old one stays readable until it is complete.
    build = lifecycle.refresh_path(catalog.warehouse, model.name) if model.full_refresh else target
    checkpoint = os.path.join(build, "_dbt_streaming", "checkpoint")
    paths = {}
    for name in plan.sources:
        schema, _, identifier = name.rpartition(".")
        paths[name] = catalog.location(schema or "default", identifier)
        if not is_delta(paths[name]):
            raise StreamingError(
                "SSR302",
                f"source {name} of {model.name} has no Delta table",
                f"nothing at {paths[name]}",
                "Run `dbt seed` / the upstream model first, or set the source's `meta: {location: ...}`.",
            )
    dimensions = _dimensions(model, plan)
    streams = {n: p for n, p in paths.items() if n not in dimensions}
    previous = _check_state(model, plan, build, checkpoint, streams) or {}
    options = admission.source_options(model.config)  # max_files_per_trigger, starting_version...
    admission.check_start(options, streams, checkpoint)

    bindings = {}
    for i, (name, path) in enumerate(paths.items()):
        view = f"__dss_{model.schema}_{model.identifier}_{i}"
        if name in dimensions:  # a table, read at its latest version when each micro-batch runs
            spark.read.format(FORMAT).load(path).createOrReplaceTempView(view)
        else:
            spark.readStream.format(FORMAT).options(**options).option("table", name).load(
                path
            ).createOrReplaceTempView(view)
        bindings[name] = view
    try:
        df = spark.sql(plan.sql_for(bindings))
    except PySparkException as exc:
        raise StreamingError(
            "SSR303",
            f"Spark cannot plan the streaming query of {model.name}",
            str(exc).splitlines()[0],
            "Fix the model SQL; nothing was started or written.",
        ) from None

    save_query(
        build, plan, model.sql, dict(model.config), model.materialization
    )  # for snapshot_equivalence
    keep = plan.upsert.keep_column if plan.upsert else None
    ranked = plan.upsert is not None and plan.upsert.rank_sql is not None
    partials = (
        plan.upsert.partials if plan.upsert else None
    )  # state_ttl: partial aggregates in Delta
    schema = (
        upsert.ranked(plan, spark.createDataFrame([], df.schema), model.name).schema
        if ranked
        else state.result_schema(plan, spark, df.schema, model.name)
        if partials
        else df.schema
    )
    columns = [(f.name, f.dataType.simpleString()) for f in schema.fields if f.name != keep]
    arrow_schema = types.arrow_schema(columns)
    keys = upsert.key_columns(plan, [c for c, _ in columns])
    base_meta = {
        "fingerprint": plan.fingerprint,
        "model": model.name,
        "materialization": model.materialization,
    }
    written = {"rows": 0, "commits": 0, "replayed": 0}
    run_batches: list[dict] = []  # sources and watermark of each batch committed by this run
    committer: list = []  # BatchCommitter | UpsertCommitter [, PartialsCommitter]

    def create() -> None:
        create_table(build, arrow_schema, {**base_meta, "batch_id": None, "sources": {}})
        if keys:
            create_changelog(build, arrow_schema, restarts=partials is not None)

    def sink(batch_df, batch_id: int) -> None:
        if not is_delta(build):
            create()
        if not committer:
            app_id = f"dbt-spark-streaming-{_query_id(checkpoint)}"
            committer.append(
                UpsertCommitter(build, app_id, arrow_schema, keys, keep)
                if keys
                else BatchCommitter(build, app_id, arrow_schema)
            )
            if partials:  # its commit is the batch's last: the one that says the batch is done
                committer.append(PartialsCommitter(build, app_id, list(partials.keys)))
        if committer[-1].committed(batch_id):
            # Replay of a batch already in Delta: Spark (4.2+) still needs the plan executed.
            batch_df.write.format("noop").mode("overwrite").save()
            written["replayed"] += 1
            return
        versions, watermark_ms, batch_ts_ms, exact = _read_offsets(checkpoint, batch_id)
        meta = {
            **base_meta,
            "batch_id": batch_id,
            "sources": versions,
            **exact,  # positions and late-row watermark, for the oracle (runtime/equivalence.py)
            "watermark_ms": watermark_ms,
            "watermark": _iso(watermark_ms) if plan.watermark_delay_us is not None else None,
        }
        if partials:
            rows, merged, restarted = state.batch(
                plan, batch_df, build, batch_ts_ms, model.name, keys
            )
            meta["restarted_keys"] = len(restarted)
            # a crash after the table's commit replays the batch: only the partials are left to store
            count = (
                0
                if committer[0].committed(batch_id)
                else committer[0].commit(rows, batch_id, meta, restarted)
            )
            committer[1].commit(merged, batch_id, batch_ts_ms - partials.ttl_ms)
        else:
            rows = (
                upsert.rerank(plan, batch_df, build, keys, model.name)
                if ranked
                else batch_df.toArrow()
            )
            count = committer[0].commit(rows, batch_id, meta)
        written["rows"] += count
        written["commits"] += 1
        run_batches.append({"sources": versions, "watermark_ms": watermark_ms, **exact})
        if monitor is not None:
            monitor.batch(batch_id, count, meta["watermark"])
        elif time.time() - progress["logged"] >= PROGRESS_EVERY_S:  # a long backfill shows progress
            progress["logged"] = time.time()
            at = ", ".join(
                f"{n} v{v} of v{progress['latest'].get(n, '?')}" for n, v in versions.items()
            )
            logger.info(
                f"{model.name}: batch {batch_id} committed ({at}): {written['rows']} rows written "
                f"in {written['commits']} batches so far, {round(time.time() - started)}s"
            )

    progress = {"logged": time.time(), "latest": {n: latest_version(p) for n, p in paths.items()}}
    trigger = {"processingTime": interval} if interval else {"availableNow": True}
    query = (
        df.writeStream.queryName(f"dbt_{model.schema}_{model.identifier}")
        .outputMode(plan.output_mode)
        .foreachBatch(sink)
        .trigger(**trigger)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        monitor.wait(query) if monitor is not None else query.awaitTermination()
    except PySparkException as exc:
        raise StreamingError(
            "SSR306",
            f"the streaming query of {model.name} failed",
            _first_error_line(str(exc)),
            "Fix the cause and run `dbt run` again: it resumes from the last committed "
            "batch, nothing is lost or duplicated.",
        ) from None
    if model.full_refresh:
        if not is_delta(build):  # no source rows at all: the rebuilt table is empty
            create()
        lifecycle.swap_in(catalog.warehouse, model.name, build, target)
        logger.info(
            f"{model.name}: --full-refresh rebuilt the table from the sources' full history"
        )
    catalog.bind(model.schema, model.identifier)
    if keys:
        catalog.bind_changelog(model.schema, model.identifier)

    rows, versions, late, watermark, state_rows = _summarise(query.recentProgress)
    if late:
        # Spark counts dropped rows after partial aggregation; count the input rows exactly.
        df = late_rows(
            spark,
            catalog,
            plan,
            run_batches,
            consumed(previous),
            f"__dss_late_{model.schema}_{model.identifier}",
        )
        late = df.count() if df is not None else late
    response = StreamingAdapterResponse(
        _message="",
        rows_affected=written["rows"],
        rows_read=rows,
        versions_read=versions,
        batches=written["commits"] + written["replayed"],
        rows_written=written["rows"],
        late_rows=late,
        watermark=watermark,
        state_rows=state_rows,
        duration_s=round(time.time() - started, 2),
    )
    logger.info(_log_line(model, response, paths))
    written_what = "changes" if model.materialization == UPSERT_TABLE else "rows written"
    response._message = (
        f"{response.rows_written} {written_what}, {rows} read"
        if response.batches
        else "no new data"
    )
    return response


def _log_line(model: StreamingModel, r: StreamingAdapterResponse, paths: dict[str, str]) -> str:
    if not r.batches:
        at = ", ".join(f"{n} at v{latest_version(p)}" for n, p in paths.items())
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


def _dimensions(model: StreamingModel, plan) -> set[str]:
    """The sources named in config `dimensions` (by model name or schema.identifier; sql/state.py
    checked that each names one): joined as tables, not streams (a stream-to-table enrichment join)."""
    wanted = upsert.names_config(model.config, "dimensions")
    return {s for s in plan.sources for w in wanted if w in (s, s.rpartition(".")[2])}


def _query_change(target: str, fingerprint: str, sql: str) -> str:
    """' (- old line / + new line ...)': the model SQL lines that changed, if the old query is recorded."""
    import difflib

    try:
        with open(query_file(target, fingerprint)) as fh:
            old = json.load(fh)["sql"]
    except (OSError, ValueError, KeyError):
        return ""
    lines = [
        line[0] + " " + " ".join(line[1:].split())
        for line in difflib.unified_diff(
            old.strip().splitlines(), sql.strip().splitlines(), n=0, lineterm=""
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()
    ]
    if not lines:
        return ""
    return " (" + " / ".join(lines[:4]) + (" / ..." if len(lines) > 4 else "") + ")"


def _check_state(
    model: StreamingModel, plan, target: str, checkpoint: str, paths: dict[str, str]
) -> None:
    """Refuse, before any stream starts: a changed query over old state, a table whose
    checkpoint is gone, a source that is no longer append-only since the last commit.
    Returns the metadata of the table's last commit (None for a new table)."""
    previous = last_metadata(target)
    if previous and previous.get("fingerprint") != plan.fingerprint:
        raise StreamingError(
            "SSR301",
            f"the query of {model.name} changed since its table was built"
            + _query_change(target, previous["fingerprint"], model.sql),
            "its checkpoint holds state of the old query, and reusing it could silently miscount",
            "Run `dbt run --full-refresh -s "
            + model.identifier
            + "` to rebuild it from the sources' full history.",
        )
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
    for name, version in (previous or {}).get("sources", {}).items():
        if name in paths:
            added_files(
                paths[name], version, latest_version(paths[name])
            )  # raises SSD401 on a remove
    return previous


def _position(exc) -> str:
    return (
        f" (line {exc.position[0]}, column {exc.position[1]})"
        if getattr(exc, "position", None)
        else ""
    )


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "dbt-spark-streaming" in line or "Error" in line:
            return line.strip()
    return text.splitlines()[0] if text else "unknown error"
