"""OVER aggregations in the SQL front-end (sql/over.py): the plan of the forms that run, and the
coded errors of those that cannot."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query
from dbt.adapters.spark_streaming.sql.over import RANGE, ROWS, UNBOUNDED_RANGE, UNBOUNDED_ROWS

SCHEMAS = {"a.orders": {"rowtime": "timestamp", "product": "string", "units": "int", "d": "date"}}
R10 = "RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW"


def plan(sql: str, materialization: str = "streaming_view", delay="1 minute"):
    return compile_query(
        sql, schemas=SCHEMAS, watermark_delay=delay, materialization=materialization
    )


@pytest.mark.parametrize(
    "over, frame, preceding",
    [
        (f"PARTITION BY product ORDER BY rowtime {R10}", RANGE, 600_000_000),
        ("ORDER BY rowtime RANGE INTERVAL '5' MINUTE PRECEDING", RANGE, 300_000_000),
        ("PARTITION BY product ORDER BY rowtime ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", ROWS, 2),
        ("PARTITION BY product ORDER BY rowtime ROWS 2 PRECEDING", ROWS, 2),
        ("PARTITION BY product ORDER BY rowtime ROWS UNBOUNDED PRECEDING", UNBOUNDED_ROWS, None),
        (
            "ORDER BY rowtime RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            UNBOUNDED_RANGE,
            None,
        ),
        ("PARTITION BY product ORDER BY rowtime", UNBOUNDED_RANGE, None),
    ],
)
def test_frames_that_run(over, frame, preceding):
    p = plan(
        f"SELECT product, rowtime, SUM(units) OVER ({over}) AS s, "
        f"AVG(units) OVER ({over}) AS a FROM a.orders"
    )
    assert (p.over.frame, p.over.preceding) == (frame, preceding)
    assert [a.function for a in p.over.aggregates] == ["sum", "avg"]
    assert [name for name, _ in p.over.outputs] == ["product", "rowtime", "s", "a"]
    assert "WATERMARK rowtime DELAY OF" in p.spark_sql
    assert p.kind == "append" and p.upsert is None


def test_named_window_and_the_flip11_example():
    p = plan(
        "SELECT product, units, SUM(units) OVER w AS total, COUNT(*) OVER w AS n, "
        "MIN(units) OVER w AS lo, MAX(units) OVER w AS hi FROM a.orders "
        f"WHERE units > 0 WINDOW w AS (PARTITION BY product ORDER BY rowtime {R10})"
    )
    assert [a.function for a in p.over.aggregates] == ["sum", "count", "min", "max"]
    assert p.over.aggregates[1].arg is None  # COUNT(*)
    assert p.over.keys == ("__dss_p0",) and "WHERE units > 0" in p.spark_sql
    oracle = p.emitted_sql({"a.orders": "v"}, 60_000_000)
    assert "SUM(units) OVER w AS total" in oracle and "WINDOW w AS (PARTITION BY" in oracle
    assert "__dss_event_time <= TIMESTAMP_MICROS(60000000)" in oracle
    assert "__dss_late_wm" in oracle


def test_the_frame_is_in_the_fingerprint():
    rows = plan("SELECT SUM(units) OVER (ORDER BY rowtime ROWS 2 PRECEDING) AS s FROM a.orders")
    more = plan("SELECT SUM(units) OVER (ORDER BY rowtime ROWS 3 PRECEDING) AS s FROM a.orders")
    assert rows.fingerprint != more.fingerprint


@pytest.mark.parametrize(
    "sql, code, words",
    [
        ("SUM(units) OVER (PARTITION BY product ORDER BY units)", "SSV170", "not a timestamp"),
        ("SUM(units) OVER (ORDER BY d)", "SSV170", "not a timestamp"),
        ("SUM(units) OVER (ORDER BY rowtime DESC)", "SSV170", "descending"),
        ("SUM(units) OVER (PARTITION BY product)", "SSV170", "no ORDER BY"),
        ("SUM(units) OVER (ORDER BY rowtime, product)", "SSV170", "exactly one"),
        ("SUM(units) OVER (ORDER BY other)", "SSV170", "not a column"),
        (
            "SUM(units) OVER (ORDER BY rowtime ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)",
            "SSV171",
            "cannot run on a stream",
        ),
        (
            "SUM(units) OVER (ORDER BY rowtime ROWS BETWEEN UNBOUNDED PRECEDING AND "
            "UNBOUNDED FOLLOWING)",
            "SSV171",
            "FOLLOWING",
        ),
        ("SUM(units) OVER (ORDER BY rowtime RANGE 5 PRECEDING)", "SSV171", "RANGE"),
        ("SUM(units) OVER (ORDER BY rowtime ROWS INTERVAL '1' MINUTE PRECEDING)", "SSV171", ""),
        ("SUM(units) OVER (ORDER BY rowtime) + 1", "SSV172", "inside an expression"),
        ("STDDEV(units) OVER (ORDER BY rowtime)", "SSV172", "only SUM, COUNT"),
        ("COUNT(DISTINCT units) OVER (ORDER BY rowtime)", "SSV172", "without DISTINCT"),
        (
            "SUM(units) OVER (ORDER BY rowtime), MAX(units) OVER (ORDER BY rowtime ROWS 1 "
            "PRECEDING)",
            "SSV172",
            "different windows",
        ),
        ("SUM(units) OVER w", "SSV172", "names no WINDOW"),
    ],
)
def test_refused_forms(sql, code, words):
    with pytest.raises(SqlError) as info:
        plan(f"SELECT product, {sql} AS s FROM a.orders")
    assert info.value.code == code, str(info.value)
    assert words in str(info.value)


@pytest.mark.parametrize(
    "sql, code, words",
    [
        (
            "SELECT product, SUM(units) OVER (ORDER BY rowtime) AS s FROM a.orders "
            "GROUP BY product, units, rowtime",
            "SSV172",
            "GROUP",
        ),
        (
            "SELECT o.product, SUM(o.units) OVER (ORDER BY o.rowtime) AS s FROM a.orders AS o "
            "JOIN a.orders AS p ON o.product = p.product",
            "SSV172",
            "JOIN",
        ),
        ("SELECT *, SUM(units) OVER (ORDER BY rowtime) AS s FROM a.orders", "SSV172", "*"),
    ],
)
def test_refused_shapes(sql, code, words):
    with pytest.raises(SqlError) as info:
        plan(sql)
    assert info.value.code == code, str(info.value)
    assert words in str(info.value)


def test_upsert_table_and_missing_watermark_delay():
    sql = "SELECT product, SUM(units) OVER (ORDER BY rowtime ROWS 2 PRECEDING) AS s FROM a.orders"
    with pytest.raises(SqlError) as info:
        plan(sql, materialization="upsert_table")
    assert info.value.code == "SSV173"
    with pytest.raises(SqlError) as info:
        plan(sql, delay=None)
    assert info.value.code == "SSV105" and "OVER aggregation" in str(info.value)


def test_calcite_cascading_partition_by_floor():
    p = plan(
        "SELECT product, rowtime, SUM(units) OVER (PARTITION BY FLOOR(rowtime TO HOUR), product "
        "ORDER BY rowtime ROWS UNBOUNDED PRECEDING) AS s FROM a.orders"
    )
    assert p.over.keys == ("__dss_p0", "__dss_p1") and p.over.frame == UNBOUNDED_ROWS
    assert "DATE_TRUNC('HOUR', rowtime) AS __dss_p0" in p.spark_sql
