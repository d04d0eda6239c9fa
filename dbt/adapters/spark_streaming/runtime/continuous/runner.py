"""Continuous mode: a model's streaming query kept running in a runner, a long-lived process.

`trigger: {processing_time: '10 seconds'}` (or `continuous: true`, every 10 seconds) makes
`dbt run` hand the model to a runner (pipeline.py: by default one per warehouse,
hosting every continuous model's query in one SparkSession) that outlives `dbt run`. `dbt run`
returns once the query has started and finished its first trigger (so the table has caught up
with the sources as they were). This module is what a model's runs in a runner leave and
what dbt reads of them; the runner process itself is host.py.

Each continuous model keeps its files in ``<root>/.dbt_streaming/runners/<schema>.<identifier>/``,
where ``<root>`` is the warehouse's control root (the profile's `checkpoint_root`, else the
warehouse):

- ``spec.json``: what to run (the compiled model, source locations, the runner's name);
- ``status.json``: written by the runner (atomically): its pid and host, the model's state
  (``starting``, ``running``, ``stopping``, ``restarting``, ``stopped``, ``failed``),
  fingerprint, last batch, input rows/s, watermark, late rows, last error, restarts, the
  Spark scheduler pool of its last micro-batch;
- ``stop``: a stop request (`stream_stop`); the runner finishes the model's current batch and
  stops its query (the runner itself ends with its last model).

The runner holds the model's run lock (lifecycle.model_lock) while it runs the model, so no
other run writes the table meanwhile. A runner killed outright leaves status ``running`` with
a dead pid: ``dbt run`` reports it as dead and hands the model to a new runner, which resumes
from the checkpoint (exactly once, as after any crash).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from ... import layout
from ...errors import StreamingError, config_error
from ...sql.intervals import parse_duration
from ..lifecycle import alive

DEFAULT_INTERVAL = "10 seconds"
TERMINAL = ("stopped", "failed")
POLL = 0.5  # seconds between a runner's looks for a model's stop request
# the control files of a model's (and a shared runner's) directory: what to run, its status,
# a stop request
SPEC, STATUS, STOP = "spec.json", "status.json", "stop"
PROGRESS_EVERY = 4  # polls between asking a running query for its progress
# The Spark scheduler pool (FAIR, host.py) of the jobs a thread submits: a starting model's
# (its own, named after it) until its query has caught up, then Spark's "default" pool, or
# DOWNSTREAM for a model that streams from the table of another model of its runner
POOL = "spark.scheduler.pool"
DOWNSTREAM = "downstream"


def processing_time(config: Mapping[str, Any]) -> Optional[str]:
    """The processing-time trigger interval of a continuous model, or None (available-now)."""
    trigger = config.get("trigger") or "available_now"
    continuous = config.get("continuous")
    if continuous not in (None, True, False):
        raise config_error("continuous", continuous, "true or false")
    if isinstance(trigger, Mapping) and trigger.get("available_now") is True and len(trigger) == 1:
        trigger = "available_now"
    if trigger == "available_now":
        return DEFAULT_INTERVAL if continuous else None
    interval = (
        trigger.get("processing_time")
        if isinstance(trigger, Mapping) and len(trigger) == 1
        else None
    )
    try:
        us = parse_duration(str(interval)) if interval is not None else 0
    except ValueError:
        us = 0
    if us <= 0:
        raise config_error(
            "trigger",
            trigger,
            "'available_now' or {processing_time: '<duration>'} "
            "(e.g. '10 seconds'), a positive duration",
        )
    if continuous is False:
        raise config_error(
            "continuous", continuous, "true (or unset) with a processing_time trigger"
        )
    return str(interval)


def model_home(root: str, name: str) -> str:
    """Model `name`'s runner directory, created (reading a status must not create it)."""
    path = layout.runner_path(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, default=str)
    os.replace(tmp, path)


