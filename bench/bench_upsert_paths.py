"""Benchmark: one upsert_table micro-batch MERGEd in the dbt process against by Spark jobs.

An UpsertCommitter (delta/upsert.py) over a table of --users keys (user_id, n, total, last_ts,
built by one batch), then batches of B changed keys drawn at random (every file is a
candidate), alternately on each path (driver_rows forcing it), in one process and
SparkSession; prints each path's seconds per batch (commit() alone, the batch cached), their
medians' ratio and the process's peak RSS.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_upsert_paths.py [--users 100000] [--batch 9500 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

from dbt.adapters.spark_streaming.delta import upsert
from dbt.adapters.spark_streaming.delta.sink import create_table
from dbt.adapters.spark_streaming.runtime.session import get_spark

SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()),
        ("n", pa.int64()),
        ("total", pa.float64()),
        ("last_ts", pa.timestamp("us", tz="UTC")),
    ]
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--batch", type=int, nargs="+", default=[9_500, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spark, rng = get_spark(), np.random.default_rng(1)

    def batch(keys, v: int):
        n = len(keys)
        t = pa.table(
            {
                "user_id": pa.array(keys, pa.int64()),
                "n": pa.array(np.full(n, v), pa.int64()),
                "total": pa.array(rng.uniform(0, 100, n)),
                "last_ts": pa.array(np.full(n, 1_600_000_000_000_000 + v), SCHEMA[3].type),
            }
        )
        return spark.createDataFrame(t)

    work = tempfile.mkdtemp(prefix="bench-upsert-paths-")
    path = f"{work}/t"
    try:
        create_table(path, SCHEMA, {"batch_id": None})
        upsert.create_changelog(path, SCHEMA)
        sink = upsert.UpsertCommitter(path, "bench", SCHEMA, ["user_id"], None, driver_rows=0)
        sink.commit(batch(np.arange(args.users), 0), 0, {})
        batch_id = 1
        for size in args.batch:
            took: dict[str, list[float]] = {"driver": [], "executors": []}
            for i in range(args.repeat):
                for where in ["driver", "executors"][:: 1 if i % 2 == 0 else -1]:
                    on_driver = where == "driver"
                    sink.driver_rows = size if on_driver else 0
                    sink.driver_bytes = 1 << 40 if on_driver else 0
                    df = batch(rng.choice(args.users, size, replace=False), batch_id).cache()
                    df.count()
                    t0 = time.perf_counter()
                    sink.commit(df, batch_id, {})
                    took[where].append(time.perf_counter() - t0)
                    assert sink.paths[-1] == where
                    df.unpersist()
                    batch_id += 1
            d, e = (statistics.median(took[w]) for w in ("driver", "executors"))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{args.users:,} keys, batch {size:,}: dbt process {d:.2f} s, Spark jobs "
                f"{e:.2f} s (medians of {args.repeat}), ratio {e / d:.1f}x; peak RSS {rss:.0f} MB",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
