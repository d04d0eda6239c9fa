"""Benchmark: a dbt `streaming_view` (10-minute TUMBLE aggregate) vs. the same job \
hand-written in PySpark.

What it measures
  * ours:     `dbt run` of model bids_per_10min (materialized='streaming_view'), invoked in-process
              with dbtRunner, over a Delta table of N events written as K appended versions;
  * baseline: the PySpark Structured Streaming job a user would write by hand (same "delta_rs"
              source, withWatermark + window() aggregate, availableNow trigger, foreachBatch sink
              appending batch_df.toArrow() with deltalake.write_deltalake).
  Both run in the same process and the same SparkSession, after two warm-up rounds of both paths on
  a 100k-event table (so neither pays Spark/JVM startup or cold JIT, and dbt can partially parse);
  repeats alternate which side runs first. Runs take a few seconds and vary by ~10% on a small
  machine: use --repeat 5 and compare the medians. Both outputs are checked
  to hold the same rows. Printed: wall seconds, events/s, ours/baseline ratio and overhead
  (target <= 15%), dbt's share (invoke time minus the adapter's own duration_s), and peak memory:
  JVM RSS and heap (polled), Python UDF workers' RSS (polled), Python driver ru_maxrss.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_tumble.py [--events 2000000] [--versions 20] [--repeat 1]
Work files go to bench/work/ (gitignored) and are recreated on every run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
PROJECT, WAREHOUSE = os.path.join(WORK, "project"), os.path.join(WORK, "warehouse")
BIDS, OURS_OUT = (
    os.path.join(WAREHOUSE, "bench", "bids"),
    os.path.join(WAREHOUSE, "bench", "bids_per_10min"),
)
BASE_OUT = os.path.join(WORK, "baseline", "bids_per_10min")
MODEL = """{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ source('bench','bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, item
"""
FILES = {
    "dbt_project.yml": (
        "name: bench_tumble\nversion: '1.0'\nconfig-version: 2\nprofile: bench_tumble\n"
    ),
    "profiles.yml": (
        "bench_tumble:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
        "      method: session\n      schema: bench\n"
        f"      warehouse_path: {WAREHOUSE}\n      threads: 1\n"
    ),
    "models/sources.yml": (
        "version: 2\nsources:\n  - name: bench\n    schema: bench\n"
        "    tables:\n      - name: bids\n"
    ),
    "models/bids_per_10min.sql": MODEL,
}


def write_events(
    n: int, versions: int, seed: int = 42, after_version=None, items: int = 100, path: str = BIDS
) -> None:
    """n bids over n/2000 minutes, `items` items, +-5 s out-of-order jitter, as `versions`
    appends to the Delta table at `path` (calling `after_version(i)` after the i-th, if given)."""
    rng = np.random.default_rng(seed)
    start_us = 1_586_937_600_000_000  # 2020-04-15 08:00 UTC
    span_us = max(n // 2000, 1) * 60_000_000
    t = (
        start_us
        + np.arange(n, dtype=np.int64) * span_us // n
        + rng.integers(-5_000_000, 5_000_000, n)
    )
    names = np.array([f"item_{i:03d}" for i in range(items)])
    table = pa.table(
        {
            "bidtime": pa.array(t, pa.timestamp("us", tz="UTC")),
            "price": pa.array(np.round(rng.uniform(1, 100, n), 2)),
            "item": pa.array(names[rng.integers(0, items, n)]),
        }
    )
    shutil.rmtree(path, ignore_errors=True)
    for i, chunk in enumerate(np.array_split(np.arange(n), versions)):
        write_deltalake(path, table.slice(int(chunk[0]), len(chunk)), mode="append")
        if after_version:
            after_version(i)


def run_ours() -> tuple[float, float]:
    """`dbt run` in process; returns (wall seconds, the adapter's own duration_s)."""
    from dbt.cli.main import dbtRunner

    shutil.rmtree(OURS_OUT, ignore_errors=True)
    t0 = time.perf_counter()
    res = dbtRunner().invoke(
        ["--quiet", "run", "--project-dir", PROJECT, "--profiles-dir", PROJECT]
    )
    wall = time.perf_counter() - t0
    if not res.success:
        sys.exit(f"FAIL: dbt run failed: {res.exception or [r.message for r in res.result]}")
    return wall, float(res.result.results[0].adapter_response.get("duration_s", 0.0))


def run_baseline(spark) -> float:
    """The hand-written PySpark job; returns wall seconds."""
    from pyspark.sql import functions as F

    shutil.rmtree(BASE_OUT, ignore_errors=True)
    checkpoint = tempfile.mkdtemp(prefix="bench-ckpt-", dir=WORK)

    def sink(batch_df, batch_id):
        tbl = batch_df.toArrow()
        if tbl.num_rows:
            write_deltalake(BASE_OUT, tbl, mode="append")

    t0 = time.perf_counter()
    df = (
        spark.readStream.format("delta_rs")
        .option("table", "bench.bids")
        .load(BIDS)
        .withWatermark("bidtime", "1 minute")
        .groupBy(F.window("bidtime", "10 minutes"), "item")
        .agg(F.sum("price").alias("total"), F.count("*").alias("bids"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "item",
            "total",
            "bids",
        )
    )
    query = (
        df.writeStream.outputMode("append")
        .trigger(availableNow=True)
        .option("checkpointLocation", checkpoint)
        .foreachBatch(sink)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - t0
    shutil.rmtree(checkpoint, ignore_errors=True)
    return wall


def check_same() -> int:
    """Both outputs hold the same rows; returns the row count."""

    def load(path):
        df = DeltaTable(path).to_pandas(columns=["window_start", "item", "total", "bids"])
        df["total"] = df["total"].round(6)
        return df.sort_values(["window_start", "item"]).reset_index(drop=True)

    ours, base = load(OURS_OUT), load(BASE_OUT)
    if len(ours) != len(base) or not ours.equals(base):
        diff = ours.merge(base, how="outer", indicator=True).query("_merge != 'both'")
        sys.exit(
            f"FAIL: outputs differ: ours {len(ours)} rows, baseline {len(base)} rows\n"
            f"{diff.head(20)}"
        )
    if not len(ours):
        sys.exit("FAIL: both outputs are empty")
    return len(ours)


class MemoryPoller(threading.Thread):
    """Peak RSS of the JVM child and of the Python workers it forks (sum), polled every 50 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.jvm_peak = self.workers_peak = 0
        self.stop = threading.Event()

    @staticmethod
    def _procs():
        procs = {}  # pid -> (ppid, comm, rss bytes)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read()
                with open(f"/proc/{pid}/statm") as fh:
                    rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except OSError:
                continue
            comm, rest = (
                stat[stat.index("(") + 1 : stat.rindex(")")],
                stat[stat.rindex(")") + 2 :].split(),
            )
            procs[int(pid)] = (int(rest[1]), comm, rss)
        return procs

    def sample(self):
        procs = self._procs()
        descendants, frontier = set(), {os.getpid()}
        while frontier:
            frontier = {p for p, (pp, _, _) in procs.items() if pp in frontier} - descendants
            descendants |= frontier
        jvm = sum(procs[p][2] for p in descendants if procs[p][1] == "java")
        workers = sum(procs[p][2] for p in descendants if procs[p][1].startswith("python"))
        self.jvm_peak, self.workers_peak = max(self.jvm_peak, jvm), max(self.workers_peak, workers)

    def run(self):
        while not self.stop.wait(0.05):
            self.sample()


def jvm_heap(spark) -> tuple[int, int]:
    """(max heap, sum of the heap pools' peak usage) in bytes."""
    mf = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    peak = sum(
        p.getPeakUsage().getUsed()
        for p in mf.getMemoryPoolMXBeans()
        if str(p.getType()) == "Heap memory"
    )
    return mf.getMemoryMXBean().getHeapMemoryUsage().getMax(), peak


def setup_project(files: dict | None = None, work: str = WORK, project: str = PROJECT) -> None:
    """A fresh work dir with the dbt project (`files`, default this benchmark's); cwd moves
    there so dbt's logs/ and target/ land in it."""
    shutil.rmtree(work, ignore_errors=True)
    for name, text in (FILES if files is None else files).items():
        os.makedirs(os.path.dirname(os.path.join(project, name)), exist_ok=True)
        with open(os.path.join(project, name), "w") as fh:
            fh.write(text)
    os.chdir(project)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--versions", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()

    setup_project()
    # Warm-up on a small table: starts Spark, parses the dbt project, JIT-warms both code paths.
    write_events(100_000, 2)
    from dbt.adapters.spark_streaming.runtime.session import get_spark

    for _ in range(2):
        run_ours()
        spark = get_spark()
        run_baseline(spark)
        check_same()

    t0 = time.perf_counter()
    write_events(args.events, args.versions)
    gen_s = time.perf_counter() - t0
    poller = MemoryPoller()
    poller.start()
    ours, adapter, base = [], [], []
    for i in range(args.repeat):  # alternate the order so neither side always runs "second"
        for side in ("ours", "base") if i % 2 == 0 else ("base", "ours"):
            if side == "ours":
                wall, inner = run_ours()
                ours.append(wall), adapter.append(inner)
            else:
                base.append(run_baseline(spark))
        rows = check_same()
    poller.stop.set()
    poller.join()
    poller.sample()
    heap_max, heap_peak = jvm_heap(spark)
    driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    driver_mem = spark.sparkContext.getConf().get("spark.driver.memory", "1g")

    o, b = min(ours), min(base)
    om, bm = statistics.median(ours), statistics.median(base)
    mib = 2**20
    print(
        f"\nbench_tumble: {args.events:,} events in {args.versions} Delta versions "
        f"(generated in {gen_s:.1f}s), {rows:,} output rows, identical in both; "
        f"{args.repeat} repeat(s)"
    )
    print(f"{'':10} {'best s':>8} {'events/s':>11} {'median s':>9}   all runs (s)")
    for name, best, median, runs in (("ours", o, om, ours), ("baseline", b, bm, base)):
        print(
            f"{name:10} {best:8.2f} {args.events / best:11,.0f} {median:9.2f}   "
            f"{' '.join(f'{x:.2f}' for x in runs)}"
        )
    overhead = (o / b - 1) * 100
    print(
        f"ratio ours/baseline {o / b:.3f} (best), {om / bm:.3f} (median); "
        f"overhead {overhead:+.1f}% "
        f"({'OK' if overhead <= 15 else 'ABOVE'} target <= 15%)"
    )
    dbt_s = statistics.median(w - x for w, x in zip(ours, adapter, strict=True))
    print(
        f"  of ours (median): adapter run_streaming_model {statistics.median(adapter):.2f}s, "
        f"dbt around it {dbt_s:.2f}s"
    )
    print(
        f"memory peaks: JVM RSS {poller.jvm_peak / mib:,.0f} MiB, "
        f"JVM heap {heap_peak / mib:,.0f} MiB "
        f"of max {heap_max / mib:,.0f} MiB (spark.driver.memory={driver_mem}: "
        f"{'within' if heap_peak <= heap_max else 'EXCEEDED'}), Python workers RSS "
        f"{poller.workers_peak / mib:,.0f} MiB, Python driver RSS {driver_rss / mib:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
