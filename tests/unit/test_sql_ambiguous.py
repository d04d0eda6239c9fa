"""SSV119: an unqualified column that several inputs of a join have is named as the cause,
before any other check blames something else (FLIP-145's cumulative example got SSV108, which
blamed its OVER)."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query

ORDERS = {
    "analytics.orders": {
        "pay_time": "timestamp",
        "item_id": "string",
        "seller_id": "string",
        "price": "double",
        "user_id": "string",
    },
    "analytics.sellers": {"seller_id": "string", "name": "string", "price": "double"},
}
# FLIP-145's cumulative example as written there (its view as a CTE, the source renamed).
FLIP145 = """
WITH trd_itm_ord_mm AS (
SELECT item_id, seller_id, window_start, window_end, sales, item_buyer_cnt, slr_buyer_cnt
FROM (
    SELECT item_id, seller_id, window_start, window_end, SUM(price) as sales,
        COUNT(DISTINCT user_id) as item_buyer_cnt
    FROM TABLE(
        CUMULATE(TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES,
        INTERVAL '1' DAY))
    GROUP BY item_id, seller_id, window_start, window_end
) a
LEFT JOIN ( -- using window join to enrich the buyer count of the shop from 00:00 to current minute
    SELECT seller_id, window_start, window_end, COUNT(DISTINCT user_id) as slr_buyer_cnt
    FROM TABLE(
        CUMULATE(TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES,
        INTERVAL '1' DAY))
    GROUP BY seller_id, window_start, window_end
) b
ON a.seller_id = b.seller_id AND a.window_start = b.window_start AND a.window_end = b.window_end
)
SELECT *
FROM (
    SELECT *,
        ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY sales DESC) as rank
    FROM trd_itm_ord_mm
) WHERE rank <= 100
"""
QUALIFIED = FLIP145.replace(
    "SELECT item_id, seller_id, window_start, window_end, sales, item_buyer_cnt, slr_buyer_cnt",
    "SELECT a.item_id, a.seller_id, a.window_start, a.window_end, sales, item_buyer_cnt, "
    "slr_buyer_cnt",
)


def compile_(sql: str, **kw):
    return compile_query(sql, schemas=ORDERS, watermark_delay="1 minute", **kw)


def test_flip145_cumulative_example_names_its_ambiguous_columns():
    with pytest.raises(SqlError) as info:
        compile_(FLIP145)
    e = info.value
    assert e.code == "SSV119"
    assert e.what == "columns seller_id, window_start, window_end are ambiguous"
    assert "inputs a and b both have a column seller_id" in e.why
    assert "e.g. a.seller_id (or b.seller_id)" in e.fix
    assert "OVER" not in str(e)
    assert e.position == (3, 17)  # (line, column) of the first ambiguous column


def test_qualified_flip145_example_compiles():
    """Columns only one input has (sales, item_buyer_cnt, slr_buyer_cnt) need no qualifier."""
    plan = compile_(QUALIFIED)
    assert plan.kind == "append" and "a.__w = b.__w" in plan.spark_sql


@pytest.mark.parametrize(
    "sql,column",
    [
        # a stream joined with a dimension table: in the SELECT list, and in WHERE
        (
            "SELECT o.item_id, name, price FROM analytics.orders o "
            "JOIN analytics.sellers s ON o.seller_id = s.seller_id",
            "column price is",
        ),
        (
            "SELECT o.item_id, name FROM analytics.orders o "
            "JOIN analytics.sellers s ON o.seller_id = s.seller_id WHERE price > 1",
            "column price is",
        ),
        # a subquery's columns are its projections; a TVF adds the window columns
        (
            "SELECT window_end FROM (SELECT item_id, window_start, window_end FROM TABLE(TUMBLE("
            "TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '1' MINUTE))) a JOIN TABLE("
            "TUMBLE(TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '1' MINUTE)) b ON "
            "a.item_id = b.item_id AND a.window_start = b.window_start AND a.window_end = "
            "b.window_end",
            "column window_end is",
        ),
    ],
)
def test_ambiguous_column_of_a_join(sql, column):
    with pytest.raises(SqlError) as info:
        compile_(sql, dimensions=("analytics.sellers",))
    assert info.value.code == "SSV119" and column in str(info.value)


@pytest.mark.parametrize(
    "sql",
    [
        # qualified, or a column of one input only
        "SELECT o.item_id, name, s.price FROM analytics.orders o "
        "JOIN analytics.sellers s ON o.seller_id = s.seller_id",
        # a lambda's parameter is not a column
        "SELECT o.item_id, name, TRANSFORM(ARRAY(1), price -> price + 1) AS x "
        "FROM analytics.orders o JOIN analytics.sellers s ON o.seller_id = s.seller_id",
        # an input of unknown columns (no schema) is not guessed at
        "SELECT o.item_id, price FROM analytics.orders o "
        "JOIN analytics.other s ON o.seller_id = s.seller_id",
    ],
)
def test_not_ambiguous(sql):
    dimension = "analytics.other" if "analytics.other" in sql else "analytics.sellers"
    plan = compile_(sql, dimensions=(dimension,))
    assert plan.sources[0] == "analytics.orders"
