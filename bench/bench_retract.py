"""Benchmark: MIN, MAX and COUNT(DISTINCT) over a retracting input (a count per value, as
partials in Delta) against COUNT, SUM and AVG alone (Spark's own state), on the same changes.

A source of accounts (id, region over --regions regions, a DOUBLE balance, 10% NULL) with
Delta's Change Data Feed on: --rows rows, then per round an UPDATE of 1% of them (new
balances, some moved to another region) and a DELETE of 0.1%. Two upsert_table models read
it with `read_change_feed=true`, grouped by region (`constant_domain`), in process (dbtRunner,
one SparkSession):
  * sums:    COUNT(*), SUM(balance), AVG(balance): retracted by subtraction, Spark's state
             (the baseline);
  * sums_delta: the same with `state_ttl` (its partials in Delta, merged per batch: what
             the partials cost without maps);
  * extrema: COUNT(*), SUM(balance), MIN(balance), MAX(balance), COUNT(DISTINCT balance): one
             map value -> count per region, merged per batch with the stored maps in Delta.
First each is built over the snapshot (`dbt run --full-refresh`) --repeat times (the order
alternating); then each round changes the source and refreshes both. Prints the medians and
the ratios of extrema to both; the extrema table is checked against pandas at the end.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_retract.py [--rows 1000000] [--regions 100] [--repeat 3]
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

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "retract")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
ACCOUNTS = os.path.join(WAREHOUSE, "bench", "accounts")
SOURCE = "{{ source('bench', 'accounts') }}"
CONFIG = "materialized='upsert_table', constant_domain=['region'], read_change_feed=true"
FILES = {
    **bu.project_files("bench_retract", WAREHOUSE, "accounts"),
    "models/warm.sql": "{{ config(materialized='table') }}\nSELECT 1 AS x\n",  # starts Spark
    "models/sums.sql": (
        f"{{{{ config({CONFIG}) }}}}\nSELECT region, COUNT(*) AS n, SUM(balance) AS total, "
        f"AVG(balance) AS mean FROM {SOURCE} GROUP BY region\n"
    ),
    "models/sums_delta.sql": (
        "{{ config(materialized='upsert_table', state_ttl='3650 days', read_change_feed=true) }}"
        "\nSELECT region, COUNT(*) AS n, SUM(balance) AS total, AVG(balance) AS mean "
        f"FROM {SOURCE} GROUP BY region\n"
    ),
    "models/extrema.sql": (
        f"{{{{ config({CONFIG}) }}}}\nSELECT region, COUNT(*) AS n, SUM(balance) AS total, "
        "MIN(balance) AS low, MAX(balance) AS high, COUNT(DISTINCT balance) AS distinct_balances "
        f"FROM {SOURCE} GROUP BY region\n"
    ),
}
MODELS = ("sums", "sums_delta", "extrema")


def balances(rng, n: int) -> pa.Array:
    values = np.round(rng.uniform(-1e6, 1e6, n), 2)
    return pa.array(values, mask=rng.random(n) < 0.1)


def change(rng, rows: int, regions: int) -> None:
    """Update 1% of the rows (new balances; a third moved to another region), delete 0.1%."""
    table = DeltaTable(ACCOUNTS)
    ids = rng.choice(rows, rows // 100, replace=False)
    listed = ", ".join(map(str, ids))
    table.update(
        predicate=f"id IN ({listed})",
        updates={
            "balance": f"balance + {round(float(rng.uniform(-1000, 1000)), 2)}",
            "region": f"CASE WHEN id % 3 = 0 THEN (region + 1) % {regions} ELSE region END",
        },
    )
    gone = ", ".join(map(str, rng.choice(rows, rows // 1000, replace=False)))
    DeltaTable(ACCOUNTS).delete(f"id IN ({gone})")


def check() -> None:
    """extrema equals pandas' aggregates over the source's current rows."""
    df = DeltaTable(ACCOUNTS).to_pandas()
    want = df.groupby("region").agg(
        n=("id", "size"),
        low=("balance", "min"),
        high=("balance", "max"),
        distinct_balances=("balance", "nunique"),
    )
    got = DeltaTable(os.path.join(WAREHOUSE, "bench", "extrema")).to_pandas().set_index("region")
    got = got.loc[want.index]
    for column in ("n", "low", "high", "distinct_balances"):
        if not np.array_equal(got[column].to_numpy(), want[column].to_numpy()):
            sys.exit(f"FAIL: extrema.{column} differs from pandas over the source")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--regions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bt.setup_project(FILES, WORK, PROJECT)
    rng = np.random.default_rng(35)
    write_deltalake(
        ACCOUNTS,
        pa.table(
            {
                "id": pa.array(np.arange(args.rows), pa.int64()),
                "region": pa.array(rng.integers(0, args.regions, args.rows), pa.int64()),
                "balance": balances(rng, args.rows),
            }
        ),
        configuration={"delta.enableChangeDataFeed": "true"},
    )

    def dbt(*a: str) -> float:
        return bu.dbt(*a, project=PROJECT)

    dbt("run", "-s", "warm")  # the SparkSession starts outside the figures
    builds: dict[str, list[float]] = {m: [] for m in MODELS}
    for i in range(args.repeat):  # the order alternating; the last build stays
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            builds[model].append(dbt("run", "--full-refresh", "-s", model))
    refreshes: dict[str, list[float]] = {m: [] for m in MODELS}
    for i in range(args.repeat + 1):  # the first round warms up
        change(rng, args.rows, args.regions)
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            took = dbt("run", "-s", model)
            if i:
                refreshes[model].append(took)
    check()
    print(
        f"{args.rows:,} accounts in {args.regions} regions; per refresh 1% updated, 0.1% "
        f"deleted; medians of {args.repeat}:"
    )
    for label, runs in (("build", builds), ("refresh", refreshes)):
        med = {m: statistics.median(v) for m, v in runs.items()}
        print(
            f"  {label}: "
            + ", ".join(f"{m} {med[m]:.2f} s" for m in MODELS)
            + f"; ratio extrema/sums {med['extrema'] / med['sums']:.2f}, "
            f"extrema/sums_delta {med['extrema'] / med['sums_delta']:.2f}"
        )


if __name__ == "__main__":
    main()
