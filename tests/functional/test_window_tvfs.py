"""CUMULATE and SESSION window TVFs through `dbt run`: a seeded random event stream, out of
order within the watermark delay, appended in several Delta versions with `dbt run` after
each. After every run each streaming_view table equals the same query run by Spark in batch
over all rows appended so far, restricted to the windows the watermark has closed, and the
snapshot_equivalence test passes."""

import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, equivalence_project, rows, table_path

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""
DELAY = timedelta(minutes=2)
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
EV = "{{ source('raw', 'ev') }}"
CUMULATE = (
    f"CUMULATE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES, "
    "INTERVAL '-3' MINUTES)"
)
# Per model: the query (EV is the source) and which rows the stream has emitted, given the
# watermark: a CUMULATE window (each step of a max window on its own) or a session
# (aggregated, or its rows) when its end <= the watermark. (CUMULATE rows, a projection like
# TUMBLE rows, are checked in batch by test_tvf_semantics.py; left out here to save time.)
MODELS = {
    "cumulate_agg": (
        f"SELECT window_start, window_end, window_time, k, SUM(v) AS total, COUNT(*) AS n "
        f"FROM TABLE({CUMULATE}) GROUP BY window_start, window_end, k",
        lambda r, wm: r[1] <= wm,
    ),
    "session_agg": (
        f"SELECT k, window_start, window_end, SUM(v) AS total, COUNT(*) AS n FROM TABLE(SESSION("
        f"TABLE {EV} PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' MINUTES)) "
        "GROUP BY window_start, window_end, k",
        lambda r, wm: r[2] <= wm,
    ),
    "session_rows": (
        "SELECT ts, v, window_start, window_end "
        f"FROM TABLE(SESSION(DATA => TABLE {EV}, TIMECOL => DESCRIPTOR(ts), "
        f"GAP => INTERVAL '30' SECONDS))",
        lambda r, wm: r[3] <= wm,
    ),
}
EPOCH = datetime(2020, 4, 15, 8, 0, tzinfo=timezone.utc)


def appends(
    seed: int = 7, versions: int = 3, per_version: int = 40, keys: str = "abc", minutes: int = 12
) -> list[list[tuple]]:
    """Random (ts, k, v) events; each version covers the next `minutes` minutes, shuffled, and
    may reach back to just after the previous versions' max time - DELAY (the watermark), so
    events are out of order but never late."""
    rng = random.Random(seed)
    out, high = [], EPOCH
    for i in range(versions):
        low = high - DELAY + timedelta(seconds=1) if i else EPOCH
        span = int((EPOCH + timedelta(minutes=minutes * (i + 1)) - low).total_seconds())
        events = [
            (
                low + timedelta(seconds=rng.randrange(span), milliseconds=rng.randrange(1000)),
                rng.choice(keys),
                rng.randrange(1, 100),
            )
            for _ in range(per_version)
        ]
        high = max(high, *(e[0] for e in events))
        out.append(events)
    return out


def append(path: str, events: list[tuple]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "ts": pa.array([e[0] for e in events], pa.timestamp("us", tz="UTC")),
                "k": pa.array([e[1] for e in events]),
                "v": pa.array([e[2] for e in events], pa.int64()),
            }
        ),
        mode="append",
    )


def batch_rows(schema: str, sql: str) -> list[tuple]:
    """The model's query run by Spark in batch over the view `window_tvfs_ev` (all source rows)."""
    spark = get_spark()
    name = f"{schema}.ev"
    plan = compile_query(
        sql.replace(EV, name),
        schemas={name: {"ts": "timestamp", "k": "string", "v": "bigint"}},
        watermark_delay="2 minutes",
    )
    table = spark.sql(plan.sql_for({name: "window_tvfs_ev"})).toArrow()
    return sorted(tuple(r.values()) for r in table.to_pylist())


class TestCumulateAndSession:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, {n: CONFIG + sql for n, (sql, _) in MODELS.items()})

    def test_stream_equals_batch_on_closed_windows(self, project):
        check_runs(project, MODELS, seed=7)


