"""Fault injection for the crash tests: a hook, not a code path that sleeps.

Set ``DBT_SPARK_STREAMING_FAULT=<point>`` or ``<point>@<batch_id>`` and the process exits
abruptly (``os._exit``, no cleanup, like a kill) when it reaches that point. Points, in
the order a micro-batch passes them:

  before_write         batch computed, nothing written
  during_write         data files written, Delta log not committed
  after_delta_commit   Delta commit done, Spark's checkpoint commit not yet written
  after_compaction     the batch's tables compacted (delta/compaction.py), Spark's checkpoint
                       commit not yet written
  after_vacuum         the model's tables vacuumed (runtime/maintenance.py), Spark's
                       checkpoint commit not yet written

(an upsert_table: during_write = its changelog committed and the table's rewritten files
written, the table's commit not yet),

and, inside a compaction (delta/compaction.py; no batch id):

  compaction_written   its files written and recorded (delta/origins.py), its commit not made
  compaction_committed its commit made, its record not yet final

and, in a `--full-refresh` (runtime/lifecycle.py; no batch id):

  refresh_built        the new table is complete aside, the old one still in place
  refresh_swapping     the old table moved to trash, the new one not yet in place (with a
                       checkpoint_root: the table's swap commit made, the new checkpoint
                       not yet moved in)

and, in a `dbt run` of a continuous model (runtime/continuous/runner.py; no batch id):

  runner_start         the model's lock held, its runner not yet started

and, when a query change that keeps the state renames, adds or drops columns of an
upsert_table (runtime/streaming.py; no batch id):

  columns_rewriting    its changelog rewritten with the new columns, its table not yet

and, when a new stream's backlog is split (runtime/backlog.py; no batch id):

  backlog_split        the split recorded in the checkpoint, the query not yet started

For the concurrency tests, ``DBT_SPARK_STREAMING_PAUSE=<point>[@<batch_id>]=<file>`` holds the
process at that point instead (holding whatever it holds, its lock say): it writes its pid to
``<file>`` and waits until the file is deleted.
"""

from __future__ import annotations

import os
import sys
import time

ENV = "DBT_SPARK_STREAMING_FAULT"
PAUSE_ENV = "DBT_SPARK_STREAMING_PAUSE"
EXIT_CODE = 75
POINTS = (
    "before_write",
    "during_write",
    "after_delta_commit",
    "refresh_built",
    "refresh_swapping",
    "runner_start",
    "columns_rewriting",
    "backlog_split",
)


def _matches(spec: str, point: str, batch_id: int) -> bool:
    name, _, at = spec.partition("@")
    return name == point and (not at or int(at) == batch_id)


def fault_point(point: str, batch_id: int) -> None:
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        where, _, path = pause.partition("=")
        if _matches(where, point, batch_id) and not os.path.exists(f"{path}.done"):
            with open(path, "w") as fh:
                fh.write(str(os.getpid()))
            while os.path.exists(path):
                time.sleep(0.2)
            open(f"{path}.done", "w").close()  # once: a later pass (a retry) goes on
    spec = os.environ.get(ENV)
    if spec and _matches(spec, point, batch_id):
        sys.stderr.write(f"[dbt-spark-streaming] injected fault {point} at batch {batch_id}\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
