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
    p = plan(
        f"SELECT window_start, item, SUM(price) AS total FROM {TUMBLE} "
        "GROUP BY window_start, window_end, item HAVING SUM(price) > 1"
    )
    assert p.emitted_sql({"analytics.bids": "b"}, 1_000_000) == norm(
        "SELECT __w.start AS window_start, item, SUM(price) AS total "
        f"FROM (SELECT * FROM {INNER} WHERE __w.end > __dss_late_wm) AS bids GROUP BY __w, item "
        "HAVING SUM(price) > 1 AND MAX(__w.end) <= TIMESTAMP_MICROS(1000000)"
    )
    assert p.late_rows_sql({"analytics.bids": "b"}) == [
        norm(
            "SELECT * EXCEPT (__w, __dss_late_wm), __w.start AS window_start, __w.end AS "
            f"window_end, __dss_late_wm AS batch_watermark FROM {INNER} WHERE __w.end <= "
            "__dss_late_wm"
        )
    ]


def test_window_aggregate_in_a_cte_is_found():
    p = plan(
        f"WITH t AS (SELECT window_start, window_end, COUNT(*) AS n FROM {TUMBLE} "
        "GROUP BY window_start, window_end) SELECT * FROM t WHERE n > 2"
    )
    sql = p.emitted_sql({"analytics.bids": "b"}, 0)
    assert (
        "WHERE __w.end > __dss_late_wm" in sql
        and "HAVING MAX(__w.end) <= TIMESTAMP_MICROS(0)" in sql
    )
    assert len(p.late_rows_sql({"analytics.bids": "b"})) == 1


def test_stateless_queries_emit_everything_read():
    for sql in (
        f"SELECT item, window_start FROM {TUMBLE} WHERE price > 1",
        "SELECT item FROM analytics.bids",
    ):
        p = plan(sql)
        assert p.emitted_sql({"analytics.bids": "b"}, 5) == p.sql_for({"analytics.bids": "b"})
        assert p.late_rows_sql({"analytics.bids": "b"}) == []


# --- Window joins: late rows dropped per side; outer rows only when their window closed or
# when they fail a condition on their own side (Spark's pre-join filter emits them at once).
JOIN_SCHEMAS = {
    "analytics.lt": {"row_time": "timestamp", "num": "int", "id": "string"},
    "analytics.rt": {"row_time": "timestamp", "num": "int", "id": "string"},
}
T5 = "TABLE(TUMBLE(TABLE analytics.{}, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
BOUNDS = "L.window_start = R.window_start AND L.window_end = R.window_end"
BIND = {"analytics.lt": "l", "analytics.rt": "r"}


def join_plan(kind: str, extra: str = ""):
    return compile_query(
        f"SELECT L.num, R.num AS r FROM {T5.format('lt')} L {kind} JOIN {T5.format('rt')} R "
        f"ON L.num = R.num AND {BOUNDS}{extra}",
        schemas=JOIN_SCHEMAS,
        watermark_delay="1 minute",
    )


def test_window_join_sides_drop_late_rows():
    p = join_plan("")
    sql = p.emitted_sql(BIND, 7)
    assert sql.count("WHERE __w.end > __dss_late_wm") == 2
    assert "TIMESTAMP_MICROS" not in sql  # an inner join emits every pair at once
    assert [q.split(" FROM ")[-1].split(" ")[0] for q in p.late_rows_sql(BIND)] == ["l", "r"]


def test_outer_window_join_emits_unmatched_rows_of_closed_windows():
    p = join_plan("LEFT", " AND L.id <> 'x' AND R.id <> 'y' AND L.id < R.id")
    where = p.emitted_sql(BIND, 7).split(" WHERE ")[-1]
    assert (
        where
        == norm(
            "SELECT 1 WHERE (NOT L.__w IS NULL AND NOT R.__w IS NULL) OR COALESCE(L.__w.end, "
            "R.__w.end) <= TIMESTAMP_MICROS(7) OR (NOT L.__w IS NULL AND NOT (COALESCE(L.id <> "
            "'x', FALSE)))"
        ).split(" WHERE ")[-1]
    )
    full = join_plan("FULL", " AND L.id <> 'x' AND R.id <> 'y'").emitted_sql(BIND, 7)
    # FULL: the rewrite adds IS NOT NULL on each equated key (Spark's streaming FULL join matches
    # NULL keys): a row with a NULL key fails its own side's conditions and is emitted at once.
    assert "NOT (COALESCE(L.id <> 'x' AND NOT L.num IS NULL, FALSE))" in full
    assert "NOT (COALESCE(R.id <> 'y' AND NOT R.num IS NULL, FALSE))" in full
    right = join_plan("RIGHT", " AND L.id <> 'x'").emitted_sql(BIND, 7)
    assert "COALESCE(L.id" not in right and "<= TIMESTAMP_MICROS(7)" in right


def test_window_join_of_window_aggregates_drops_late_rows_once_and_keeps_closed_windows():
    """A side that is a window aggregate drops late rows and keeps closed windows in the aggregate
    (HAVING), not again below the join; its late rows are listed once per aggregate."""
    agg = (
        "(SELECT num, window_start, window_end, COUNT(*) AS c FROM {} "
        "GROUP BY window_start, window_end, num)"
    )
    p = compile_query(
        f"SELECT L.num, L.c, R.c AS r FROM {agg.format(T5.format('lt'))} L LEFT JOIN "
        f"{agg.format(T5.format('rt'))} R ON L.num = R.num AND {BOUNDS}",
        schemas=JOIN_SCHEMAS,
        watermark_delay="1 minute",
    )
    sql = p.emitted_sql(BIND, 7)
    assert sql.count("WHERE __w.end > __dss_late_wm") == 2
    assert sql.count("HAVING MAX(__w.end) <= TIMESTAMP_MICROS(7)") == 2
    assert len(p.late_rows_sql(BIND)) == 2
