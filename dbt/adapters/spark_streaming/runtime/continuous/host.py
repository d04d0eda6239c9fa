"""The runner process (pipeline.py has what `dbt run` shares with it):
`python -m dbt.adapters.spark_streaming.runtime.continuous.host <pipeline dir>` hosts the
continuous models handed to its pipeline, each model's query in a thread of its own, all in one
SparkSession, until the last model stops.

- A model is taken from the inbox once no query of it runs here; its thread holds the model's
  run lock (taken over from the `dbt run` that handed it) while its query runs.
- Isolation: a model whose query fails is reported in its own status and restarted with
  backoff (pipeline.restart_delay, at most config `max_restarts` times; then it stays
  ``failed``, "gave up"); the other models go on. A
  model that fails before its first trigger is not restarted: the `dbt run` waiting for it
  reports the error.
- Fairness: Spark's FAIR scheduler; a model starts in a pool of its own, so its backlog does
  not hold the others' micro-batches in a queue behind it, and its micro-batches join a
  shared pool (first come, first served) once it has caught up (runner.Monitor.pool): Spark's
  default, or for a model that streams from another model's table here, the DOWNSTREAM pool,
  whose tasks go first (POOLS): a chain's later models take in a commit before the first models
  take in the next append.
- SIGTERM stops every model (each lets its batch in flight commit), then the process.

`pipeline.hand` runs this module with ``--detach``: that short-lived process starts the runner
in a session of its own, so the runner is not a child of dbt.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from ...errors import StreamingError
from . import runner
from .pipeline import MODULE, max_restarts, restart_delay

LOCK_WAIT = 30  # seconds a new runner waits for an ending one's lock
POLL = 0.25  # seconds between looks at the inbox
# The runner's JVM lives as long as its models: G1 gives back heap it no longer needs (the heap
# shrunk to <= 30% free at the end of a concurrent collection) instead of keeping what its
# busiest moment took (bench/README "Continuous models sharing a runner"). G1 starts one after
# 10 s without any collection; a JVM busy with micro-batches collects its young objects all the
# time and never gets there, so the runner asks for one (System.gc(), concurrent with these
# options) once the models it took have started, and every COLLECT_EVERY seconds. A profile's
# `server_side_parameters` may set spark.driver.extraJavaOptions instead (then it asks none).
RUNNER_JAVA_OPTIONS = (
    "-XX:G1PeriodicGCInterval=10000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    " -XX:+ExplicitGCInvokesConcurrent"
)
COLLECT_EVERY = 60
# The runner's JVM heap: Spark's own default, not a `dbt run`'s 4g (runtime/session.py, for a
# backfill in one process). Under appends G1 grew the 4g heap of 20 models' runner to 1.0-2.6
# GB of memory for ~150 MB of live objects, which put the runner over 2.5 GB in all; with 1g
# its JVM stayed at 0.7-0.85 GB, at the same latency, and a model starting over 2M rows
# beside them ran (bench/README "Continuous models sharing a runner"). A profile's
# `server_side_parameters` may set spark.driver.memory: a runner whose queries keep large
# state in Spark's state store needs more.
RUNNER_DRIVER_MEMORY = "1g"
# Spark's FAIR pools (spark.scheduler.allocation.file): a pool whose running tasks are below
# its minShare has its tasks launched first, so DOWNSTREAM's go ahead of the default pool's
# and the starting models' pools (minShare 0). bench/README: the 3-model chain's p50 with 20
# models on 2 cores.
POOLS = f"""<?xml version="1.0"?>
<allocations>
  <pool name="{runner.DOWNSTREAM}">
    <schedulingMode>FIFO</schedulingMode>
    <weight>1</weight>
    <minShare>1000000</minShare>
  </pool>
