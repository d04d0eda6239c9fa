"""Runners: the long-lived processes that host continuous models' queries.

Every continuous model of a warehouse runs, by default, in one runner (pipeline ``default``):
one process, one SparkSession (one Spark application on a cluster), one streaming query per
model, scheduled fairly (Spark's FAIR scheduler: host.py). Config `pipeline: <name>`
places a model in the runner of that name (to isolate models or spread them over
applications); `pipeline: false` gives a model a runner of its own, named after it.

`dbt run` hands a continuous model to its runner (`hand`): it writes the model's spec and a
request into the runner's inbox, starts the runner if none runs, and waits until the model's
query has finished its first trigger. The runner process itself is host.py; what a model does
there is in its status (runner.py). The files of runner `<pipeline>` are in
``<control>/.dbt_streaming/pipelines/<pipeline>/``:

- ``spec.json``: its session (Spark master and settings, warehouse, checkpoint root), as the
  `dbt run` that started it had them;
- ``status.json``: pid, host, state (``starting``, ``running``, ``stopped``, ``failed``), the
  models it runs;
- ``lock``: held (flock) by the runner while it lives, so at most one process runs a pipeline;
- ``inbox/<schema>.<identifier>.json``: a model handed over, until the runner takes it;
- ``runner.log``: the runner's output (every model's lines, each with the model's name).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, Callable, Optional

from dbt.adapters.events.logging import AdapterLogger

from ... import layout
from ...errors import StreamingError, config_error
from ...faults import fault_point
from . import runner

logger = AdapterLogger("SparkStreaming")

DEFAULT = "default"
MAX_RESTARTS = 5  # restarts of a failed query (config max_restarts), after 2, 4, 8, ... s
MODULE = "dbt.adapters.spark_streaming.runtime.continuous.host"  # the runner process (python -m)
START_TIMEOUT = 120  # seconds a runner has to take a model handed to it
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
_starting = threading.Lock()  # dbt runs models in threads: one of them starts a runner


def name_of(config: Mapping[str, Any], model: str) -> str:
    """The runner (pipeline) that runs continuous model `model` (schema.identifier)."""
    value = config.get("pipeline", DEFAULT)
    if value is False:
        return model
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise config_error(
            "pipeline",
            value,
            "a runner's name (letters, digits, '_', '.', '-'), or false for a runner of the "
            "model's own",
        )
    return value


def max_restarts(config: Mapping[str, Any]) -> int:
    """Config `max_restarts`: how often a runner restarts a model's failed query before it
    gives up (default MAX_RESTARTS; 0: never)."""
    value = config.get("max_restarts", MAX_RESTARTS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise config_error("max_restarts", value, "a whole number >= 0")
    return value


def shuffle_partitions(config: Mapping[str, Any]) -> Optional[int]:
    """Config `shuffle_partitions`: the shuffle (stateful) partitions of the model's query when
    its checkpoint is new (Spark keeps the count a query started with). For a continuous model
    in a shared runner 1 by default: the runner's many queries are its parallelism, and each
    partition costs every micro-batch a task, a state store's load and commit, and a file
    (bench/README: append -> commit p50 3.6-4.1 s -> 3.1 s for 20 models on 2 cores); for
    others (and in a runner of the model's own, `pipeline: false`) None: the session's
    `spark.sql.shuffle.partitions`."""
    value = config.get("shuffle_partitions")
    if value is None:
        shared = config.get("pipeline", DEFAULT) is not False
        return 1 if shared and runner.processing_time(config) is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error("shuffle_partitions", value, "a whole number >= 1")
    return value


def restart_delay(restarts: int) -> int:
    """Seconds before restart number `restarts` + 1 of a failed query: 2, 4, 8, ... 60."""
    return min(2 << restarts, 60)


def home(control: str, pipeline: str) -> str:
    return layout.pipeline_path(control, pipeline)


def status(control: str, pipeline: str) -> Optional[dict]:
    """The status of runner `pipeline` with ``alive`` (None if it never ran)."""
    return runner.read_status(os.path.join(home(control, pipeline), runner.STATUS))


def inbox(control: str, pipeline: str) -> str:
    return os.path.join(home(control, pipeline), "inbox")


def hand(
    control: str,
    pipeline: str,
    session: dict,
    name: str,
    spec: dict,
    on_progress: Callable[[dict], None],
) -> dict:
    """Hand continuous model `name` (its runner `spec`) to runner `pipeline`, starting the
    runner (with `session`) if none runs, and wait until the model's query has finished its
    first trigger. Returns the model's status; raises its error if it fails before that."""
    model_home = runner.model_home(control, name)
    for stale in (runner.STOP, runner.STATUS):
        if os.path.exists(os.path.join(model_home, stale)):
            os.remove(os.path.join(model_home, stale))
    fault_point("runner_start", -1)
    request = uuid.uuid4().hex
    runner.write_json(os.path.join(model_home, runner.SPEC), {**spec, "request": request})
    os.makedirs(inbox(control, pipeline), exist_ok=True)
    asked = os.path.join(inbox(control, pipeline), f"{name}.json")
    runner.write_json(asked, {"model": name, "request": request})
    spawned, since, seen_batch = 0, time.time(), None
    while True:
        st = runner.status(control, name)
        if st is not None and st.get("request") == request:
            if st.get("last_batch") is not None and st["last_batch"] != seen_batch:
                seen_batch = st["last_batch"]
                on_progress(st)
            if st["state"] == "running" and st.get("ready"):
                return st
            if not st["alive"]:
                raise _failure(control, pipeline, name, st)
        elif os.path.exists(asked):  # not taken yet
            host = status(control, pipeline)
            if not (host and host["alive"]):
                if spawned >= 2:  # (one may have met a runner ending as it was handed the model)
                    raise _failure(control, pipeline, name, host or {})
                spawned += _start(control, pipeline, session)
                since = time.time()
            elif time.time() - since > START_TIMEOUT:
                raise _failure(
                    control, pipeline, name, {"error": f"not taken after {START_TIMEOUT} s"}
                )
        elif not (status(control, pipeline) or {}).get("alive"):  # taken, then the runner died
            raise _failure(control, pipeline, name, {"error": "the runner ended"})
        time.sleep(0.25)


def _failure(control: str, pipeline: str, name: str, st: dict) -> StreamingError:
    error = st.get("error")
    if isinstance(error, dict) and error.get("code"):
        return StreamingError(error["code"], error["what"], error["why"], error["fix"])
    log = os.path.join(home(control, pipeline), "runner.log")
    return StreamingError(
        "SSR310",
        f"the runner of {name} ({pipeline}) did not start its query",
        str(error or "it ended without a status") + f"; log: {runner.tail(log)}",
        f"See {log}; fix the cause and run `dbt run` again.",
    )


def _start(control: str, pipeline: str, session: dict) -> bool:
    """Start runner `pipeline` unless it runs (it takes what its inbox holds); whether this
    call started one."""
    with _starting:
        host = status(control, pipeline)
        if host and host["alive"]:
            return False
        directory = home(control, pipeline)
        runner.write_json(os.path.join(directory, runner.SPEC), session)
        # Through a short-lived intermediate process, so the runner is not our child (it must
        # outlive dbt, and must not linger as our zombie if it dies first).
        subprocess.run(
            [sys.executable, "-m", MODULE, "--detach", directory],
            check=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        deadline = time.time() + 30
        while time.time() < deadline and not (status(control, pipeline) or {}).get("alive"):
            time.sleep(0.1)
        return True


def warn_if_settings_differ(control: str, pipeline: str, session: dict) -> None:
    """Log when runner `pipeline` runs with other Spark settings than this run's profile has
    (a runner keeps the session it started with)."""
    host = status(control, pipeline)
    if not (host and host["alive"]):
        return
    try:
        running = runner.read_json(os.path.join(home(control, pipeline), runner.SPEC))
    except (OSError, ValueError):
        return
    if (running.get("master"), running.get("conf")) != (session["master"], session["conf"]):
        logger.warning(
            f"runner {pipeline} (pid {host['pid']}) runs with other Spark settings than this "
            f"profile's (master {running.get('master')}); they apply once it is restarted: "
            "`dbt run-operation stream_stop`, then `dbt run`"
        )
