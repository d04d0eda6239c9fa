"""sql/querychange.py: which changes of a compiled query keep the state of the old one."""

import pytest

from dbt.adapters.spark_streaming.sql import compile_query
from dbt.adapters.spark_streaming.sql.querychange import classify

SCHEMAS = {"a.bids": {"bidtime": "timestamp", "item": "string", "price": "double"}}
BASE = (
    "SELECT window_start, window_end, item, SUM(price) AS total FROM TABLE(TUMBLE(TABLE a.bids, "
    "DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, item"
)


def _plan(sql, delay="1 minute"):
    return compile_query(sql, schemas=SCHEMAS, watermark_delay=delay)


@pytest.mark.parametrize(
    "sql",
    [
        BASE.replace("AS total", "AS renamed"),
        BASE.replace("AS total", "AS total, window_end AS e"),
        BASE + " HAVING SUM(price) > 2",
        BASE.replace("item, SUM", "UPPER(item) AS item, SUM"),
        BASE.replace("SUM(price) AS total", "SUM(price) * 2 AS total"),
        f"SELECT * FROM ({BASE}) AS t WHERE total > 3",
    ],
)
def test_changes_after_the_aggregation_keep_state(sql):
    change = classify(_plan(BASE), _plan(sql))
    assert change.keeps_state, change


@pytest.mark.parametrize(
    "sql, delay, named",
    [
        (BASE.replace("SUM(price)", "MAX(price)"), "1 minute", "aggregates SUM(price) -> MAX"),
        (BASE.replace("AS total", "AS total, COUNT(*) AS n"), "1 minute", "COUNT(*)"),
        (BASE + " HAVING COUNT(*) > 1", "1 minute", "aggregates"),
        (BASE, "2 minutes", "watermark"),
        (BASE.replace("'10'", "'5'"), "1 minute", "window"),
        (BASE.replace("GROUP BY", "WHERE price > 1 GROUP BY"), "1 minute", "filter before"),
        (BASE.replace("item, SUM", "SUM").replace(", item", ""), "1 minute", "grouping keys"),
    ],
)
def test_changes_of_the_state_are_named(sql, delay, named):
    change = classify(_plan(BASE), _plan(sql, delay))
    assert not change.keeps_state and named in change.what, change


def test_a_query_without_state_may_change_its_projection_and_filter():
    old = _plan("SELECT bidtime, item FROM a.bids WHERE price > 1", None)
    assert classify(
        old, _plan("SELECT bidtime, price FROM a.bids WHERE price > 2", None)
    ).keeps_state
    assert not classify(old, _plan(BASE)).keeps_state  # an aggregation added


COUNTS = "SELECT item, COUNT(*) AS n, SUM(price) AS total FROM a.bids GROUP BY item"


def _ttl(sql):
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay=None,
        materialization="upsert_table",
        state_ttl="1 day",
    )


def test_a_state_ttl_projection_keeps_its_partials():
    """Partials are keyed and named by position (__k0, __p0): the final projection is not
    state, their aggregates are."""
    old = _ttl(COUNTS)
    for sql in (COUNTS.replace("AS n", "AS bids"), COUNTS.replace("SUM(price)", "SUM(price) * 2")):
        assert classify(old, _ttl(sql)).keeps_state, sql
    changed = classify(old, _ttl(COUNTS.replace("SUM(price)", "MAX(price)")))
    assert not changed.keeps_state and "upsert maintenance" in changed.what
