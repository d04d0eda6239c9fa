"""Benchmark: the latency of a continuous model, from a source append's commit to the model's
commit holding those rows.

A `streaming_view` projecting a Delta source (`bench.events`) runs continuously (a runner
process started by `dbt run`, processing-time trigger `--interval`). The benchmark appends
`--appends` versions of `--rows` rows each, one at a time, waiting a random fraction of the
trigger interval before each (so appends fall anywhere in the trigger's cycle), and for each
append takes the time from the source's Delta commit to the first commit of the model whose
metadata says it consumed that version (both are Delta commit timestamps, written on this
machine). Prints p50, p99 and max (targets: p50 <= 0.5 s, p99 <= 1.5 s), then stops the runner
and checks that the model holds exactly the source's rows.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_latency.py [--appends 100] [--rows 1000] \
      [--interval '100 milliseconds']
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work", "latency")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
EVENTS = os.path.join(WAREHOUSE, "bench", "events")
MODEL = os.path.join(WAREHOUSE, "bench", "events_live")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
META = "dbt_spark_streaming"


def files(interval: str) -> dict:
    return {
        "dbt_project.yml": "name: bench_latency\nversion: '1.0'\nconfig-version: 2\nprofile: b\n",
        "profiles.yml": (
            "b:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
            f"      method: session\n      schema: bench\n      warehouse_path: {WAREHOUSE}\n"
            "      threads: 1\n"
        ),
        "models/sources.yml": (
            "version: 2\nsources:\n  - name: bench\n    schema: bench\n"
            "    tables: [{name: events}]\n"
        ),
        "models/events_live.sql": (
            "{{ config(materialized='streaming_view', "
            f"trigger={{'processing_time': '{interval}'}}) }}}}\n"
            "SELECT ts, id, amount * 2 AS amount2 FROM {{ source('bench', 'events') }}\n"
        ),
    }


def events(n: int, start: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "ts": pa.array((1_586_937_600 + ids) * 1_000_000, pa.timestamp("us", tz="UTC")),
            "id": pa.array(ids, pa.int64()),
            "amount": pa.array(ids % 100 / 4.0),
        }
    )


def dbt(*args: str) -> None:
    out = subprocess.run(
        [DBT, *args, "--project-dir", PROJECT, "--profiles-dir", PROJECT],
        capture_output=True,
        text=True,
        cwd=PROJECT,
    )
    if out.returncode != 0:
        sys.exit(f"FAIL: dbt {' '.join(args)}\n{out.stdout[-3000:]}")


def commit_ms(table: str, version: int) -> tuple[int, dict]:
    """The Delta commit timestamp (ms) of `version` of `table`, and our metadata in it."""
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json")) as fh:
        for line in fh:
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
                meta = info.get(META)
                return info["timestamp"], json.loads(meta) if isinstance(meta, str) else {}
    raise ValueError(f"no commitInfo in version {version} of {table}")


def wait_for_model(source_version: int, after: int, timeout: float = 120.0) -> tuple[int, int]:
    """(version, commit ms) of the model's first commit after version `after` that consumed
    `source_version` of the source."""
    deadline, version = time.time() + timeout, after + 1
    log = os.path.join(MODEL, "_delta_log")
    while time.time() < deadline:
        if os.path.exists(os.path.join(log, f"{version:020d}.json")):
            ms, meta = commit_ms(MODEL, version)
            if meta.get("sources", {}).get("bench.events", -1) >= source_version:
                return version, ms
            version += 1
            continue
        time.sleep(0.005)
    sys.exit(f"FAIL: no model commit of source version {source_version} within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--appends", type=int, default=100)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--interval", default="100 milliseconds", help="the trigger's interval")
    args = ap.parse_args()
    from dbt.adapters.spark_streaming.sql.intervals import parse_duration

    interval_s = parse_duration(args.interval) / 1e6
    shutil.rmtree(WORK, ignore_errors=True)
    for name, text in files(args.interval).items():
        os.makedirs(os.path.dirname(os.path.join(PROJECT, name)), exist_ok=True)
        with open(os.path.join(PROJECT, name), "w") as fh:
            fh.write(text)
    write_deltalake(EVENTS, events(args.rows, 0), mode="append")
    dbt("run")  # starts the runner; returns once its first batch is committed
    rng = random.Random(7)
    latencies = []
    try:
        model_version = DeltaTable(MODEL).version()
        for i in range(1, args.appends + 1):
            time.sleep(rng.uniform(0, interval_s))
            write_deltalake(EVENTS, events(args.rows, i * args.rows), mode="append")
            source_version = DeltaTable(EVENTS).version()
            appended_ms, _ = commit_ms(EVENTS, source_version)
            model_version, done_ms = wait_for_model(source_version, model_version)
            latencies.append((done_ms - appended_ms) / 1000)
    finally:
        dbt("run-operation", "stream_stop")
    got = DeltaTable(MODEL).to_pyarrow_table(columns=["id"]).column("id").to_numpy()
    want = np.arange((args.appends + 1) * args.rows)
    if not np.array_equal(np.sort(got), want):
        sys.exit(f"FAIL: the model holds {len(got)} rows, not the source's {len(want)}")
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    print(
        f"continuous streaming_view, trigger every {args.interval}; {args.appends} appends of "
        f"{args.rows:,} rows, source commit to model commit:"
    )
    print(f"  p50 {q[49]:.3f} s   p99 {q[98]:.3f} s   max {max(latencies):.3f} s")
    print(f"  (targets: p50 <= 0.5 s, p99 <= 1.5 s); model rows checked: {len(got):,}")


if __name__ == "__main__":
    main()
