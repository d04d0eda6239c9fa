"""Calcite's and Flink's older streaming SQL: SELECT STREAM, wall-clock functions, VALUES, and
FLOOR / CEIL (ts TO unit) in Spark's terms (dbt.adapters.spark_streaming.sql)."""

import pytest
import sqlglot

from dbt.adapters.spark_streaming.sql import SparkStreaming, SqlError, compile_query

SCHEMAS = {
    "analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string"},
}


def compile_(sql, materialization="streaming_view", **kw):
    return compile_query(
        sql, schemas=SCHEMAS, watermark_delay="1 minute", materialization=materialization, **kw
    )


def norm(sql: str) -> str:
    return sqlglot.parse_one(sql, read=SparkStreaming).sql(dialect=SparkStreaming)


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("SELECT STREAM * FROM analytics.bids", "SELECT * FROM analytics.bids"),
        ("SELECT STREAM item, price FROM analytics.bids", "SELECT item, price FROM analytics.bids"),
        (
            "select stream distinct item from analytics.bids",
            "SELECT DISTINCT item FROM analytics.bids",
        ),
        (
            "SELECT STREAM COUNT(*) AS n FROM analytics.bids GROUP BY item",
            "SELECT COUNT(*) AS n FROM analytics.bids GROUP BY item",
        ),
        # a column named stream stays a column
        ("SELECT stream, item FROM t", "SELECT stream, item FROM t"),
        ("SELECT stream FROM t", "SELECT stream FROM t"),
        ("SELECT stream AS s FROM t", "SELECT stream AS s FROM t"),
        ("SELECT stream * 2 FROM t", "SELECT stream * 2 FROM t"),
        ("SELECT stream.a FROM stream", "SELECT stream.a FROM stream"),
        ("SELECT stream = 1 FROM t", "SELECT stream = 1 FROM t"),
    ],
)
def test_select_stream_is_a_no_op(sql, expected):
    assert norm(sql) == norm(expected)


def test_select_stream_compiles_like_select():
    plain = compile_("SELECT item, price FROM analytics.bids WHERE price > 1")
    stream = compile_("SELECT STREAM item, price FROM analytics.bids WHERE price > 1")
    assert stream.spark_sql == plain.spark_sql
    assert stream.fingerprint == plain.fingerprint


WALL_CLOCK = [
    "now()",
    "NOW()",
    "CURRENT_TIMESTAMP",
    "CURRENT_TIMESTAMP()",
    "LOCALTIMESTAMP",
    "localtimestamp()",
    "CURRENT_DATE",
    "current_date()",
    "CURRENT_TIME",
    "LOCALTIME",
    "PROCTIME()",
    "CURRENT_ROW_TIMESTAMP()",
    "unix_timestamp()",
    "curdate()",
    "sysdate()",
]


@pytest.mark.parametrize("materialization", ["streaming_view", "upsert_table"])
@pytest.mark.parametrize("call", WALL_CLOCK)
def test_wall_clock_functions_are_refused(call, materialization):
    sql = f"SELECT item, price\nFROM analytics.bids\nWHERE bidtime > {call} - INTERVAL 1 HOUR"
    with pytest.raises(SqlError) as info:
        compile_(sql, materialization)
    err = info.value
    assert err.code == "SSV111", str(err)
    assert "current date or time" in err.what
    assert "must not depend on when a micro-batch ran" in err.why
    assert "snapshot_equivalence" in err.why
    assert "event-time column" in err.fix
    assert err.position is not None and err.position[0] == 3
    if "(" in call and not call.startswith("unix"):
        assert err.position == (3, 17)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT item, CURRENT_TIMESTAMP AS loaded FROM analytics.bids",
        "SELECT item, COUNT(*) FROM analytics.bids GROUP BY item, CURRENT_DATE",
        "SELECT item FROM analytics.bids GROUP BY TUMBLE(PROCTIME(), INTERVAL '1' HOUR), item",
        "SELECT item, TUMBLE_PROCTIME(bidtime, INTERVAL '1' HOUR) FROM analytics.bids "
        "GROUP BY TUMBLE(bidtime, INTERVAL '1' HOUR), item",
        "WITH x AS (SELECT *, now() AS t FROM analytics.bids) SELECT * FROM x",
    ],
)
def test_wall_clock_anywhere_is_refused(sql):
    with pytest.raises(SqlError) as info:
        compile_(sql, "upsert_table")
    assert info.value.code == "SSV111"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT `current_timestamp`, now_col, bids.current_date FROM analytics.bids",
        "SELECT unix_timestamp(bidtime) AS u, date_trunc('HOUR', bidtime) AS h FROM analytics.bids",
    ],
)
def test_columns_and_event_time_functions_are_not_wall_clock(sql):
    compile_(sql)


@pytest.mark.parametrize(
    "sql,what",
    [
        ("SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(id, name)", "VALUES"),
        ("SELECT * FROM VALUES (1, 'a') AS v(id, name)", "VALUES"),
        (
            "SELECT b.item, v.name FROM analytics.bids b JOIN (VALUES ('x', 'X')) AS v(id, name) "
            "ON b.item = v.id",
            "VALUES",
        ),
        ("SELECT item FROM analytics.bids UNION ALL VALUES ('x')", "VALUES"),
        ("SELECT 1 AS one", "reads no table"),
        ("WITH c AS (SELECT 1 AS one) SELECT * FROM c", "reads no table"),
    ],
)
@pytest.mark.parametrize("materialization", ["streaming_view", "upsert_table"])
def test_constant_relations_are_refused(sql, what, materialization):
    with pytest.raises(SqlError) as info:
        compile_(sql, materialization)
    err = info.value
    assert err.code == "SSV112", str(err)
    assert what in err.what
    assert "not a stream" in err.why


def test_values_in_an_in_list_is_allowed():
    compile_("SELECT item FROM analytics.bids WHERE item IN (VALUES ('a'), ('b'))")


@pytest.mark.parametrize(
    "sql,expected",
    [
        (
            "SELECT FLOOR(bidtime TO HOUR) AS h FROM t",
            "SELECT DATE_TRUNC('HOUR', bidtime) AS h FROM t",
        ),
        (
            "SELECT CEIL(bidtime TO DAY) AS d FROM t",
            "SELECT CASE WHEN DATE_TRUNC('DAY', bidtime) = bidtime THEN bidtime "
            "ELSE DATE_TRUNC('DAY', bidtime) + INTERVAL 1 DAY END AS d FROM t",
        ),
        ("SELECT FLOOR(price), CEIL(price) FROM t", "SELECT FLOOR(price), CEIL(price) FROM t"),
    ],
)
def test_floor_ceil_to_unit_generate_spark_sql(sql, expected):
    out = sqlglot.parse_one(sql, read=SparkStreaming).sql(dialect=SparkStreaming)
    assert out == expected
    assert "TO" not in out.split()  # Spark cannot parse FLOOR(x TO unit)
