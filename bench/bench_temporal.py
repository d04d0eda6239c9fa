"""Benchmark: an event-time temporal join (each order with the rate version valid at its time)
against the same orders projected without the join, on the same sources.

Two sources: --rows orders (id, ts one a second, currency of --currencies, a DOUBLE amount)
and the currencies' rate versions (currency, rtime, rate), --versions per currency spread over
the orders' time, declared `meta: {unique_key: currency, event_time: rtime}`. Two
streaming_view models, in process (dbtRunner, one SparkSession):
  * proj:   SELECT o.id, o.ts, o.currency, o.amount FROM orders o   (the baseline: the same
            read and write, no join, no state);
  * joined: the same orders LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts, with the rate and the
            converted amount (sql/temporaljoin.py: both inputs unioned into a stateful operator
            keyed by currency);
  * joined_scd2: the same join with the versions of an upsert_table, `history`
            (apply_changes scd_type 2 over the same versions as change events), read from its
            changelog; `history` is run before it each time, and timed apart.
First each is built over the sources (`dbt run --full-refresh`) --repeat times (the order
alternating); then each round appends 1% more orders and their versions and refreshes them.
Prints the medians, rows per second and the ratios to proj; the joined table is checked
against Python (the version valid at each order's time) at the end, and joined_scd2 against
joined.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_temporal.py [--rows 1000000] [--currencies 100] [--versions 100]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tumble as bt  # noqa: E402  (its project set-up)
import bench_upsert as bu  # noqa: E402  (its in-process dbt)

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "temporal")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
ORDERS = os.path.join(WAREHOUSE, "bench", "orders")
RATES = os.path.join(WAREHOUSE, "bench", "rates")
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }}\n"
FROM = "FROM {{ source('bench', 'orders') }} AS o"
FILES = {
    **bu.project_files("bench_temporal", WAREHOUSE, "orders"),
    "models/sources.yml": (
        "version: 2\nsources:\n  - name: bench\n    schema: bench\n    tables:\n"
        "      - name: orders\n      - name: rates\n"
        "        config: {meta: {unique_key: currency, event_time: rtime}}\n"
        "      - name: rate_changes\n"
    ),
    "models/history.sql": (
        "{{ config(materialized='upsert_table', unique_key='currency', apply_changes={"
        "'sequence_by': 'rtime', 'except_columns': ['op'], 'scd_type': 2}) }}\n"
        "SELECT * FROM {{ source('bench', 'rate_changes') }}\n"
    ),
    "models/joined_scd2.sql": (
        f"{CONFIG}SELECT o.id, o.ts, o.currency, o.amount, r.rate, o.amount * r.rate AS "
        f"converted {FROM} LEFT JOIN {{{{ ref('history') }}}} "
        "FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency\n"
    ),
    "models/warm.sql": "{{ config(materialized='table') }}\nSELECT 1 AS x\n",  # starts Spark
    "models/proj.sql": f"{CONFIG}SELECT o.id, o.ts, o.currency, o.amount {FROM}\n",
    "models/joined.sql": (
        f"{CONFIG}SELECT o.id, o.ts, o.currency, o.amount, r.rate, o.amount * r.rate AS "
        f"converted {FROM} LEFT JOIN {{{{ source('bench', 'rates') }}}} "
        "FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency\n"
    ),
}
MODELS = ("proj", "joined", "joined_scd2")
CHANGES = os.path.join(WAREHOUSE, "bench", "rate_changes")
EPOCH = np.datetime64("2024-01-01T00:00:00", "us")


def append(rng, first: int, rows: int, currencies: int, versions: int, total: int) -> None:
    """Orders first .. first + rows - 1 (one a second, 30 s of disorder) and, per currency,
    the share of its --versions versions that falls in their time span."""
    seconds = np.arange(first, first + rows) + rng.integers(-30, 1, rows)
    write_deltalake(
        ORDERS,
        pa.table(
            {
                "id": pa.array(np.arange(first, first + rows), pa.int64()),
                "ts": pa.array(EPOCH + np.maximum(seconds, 0) * 1_000_000, pa.timestamp("us")).cast(
                    pa.timestamp("us", tz="UTC")
                ),
                "currency": pa.array(rng.integers(0, currencies, rows), pa.int64()),
                "amount": pa.array(np.round(rng.uniform(0, 1e4, rows), 2)),
            }
        ),
        mode="append",
    )
    every = total // versions  # a currency's versions: one every `every` seconds, offset by it
    starts = [
        (c, s + (c * 7919) % every)
        for c in range(currencies)
        for s in range(first - first % every, first + rows, every)
        if first <= s + (c * 7919) % every < first + rows
    ]
    rates = pa.table(
        {
            "currency": pa.array([c for c, _ in starts], pa.int64()),
            "rtime": pa.array(
                EPOCH + np.array([s for _, s in starts], dtype=np.int64) * 1_000_000,
                pa.timestamp("us"),
            ).cast(pa.timestamp("us", tz="UTC")),
            "rate": pa.array(rng.uniform(0.5, 2.0, len(starts))),
        }
    )
    write_deltalake(RATES, rates, mode="append")
    changes = rates.append_column("op", pa.array(["u"] * len(rates), pa.string()))
    write_deltalake(CHANGES, changes, mode="append")  # the same versions, as change events


def check() -> int:
    """joined holds each order at or below its last watermark with the rate valid at its time
    (Python over the sources); its row count."""
    orders = DeltaTable(ORDERS).to_pandas()
    rates = DeltaTable(RATES).to_pandas().sort_values("rtime")
    out = os.path.join(WAREHOUSE, "bench", "joined")
    got = DeltaTable(out).to_pandas().sort_values("id").reset_index(drop=True)
    history = DeltaTable(out).history()
    meta = next(h for h in history if "dbt_spark_streaming" in h)
    watermark = np.datetime64(int(json.loads(meta["dbt_spark_streaming"])["watermark_ms"]), "ms")
    due = orders[orders["ts"].dt.tz_localize(None) <= watermark].sort_values("id")
    if list(got["id"]) != list(due["id"]):
        sys.exit(f"FAIL: joined has {len(got)} orders, the watermark passed {len(due)}")
    per = {c: (list(g["rtime"]), list(g["rate"])) for c, g in rates.groupby("currency")}
    for row in got.sample(min(len(got), 2000), random_state=1).itertuples():
        times, values = per.get(row.currency, ([], []))
        i = bisect.bisect_right(times, row.ts)
        want = values[i - 1] if i else None
        if not (want is None and np.isnan(row.rate) or want == row.rate):
            sys.exit(f"FAIL: order {row.id} joined rate {row.rate}, the valid one is {want}")
    scd2 = os.path.join(WAREHOUSE, "bench", "joined_scd2")
    versions = DeltaTable(scd2).to_pandas().sort_values("id").reset_index(drop=True)
    if not versions[["id", "rate"]].equals(got[["id", "rate"]]):
        sys.exit("FAIL: joined_scd2 differs from joined")
    return len(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--currencies", type=int, default=100)
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bt.setup_project(FILES, WORK, PROJECT)
    rng = np.random.default_rng(35)
    total = args.rows + args.rows // 100 * (args.repeat + 1)
    append(rng, 0, args.rows, args.currencies, args.versions, total)

    def dbt(*a: str) -> float:
        return bu.dbt(*a, project=PROJECT)

    def run(model: str, runs: dict, *flags: str) -> None:
        if model == "joined_scd2":  # its versions first
            runs["history"].append(dbt("run", *flags, "-s", "history"))
        runs[model].append(dbt("run", *flags, "-s", model))

    dbt("run", "-s", "warm")  # the SparkSession starts outside the figures
    builds: dict[str, list[float]] = {m: [] for m in (*MODELS, "history")}
    for i in range(args.repeat):  # the order alternating; the last build stays
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            run(model, builds, "--full-refresh")
    refreshes: dict[str, list[float]] = {m: [] for m in (*MODELS, "history")}
    first, step = args.rows, args.rows // 100
    for i in range(args.repeat + 1):  # the first round warms up
        append(rng, first, step, args.currencies, args.versions, total)
        first += step
        for model in MODELS if i % 2 == 0 else MODELS[::-1]:
            run(model, refreshes if i else {m: [] for m in refreshes})
    joined = check()
    print(
        f"{args.rows:,} orders over {args.currencies} currencies, {args.versions} rate versions "
        f"each; refresh: 1% more orders; medians of {args.repeat} ({joined:,} rows joined):"
    )
    for label, runs, rows in (("build", builds, args.rows), ("refresh", refreshes, step)):
        med = {m: statistics.median(v) for m, v in runs.items()}
        print(
            f"  {label}: "
            + ", ".join(f"{m} {med[m]:.2f} s ({rows / med[m]:,.0f} orders/s)" for m in MODELS)
            + f", history {med['history']:.2f} s; ratios to proj: joined "
            f"{med['joined'] / med['proj']:.2f}, joined_scd2 {med['joined_scd2'] / med['proj']:.2f}"
        )


if __name__ == "__main__":
    main()
