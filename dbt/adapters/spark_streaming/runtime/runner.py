"""Continuous mode: a model's streaming query kept running in a detached runner process.

`trigger: {processing_time: '10 seconds'}` (or `continuous: true`, every 10 seconds) makes
`dbt run` start the model's query in a runner process of its own (with its own embedded
SparkSession) that outlives `dbt run`. `dbt run` returns once the query has started and
finished its first trigger (so the table has caught up with the sources as they were). This
module is what `dbt run` and the runner share; the runner process itself is runtime/runner_main.py.

Each runner keeps its files in ``<root>/.dbt_streaming/runners/<schema>.<identifier>/``, where
``<root>`` is the warehouse's control root (the profile's `checkpoint_root`, else the warehouse):

- ``spec.json``: what to run (the compiled model, the Spark settings, source locations);
- ``status.json``: written by the runner (atomically): pid, host, state (``starting``,
  ``running``, ``stopping``, ``stopped``, ``failed``), fingerprint, last batch, input rows/s,
  watermark, late rows, last error;
- ``stop``: a stop request (`stream_stop`); the runner finishes its current batch, stops its
  query and exits;
- ``runner.log``: the runner's output.

The runner holds the model's run lock (lifecycle.model_lock) while it runs, so no other run
writes the table meanwhile. A runner killed outright leaves status ``running`` with a dead
pid: ``dbt run`` reports it as dead and starts a new runner, which resumes from the
checkpoint (exactly once, as after any crash).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from .. import layout
from ..errors import StreamingError, config_error
from ..faults import fault_point
from ..sql.intervals import parse_duration
from .lifecycle import alive

DEFAULT_INTERVAL = "10 seconds"
TERMINAL = ("stopped", "failed")
START_TIMEOUT = 120  # seconds a new runner has to write its first status
MODULE = "dbt.adapters.spark_streaming.runtime.runner_main"  # the runner process (python -m)


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


def _dir(root: str, name: str) -> str:
    """Model `name`'s runner directory, created (reading a status must not create it)."""
    path = layout.runner_path(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, default=str)
    os.replace(tmp, path)


def status(root: str, name: str) -> Optional[dict]:
    """The runner status of model `name` with ``alive`` (its process runs), or None if the model
    never had a runner. A runner whose process is gone without saying so is ``dead``."""
    path = os.path.join(layout.runner_path(root, name), "status.json")
    try:
        with open(path) as fh:
            st = json.load(fh)
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


def error_text(st: dict) -> Optional[str]:
    """The last error of a runner status, as text (None if there was none)."""
    error = st.get("error")
    return (error.get("message") if isinstance(error, dict) else error) or None


def names(root: str) -> list[str]:
    """Models (schema.identifier) that have or had a runner."""
    runners = layout.runners_path(root)
    return sorted(os.listdir(runners)) if os.path.isdir(runners) else []


def log_tail(root: str, name: str, lines: int = 5) -> str:
    try:
        with open(os.path.join(layout.runner_path(root, name), "runner.log")) as fh:
            return " | ".join(
                line.strip() for line in fh.read().splitlines()[-lines:] if line.strip()
            )
    except OSError:
        return ""


