"""Benchmark: throughput of each window TVF and window operation, as a ratio to TUMBLE, and
the size of their streaming state as the stream grows.

Throughput: each model below is a `streaming_view` over the same N bids (bench_tumble's
generator: ~100 items, a few seconds out of order) in K Delta versions; one `dbt run` (in
process, dbtRunner) builds it from scratch over all of them. Prints seconds, events/s and the
ratio to the TUMBLE aggregate, medians of the repeats (models in alternating order).

State: the same models then follow the stream version by version (one `dbt run` per
appended version) and print Spark's state-store rows after each run (`state_rows` in
run_results.json): window-bounded operators keep a flat state, as the watermark closes and
evicts windows (CUMULATE: each cumulative window at its own end, so at most max size / step
open windows of partial aggregates per key).

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_tvfs.py [--events 2000000] [--versions 20] [--repeat 3] [--with-join]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402  (same project layout and event generator)

B = "{{ source('bench','bids') }}"
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }}\n"
TUMBLE = f"TABLE(TUMBLE(TABLE {B}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
MODELS = {
    "tumble": (
        "SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n "
        f"FROM {TUMBLE} "
        "GROUP BY window_start, window_end, item"
    ),
    "hop": (
        f"SELECT window_start, window_end, item, SUM(price) AS total FROM TABLE(HOP(TABLE {B}, "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) "
        "GROUP BY window_start, window_end, item"
    ),
    "cumulate": (
        "SELECT window_start, window_end, item, SUM(price) AS total "
        f"FROM TABLE(CUMULATE(TABLE {B}, "
        "DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES)) "
        "GROUP BY window_start, window_end, item"
    ),
    "session": (
        "SELECT window_start, window_end, item, SUM(price) AS total "
        f"FROM TABLE(SESSION(TABLE {B} "
        "PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '10' SECONDS)) "
        "GROUP BY window_start, window_end, item"
    ),
    "tumble_rows": (
        f"SELECT bidtime, price, item, window_start, window_end FROM {TUMBLE} WHERE price > 50"
    ),
    "top3": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY window_start, window_end, item ORDER BY "
        f"price DESC) AS rownum FROM {TUMBLE}) WHERE rownum <= 3"
    ),
    "dedup_first": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY window_start, window_end, item "
        f"ORDER BY bidtime) AS rownum FROM {TUMBLE}) WHERE rownum = 1"
    ),
}
# The window join (a self-join of bids per item and window) is opt-in (--with-join): Spark's
# stream-stream join keeps every row of open windows on both sides, and on 2M events it took
# ~325 s where the TUMBLE aggregate takes ~10 s (one run each, on a loaded machine).
JOIN = {
    "join": (
        "SELECT L.item, L.price AS l_price, R.price AS r_price, L.window_start, L.window_end "
        f"FROM {TUMBLE} L "
        f"JOIN {TUMBLE} R ON L.item = R.item AND L.window_start = R.window_start "
        "AND L.window_end = R.window_end "
        "AND L.bidtime < R.bidtime AND R.bidtime < L.bidtime + INTERVAL '2' SECONDS"
    ),
}


def setup(with_join: bool) -> None:
    if with_join:
        MODELS.update(JOIN)
    bt.FILES.pop("models/bids_per_10min.sql", None)
    bt.FILES.update({f"models/{name}.sql": CONFIG + sql for name, sql in MODELS.items()})
    bt.setup_project()


def dbt_run(*models: str) -> dict:
    """`dbt run -s models` in process; adapter_response by model."""
    from dbt.cli.main import dbtRunner

    res = dbtRunner().invoke(
        ["--quiet", "run", "-s", *models, "--project-dir", bt.PROJECT, "--profiles-dir", bt.PROJECT]
    )
    if not res.success:
        sys.exit(
            f"FAIL: dbt run {' '.join(models)}: {res.exception or [r.message for r in res.result]}"
        )
    return {r.node.name: r.adapter_response for r in res.result}


def drop_tables() -> None:
    for name in {**MODELS, **JOIN}:
        shutil.rmtree(os.path.join(bt.WAREHOUSE, "bench", name), ignore_errors=True)


def throughput(events: int, versions: int, repeat: int) -> None:
    bt.write_events(events, versions)
    times: dict[str, list[float]] = {name: [] for name in MODELS}
    names = list(MODELS)
    for i in range(repeat + 1):  # round 0 warms up
        drop_tables()
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            response = dbt_run(name)[name]
            if i:
                times[name].append(time.perf_counter() - t0)
            reads = 2 if name == "join" else 1  # the self-join reads the source once per side
            if response["rows_read"] != reads * events:
                sys.exit(
                    f"FAIL: {name} read {response['rows_read']} rows, not {reads} x {events} events"
                )
    base = statistics.median(times["tumble"])
    print(
        f"throughput: {events:,} events in {versions} versions, one dbt run each, "
        f"medians of {repeat}:"
    )
    print(f"  {'model':<12} {'seconds':>8} {'events/s':>10} {'ratio to TUMBLE':>16}")
    for name in MODELS:
        med = statistics.median(times[name])
        print(f"  {name:<12} {med:>8.2f} {events / med:>10,.0f} {base / med:>16.2f}")


def state(events: int, versions: int) -> None:
    drop_tables()
    rows: dict[str, list[int]] = {name: [] for name in MODELS}

    def after(i: int) -> None:
        for name, response in dbt_run(*MODELS).items():
            rows[name].append(response["state_rows"])

    bt.write_events(events, versions, after_version=after)
    print(
        f"state rows after each of {versions} runs "
        f"(one appended version each, {events // versions:,} events):"
    )
    for name, counts in rows.items():
        print(f"  {name:<12} {json.dumps(counts)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--versions", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--state-versions", type=int, default=8)
    ap.add_argument(
        "--with-join", action="store_true", help="also the window join (slow, see JOIN)"
    )
    args = ap.parse_args()
    setup(args.with_join)
    throughput(args.events, args.versions, args.repeat)
    state(args.events // 5, args.state_versions)


if __name__ == "__main__":
    main()