</allocations>
"""


def _error(exc: BaseException) -> Any:
    if isinstance(exc, StreamingError):
        return {
            "code": exc.code,
            "what": exc.what,
            "why": exc.why,
            "fix": exc.fix,
            "message": str(exc),
        }
    return str(exc) or type(exc).__name__


class Host:
    """One runner: its session, its models' threads, its status.json."""

    def __init__(self, directory: str):
        self.directory = directory
        self.pipeline = os.path.basename(directory)
        self.spec = runner.read_json(os.path.join(directory, runner.SPEC))
        self.control = self.spec["control"]
        self.threads: dict[str, threading.Thread] = {}
        self.monitors: dict[str, runner.Monitor] = {}
        self.taken: set[str] = set()  # requests taken
        self.stopping = False
        self.st = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "pipeline": self.pipeline,
            "master": self.spec["master"],
        }
        self.save("starting")
        self.spark: Any = None
        self.catalog: Any = None
        self.collects = False  # the runner asks its JVM for concurrent collections

    def save(self, state: str) -> None:
        models = sorted(n for n, t in self.threads.items() if t.is_alive())
        self.st.update(state=state, models=models, heartbeat=time.strftime("%Y-%m-%d %H:%M:%S"))
        runner.write_json(os.path.join(self.directory, runner.STATUS), self.st)

    def start_session(self) -> None:
        from ..catalog import Catalog
        from ..session import get_spark

        pools = os.path.join(self.directory, "pools.xml")
        with open(pools, "w") as fh:
            fh.write(POOLS)
        conf = {
            "spark.scheduler.mode": "FAIR",
            "spark.scheduler.allocation.file": f"file://{pools}",
            "spark.driver.extraJavaOptions": RUNNER_JAVA_OPTIONS,
            "spark.driver.memory": RUNNER_DRIVER_MEMORY,
            **(self.spec.get("conf") or {}),
        }
        self.collects = conf["spark.driver.extraJavaOptions"] == RUNNER_JAVA_OPTIONS
        self.spark = get_spark(self.spec["master"], conf)
        self.catalog = Catalog(self.spark, self.spec["warehouse"], self.spec.get("checkpoint_root"))

    def requests(self) -> list[tuple[str, str]]:
        """(model, path) of each request in the inbox not yet taken."""
        inbox = os.path.join(self.directory, "inbox")
        found = []
        for entry in sorted(os.listdir(inbox)) if os.path.isdir(inbox) else []:
            path = os.path.join(inbox, entry)
            try:
                request = runner.read_json(path)
            except (OSError, ValueError):
                continue  # being written
            if request.get("request") not in self.taken:
                found.append((request["model"], path))
        return found

    def take(self, name: str, path: str) -> None:
        """Start hosting model `name` (its request at `path`), unless its query still runs
        here (a stop, then a new hand-over): then at a later look."""
        thread = self.threads.get(name)
        if thread is not None and thread.is_alive():
            return
        spec = runner.read_json(os.path.join(runner.model_home(self.control, name), runner.SPEC))
        self.taken.add(spec["request"])
        thread = threading.Thread(
            target=self.host, args=(name, spec, path), name=f"model {name}", daemon=True
        )
        self.threads[name] = thread
        thread.start()

    def host(self, name: str, spec: dict, request: str) -> None:
        """Run model `name`'s query until it is stopped: restarted with backoff when it fails
        after its first trigger."""
        from ..catalog import register_location
        from ..model import StreamingModel
        from ..streaming import run_streaming_model

        for (schema, identifier), location in spec["locations"]:
            register_location(schema, identifier, location)
        # the starting model's pool (FAIR); the query's thread inherits it from this one
        self.spark.sparkContext.setLocalProperty(runner.POOL, name)
        model = StreamingModel(**spec["model"])
        restarts, started_by, limit = 0, spec.get("started_by"), max_restarts(model.config)
        while True:
            monitor = runner.Monitor(
                runner.model_home(self.control, name),
                {
                    "model": name,
                    "pipeline": self.pipeline,
                    "request": spec["request"],
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "fingerprint": spec["fingerprint"],
                    "interval": spec["processing_time"],
                    "started_by": started_by,  # the `dbt run` whose lock it takes over
                    "restarts": restarts,
                },
            )
            self.monitors[name] = monitor
            if self.stopping:
                monitor.stop_requested = True
            if os.path.exists(request):
                os.remove(request)
            try:
                run_streaming_model(self.spark, self.catalog, model, monitor=monitor)
            except BaseException as exc:  # noqa: BLE001 - the status must say why it ended
                error = _error(exc)
                print(f"{name}: failed: {exc}", flush=True)
                if not monitor.st["ready"] and restarts == 0 or monitor.stopping():
                    monitor.save(state="failed", error=error)
                    return
                if restarts == limit:
                    monitor.save(state="failed", error=error, gave_up=f"after {restarts} restarts")
                    print(f"{name}: gave up after {restarts} restarts", flush=True)
                    return
                delay = restart_delay(restarts)
                monitor.save(state="restarting", error=error, restart_in_s=delay)
                print(f"{name}: restarting its query in {delay} s", flush=True)
                deadline = time.time() + delay
                while time.time() < deadline and not monitor.stopping():
                    time.sleep(POLL)
                if monitor.stopping():
                    monitor.save(state="stopped")
                    return
                restarts, started_by = restarts + 1, None
                continue
            monitor.save(state="stopped")
            print(f"{name}: stopped", flush=True)
            return

    def rank(self) -> None:
        """Send the micro-batches of each model that streams from the table of another model
        running here (or from its changelog, which is inside its table's directory) to the
        DOWNSTREAM pool (runner.Monitor.pool)."""
        monitors = list(self.monitors.items())  # model threads add to it
        written = [
            (name, m.target)
            for name, m in monitors
            if m.target and name in self.threads and self.threads[name].is_alive()
        ]

        def upstream(name: str, source: str) -> bool:
            return any(
                other != name and (source == target or source.startswith(f"{target}/"))
                for other, target in written
            )

        for name, monitor in monitors:
            downstream = any(upstream(name, source) for source in monitor.sources)
            monitor.shared = runner.DOWNSTREAM if downstream else None

    def stop_all(self) -> None:
        self.stopping = True
        for monitor in list(self.monitors.values()):
            monitor.stop_requested = True

    def serve(self) -> None:
        """Take requests until no model runs and none waits."""
        self.start_session()
        self.save("running")
        beat = collected = time.time()
        starting = False  # models taken since the last collection, maybe not started yet
        while True:
            waiting = [] if self.stopping else self.requests()
            for name, path in waiting:
                self.take(name, path)
            if not waiting and not any(t.is_alive() for t in self.threads.values()):
                return
            starting = starting or bool(waiting)
            self.rank()
            started = all(m.st["ready"] for m in list(self.monitors.values()))
            if self.collects and (starting and started or time.time() - collected > COLLECT_EVERY):
                self.spark._jvm.System.gc()  # a concurrent collection (RUNNER_JAVA_OPTIONS)
                collected, starting = time.time(), False
            if time.time() - beat > 10:
                self.save("running")
                beat = time.time()
            time.sleep(POLL)


