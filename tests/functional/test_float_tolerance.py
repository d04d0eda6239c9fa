"""snapshot_equivalence compares FLOAT/DOUBLE columns within a tolerance: a stream sums doubles
in another order than the batch query (floating-point addition is not associative), so a
correct table differs from it in the last bits. Seeded random DOUBLE prices (two decimals,
magnitudes from 1e-3 to 1e9, NULLs, out of order) over many appends and micro-batch sizes, for
a window aggregate, an upsert_table with partials (state_ttl) and one with constant_domain, a
chain of models and an OVER aggregation: every test passes on the correct tables, and at least
one of them only within the tolerance; in every model, a value changed by less than the
tolerance passes and one changed by more fails, with the column and the difference named (by
the Spark pass and by the second, Python one); `float_tolerance: 0` is exact."""

import json
import os
import random
from datetime import timedelta

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime import tolerance
from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.runtime.tolerance import subtract

from .helpers import table_path, ts
from .test_equivalence import SOURCES

MODELS = {
    "window_sums": """
{{ config(materialized='streaming_view', watermark_delay='2 minutes', max_files_per_trigger=1) }}
SELECT window_start, window_end, item, SUM(price) AS total, AVG(price) AS mean, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ source('raw', 'bids') }}, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, item
""",
    "ttl_sums": """
{{ config(materialized='upsert_table', unique_key='item', state_ttl='30 days') }}
SELECT item, SUM(price) AS total, AVG(price) AS mean, COUNT(*) AS n
FROM {{ source('raw', 'bids') }} GROUP BY item
""",
    "domain_sums": """
{{ config(materialized='upsert_table', unique_key='item', constant_domain='item',
          max_files_per_trigger=2) }}
SELECT item, SUM(price) AS total, COUNT(price) AS priced
FROM {{ source('raw', 'bids') }} GROUP BY item
""",
    "chain_a": """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ source('raw', 'bids') }}, DESCRIPTOR(ts), INTERVAL '1' MINUTES))
GROUP BY window_start, window_end, item
""",
    "chain_b": """
{{ config(materialized='upsert_table', unique_key='item', constant_domain='item') }}
SELECT item, SUM(total) AS total, SUM(bids) AS bids FROM {{ ref('chain_a') }} GROUP BY item
""",
    "running": """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT ts, item, price,
       SUM(price) OVER (PARTITION BY item ORDER BY ts
                        ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS last4
FROM {{ source('raw', 'bids') }}
""",
}
ITEMS = [f"i{i}" for i in range(20)]


def bids(rng: random.Random, start, n: int) -> pa.Table:
    """`n` bids after `start`, ~5 s apart, out of order by up to 50 s; prices with two
    decimals of magnitudes 1e-3..1e9, 3% NULL."""
    times, items, prices = [], [], []
    for i in range(n):
        times.append(start + timedelta(seconds=5 * i + rng.uniform(-50, 0)))
        items.append(rng.choice(ITEMS))
        price = round(10 ** rng.uniform(-3, 9), 2) if rng.random() > 0.03 else None
        prices.append(price)
    return pa.table(
        {
            "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
            "item": pa.array(items),
            "price": pa.array(prices, pa.float64()),
        }
    )


def schema_file(arguments: dict | None = None) -> str:
    test = (
        {"snapshot_equivalence": {"arguments": arguments}} if arguments else "snapshot_equivalence"
    )
    return json.dumps({"models": [{"name": n, "data_tests": [test]} for n in MODELS]})