def check_runs(project, models: dict, seed: int) -> dict:
    """Append `appends(seed)` version by version with `dbt run` after each; after every run,
    each model's table equals its batch result on the closed windows (`models[name][1]`), no
    row is late, and snapshot_equivalence passes. Checks that every model emitted new rows in
    every run and still has open windows; returns the tables' rows by model."""
    source, schema = table_path(project, "ev"), project.test_schema
    emitted = {name: [] for name in models}
    for events in appends(seed):
        append(source, events)
        results = run_dbt(["run"])
        get_spark().createDataFrame(DeltaTable(source).to_pyarrow_table()).createOrReplaceTempView(
            "window_tvfs_ev"
        )
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            n: 0 for n in models
        }
        for name, (sql, closed) in models.items():
            path = table_path(project, name)
            watermark = datetime.fromtimestamp(
                commits(path)[-1]["watermark_ms"] / 1000, timezone.utc
            )
            everything = batch_rows(schema, sql)
            expected = [r for r in everything if closed(r, watermark)]
            assert rows(path) == expected, name
            emitted[name].append((len(expected), len(everything)))
        assert len(run_dbt(["test"])) == len(models)
    assert all(0 < a[0] < b[0] < c[0] for a, b, c in emitted.values()), emitted
    assert all(n[-1][0] < n[-1][1] for n in emitted.values()), emitted
    return {name: rows(table_path(project, name)) for name in models}


# A daily total refreshed every 30 minutes (FLIP-145's use of CUMULATE): each cumulative window
# is emitted when the watermark passes its own end, not with the day.
DAILY = (
    "SELECT window_start, window_end, SUM(v) AS total, COUNT(*) AS n FROM TABLE(CUMULATE("
    f"TABLE {EV}, DESCRIPTOR(ts), INTERVAL '30' MINUTES, INTERVAL '1' DAY)) "
    "GROUP BY window_start, window_end"
)
DAILY_MODELS = {
    "daily_view": "{{ config(materialized='streaming_view', watermark_delay='1 minute') }}\n",
    "daily_upsert": "{{ config(materialized='upsert_table', watermark_delay='1 minute') }}\n",
}


def at(hhmm: str) -> datetime:
    return EPOCH.replace(hour=int(hhmm[:2]), minute=int(hhmm[3:]))


class TestCumulateEmitsEachStep:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, {n: c + DAILY for n, c in DAILY_MODELS.items()})

    def test_each_step_is_emitted_at_its_end(self, project):
        source = table_path(project, "ev")
        day = EPOCH.replace(hour=0)

        def window(end: str, total: int, n: int) -> tuple:
            return (day, at(end), total, n)

        # Watermark 01:09, long before the day ends: [0:00, 0:30) and [0:00, 1:00) are final.
        append(source, [(at(t), "a", v) for t, v in [("00:05", 1), ("00:20", 2), ("00:40", 4)]])
        append(source, [(at("01:10"), "a", 8)])
        first = [window("00:30", 3, 2), window("01:00", 7, 3)]
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            n: 0 for n in DAILY_MODELS
        }
        for name in DAILY_MODELS:
            assert rows(table_path(project, name)) == first, name
        assert len(run_dbt(["test"])) == len(DAILY_MODELS)

        # Watermark 02:04: [0:00, 1:30) and [0:00, 2:00) follow. The row at 0:50 came after
        # [0:00, 1:00) closed: Spark drops it from that window only, and counts it as late.
        append(source, [(at(t), "a", v) for t, v in [("01:40", 16), ("00:50", 32), ("02:05", 64)]])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            n: 1 for n in DAILY_MODELS
        }
        later = [window("01:30", 47, 5), window("02:00", 63, 6)]
        for name in DAILY_MODELS:
            assert rows(table_path(project, name)) == first + later, name
        assert len(run_dbt(["test"])) == len(DAILY_MODELS)
