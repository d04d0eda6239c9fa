"""Where the time of bench_tumble.py goes: per-phase timers for ours vs. the baseline.

  .venv/bin/python bench/profile_tumble.py [--events 2000000] [--versions 20] [--repeat 3] \
      [--cprofile]

Same setup as bench_tumble.py, then for each side (alternating, `--repeat` times) it reports
  * Spark's own per-trigger durations (StreamingQueryProgress.durationMs, summed over the
    query's micro-batches, via a StreamingQueryListener): latestOffset, queryPlanning,
    addBatch (runs the batch incl. the foreachBatch sink), walCommit, commitOffsets, ...
  * wall time of the adapter's Python steps (monkeypatched timers) and of dbt around them
    (dbtRunner.invoke minus run_streaming_model).
Prints medians in seconds.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402

timers: dict[str, float] = collections.defaultdict(float)


def timed(owner, attr, label=None):
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            timers[label or attr] += time.perf_counter() - t0

    setattr(owner, attr, wrapper)


def instrument() -> None:
    from dbt.adapters.spark_streaming.delta import sink
    from dbt.adapters.spark_streaming.runtime import catalog, model, report, streaming
    from dbt.adapters.spark_streaming.runtime import sink as model_sink

    timed(model.sqlfront, "compile_query", "adapter: compile_query (SQL rewrite + source schemas)")
    timed(streaming, "_check_state", "adapter: _check_state")
    timed(model_sink, "create_table", "adapter sink: create_table (empty Delta commit)")
    timed(model_sink, "_read_offsets", "adapter sink: _read_offsets")
    timed(report, "summarise", "adapter: summarise progress")
    timed(report, "log_line", "adapter: log_line")
    timed(model_sink, "_query_id", "adapter sink: _query_id")
    timed(sink.BatchCommitter, "committed", "adapter sink: BatchCommitter.committed")
    timed(
        sink.BatchCommitter,
        "commit",
        "adapter sink: BatchCommitter.commit (parquet + Delta commit)",
    )
    timed(catalog.Catalog, "bind", "adapter: Catalog.bind (incl. output table after the run)")
    timed(catalog.Catalog, "bind_registered", "adapter: Catalog.bind_registered")
    timed(streaming, "run_streaming_model", "adapter: run_streaming_model TOTAL")
    # the baseline's sink writes with write_deltalake (bench_tumble imported it by name)
    timed(bt, "write_deltalake", "baseline sink: write_deltalake")
    from pyspark.sql import SparkSession
    from pyspark.sql.classic.dataframe import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    timed(DataFrame, "toArrow", "both sinks: batch_df.toArrow")
    timed(DataStreamReader, "load", "both: readStream...load (source schema via Python worker)")
    timed(DataStreamWriter, "start", "both: writeStream.start")
    timed(StreamingQuery, "awaitTermination", "both: query.awaitTermination")
    timed(SparkSession, "sql", "spark.sql calls (dbt macros + adapter binding/DDL)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--versions", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cprofile", action="store_true", help="also cProfile one dbt invoke")
    args = ap.parse_args()

    bt.setup_project()
    bt.write_events(20_000, 2)
    bt.run_ours()
    from pyspark.sql.streaming import StreamingQueryListener

    from dbt.adapters.spark_streaming.runtime.session import get_spark

    spark = get_spark()
    bt.run_baseline(spark)
    instrument()

    progress: list = []

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, e):
            pass

        def onQueryIdle(self, e):
            pass

        def onQueryTerminated(self, e):
            pass

        def onQueryProgress(self, e):
            progress.append(e.progress)

    listener = Listener()
    spark.streams.addListener(listener)

    bt.write_events(args.events, args.versions)
    results = {"ours": [], "base": []}
    for i in range(args.repeat + 1):  # the first round is a warm-up at full size, not reported
        for side in ("ours", "base") if i % 2 == 0 else ("base", "ours"):
            timers.clear()
            del progress[:]
            wall = bt.run_ours()[0] if side == "ours" else bt.run_baseline(spark)
            time.sleep(1.0)  # let the listener bus deliver the last progress events
            sample = dict(timers, wall=wall)
            sample["batches"] = len(progress)
            for p in progress:
                for k, v in p.durationMs.items():
                    sample[f"spark: {k}"] = sample.get(f"spark: {k}", 0) + v / 1000
            if side == "ours":
                sample["dbt around the adapter"] = (
                    wall - timers["adapter: run_streaming_model TOTAL"]
                )
            if i:
                results[side].append(sample)
        bt.check_same()

    spark.streams.removeListener(listener)
    if (
        args.cprofile
    ):  # one more dbt run under cProfile (main thread: dbt itself, not the model thread)
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(bt.run_ours)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)

    keys = sorted({k for s in results["ours"] + results["base"] for k in s})
    med = {
        side: {k: statistics.median(s.get(k, 0.0) for s in results[side]) for k in keys}
        for side in results
    }
    print(
        f"\nprofile: {args.events:,} events / {args.versions} versions, "
        f"median of {args.repeat} (seconds)"
    )
    print(f"{'':62} {'ours':>8} {'baseline':>9} {'diff':>8}")
    for k in ["wall", "batches"] + [k for k in keys if k not in ("wall", "batches")]:
        o, b = med["ours"][k], med["base"][k]
        print(f"{k:62} {o:8.3f} {b:9.3f} {o - b:+8.3f}")


if __name__ == "__main__":
    main()
