"""Benchmark: the cost of the snapshot_equivalence test against one batch evaluation of the query.

What it measures, on the bench_tumble model (10-minute TUMBLE aggregate by item) over N events
written as K Delta versions and consumed by two `dbt run`s (K-1 versions, then the last one):
  * test:     `dbt test` of the model's snapshot_equivalence test, in process (dbtRunner);
  * check:    the adapter's check alone (runtime/equivalence.check: batch query over the consumed
              source versions with late rows and open windows removed, multiset comparison);
  * baseline: one batch evaluation of the same rewritten query over the same snapshot, run to
              completion (written to Spark's `noop` sink).
All in the same process and SparkSession, after a warm-up; repeats alternate the order. The
target is test ~= baseline + the comparison, i.e. a ratio close to 1.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_equivalence.py [--events 10000000] [--versions 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402  (same project, model and event generator)

TESTS = "version: 2\nmodels:\n  - name: bids_per_10min\n    data_tests: [snapshot_equivalence]\n"


def dbt(*args: str):
    from dbt.cli.main import dbtRunner

    res = dbtRunner().invoke(
        ["--quiet", *args, "--project-dir", bt.PROJECT, "--profiles-dir", bt.PROJECT]
    )
    if not res.success:
        sys.exit(f"FAIL: dbt {args[0]} failed: {res.exception or [r.message for r in res.result]}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    bt.setup_project()
    with open(os.path.join(bt.PROJECT, "models", "tests.yml"), "w") as fh:
        fh.write(TESTS)
    # Consume all but the last version, then the last one: two runs, several micro-batches.
    run_s = []

    def run_after(i: int) -> None:
        if i >= args.versions - 2:
            t0 = time.perf_counter()
            dbt("run")
            run_s.append(time.perf_counter() - t0)

    bt.write_events(args.events, args.versions, after_version=run_after)

    from dbt.adapters.spark_streaming import sql as sqlfront
    from dbt.adapters.spark_streaming.runtime.catalog import Catalog
    from dbt.adapters.spark_streaming.runtime.equivalence import check
    from dbt.adapters.spark_streaming.runtime.model import SourceSchemas
    from dbt.adapters.spark_streaming.runtime.session import get_spark

    spark = get_spark()  # the session dbt used, in this process
    catalog = Catalog(spark, bt.WAREHOUSE)
    catalog.bind_all()
    plan = sqlfront.compile_query(
        bt.MODEL.split("}}", 1)[1].replace("{{ source('bench','bids') }}", "bench.bids"),
        schemas=SourceSchemas(catalog),
        watermark_delay="1 minute",
    )

    def baseline() -> float:
        t0 = time.perf_counter()
        spark.sql(plan.sql_for({})).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    def adapter_check() -> float:
        t0 = time.perf_counter()
        result = check(spark, catalog, "bench", "bids_per_10min")
        if not result.passed or not result.actual_rows:
            sys.exit(f"FAIL: {result.summary()}")
        return time.perf_counter() - t0

    def test() -> float:
        t0 = time.perf_counter()
        dbt("test")
        return time.perf_counter() - t0

    for f in (baseline, adapter_check, test):  # warm-up
        f()
    times = {"baseline": [], "check": [], "test": []}
    for i in range(args.repeat):
        order = [("baseline", baseline), ("check", adapter_check), ("test", test)]
        for name, f in order if i % 2 == 0 else order[::-1]:
            times[name].append(f())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"events={args.events:,} versions={args.versions} "
        f"(dbt runs {' + '.join(f'{x:.1f}' for x in run_s)} s), medians of {args.repeat}:"
    )
    print(f"  baseline (one batch evaluation): {med['baseline']:.2f} s")
    print(
        f"  adapter check:                   {med['check']:.2f} s  "
        f"ratio {med['check'] / med['baseline']:.2f}"
    )
    print(
        f"  dbt test snapshot_equivalence:   {med['test']:.2f} s  "
        f"ratio {med['test'] / med['baseline']:.2f}"
    )


if __name__ == "__main__":
    main()
