"""The rewrite means what Flink means: the rewritten SQL, run by Spark in batch, gives
exactly FLIP-145's example tables, and window assignment with offsets matches Flink's
definition on random timestamps."""
import datetime as dt
import random

import pytest

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

SCHEMAS = {"bid": {"bidtime": "timestamp", "price": "double", "item": "string"}}
BIDS = [("08:07", 2, "A"), ("08:11", 3, "B"), ("08:05", 4, "C"), ("08:09", 5, "D"), ("08:13", 1, "E"),
        ("08:17", 6, "F")]


def t(hhmm: str) -> dt.datetime:
    h, m = map(int, hhmm.split(":"))
    return dt.datetime(2020, 4, 15, h, m)


@pytest.fixture(scope="module")
def spark():
    spark = get_spark()
    spark.createDataFrame([(t(b), float(p), i) for b, p, i in BIDS], "bidtime timestamp, price double, item string") \
        .createOrReplaceTempView("bid")
    return spark


def run(spark, sql: str, delay: str | None = None) -> list[tuple]:
    plan = compile_query(sql, schemas=SCHEMAS, watermark_delay=delay)
    return sorted(tuple(r) for r in spark.sql(plan.sql_for({"bid": "bid"})).collect())


def test_tumble_table(spark):
    got = run(spark, "SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))")
    win = {"A": "08:00", "B": "08:10", "C": "08:00", "D": "08:00", "E": "08:10", "F": "08:10"}
    expected = sorted((t(b), float(p), i, t(win[i]), t(win[i]) + dt.timedelta(minutes=10),
                       t(win[i]) + dt.timedelta(minutes=10) - dt.timedelta(milliseconds=1)) for b, p, i in BIDS)
    assert got == expected


def test_tumble_aggregate(spark):
    got = run(spark, "SELECT window_start, window_end, SUM(price) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), "
                     "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end", delay="1 minute")
    assert got == [(t("08:00"), t("08:10"), 11.0), (t("08:10"), t("08:20"), 10.0)]


def test_hop_table_and_aggregate(spark):
    rows = run(spark, "SELECT item, window_start, window_end FROM TABLE(HOP(TABLE bid, DESCRIPTOR(bidtime), "
                      "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))")
    assert len(rows) == 12  # FLIP-145: every bid in two 10-minute windows sliding by 5
    assert ("F", t("08:15"), t("08:25")) in rows and ("A", t("08:00"), t("08:10")) in rows
    got = run(spark, "SELECT window_start, window_end, SUM(price) FROM TABLE(HOP(TABLE bid, DESCRIPTOR(bidtime), "
                     "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end", delay="1 minute")
    assert got == [(t("08:00"), t("08:10"), 11.0), (t("08:05"), t("08:15"), 15.0),
                   (t("08:10"), t("08:20"), 10.0), (t("08:15"), t("08:25"), 6.0)]


@pytest.mark.parametrize("size_min,offset", [(10, "INTERVAL '1' MINUTES"), (10, "INTERVAL '-3' MINUTES"),
                                             (60, "INTERVAL '15' MINUTE"), (7, None)])
def test_tumble_offsets_match_flink_definition(spark, size_min, offset):
    """Flink: window_start = ts - ((ts - offset) mod size), on 200 random timestamps."""
    rng = random.Random(size_min)
    epoch = dt.datetime(2020, 1, 1)
    stamps = [epoch + dt.timedelta(seconds=rng.randrange(0, 3 * 86400), microseconds=rng.randrange(10**6))
              for _ in range(200)]
    spark.createDataFrame([(s,) for s in stamps], "ts timestamp").createOrReplaceTempView("ev")
    args = f"TABLE ev, DESCRIPTOR(ts), INTERVAL '{size_min}' MINUTES" + (f", {offset}" if offset else "")
    plan = compile_query(f"SELECT ts, window_start, window_end FROM TABLE(TUMBLE({args}))",
                         schemas={"ev": {"ts": "timestamp"}}, watermark_delay=None)
    got = sorted(tuple(r) for r in spark.sql(plan.sql_for({"ev": "ev"})).collect())
    size = dt.timedelta(minutes=size_min)
    off = dt.timedelta(minutes=int(offset.split("'")[1])) if offset else dt.timedelta(0)
    expected = []
    for s in stamps:
        start = s - ((s - dt.datetime(1970, 1, 1) - off) % size)  # Flink aligns to the Unix epoch
        expected.append((s, start, start + size))
    assert got == sorted(expected)
