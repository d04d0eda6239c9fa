"""The runner process of a continuous model (runtime/runner.py has what `dbt run` shares with
it): `python -m dbt.adapters.spark_streaming.runtime.runner_main <spec.json>` runs the model's
query until asked to stop, keeping its status.json current.

`runner.start` runs this module with ``--detach``: that short-lived process starts the runner
in a session of its own, so the runner is not a child of dbt (it must outlive `dbt run`, and
must not linger as dbt's zombie if it dies first)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from ..errors import StreamingError
from .runner import MODULE, Monitor


def main(spec_path: str) -> int:
    """The runner process: run the model's query until stopped."""
    from dbt_common.events.base_types import EventLevel
    from dbt_common.events.event_manager_client import add_logger_to_manager
    from dbt_common.events.logger import LineFormat, LoggerConfig

    add_logger_to_manager(
        LoggerConfig(
            name="runner",
            line_format=LineFormat.DebugText,
            level=EventLevel.INFO,
            output_stream=sys.stdout,
        )
    )
    with open(spec_path) as fh:
        spec = json.load(fh)
    home = os.path.dirname(spec_path)
    monitor = Monitor(
        home,
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "fingerprint": spec["fingerprint"],
            "interval": spec["processing_time"],
            "started_by": spec.get("started_by"),  # the `dbt run` whose lock it takes over
        },
    )
    signal.signal(signal.SIGTERM, lambda *_: setattr(monitor, "stop_requested", True))
    try:
        from .catalog import Catalog, register_location
        from .model import StreamingModel
        from .session import get_spark
        from .streaming import run_streaming_model

        spark = get_spark(spec["master"], spec["conf"])
        for (schema, identifier), location in spec["locations"]:
            register_location(schema, identifier, location)
        catalog = Catalog(spark, spec["warehouse"], spec.get("checkpoint_root"))
        run_streaming_model(spark, catalog, StreamingModel(**spec["model"]), monitor=monitor)
    except BaseException as exc:  # noqa: BLE001 - the status must say why the runner ended
        error: Any = str(exc)
        if isinstance(exc, StreamingError):
            error = {
                "code": exc.code,
                "what": exc.what,
                "why": exc.why,
                "fix": exc.fix,
                "message": str(exc),
            }
        print(f"runner failed: {exc}", flush=True)
        monitor.save(state="failed", error=error)
        return 1
    monitor.save(state="stopped")
    print("runner stopped", flush=True)
    return 0


def _detach(spec_path: str) -> None:
    """Start the runner of `spec_path` in a new session, its output to runner.log beside it."""
    log = open(os.path.join(os.path.dirname(spec_path), "runner.log"), "a")
    subprocess.Popen(
        [sys.executable, "-m", MODULE, spec_path],
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
