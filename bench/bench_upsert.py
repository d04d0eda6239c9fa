"""Benchmark: refreshing an upsert_table after a 1% append, against recomputing it in batch.

What it measures, for each history size H (events already maintained):
  * refresh:  `dbt run` of the upsert_table model (GROUP BY user: count, sum, max time) after
              H/100 new events were appended as one Delta version (in process, dbtRunner),
              with its state kept as partials in Delta (`state_ttl`) and, for comparison, in
              Spark's state store (`constant_domain`);
  * continuous: the same model running continuously (a runner process, 1-second trigger):
              the time from the append to its commit in the model's table;
  * floor:    `dbt run` of a stateless streaming_view of the same source (a filter keeping ~1% of
              the events): what any streaming refresh costs here (query start, one micro-batch
              reading the new events, one Delta commit), whatever its query;
  * full:     `dbt run` of a `table` model with the same SQL, which recomputes the query over
              the whole snapshot and writes it to Delta: what a scheduled batch model does.
Both in the same process and SparkSession; each repeat appends another 1% and alternates the
order. Prints medians and the ratios refresh / full (target: <= 5%, flat as H grows).

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_upsert.py [--history 1000000 10000000] [--users 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402  (its project set-up)

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "upsert")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
CLICKS = os.path.join(WAREHOUSE, "bench", "clicks")
SQL = (
    "SELECT user_id, COUNT(*) AS n, SUM(amount) AS total, MAX(ts) AS last_ts\n"
    "FROM {{ source('bench', 'clicks') }} GROUP BY user_id\n"
)


def project_files(name: str, warehouse: str, table: str) -> dict:
    """A bench dbt project's dbt_project.yml, profiles.yml (the in-process session, schema
    bench, one thread) and sources.yml (source `bench` with `table`)."""
    return {
        "dbt_project.yml": f"name: {name}\nversion: '1.0'\nconfig-version: 2\nprofile: bench\n",
        "profiles.yml": (
            "bench:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
            "      method: session\n      schema: bench\n"
            f"      warehouse_path: {warehouse}\n      threads: 1\n"
        ),
        "models/sources.yml": (
            "version: 2\nsources:\n  - name: bench\n    schema: bench\n"
            f"    tables: [{{name: {table}}}]\n"
        ),
    }


FILES = {
    **project_files("bench_upsert", WAREHOUSE, "clicks"),
    "models/clicks_per_user.sql": "{{ config(materialized='upsert_table', state_ttl='30 days') }}\n"
    + SQL,
    "models/clicks_per_user_spark.sql": (
        "{{ config(materialized='upsert_table', constant_domain=['user_id']) }}\n" + SQL
    ),
    "models/clicks_per_user_cont.sql": (
        "{{ config(materialized='upsert_table', constant_domain=['user_id'], "
        "trigger={'processing_time': '1 second'}) }}\n" + SQL
    ),
    "models/clicks_per_user_batch.sql": "{{ config(materialized='table') }}\n" + SQL,
    "models/clicks_filtered.sql": (
        "{{ config(materialized='streaming_view') }}\n"
        "SELECT * FROM {{ source('bench', 'clicks') }} WHERE amount < 2\n"
    ),
}


def events(n: int, users: int, start_s: int, rng) -> pa.Table:
    ts = (1_586_937_600 + start_s + np.arange(n) * 3600 // max(n, 1)) * 1_000_000
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(rng.integers(0, users, n), pa.int64()),
            "amount": pa.array(np.round(rng.uniform(1, 100, n), 2)),
        }
    )


def dbt(*args: str, project: str = PROJECT) -> float:
    """Seconds of a `dbt <args>` in this process (exits on a failure)."""
    from dbt.cli.main import dbtRunner

    t0 = time.perf_counter()
    res = dbtRunner().invoke(
        ["--quiet", *args, "--project-dir", project, "--profiles-dir", project]
    )
    if not res.success:
        sys.exit(f"FAIL: dbt {' '.join(args)}: {res.exception or [r.message for r in res.result]}")
    return time.perf_counter() - t0


def same_rows(model: str) -> int:
    """The upsert table equals the batch table (compared as sorted rows); returns the row count."""
    a = DeltaTable(os.path.join(WAREHOUSE, "bench", model)).to_pandas().sort_values("user_id")
    b = (
        DeltaTable(os.path.join(WAREHOUSE, "bench", "clicks_per_user_batch"))
        .to_pandas()
        .sort_values("user_id")
    )
    if not (
        len(a) == len(b)
        and (a["user_id"].values == b["user_id"].values).all()
        and (a["n"].values == b["n"].values).all()
        and np.allclose(a["total"], b["total"])
    ):
        sys.exit(f"FAIL: {model} differs from the batch table")
    return len(a)


def same_filtered(model: str) -> None:
    """The streaming_view holds exactly the source rows its filter keeps."""
    got = (
        DeltaTable(os.path.join(WAREHOUSE, "bench", model))
        .to_pyarrow_table(columns=["amount"])
        .column("amount")
    )
    want = (
        DeltaTable(CLICKS)
        .to_pyarrow_table(columns=["amount"], filters=[("amount", "<", 2)])
        .column("amount")
    )
    if len(got) != len(want) or not np.allclose(np.sort(got.to_numpy()), np.sort(want.to_numpy())):
        sys.exit(f"FAIL: {model} does not hold exactly the rows its filter keeps")


def committed_after(model: str, version: int, timeout: float = 300.0) -> float:
    """Wait until `model`'s table has a commit after `version`; returns when it appeared."""
    path = os.path.join(WAREHOUSE, "bench", model)
    deadline = time.perf_counter() + timeout
    while DeltaTable(path).version() <= version:
        if time.perf_counter() > deadline:
            sys.exit(f"FAIL: {model} committed nothing within {timeout} s")
        time.sleep(0.02)
    return time.perf_counter()


