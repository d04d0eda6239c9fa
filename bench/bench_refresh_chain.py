"""Benchmark: does an upsert_table's refresh stay flat over many refreshes, not only in history?

Each `dbt run` of a stateful model is a new query that loads Spark's state from the checkpoint:
the last snapshot and the delta files written after it. This maintains bench_upsert.py's
aggregate with Spark's state (`constant_domain`) over H events, then refreshes it N times,
each after a 1% append (one Delta version), in process (dbtRunner). It prints the median
refresh time of each run of ten refreshes, its ratio to the first ten's (the baseline, in the
same run: a flat refresh stays near 1.0), and the delta and snapshot files of a state store
partition; at the end it checks the table against the batch query's rows.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_refresh_chain.py [--history 10000000] [--refreshes 60]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys

import numpy as np
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.layout import checkpoint_path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_upsert as bu  # noqa: E402  (its project, events and checks)

MODEL = "clicks_per_user_spark"
STATE = os.path.join(checkpoint_path(os.path.join(bu.WAREHOUSE, "bench", MODEL)), "state")


def state_files() -> tuple[int, int]:
    """(delta files, snapshot files) of the aggregate's state store partition 0."""
    part = os.path.join(STATE, "0", "0")
    return len(glob.glob(part + "/*.delta")), len(glob.glob(part + "/*.snapshot"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=10_000_000)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--refreshes", type=int, default=60)
    args = ap.parse_args()
    bu.bt.setup_project(bu.FILES, bu.WORK, bu.PROJECT)
    rng = np.random.default_rng(7)
    write_deltalake(bu.CLICKS, bu.events(args.history, args.users, 0, rng), mode="append")
    bu.dbt("run", "-s", MODEL, "clicks_per_user_batch")
    times = []
    for i in range(args.refreshes):
        new = bu.events(args.history // 100, args.users, (100 + i) * 3600, rng)
        write_deltalake(bu.CLICKS, new, mode="append")
        times.append(bu.dbt("run", "-s", MODEL))
        if (i + 1) % 10 == 0:
            deltas, snapshots = state_files()
            median = statistics.median(times[-10:])
            first = statistics.median(times[:10])
            print(
                f"refreshes {i - 8:3d}-{i + 1:3d}: median {median:.2f} s, "
                f"ratio to the first ten {median / first:.2f}; "
                f"state partition 0: {deltas} delta files, {snapshots} snapshots",
                flush=True,
            )
    bu.dbt("run", "-s", "clicks_per_user_batch")
    print(f"OK: {bu.same_rows(MODEL):,} rows, equal to the batch query's")


if __name__ == "__main__":
    main()
