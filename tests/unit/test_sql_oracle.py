"""The snapshot-equivalence oracle's SQL (sql/oracle.py): what a stream emitted, as batch SQL."""

import sqlglot

from dbt.adapters.spark_streaming.sql import SparkStreaming, compile_query

SCHEMAS = {"analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string"}}
W10 = "WINDOW(bidtime, '600 seconds', '600 seconds', '0 seconds') AS __w"
INNER = f"(SELECT *, {W10} FROM b WATERMARK bidtime DELAY OF INTERVAL '60' SECONDS)"
TUMBLE = "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"


def norm(sql: str) -> str:
    return sqlglot.parse_one(sql, read=SparkStreaming).sql(dialect=SparkStreaming)


def plan(sql: str):
    return compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")


def test_window_aggregate_drops_late_rows_and_open_windows():
    p = plan(f"SELECT window_start, item, SUM(price) AS total FROM {TUMBLE} "
             "GROUP BY window_start, window_end, item HAVING SUM(price) > 1")
    assert p.emitted_sql({"analytics.bids": "b"}, 1_000_000) == norm(
        "SELECT __w.start AS window_start, item, SUM(price) AS total "
        f"FROM (SELECT * FROM {INNER} WHERE __w.end > __dss_late_wm) AS bids GROUP BY __w, item "
        "HAVING SUM(price) > 1 AND MAX(__w.end) <= TIMESTAMP_MICROS(1000000)")
    assert p.late_rows_sql({"analytics.bids": "b"}) == [norm(
        "SELECT * EXCEPT (__w, __dss_late_wm), __w.start AS window_start, __w.end AS window_end, "
        f"__dss_late_wm AS batch_watermark FROM {INNER} WHERE __w.end <= __dss_late_wm")]


def test_window_aggregate_in_a_cte_is_found():
    p = plan(f"WITH t AS (SELECT window_start, window_end, COUNT(*) AS n FROM {TUMBLE} "
             "GROUP BY window_start, window_end) SELECT * FROM t WHERE n > 2")
    sql = p.emitted_sql({"analytics.bids": "b"}, 0)
    assert "WHERE __w.end > __dss_late_wm" in sql and "HAVING MAX(__w.end) <= TIMESTAMP_MICROS(0)" in sql
    assert len(p.late_rows_sql({"analytics.bids": "b"})) == 1


def test_stateless_queries_emit_everything_read():
    for sql in (f"SELECT item, window_start FROM {TUMBLE} WHERE price > 1",
                "SELECT item FROM analytics.bids"):
        p = plan(sql)
        assert p.emitted_sql({"analytics.bids": "b"}, 5) == p.sql_for({"analytics.bids": "b"})
        assert p.late_rows_sql({"analytics.bids": "b"}) == []
