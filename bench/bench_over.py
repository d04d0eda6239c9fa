"""Benchmark: throughput of OVER aggregations (RANGE, ROWS, UNBOUNDED frames) as a ratio to the
TUMBLE aggregate on the same events, and their state as the stream grows.

Same harness as bench_tvfs.py (bench_tumble's ~100 items, a few seconds out of order, N events
in K Delta versions, one in-process `dbt run` per model from scratch; medians of the repeats),
with these models. An OVER aggregation writes one row per event (the TUMBLE aggregate one per
item and window) and runs as applyInPandasWithState (runtime/over.py): rows go through Python.

State rows are Spark's state-store rows: one per partition key (item) for every frame, each
holding that key's pending rows and its frame's kept rows (RANGE: the interval, ROWS: the last
n) or accumulators (UNBOUNDED); so the count stays flat at the number of items.

Run (from the repo root, with the project venv; keep it short on a shared machine):
  .venv/bin/python bench/bench_over.py [--events 200000] [--versions 10] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tvfs as tv  # noqa: E402  (same project, generator and measurements)

B = tv.B
W = "PARTITION BY item ORDER BY bidtime"
OVER = {
    "tumble": tv.MODELS["tumble"],
    "over_range": (
        f"SELECT item, bidtime, price, SUM(price) OVER w AS total, COUNT(*) OVER w AS n FROM {B} "
        f"WINDOW w AS ({W} RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW)"
    ),
    "over_rows": (
        f"SELECT item, bidtime, price, SUM(price) OVER w AS total, MAX(price) OVER w AS top "
        f"FROM {B} WINDOW w AS ({W} ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)"
    ),
    "over_unbounded": (
        f"SELECT item, bidtime, price, SUM(price) OVER w AS total, COUNT(*) OVER w AS n "
        f"FROM {B} WINDOW w AS ({W} ROWS UNBOUNDED PRECEDING)"
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--state-versions", type=int, default=5)
    args = ap.parse_args()
    tv.MODELS.clear()
    tv.MODELS.update(OVER)
    tv.setup(with_join=False)
    tv.throughput(args.events, args.versions, args.repeat)
    tv.state(args.events // 5, args.state_versions)


if __name__ == "__main__":
    main()