def bench(history: int, users: int, repeat: int) -> dict:
    bt.setup_project(FILES, WORK, PROJECT)
    rng = np.random.default_rng(7)
    step = 10_000_000
    for i, chunk in enumerate(np.array_split(np.arange(history), max(history // step, 1))):
        write_deltalake(CLICKS, events(len(chunk), users, i * 3600, rng), mode="append")
    initial = {
        m: dbt("run", "-s", m)
        for m in (
            "clicks_per_user",
            "clicks_per_user_spark",
            "clicks_per_user_cont",
            "clicks_filtered",
        )
    }
    times: dict[str, list[float]] = {
        "refresh": [],
        "spark": [],
        "full": [],
        "continuous": [],
        "floor": [],
    }
    cont = os.path.join(WAREHOUSE, "bench", "clicks_per_user_cont")
    for i in range(repeat + 1):  # the first round warms up
        version = DeltaTable(cont).version()
        t0 = time.perf_counter()
        write_deltalake(CLICKS, events(history // 100, users, (100 + i) * 3600, rng), mode="append")
        took = committed_after("clicks_per_user_cont", version) - t0
        if i:
            times["continuous"].append(took)
        order = [
            ("refresh", "clicks_per_user"),
            ("spark", "clicks_per_user_spark"),
            ("full", "clicks_per_user_batch"),
            ("floor", "clicks_filtered"),
        ]
        for name, model in order if i % 2 == 0 else order[::-1]:
            took = dbt("run", "-s", model)
            if i:
                times[name].append(took)
    dbt("run-operation", "stream_stop")
    rows = same_rows("clicks_per_user")
    same_rows("clicks_per_user_spark")
    same_rows("clicks_per_user_cont")
    same_filtered("clicks_filtered")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"H={history:,} events, {rows:,} users "
        f"(initial builds: partials {initial['clicks_per_user']:.1f} s, "
        f"Spark state {initial['clicks_per_user_spark']:.1f} s), +1% per refresh, "
        f"medians of {repeat}:"
    )
    print(
        f"  upsert_table refresh, partials in Delta:  {med['refresh']:.2f} s  "
        f"ratio {med['refresh'] / med['full']:.1%}"
    )
    print(
        f"  upsert_table refresh, Spark state store:  {med['spark']:.2f} s  "
        f"ratio {med['spark'] / med['full']:.1%}"
    )
    print(
        f"  continuous model, append to commit:       {med['continuous']:.2f} s  "
        f"ratio {med['continuous'] / med['full']:.1%}"
    )
    print(
        f"  floor, a stateless streaming_view:        {med['floor']:.2f} s  "
        f"ratio {med['floor'] / med['full']:.1%}"
    )
    print(f"  full batch recompute:                     {med['full']:.2f} s")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for h in args.history:
        bench(h, args.users, args.repeat)


if __name__ == "__main__":
    main()