class TestDoublesSummedAcrossBatches:
    @pytest.fixture(scope="class")
    def models(self):
        sources = SOURCES.replace("tables: [{name: ev}]", "tables: [{name: bids}]")
        return {"sources.yml": sources, "tests.yml": schema_file()} | {
            f"{n}.sql": sql for n, sql in MODELS.items()
        }

    def set_tests(self, project, arguments: dict | None = None) -> None:
        with open(os.path.join(project.project_root, "models", "tests.yml"), "w") as fh:
            fh.write(schema_file(arguments))

    def test_equal_within_tolerance_and_not_beyond(self, project, monkeypatch):
        source = table_path(project, "bids")
        rng = random.Random(39)
        start = ts("2024-03-01 10:00:00")
        for n in range(4):
            for _ in range(3):  # three appends a run: several batches where files are limited
                write_deltalake(source, bids(rng, start, 60), mode="append")
                start += timedelta(minutes=5)
            run_dbt(["run"])
            if n % 2:  # tests after the second and the last run
                _, out = run_dbt_and_capture(["--debug", "test"])
        # the last run's tests passed, and some only within the tolerance: the defect's case
        assert "equal within the float tolerance" in out, out[-3000:]

        # exact comparison (the old behaviour) fails on these correct tables
        self.set_tests(project, {"float_tolerance": 0, "float_abs_tolerance": 0})
        results = run_dbt(["test"], expect_pass=False)
        assert any(r.status == "fail" for r in results)
        self.set_tests(project)

        # in every model, one value changed by less than the tolerance passes; by more, fails
        # naming the column and the difference
        good = {n: DeltaTable(table_path(project, n)).version() for n in MODELS}
        changed = {n: tamper(table_path(project, n), 1e-13) for n in MODELS}
        run_dbt(["test"])
        for n in MODELS:
            DeltaTable(table_path(project, n)).restore(good[n])
            assert tamper(table_path(project, n), 1e-6) == changed[n]
        results, out = run_dbt_and_capture(["test"], expect_pass=False)
        assert sorted(r.failures for r in results) == [2] * len(MODELS), out[-3000:]
        assert out.count("1 missing, 1 unexpected") >= len(MODELS), out[-5000:]
        for n, (column, at) in changed.items():
            assert f"{column} ({at}" in out, (n, out[-5000:])
        assert "beyond the tolerance (relative 1e-09, absolute 1e-12)" in out
        # the same, described by the Spark pass alone (too many rows for the second chance)
        monkeypatch.setattr(tolerance, "SECOND_CHANCE", 0)
        _, out = run_dbt_and_capture(["test", "-s", "window_sums", "running"], expect_pass=False)
        assert "total (window_start" in out and "last4 (ts" in out, out[-5000:]
        # loosened, the same changes pass
        self.set_tests(project, {"float_tolerance": 1e-5})
        run_dbt(["test"])


CHANGED = {"running": "last4"}  # the float column changed per model; default `total`


def tamper(path: str, by: float) -> tuple[str, str]:
    """Multiply one value (> 1) of the model's float column by 1 + `by` in a new Delta commit
    (the streaming commits stay); returns the column and the start of its row's description
    in the check's summary."""
    name = os.path.basename(path)
    column = CHANGED.get(name, "total")
    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    row = min((r for r in rows if r[column] and r[column] > 1), key=str)
    first = next(iter(row))  # the first column (not a float) names the row in the summary
    label = row[first] if first == "item" else row[first].strftime("%Y-%m-%d %H:%M:%S")
    keys = [k for k in ("window_start", "ts", "item") if k in row]
    text = {k: row[k] if k == "item" else row[k].strftime("%Y-%m-%d %H:%M:%S.%f") for k in keys}
    where = " AND ".join(f"{k} = '{v}'" for k, v in text.items())
    updated = DeltaTable(path).update({column: f"{column} * (1 + {by!r})"}, predicate=where)
    assert updated["num_updated_rows"] == 1, (name, where, updated)
    return column, f"{first} {label}"


def test_subtract_takes_away_rows_equal_within_the_tolerance():
    """After a query change that kept the state, the oracle takes away from the new query's
    rows over all batches those it gives over the batches before the change: the same windows
    summed over other files, which can differ in the last bits (runtime/tolerance.py
    subtract)."""
    spark = get_spark()

    def df(data):
        return spark.createDataFrame(data, "w string, total double")

    rows = df([("w1", 0.1 + 0.2), ("w2", 5.0), ("k", 1.0), ("k", 2.0), ("k", 3.0), (None, None)])
    earlier = df([("w1", 0.3), ("k", 2.0), (None, None)])

    def left(rel, floor, earlier=earlier):
        return sorted((tuple(r) for r in subtract(rows, earlier, rel, floor).collect()), key=repr)

    kept = [("k", 1.0), ("k", 3.0), ("w2", 5.0)]
    assert left(1e-9, 1e-12) == kept
    assert left(0, 0) == sorted(kept + [("w1", 0.1 + 0.2)], key=repr)  # exact, as exceptAll
    beyond = left(1e-9, 1e-12, df([("w1", 0.31)]))  # takes nothing away
    assert beyond == sorted((tuple(r) for r in rows.collect()), key=repr)
