"""Which queries split a new stream's backlog, and the two halves' SQL (sql/backlog.py)."""

import pytest
import sqlglot

from dbt.adapters.spark_streaming.sql import SparkStreaming, compile_query

SCHEMAS = {
    "analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string"},
    "analytics.items": {"item": "string", "name": "string"},
}
W10 = "WINDOW(bidtime, '600 seconds', '600 seconds', '0 seconds') AS __w"
INNER = f"(SELECT *, {W10} FROM b WATERMARK bidtime DELAY OF INTERVAL '60' SECONDS)"
BIDS = "TABLE analytics.bids"
TUMBLE = f"TABLE(TUMBLE({BIDS}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
AGG = "SELECT window_start, window_end, item, SUM(price) AS total FROM {} "
GROUP = "GROUP BY window_start, window_end, item"


def norm(sql: str) -> str:
    return sqlglot.parse_one(sql, read=SparkStreaming).sql(dialect=SparkStreaming)


def plan(sql: str, materialization: str = "streaming_view"):
    joins = "analytics.items" in sql
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay="1 minute",
        materialization=materialization,
        dimensions=("analytics.items",) if joins else (),
    )


def test_the_halves_of_a_tumble_aggregate():
    where = "WHERE bidtime > TIMESTAMP '2020-01-01 00:00:00' OR price > 1 "
    p = plan(AGG.format(TUMBLE) + where + GROUP + " HAVING SUM(price) > 2")
    assert p.backlog_window is not None and p.backlog_window.time_column == "bidtime"
    head = "SELECT __w.start AS window_start, __w.end AS window_end, item, SUM(price) AS total"
    tail = f"AS bids {where}GROUP BY __w, item HAVING SUM(price) > 2"
    assert p.backlog_sql_for({"analytics.bids": "b"}, 7_000_000) == norm(
        f"{head} FROM (SELECT * FROM {INNER} WHERE __w.end <= TIMESTAMP_MICROS(7000000)) {tail}"
    )
    assert p.backlog_sql_for({"analytics.bids": "b"}, 7_000_000, "__m") == norm(
        f"{head} FROM (SELECT * EXCEPT (__m) FROM {INNER} "
        f"WHERE NOT __m OR __w.end > TIMESTAMP_MICROS(7000000)) {tail}"
    )


@pytest.mark.parametrize(
    "tvf",
    [
        f"HOP({BIDS}, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)",
        f"CUMULATE({BIDS}, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)",
    ],
)
def test_hop_and_cumulate_split(tvf):
    assert plan(AGG.format(f"TABLE({tvf})") + GROUP).backlog_window is not None


def test_a_top_n_of_each_windows_rows_splits():  # one aggregate, by window
    sql = (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY price DESC) AS rn FROM {TUMBLE}) WHERE rn <= 2"
    )
    assert plan(sql).backlog_window is not None


@pytest.mark.parametrize(
    "sql",
    [
        # SESSION windows merge: a row's own window may end before its session
        "SELECT window_start, window_end, SUM(price) AS total FROM TABLE(SESSION("
        f"{BIDS}, DESCRIPTOR(bidtime), INTERVAL '1' MINUTES)) GROUP BY window_start, window_end",
        # no aggregate: nothing in state
        f"SELECT window_start, item, price FROM {TUMBLE}",
        # a join keeps state of its own
        AGG.format(f"{TUMBLE} t JOIN analytics.items i ON t.item = i.item").replace(
            "item,", "t.item,"
        )
        + GROUP.replace("item", "t.item"),
        # a Top-N over a window aggregate: a second aggregate
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY total DESC) AS rn FROM ({AGG.format(TUMBLE)}{GROUP})) WHERE rn <= 2",
    ],
)
def test_other_queries_do_not_split(sql):
    assert plan(sql).backlog_window is None


@pytest.mark.parametrize(
    "filters",
    [
        "WHERE price > 1",  # Spark computes the watermark over the rows that pass
        "WHERE bidtime > TIMESTAMP '2020-01-01 00:00:00' AND item <> 'x'",  # one conjunct of two
        "WHERE TRUE",
        f"{GROUP} HAVING item <> 'x'",  # a grouping key's: pushed through the aggregate
    ],
)
def test_a_filter_below_the_watermark_does_not_split(filters):
    sql = AGG.format(TUMBLE) + filters + ("" if "GROUP" in filters else f" {GROUP}")
    assert plan(sql).backlog_window is None


@pytest.mark.parametrize(
    "outer, splits",
    [
        ("WHERE it <> 'x'", False),  # a grouping key, renamed: pushed through the aggregate
        ("WHERE total > 2", True),  # an aggregate's value stays above it
        ("WHERE window_end > TIMESTAMP '2020-01-01 00:00:00'", True),  # the window's
        ("WHERE it <> 'x' OR total > 2", True),
        ("WHERE UPPER(it) <> 'X'", False),
    ],
)
def test_a_filter_over_the_aggregate_splits_unless_on_its_keys(outer, splits):
    inner = AGG.format(TUMBLE).replace("item,", "item AS it,") + GROUP
    assert (plan(f"SELECT * FROM ({inner}) {outer}").backlog_window is not None) == splits
    # through a further query, renamed again
    renamed = f"SELECT it AS i2, window_end, total FROM ({inner})"
    outer = outer.replace("UPPER(it)", "UPPER(i2)").replace("it <>", "i2 <>")
    assert (plan(f"SELECT * FROM ({renamed}) {outer}").backlog_window is not None) == splits


def test_a_having_on_a_key_expression_does_not_split():
    sql = AGG.format(TUMBLE).replace("item,", "LOWER(item) AS li,") + GROUP
    assert plan(sql + " HAVING SUM(price) > 1").backlog_window is not None
    assert plan(sql + " HAVING li <> 'x'").backlog_window is None


def test_an_upsert_table_does_not_split():
    p = plan(AGG.format(TUMBLE) + GROUP, "upsert_table")
    assert p.backlog_window is None
