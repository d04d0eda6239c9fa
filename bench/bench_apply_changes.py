"""Benchmark: apply_changes (SCD types 1 and 2) against the plain keep-latest deduplication, on
the same change events.

A source of change events (id over --keys keys, a unique seq, op: 20% inserts, 70% updates,
10% deletes, a name and a DOUBLE price), shuffled within each append. Three upsert_table
models read it (in process, dbtRunner, one SparkSession):
  * dedup: `ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq DESC) = 1` with `state_ttl`, the
           latest row per key whatever its op (no deletes, no tombstones): the same partials
           machinery, the baseline;
  * scd1:  `apply_changes={'sequence_by': 'seq', 'delete_when': "op = 'd'", ...}`;
  * scd2:  the same with `'scd_type': 2` (a version per change).
First the history (--history events, in versions of 1M) is built by `dbt run --full-refresh`
of each, --repeat times; then each round appends 1% of it and refreshes each model (the order
alternating). Prints events/s of each (events read / the `dbt run`'s time) and the ratios
to dedup; the tables are checked against pandas at the end.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_apply_changes.py [--history 1000000] [--keys 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402  (its project set-up)
import bench_upsert as bu  # noqa: E402  (its in-process dbt)

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "apply_changes")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
CHANGES = os.path.join(WAREHOUSE, "bench", "changes")
SOURCE = "{{ source('bench', 'changes') }}"
FILES = {
    **bu.project_files("bench_cdc", WAREHOUSE, "changes"),
    "models/warm.sql": "{{ config(materialized='table') }}\nSELECT 1 AS x\n",  # starts Spark
    "models/dedup.sql": (
        "{{ config(materialized='upsert_table', state_ttl='3650 days') }}\n"
        "SELECT id, seq, op, name, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id "
        f"ORDER BY seq DESC) AS rn FROM {SOURCE}) WHERE rn = 1\n"
    ),
    "models/scd1.sql": (
        "{{ config(materialized='upsert_table', unique_key='id', apply_changes={'sequence_by': "
        "'seq', 'delete_when': \"op = 'd'\", 'except_columns': ['op']}) }}\n"
        f"SELECT * FROM {SOURCE}\n"
    ),
    "models/scd2.sql": (
        "{{ config(materialized='upsert_table', unique_key='id', apply_changes={'sequence_by': "
        "'seq', 'delete_when': \"op = 'd'\", 'except_columns': ['op'], 'scd_type': 2}) }}\n"
        f"SELECT * FROM {SOURCE}\n"
    ),
}
MODELS = ("dedup", "scd1", "scd2")


def events(n: int, keys: int, first_seq: int, rng) -> pa.Table:
    """n change events with sequences first_seq.. in a shuffled order."""
    seq = rng.permutation(np.arange(first_seq, first_seq + n))
    return pa.table(
        {
            "id": pa.array(rng.integers(0, keys, n), pa.int64()),
            "seq": pa.array(seq, pa.int64()),
            "op": pa.array(rng.choice(["i", "u", "d"], n, p=[0.2, 0.7, 0.1])),
            "name": pa.array(rng.choice(["ann", "bob", "cy", "dee"], n)),
            "price": pa.array(rng.uniform(-1e6, 1e6, n)),
        }
    )


def dbt(*args: str) -> float:
    return bu.dbt(*args, project=PROJECT)


def check() -> int:
    """Both tables equal pandas' answer over the whole source; returns scd1's row count."""
    df = DeltaTable(CHANGES).to_pandas().sort_values("seq").groupby("id").tail(1)
    for model, want in (("dedup", df), ("scd1", df[df["op"] != "d"])):
        got = DeltaTable(os.path.join(WAREHOUSE, "bench", model)).to_pandas().sort_values("id")
        want = want.sort_values("id")
        if list(got["id"]) != list(want["id"]) or list(got["seq"]) != list(want["seq"]):
            sys.exit(f"FAIL: {model} differs from pandas' last change per key")
    versions = DeltaTable(os.path.join(WAREHOUSE, "bench", "scd2")).to_pandas()
    current = versions[versions["__end_at"].isna()].sort_values("id")
    live = df[df["op"] != "d"].sort_values("id")
    if (
        list(current["seq"]) != list(live["seq"])
        or len(versions) != (DeltaTable(CHANGES).to_pandas()["op"] != "d").sum()
    ):  # every sequence is unique: a version per insert or update
        sys.exit("FAIL: scd2's versions are not one per change, or its current ones not scd1's")
    return len(live)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bt.setup_project(FILES, WORK, PROJECT)
    rng, seq = np.random.default_rng(35), 0
    for chunk in np.array_split(np.arange(args.history), max(args.history // 1_000_000, 1)):
        write_deltalake(CHANGES, events(len(chunk), args.keys, seq, rng), mode="append")
        seq += len(chunk)
    dbt("run", "-s", "warm")  # the SparkSession starts outside the figures
    builds: dict[str, list[float]] = {m: [] for m in MODELS}
    for i in range(args.repeat):  # the order alternating; the last build stays
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            builds[model].append(args.history / dbt("run", "--full-refresh", "-s", model))
    build = {m: statistics.median(v) for m, v in builds.items()}
    rates: dict[str, list[float]] = {m: [] for m in MODELS}
    step = args.history // 100
    for i in range(args.repeat + 1):  # the first round warms up
        write_deltalake(CHANGES, events(step, args.keys, seq, rng), mode="append")
        seq += step
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            took = dbt("run", "-s", model)
            if i:
                rates[model].append(step / took)
    live = check()
    med = {m: statistics.median(v) for m, v in rates.items()}
    print(
        f"{args.history:,} events over {args.keys:,} keys ({live:,} keys live at the end), "
        f"then +1% ({step:,} events) per refresh, medians of {args.repeat}:"
    )
    for label, rate in (("history build", build), ("1% refresh", med)):
        print(
            f"  {label}: "
            + ", ".join(f"{m} {rate[m]:,.0f} events/s" for m in MODELS)
            + f"; ratio scd1/dedup {rate['scd1'] / rate['dedup']:.2f}, "
            f"scd2/dedup {rate['scd2'] / rate['dedup']:.2f}"
        )


if __name__ == "__main__":
    main()