def start(root: str, name: str, spec: dict, on_progress: Callable[[dict], None]) -> dict:
    """Start a runner for model `name` and wait until its query has finished its first trigger.
    Returns its status; raises the runner's own error if it fails before that."""
    home = _dir(root, name)
    for stale in ("stop", "status.json"):
        if os.path.exists(os.path.join(home, stale)):
            os.remove(os.path.join(home, stale))
    fault_point("runner_start", -1)
    spec_path = os.path.join(home, "spec.json")
    _write_json(spec_path, spec)
    # Start it through a short-lived intermediate process, so the runner is not our child
    # (it must outlive dbt, and must not linger as our zombie if it dies first).
    subprocess.run(
        [sys.executable, "-m", MODULE, "--detach", spec_path],
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    seen_batch = None
    spawned = time.time()
    while True:
        time.sleep(0.5)
        st = status(root, name)
        if st is None and time.time() - spawned > START_TIMEOUT:
            st = {"state": "dead", "alive": False, "error": f"no status after {START_TIMEOUT} s"}
        if st is None:
            continue
        if st.get("last_batch") is not None and st["last_batch"] != seen_batch:
            seen_batch = st["last_batch"]
            on_progress(st)
        if st["state"] == "running" and st.get("ready"):
            return st
        if not st["alive"]:
            error = st.get("error")
            if isinstance(error, dict) and error.get("code"):
                raise StreamingError(error["code"], error["what"], error["why"], error["fix"])
            raise StreamingError(
                "SSR310",
                f"the runner of {name} stopped before its query started",
                str(error or "it exited without a status") + (f"; log: {log_tail(root, name)}"),
                f"See {os.path.join(home, 'runner.log')}; fix the cause and run `dbt run` again.",
            )


def stop(root: str, name: str, timeout: float = 120.0) -> dict:
    """Ask model `name`'s runner to stop and wait until it has (SIGTERM after `timeout`)."""
    st = status(root, name)
    if not st or not st["alive"]:
        return st or {"state": "none"}
    open(os.path.join(_dir(root, name), "stop"), "w").close()
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = status(root, name)
        if not st["alive"]:
            return st
        time.sleep(0.5)
    os.kill(st["pid"], signal.SIGTERM)
    time.sleep(5)
    return status(root, name)


def stream_status(catalog) -> list[dict]:
    """One row per streaming model of the warehouse: its runner's state (or ``on dbt run``),
    last batch, input rows/s, watermark, lag behind its sources' latest versions, late rows
    (as Spark counts them, while the runner runs) and last error."""
    from ..delta import storage
    from ..delta.sink import last_metadata
    from ..delta.source import latest_version

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
                "runner": f"pid {st['pid']} every {st['interval']}" if st.get("pid") else "-",
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
        return "-" if value is None else str(value)[:80]

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
    return [
        [n, stop(root, n)["state"]] for n in chosen if model or (status(root, n) or {}).get("alive")
    ]


class Monitor:
    """Inside the runner: keeps status.json current and stops the query when asked."""

    def __init__(self, home: str, base: dict):
        self.home = home
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
        }
        self.stop_requested = False
        self.save()

    def save(self, **changes: Any) -> None:
        self.st.update(changes, heartbeat=time.strftime("%Y-%m-%d %H:%M:%S"))
        _write_json(os.path.join(self.home, "status.json"), self.st)

    def batch(self, batch_id: int, rows_written: int, watermark: Optional[str]) -> None:
        print(
            f"{time.strftime('%H:%M:%S')} batch {batch_id} committed: {rows_written} rows, "
            f"watermark {watermark or 'none'}",
            flush=True,
        )
        self.save(
            last_batch=batch_id,
            last_batch_at=time.strftime("%Y-%m-%d %H:%M:%S"),
            rows_written=self.st["rows_written"] + rows_written,
            watermark=watermark,
        )

    def wait(self, query) -> None:
        """Run until a stop request (file or SIGTERM) or the query fails."""
        seen = None
        while query.isActive:
            if self.stop_requested or os.path.exists(os.path.join(self.home, "stop")):
                self.save(state="stopping")
                deadline = time.time() + 300  # let the batch in flight commit
                while query.status.get("isTriggerActive") and time.time() < deadline:
                    time.sleep(0.2)
                query.stop()
                break
            progress = query.lastProgress
            if progress is not None and progress.get("batchId") != seen:
                seen = progress.get("batchId")
                late = sum(
                    op.get("numRowsDroppedByWatermark", 0)
                    for op in progress.get("stateOperators", [])
                )
                self.save(
                    rows_read=self.st["rows_read"] + progress.get("numInputRows", 0),
                    late_rows=self.st["late_rows"] + late,
                    input_rows_per_s=round(progress.get("processedRowsPerSecond") or 0.0, 1),
                )
            if not self.st["ready"] and str(query.status.get("message", "")).startswith("Waiting"):
                self.save(state="running", ready=True)
            time.sleep(0.5)
        query.awaitTermination()  # raises if the query failed