def read_json(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def read_status(path: str) -> Optional[dict]:
    """The status file at `path` with ``alive`` (its process runs), or None if there is none.
    A process gone without saying so is ``dead``."""
    try:
        st = read_json(path)
    except (OSError, ValueError):
        return None
    pid = st.get("pid")
    same_host = st.get("host") == socket.gethostname()
    st["alive"] = (
        st.get("state") not in TERMINAL and isinstance(pid, int) and (not same_host or alive(pid))
    )
    if st.get("state") not in TERMINAL and not st["alive"]:
        st["state"] = "dead"
    return st


def status(root: str, name: str) -> Optional[dict]:
    """The status of continuous model `name` in its runner, or None if it never had one."""
    return read_status(os.path.join(layout.runner_path(root, name), STATUS))


def error_text(st: dict) -> Optional[str]:
    """The last error of a runner status, as one line (None if there was none): a coded
    error's code and cause; 'gave up after n restarts' where the runner did."""
    error = st.get("error")
    if isinstance(error, dict):
        error = f"{error.get('code')}: {error.get('why')}"
    if error and st.get("gave_up"):
        error = f"{error} (gave up {st['gave_up']})"
    return error or None


def names(root: str) -> list[str]:
    """Models (schema.identifier) that have or had a runner."""
    runners = layout.runners_path(root)
    return sorted(os.listdir(runners)) if os.path.isdir(runners) else []


def tail(path: str, lines: int = 5, containing: str = "") -> str:
    """The last `lines` lines of the log file at `path` (those `containing` a text), on one
    line."""
    try:
        with open(path) as fh:
            found = [ln.strip() for ln in fh.read().splitlines() if containing in ln]
    except OSError:
        return ""
    return " | ".join(ln for ln in found[-lines:] if ln)


def log_tail(root: str, st: dict, lines: int = 5) -> str:
    """The last lines of its runner's log that name the model of status `st`."""
    log = os.path.join(layout.pipeline_path(root, st.get("pipeline") or ""), "runner.log")
    return tail(log, lines, st.get("model") or "")


def stop(root: str, name: str, timeout: float = 120.0) -> dict:
    """Ask model `name`'s runner to stop its query and wait until it has: stop_many."""
    return stop_many(root, [name], timeout)[0]


def stop_many(root: str, names: list[str], timeout: float = 120.0) -> list[dict]:
    """Ask the runners of models `names` to stop their queries, all at once, and wait until
    they have; their statuses. After `timeout`, a runner of a model's own gets SIGTERM; a
    shared one is left running the others."""
    sts = {n: status(root, n) for n in names}
    live = [n for n, st in sts.items() if st and st["alive"]]
    for n in live:
        open(os.path.join(model_home(root, n), STOP), "w").close()  # Monitor.stop_file
    deadline = time.time() + timeout
    while live and time.time() < deadline:
        time.sleep(0.25)
        sts.update((n, status(root, n)) for n in live)
        live = [n for n in live if sts[n]["alive"]]
    own = [n for n in live if sts[n].get("pipeline") == n]
    for n in own:
        os.kill(sts[n]["pid"], signal.SIGTERM)
    if own:
        time.sleep(5)
        sts.update((n, status(root, n) or sts[n]) for n in own)
    return [sts[n] or {"state": "none"} for n in names]


def stream_status(catalog) -> list[dict]:
    """One row per streaming model of the warehouse: its runner's state (or ``on dbt run``),
    last batch, input rows/s, watermark, lag behind its sources' latest versions, late rows
    (as Spark counts them, while the runner runs) and last error."""
    from ...delta import storage
    from ...delta.history import last_metadata
    from ...delta.source import latest_version

    rows = []
    for schema, identifier, path in catalog.delta_tables():
        meta = last_metadata(path) or {}
        if meta.get("materialization") not in ("streaming_view", "upsert_table"):
            continue
        name = f"{schema}.{identifier}"
        lag = {}
        for source, version in (meta.get("sources") or {}).items():
            src = catalog.location_of(source)
            if storage.is_delta(src):
                lag[source] = latest_version(src) - version
        st = status(catalog.control, name) or {}
        rows.append(
            {
                "model": name,
                "state": st.get("state", "on dbt run"),
                "runner": (
                    f"{st.get('pipeline')} pid {st['pid']} every {st['interval']}"
                    if st.get("pid")
                    else "-"
                ),
                "last_batch": meta.get("batch_id"),
                "last_commit": meta.get("table_version"),
                "input_rows_per_s": st.get("input_rows_per_s"),
                "watermark": meta.get("watermark"),
                "lag_versions": lag,
                "late_rows": st.get("late_rows"),
                "last_error": error_text(st),
            }
        )
    return rows


def status_json(rows: list[dict]) -> str:
    """`rows` of stream_status as one line of JSON (`--args '{format: json}'`)."""
    return json.dumps(rows, default=str, sort_keys=True)


def status_table(rows: list[dict]) -> str:
    """`rows` of stream_status as an aligned text table."""
    cols = [
        "model",
        "state",
        "runner",
        "last_batch",
        "input_rows_per_s",
        "watermark",
        "lag_versions",
        "late_rows",
        "last_error",
    ]

    def cell(row: dict, col: str) -> str:
        value = row.get(col)
        if col == "lag_versions":
            return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
        return "-" if value is None else str(value)[: 160 if col == "last_error" else 80]

    cells = [cols] + [[cell(r, c) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells
    )


def stop_runners(root: str, model: Optional[str] = None) -> list[list[str]]:
    """Stop the runner of `model` (identifier or schema.identifier) or, without one, every running
    runner; [[model, state], ...]. SSR311 if `model` never had a runner."""
    chosen = names(root)
    if model:
        wanted = str(model).lower()
        chosen = [n for n in chosen if wanted in (n, n.rpartition(".")[2])]
        if not chosen:
            raise StreamingError(
                "SSR311",
                f"no runner for model {model}",
                "only continuous models (a processing_time trigger) have one; known: "
                + (", ".join(names(root)) or "none"),
                "Pass the model's name, e.g. --args '{model: my_model}'.",
            )
    chosen = [n for n in chosen if model or (status(root, n) or {}).get("alive")]
    return [[n, st["state"]] for n, st in zip(chosen, stop_many(root, chosen), strict=True)]


def as_reported(reports: list[dict]) -> list[dict]:
    """Spark's progress reports of a query as a run counts them: as they are (a backlog split
    counts its batch 0 otherwise: runtime/backlog.py Backlog.counted)."""
    return reports


class Monitor:
    """Inside the runner: keeps status.json current and stops the query when asked."""

    def __init__(self, home: str, base: dict):
        self.home = home
        self.stop_file = os.path.join(home, STOP)  # a stop request (runner.stop)
        self.st = {
            **base,
            "state": "starting",
            "ready": False,
            "last_batch": None,
            "last_batch_at": None,
            "rows_read": 0,
            "rows_written": 0,
            "late_rows": 0,
            "input_rows_per_s": 0.0,
            "watermark": None,
            "error": None,
            "pool": None,
        }
        self.stop_requested = False
        # the model's table and the tables it streams from (set as its run starts), and the
        # shared pool its micro-batches go to once caught up (None: Spark's default; the
        # runner sets DOWNSTREAM for a model downstream of another of its models)
        self.target: Optional[str] = None
        self.sources: frozenset[str] = frozenset()
        self.shared: Optional[str] = None
        # the query's progress reports, each counted once into the status (`progressed`);
        # `counted` gives a backlog split's batch 0 the snapshot's rows (runtime/backlog.py)
        self.query: Any = None
        self.counted: Callable[[list[dict]], list[dict]] = as_reported
        self._through: Optional[str] = None  # the timestamp of the last report counted
        self._counting = threading.Lock()
        self.save()

    def pool(self, sc) -> None:
        """Called as a micro-batch starts, in the query's thread: once the query has caught up,
        its jobs go to a pool the runner's models share, first come first served: `shared`.
        Spark's FAIR scheduler breaks a tie between pools with as many running tasks by their
        names, so under load a pool per model served the models in alphabetical order: append
        -> commit p99 25-30 s for the last ones against 6 s with one queue (bench/README). A
        starting model's backlog keeps its own pool, and the live micro-batches are not queued
        behind its tasks. Once in its shared pool, a micro-batch asks the JVM nothing here (the
        query's thread stays there)."""
        shared = self.shared or "default"
        if self.st["pool"] == shared:
            return
        if self.st["ready"]:
            sc.setLocalProperty(POOL, self.shared)
        self.st["pool"] = sc.getLocalProperty(POOL) or "default"

    def progressed(self) -> Optional[dict]:
        """Count the query's last progress report into the status (rows read, late rows, input
        rate) unless counted already; returns the report. Called as each micro-batch starts
        (the report is then the previous batch's) and by `wait` (the last batch's): a report
        sampled every few seconds missed the batches between two samples."""
        if self.query is None:
            return None
        with self._counting:  # asked in turn: each report is seen after the ones before it
            try:
                report = self.query.lastProgress
            except Exception:  # noqa: BLE001 - a figure of the status: never a batch's failure
                return None
            # a report per trigger that ran a batch (and one every 10 s while idle: no rows)
            if report is None or report.get("timestamp") == self._through:
                return report
            self._through = report["timestamp"]
            (counted,) = self.counted([report])
            late = sum(
                op.get("numRowsDroppedByWatermark", 0) for op in report.get("stateOperators", [])
            )
            self.st.update(
                rows_read=self.st["rows_read"] + counted.get("numInputRows", 0),
                late_rows=self.st["late_rows"] + late,
                input_rows_per_s=round(report.get("processedRowsPerSecond") or 0.0, 1),
            )
        return report

    def save(self, **changes: Any) -> None:
        self.st.update(changes, heartbeat=time.strftime("%Y-%m-%d %H:%M:%S"))
        write_json(os.path.join(self.home, STATUS), self.st)

    def batch(self, batch_id: int, rows_written: int, watermark: Optional[str]) -> None:
        print(
            f"{time.strftime('%H:%M:%S')} {self.st.get('model')}: batch {batch_id} committed: "
            f"{rows_written} rows, watermark {watermark or 'none'}",
            flush=True,
        )
        self.save(
            last_batch=batch_id,
            last_batch_at=time.strftime("%Y-%m-%d %H:%M:%S"),
            rows_written=self.st["rows_written"] + rows_written,
            watermark=watermark,
        )

    def stopping(self) -> bool:
        """Whether the model is to stop (a stop file, or the runner's SIGTERM)."""
        return self.stop_requested or os.path.exists(self.stop_file)

    def wait(self, query, counted: Callable[[list[dict]], list[dict]] = as_reported) -> None:
        """Run until a stop request (file or SIGTERM) or the query fails. The query is asked
        for its progress every POLL seconds until its first trigger is done (dbt waits for
        it), then every PROGRESS_EVERY polls (each ask is a call into the JVM, per model);
        `counted`: its reports as the run counts them (`progressed`)."""
        self.counted = counted  # before the batches can count with it (`progressed`)
        self.query, polls, shown = query, 0, None
        while True:
            if self.stopping():
                self.save(state="stopping")
                open(self.stop_file, "a").close()  # ends its source's wait for a commit
                deadline = time.time() + 300  # let the batch in flight commit
                while query.status.get("isTriggerActive") and time.time() < deadline:
                    time.sleep(0.2)
                query.stop()
                break
            if not self.st["ready"] or polls % PROGRESS_EVERY == 0:
                if not query.isActive:
                    break
                progress = self.progressed()
                if progress is not None and progress.get("timestamp") != shown:
                    shown = progress.get("timestamp")
                    self.save()
                # caught up: a trigger ended with nothing to do, or ran a batch without input
                # (that applied a watermark); a trigger spends most of its interval waiting for
                # a commit (delta/source.py AWAIT_COMMIT_MS), so "Waiting" shows briefly
                message = str(query.status.get("message", ""))
                idle = progress is not None and progress.get("numInputRows") == 0
                if not self.st["ready"] and (idle or message.startswith("Waiting")):
                    self.save(state="running", ready=True)
            polls += 1
            time.sleep(POLL)
        self.progressed()  # its last batch
        query.awaitTermination()  # raises if the query failed