def _lock(directory: str):
    """The runner's lock (an flock, released when the process ends), or None if another runner
    of the pipeline still holds it after LOCK_WAIT seconds (it takes the inbox's models)."""
    fh = open(os.path.join(directory, "lock"), "a")
    deadline = time.time() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if time.time() > deadline:
                fh.close()
                return None
            time.sleep(0.2)


def main(directory: str) -> int:
    """The runner process: host the pipeline's models until the last one stops."""
    from dbt_common.events.base_types import EventLevel
    from dbt_common.events.event_manager_client import add_logger_to_manager
    from dbt_common.events.logger import LineFormat, LoggerConfig

    held = _lock(directory)
    if held is None:
        print("another runner holds the lock; exiting", flush=True)
        return 0
    add_logger_to_manager(
        LoggerConfig(
            name="runner",
            line_format=LineFormat.DebugText,
            level=EventLevel.INFO,
            output_stream=sys.stdout,
        )
    )
    host = Host(directory)
    signal.signal(signal.SIGTERM, lambda *_: host.stop_all())
    try:
        host.serve()
    except BaseException as exc:  # noqa: BLE001 - the status must say why the runner ended
        print(f"runner failed: {exc}", flush=True)
        host.st["error"] = _error(exc)
        host.stop_all()
        host.save("failed")
        return 1
    host.save("stopped")
    print("runner stopped", flush=True)
    return 0


def _detach(directory: str) -> None:
    """Start the runner of `directory` in a new session, its output to runner.log there."""
    log = open(os.path.join(directory, "runner.log"), "a")
    subprocess.Popen(
        [sys.executable, "-m", MODULE, directory],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )


if __name__ == "__main__":
    if sys.argv[1] == "--detach":
        _detach(sys.argv[2])
    else:
        sys.exit(main(sys.argv[1]))
