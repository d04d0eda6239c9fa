"""Fault injection for the crash tests: a hook, not a code path that sleeps.

Set ``DBT_SPARK_STREAMING_FAULT=<point>`` or ``<point>@<batch_id>`` and the process exits
abruptly (``os._exit``, no cleanup, like a kill) when it reaches that point. Points, in
the order a micro-batch passes them:

  before_write         batch computed, nothing written
  during_write         data files written, Delta log not committed
  after_delta_commit   Delta commit done, Spark's checkpoint commit not yet written

(an upsert_table: during_write = its changelog committed and the table's rewritten files
written, the table's commit not yet),

and, in a `--full-refresh` (runtime/lifecycle.py; no batch id):

  refresh_built        the new table is complete aside, the old one still in place
  refresh_swapping     the old table moved to trash, the new one not yet in place
"""

from __future__ import annotations

import os
import sys

ENV = "DBT_SPARK_STREAMING_FAULT"
EXIT_CODE = 75
POINTS = ("before_write", "during_write", "after_delta_commit", "refresh_built", "refresh_swapping")


def fault_point(point: str, batch_id: int) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, at = spec.partition("@")
    if name == point and (not at or int(at) == batch_id):
        sys.stderr.write(f"[dbt-spark-streaming] injected fault {point} at batch {batch_id}\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
