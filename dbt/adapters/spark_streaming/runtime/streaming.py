"""Running a streaming model: compile its SQL, bind its sources as streaming views, run the
Structured Streaming query that maintains its Delta table, and report what happened.

`run_streaming_model` decides where the query runs: here until it has caught up (trigger
available_now), or in a runner process that keeps it running (a processing-time trigger:
runtime/continuous/). `_run` runs it, in steps: recover and prepare its places (model.py), check
its sources and state, bind its inputs and plan the DataFrame, start the query with its sink
(sink.py, which commits each micro-batch), then finish: swap in a full refresh, rebind the
table, summarise and log (report.py).

The checkpoint lives with the table (`<table>/_dbt_streaming/checkpoint`, layout.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable, Optional

from dbt.adapters.events.logging import AdapterLogger

from .. import layout
from ..delta.log import read_once, release
from ..delta.sink import rewrite_columns
from ..delta.source import (
    AWAIT_COMMIT_MS,
    AWAIT_IDLE_MS,
    AWAIT_STOP_FILE,
    AWAIT_TABLES,
    AWAIT_WATERMARK,
    FORMAT,
    READ_ALL,
    consumed,
    read_change_feed,
    skip_change_commits,
)
from ..delta.upsert import rewrite_changelog
from ..errors import StreamingError
from ..faults import fault_point
from ..sql.intervals import parse_duration
from . import (
    admission,
    backlog,
    failures,
    lifecycle,
    preflight,
    progress,
    report,
    upsert,
)
from .catalog import Catalog, registered_locations
from .changes import check_query_change
from .checkpoint import caught_up, plan_no_data_batch
from .continuous import pipeline, runner
from .equivalence import late_rows
from .inputs import classify
from .model import Places, StreamingModel, compile_model, record_query
from .report import StreamingAdapterResponse
from .sink import ModelSink, apply_table_properties

logger = AdapterLogger("SparkStreaming")


def run_streaming_model(
    spark,
    catalog: Catalog,
    model: StreamingModel,
    spark_settings: tuple = ("local[*]", {}),
    monitor: Optional[runner.Monitor] = None,
    inputs: Optional[list] = None,
) -> StreamingAdapterResponse:
    """Bring `model`'s Delta table up to date with its sources (available-now trigger), or, for a
    continuous model, make sure its runner runs it (runtime/continuous/pipeline.py). Inside a runner
    (`monitor`), run the query with its processing-time trigger until stopped. `inputs`: what
    the dbt graph says of the relations it reads, its tables joined as `dimensions`
    (runtime/inputs.py)."""
    started = time.time()
    model.config, read = classify(model.config, inputs or [])
    if read:
        logger.info(f"{model.name}: reads {read}")
    interval = runner.processing_time(model.config)
    host = pipeline.name_of(model.config, model.name) if interval else None
    pipeline.max_restarts(model.config)  # SSC201 before a runner starts
    pipeline.shuffle_partitions(model.config)
    target = model.location(catalog)
    refresh = layout.refresh(catalog.warehouse, catalog.control, model.name)
    # each source's log read once until the query starts (_run); the model's tables afresh
    with read_once(target, refresh.build):
        plan = compile_model(catalog, model)
        admission.source_options(model.config)  # SSC201 before a runner starts
        backlog.enabled(model.config)
        preflight.check_writable(model.identifier, preflight.control_root(catalog.control), target)
        if monitor is not None:  # the runner takes over the lock of the `dbt run` that started it
            with lifecycle.model_lock(catalog.control, model.name, monitor.st.get("started_by")):
                return _run(spark, catalog, model, plan, refresh, started, interval, monitor)
        running = _settle_runner(catalog, model, plan, host)
        if running:
            return StreamingAdapterResponse(
                _message=f"running ({running})", duration_s=round(time.time() - started, 2)
            )
        # held until the runner, if one is started, has it: a concurrent run fails (SSR307)
        with lifecycle.model_lock(catalog.control, model.name):
            if interval is None or model.full_refresh:
                response = _run(spark, catalog, model, plan, refresh, started)
                if interval is None:
                    return response
            release()
            return _start_runner(catalog, model, plan, interval, host, spark_settings, started)


def _settle_runner(
    catalog: Catalog, model: StreamingModel, plan, host: Optional[str]
) -> Optional[str]:
    """Deal with the runner that runs the model, if any: leave it be when it runs this query
    continuously in the runner `host` names (returns its 'pid ... on host'); refuse a changed
    query it runs (SSR301); stop the model's query there when it is to run otherwise
    (--full-refresh, available_now, another runner); warn of one that died or failed."""
    current = runner.status(catalog.control, model.name)
    if current and current["alive"]:
        pid = f"runner {current.get('pipeline')}, pid {current['pid']} on {current['host']}"
        moved = host is not None and current.get("pipeline") != host
        same = current["fingerprint"] == plan.fingerprint
        if host and not model.full_refresh and same and not moved:
            logger.info(
                f"{model.name}: running continuously ({pid}, since {current['started']}, every "
                f"{current['interval']}; last batch {current['last_batch']} at "
                f"{current['last_batch_at'] or '-'}); nothing to do"
            )
            return pid
        changed = not model.full_refresh and not same
        if changed:  # SSR301 unless the change keeps the state: then restart the runner
            target = model.location(catalog)
            check_query_change(catalog, model, plan, target, current["fingerprint"], pid)
        why = (
            "--full-refresh"
            if model.full_refresh
            else "its query changed"
            if changed
            else f"its pipeline is now {host}"
            if moved
            else "its trigger is now available_now"
        )
        logger.info(f"{model.name}: stopping its query in its runner ({pid}): {why}")
        runner.stop(catalog.control, model.name)
    elif current and current["state"] in ("dead", "failed"):
        reason = (
            runner.error_text(current)
            if current["state"] == "failed"
            else (
                f"process {current['pid']} ended without stopping its query (killed?); last "
                f"heartbeat {current.get('heartbeat')}"
            )
        )
        tail = runner.log_tail(catalog.control, current, 3)
        logger.warning(
            f"{model.name}: its runner {current['state']}: {reason}"
            + (f" (log: {tail})" if tail else "")
            + ("; restarting it from its checkpoint" if host else "")
        )
    return None


def _start_runner(
    catalog: Catalog,
    model: StreamingModel,
    plan,
    interval: str,
    host: str,
    spark_settings: tuple,
    started: float,
) -> StreamingAdapterResponse:
    """Hand the model to runner `host` (started if none runs) and return once its query has
    finished its first trigger."""
    session = {
        "control": catalog.control,
        "warehouse": catalog.warehouse,
        "checkpoint_root": catalog.checkpoint_root,
        "master": spark_settings[0],
        "conf": spark_settings[1],
    }
    spec = {
        "locations": registered_locations(),
        "fingerprint": plan.fingerprint,
        "processing_time": interval,
        "started_by": os.getpid(),
        "model": model.runner_spec(),
    }
    pipeline.warn_if_settings_differ(catalog.control, host, session)
    st = pipeline.hand(
        catalog.control,
        host,
        session,
        model.name,
        spec,
        lambda s: logger.info(
            f"{model.name}: runner {host} pid {s['pid']}: batch {s['last_batch']} committed, "
            f"{s['rows_written']} rows written, watermark {s['watermark'] or 'none'}"
        ),
    )
    logger.info(
        f"{model.name}: running continuously every {interval} (runner {host}, pid {st['pid']} "
        f"on {st['host']}, last batch {st['last_batch']}); `dbt run-operation stream_status` "
        f"shows it, `dbt run-operation stream_stop --args '{{model: {model.identifier}}}'` "
        "stops it"
    )
    return StreamingAdapterResponse(
        _message=f"running (runner {host} pid {st['pid']})",
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
    refresh: layout.Refresh,
    started: float,
    interval: Optional[str] = None,
    monitor: Optional[runner.Monitor] = None,
) -> StreamingAdapterResponse:
    """Run the model's query: until it has caught up (`interval` None: available now), or with
    a processing-time trigger until `monitor` stops it. `refresh`: where a full refresh builds
    (and an interrupted one is finished)."""
    places = _places(catalog, model, plan, refresh)
    if monitor is not None:  # the runner's models downstream of others (host.Host.rank)
        monitor.target, monitor.sources = places.target, frozenset(places.streams.values())
    options = admission.source_options(model.config)  # max_files_per_trigger, starting_version...
    previous = preflight.check_sources_and_state(model, plan, places, options, catalog)
    apply_table_properties(places.build, model.config)
    streams = places.streams
    admission.check_start(options, streams, places.checkpoint)
    changed = previous.get("fingerprint") not in (None, plan.fingerprint)  # keeping its state
    idle = interval is None and _nothing_to_run(model, plan, places, options)
    if idle and not changed:
        return _nothing_new(model, plan, places, previous, started)
    split = (
        None
        if idle
        else backlog.plan_split(plan, model.config, streams, places.checkpoint, options)
    )
    read = _awaiting(options, interval, plan, streams, monitor)
    df, results, schema = _plan_dataframe(spark, model, plan, places, read, split)
    sink = ModelSink(spark, model, plan, places, schema, started, monitor, catalog.warehouse)
    _check_columns(model, plan, places, sink, previous if changed else None)
    if idle:  # a changed query, its columns rewritten: no batch to run
        return _nothing_new(model, plan, places, previous, started)
    record_query(places.build, plan, model)  # for snapshot_equivalence
    closing = plan_no_data_batch(places.checkpoint)
    if closing is not None:  # a crash after a batch's commit, before Spark planned this one
        logger.info(f"{model.name}: batch {closing} emits what the restored watermark closed")
    expected = None if monitor else progress.expected_batches(streams, places.checkpoint, options)
    write = sink if results is None else lambda batch, batch_id: sink(results(batch), batch_id)
    if split is not None:
        view = f"__dss_backlog_{model.schema}_{model.identifier}"
        path = places.sources[split.source]
        write = split.with_closed_windows(
            write, plan, path, view, lambda text: logger.info(f"{model.name}: {text}")
        )
    release()  # from here on, the sources' logs are read afresh (progress, report)
    partitions = pipeline.shuffle_partitions(model.config)
    query = _start(df, model, plan, places, write, interval, expected == 1, partitions)
    counted = split.counted if split is not None else runner.as_reported
    _wait(query, model, places, monitor, expected, counted)
    reports = counted(query.recentProgress)
    return _finish(spark, catalog, model, plan, places, refresh, sink, reports, previous, started)


IDLE_WAIT_MS = 10_000  # an idle source's wait for a commit (bench/README: idle CPU)


def _awaiting(options: dict, interval: Optional[str], plan, streams, monitor) -> dict:
    """The source options of a continuous query (in a runner: `monitor`): when a trigger finds
    nothing new, its source waits for the next commit, up to 0.8 of the interval (Spark's next
    trigger stays on time), or until the runner stops the query, and the batch reads it as it
    lands (delta/source.py AWAIT_COMMIT_MS): a model downstream of another takes in each of its
    commits at once. Once the source is idle (several triggers in a row found nothing), it
    waits up to IDLE_WAIT_MS (or the interval's 0.8 if longer): an idle model's query runs a
    trigger every 10 s, not every interval. Not at the trigger after a batch of data in a query
    with a watermark (the watermark's batch may be due). A query of several streams (a join)
    gives each the tables of all (AWAIT_TABLES): a commit to any ends a source's wait."""
    if monitor is None or interval is None or not streams:
        return options
    wait = parse_duration(interval) * 8 // 10_000
    watermark = "true" if plan.watermark_delay_us is not None else "false"
    tables = {AWAIT_TABLES: json.dumps(sorted(set(streams.values())))} if len(streams) > 1 else {}
    return {
        **options,
        AWAIT_COMMIT_MS: str(wait),
        AWAIT_IDLE_MS: str(max(wait, IDLE_WAIT_MS)),
        AWAIT_STOP_FILE: monitor.stop_file,
        AWAIT_WATERMARK: watermark,
        **tables,
    }


def _check_columns(model: StreamingModel, plan, places: Places, sink: ModelSink, changed) -> None:
    """SSR321 if the query would write other columns than its table has; but if its query
    changed keeping the state (`changed`: the table's last commit metadata) and its columns
    were renamed, added or dropped, the table (and an upsert_table's changelog) is rewritten
    with the new columns (the old rows NULL in an added one) in one commit that carries that
    metadata with the new query's fingerprint and the columns' sources (for
    snapshot_equivalence), so once. A state_ttl model's partials name no output column."""
    written = sink.arrow_schema
    change = preflight.column_sources(places.build, written) if changed else None
    if change is None:
        preflight.check_columns(model.identifier, places.build, written)
        return
    sources, words = change
    record_query(places.build, plan, model)  # the query of the fingerprint the commit records
    columns = [[new, old] for new, old in zip(written.names, sources, strict=True)]
    meta = {k: v for k, v in changed.items() if k != "table_version"}
    meta.update(fingerprint=plan.fingerprint, columns=columns)
    if sink.keys:  # first the changelog: the table's commit is the one that says it is done
        rewrite_changelog(places.build, columns, written)
        fault_point("columns_rewriting", -1)
    count = rewrite_columns(places.build, columns, written, meta)
    logger.info(f"{model.name}: columns changed ({words}): rewrote its table ({count} rows)")


def _nothing_to_run(model: StreamingModel, plan, places: Places, options: dict) -> bool:
    """Whether the query, started now with the available-now trigger (and the source
    `options`), would run no batch (checkpoint.caught_up): then the run need not start it, nor
    Spark."""
    streams = places.streams
    return (
        not model.full_refresh
        and bool(streams)
        and caught_up(
            places.checkpoint, streams, skip_change_commits(options), read_change_feed(options)
        )
    )


def _nothing_new(
    model: StreamingModel, plan, places: Places, previous: dict, started: float
) -> StreamingAdapterResponse:
    """The response of a run that had nothing to read (logged as a run of the query is)."""
    record_query(places.build, plan, model)
    response = StreamingAdapterResponse(
        _message="",
        watermark=previous.get("watermark"),
        versions_behind=progress.versions_behind(places.streams, places.checkpoint),
        duration_s=round(time.time() - started, 2),
    )
    logger.info(report.log_line(model, response, places.sources))
    response._message = report.message(model, response)
    return response


def _places(catalog: Catalog, model: StreamingModel, plan, refresh: layout.Refresh) -> Places:
    """Where this run reads and writes, once an interrupted full refresh is finished."""
    target = model.location(catalog)
    sources = {name: catalog.location_of(name) for name in plan.sources}
    dimensions = _dimensions(model, plan)
    if catalog.checkpoint_root:
        # The checkpoint is not beside the table, and object storage cannot rename a
        # directory: a full refresh is swapped in by commits (lifecycle.py).
        checkpoint = catalog.checkpoint(model.name, target)
        if lifecycle.recover_by_commit(refresh, target, checkpoint):
            logger.info(f"{model.name}: finished a full refresh that was built but not swapped in")
        if model.full_refresh:
            build, aside = lifecycle.empty_build_aside(refresh)
            return Places(target, build, sources, aside, dimensions)
        return Places(target, target, sources, checkpoint, dimensions)
    if lifecycle.recover(refresh, target):
        logger.info(
            f"{model.name}: finished a full refresh that was interrupted while swapping tables"
        )
    # A full refresh builds the new table aside; the old one stays readable until it is complete.
    build = lifecycle.empty_build(refresh) if model.full_refresh else target
    return Places(target, build, sources, catalog.checkpoint(model.name, build), dimensions)


def _plan_dataframe(spark, model: StreamingModel, plan, places: Places, options: dict, split=None):
    """The model's streaming DataFrame: each source bound as a temp view (a stream read with
    the admission `options`, or for a dimension a table read at its latest version), the plan's
    Spark SQL over them (with a backlog `split`, its stream's part: runtime/backlog.py); with
    the function that makes each micro-batch of it the rows to write (None: its rows are; see
    runtime/over.py and runtime/temporaljoin.py), and their schema."""
    from pyspark.errors import PySparkException

    bindings = {}
    for i, (name, path) in enumerate(places.sources.items()):
        view = f"__dss_{model.schema}_{model.identifier}_{i}"
        if name in places.dimensions:  # a table, read at its latest version in each micro-batch
            spark.read.format(FORMAT).load(path).createOrReplaceTempView(view)
        else:
            reader = spark.readStream.format(FORMAT).options(**options).option("table", name)
            temporal = plan.temporal
            if temporal is not None and temporal.changes and temporal.changelog == name:
                reader = reader.option(READ_ALL, "true")  # whole versions: temporaljoin.py
            if split is not None and split.source == name:
                reader = reader.options(**split.reader_options(plan.backlog_window))
            reader.load(path).createOrReplaceTempView(view)
        bindings[name] = view
    try:
        if plan.temporal is not None:  # a temporal join: our operator
            from .temporaljoin import temporal_dataframe

            view = f"__dss_tj_{model.schema}_{model.identifier}"
            return temporal_dataframe(spark, plan, bindings, view)
        df = spark.sql(
            plan.sql_for(bindings) if split is None else split.stream_sql(plan, bindings)
        )
        if plan.over is None:
            return df, None, df.schema
        from .over import over_dataframe  # an OVER aggregation: our operator

        return over_dataframe(df, plan.over, spark.sql(plan.over_sql_for(bindings)).schema)
    except PySparkException as exc:
        raise StreamingError(
            "SSR303",
            f"Spark cannot plan the streaming query of {model.name}",
            next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__),
            "Fix the model SQL; nothing was started or written.",
        ) from None


def _dimensions(model: StreamingModel, plan) -> frozenset[str]:
    """The sources named in config `dimensions` (by model name or schema.identifier; sql/state.py
    checked that each names one): joined as tables, not streams (a stream-to-table enrichment
    join)."""
    wanted = upsert.names_config(model.config, "dimensions")
    return frozenset(s for s in plan.sources for w in wanted if w in (s, s.rpartition(".")[2]))


# A query's state stores loaded from the checkpoint are kept for its next micro-batch; Spark
# snapshots them (every minDeltasForSnapshot versions) and removes old files in a maintenance
# thread that first runs a minute after they are loaded. A `dbt run` query reading one batch
# stops well before: its stores do that maintenance as the batch commits, instead (Spark's
# unloadOnCommit), or every run's load would replay one more delta file, for ever.
UNLOAD_ON_COMMIT = "spark.sql.streaming.stateStore.unloadOnCommit"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"  # config shuffle_partitions (pipeline.py)
_starting = threading.Lock()  # the setting and the start, together (dbt runs models in threads)


def _start(
    df,
    model: StreamingModel,
    plan,
    places: Places,
    sink,
    interval,
    unload_state: bool,
    partitions: Optional[int],
):
    """Start the query: its micro-batches go to `sink` (a ModelSink, or a function that hands
    them to one), its progress to the checkpoint. `unload_state`: its state stores do their
    maintenance and are unloaded as each batch commits (UNLOAD_ON_COMMIT); `partitions`: its
    shuffle partitions if its checkpoint is new (None: the session's). The query takes the
    settings as it starts (Spark runs it in a clone of the session)."""
    from pyspark.errors import PySparkException

    trigger = {"processingTime": interval} if interval else {"availableNow": True}
    conf = df.sparkSession.conf
    try:
        with _starting:
            conf.set(UNLOAD_ON_COMMIT, "true" if unload_state else "false")
            shuffle = conf.get(SHUFFLE_PARTITIONS)
            if partitions is not None:
                conf.set(SHUFFLE_PARTITIONS, str(partitions))
            try:
                return (
                    df.writeStream.queryName(f"dbt_{model.schema}_{model.identifier}")
                    .outputMode(plan.output_mode)
                    .foreachBatch(sink)
                    .trigger(**trigger)
                    .option("checkpointLocation", places.checkpoint)
                    .start()
                )
            finally:
                conf.set(SHUFFLE_PARTITIONS, shuffle)
    except PySparkException as exc:
        raise failures.query_failed(
            model.identifier, model.name, places.checkpoint, str(exc)
        ) from None


def _wait(
    query,
    model: StreamingModel,
    places: Places,
    monitor: Optional[runner.Monitor],
    expected: Optional[int],
    counted: Callable[[list[dict]], list[dict]],
) -> None:
    """Until the query has caught up (available now: a log line per micro-batch, the k-th of
    about `expected`) or the runner's monitor stopped it; its failure as a coded error
    (runtime/failures.py). `counted`: Spark's progress reports as the run counts them (a
    backlog split's batch 0 read the snapshot)."""
    from pyspark.errors import PySparkException

    try:
        if monitor is not None:
            monitor.wait(query, counted)
        else:
            progress.follow(query, logger.info, model.name, expected, counted)
    except PySparkException as exc:
        raise failures.query_failed(
            model.identifier, model.name, places.checkpoint, str(exc)
        ) from None


def _finish(
    spark,
    catalog: Catalog,
    model: StreamingModel,
    plan,
    places: Places,
    refresh: layout.Refresh,
    sink: ModelSink,
    reports: list[dict],
    previous: dict,
    started: float,
) -> StreamingAdapterResponse:
    """Swap in a full refresh's table, rebind the table, and summarise the run (logged) from
    Spark's progress `reports` of its query."""
    if model.full_refresh:
        sink.ensure_table()  # no source rows at all: the rebuilt table is empty
        if catalog.checkpoint_root:
            live = catalog.checkpoint(model.name, places.target)
            lifecycle.swap_by_commit(refresh, places.target, live, sink.keys)
        else:
            lifecycle.swap_in(refresh, places.target)
        logger.info(
            f"{model.name}: --full-refresh rebuilt the table from the sources' full history"
        )
    catalog.bind(model.schema, model.identifier)
    if sink.keys:
        catalog.bind_changelog(model.schema, model.identifier)

    rows, versions, late, watermark, state_rows = report.summarise(reports)
    if late:
        # Spark counts dropped rows after partial aggregation; count the input rows exactly.
        df = late_rows(
            spark,
            catalog,
            plan,
            sink.batches,
            consumed(previous),
            f"__dss_late_{model.schema}_{model.identifier}",
        )
        late = df.count() if df is not None else late
    response = StreamingAdapterResponse(
        _message="",
        rows_affected=sink.rows_written,
        rows_read=rows,
        versions_read=versions,
        batches=sink.commits + sink.replayed,
        rows_written=sink.rows_written,
        late_rows=late,
        watermark=watermark,
        state_rows=state_rows,
        state_bytes=progress.state_figures(reports[-1])[1] if reports else 0,
        event_time_lag_s=progress.event_time_lag_s(reports),
        versions_behind=progress.versions_behind(  # the checkpoint, swapped in if rebuilt
            places.streams, catalog.checkpoint(model.name, places.target)
        ),
        duration_s=round(time.time() - started, 2),
    )
    logger.info(report.log_line(model, response, places.sources))
    response._message = report.message(model, response)
    return response
