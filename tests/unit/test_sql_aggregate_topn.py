"""Top-N over an updating aggregate (sql/aggtopn.py): the plan (the aggregate's partials
stream, the re-ranking query, the oracle, the key) and the shapes refused."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query

SCHEMAS = {"a.bids": {"category": "string", "item": "string", "price": "double", "ts": "timestamp"}}
AGG = "SELECT category, item, SUM(price) AS total FROM a.bids GROUP BY category, item"
TOPN = (
    "SELECT * FROM (SELECT {cols}, ROW_NUMBER() OVER (PARTITION BY {part} ORDER BY total DESC) "
    "AS rn FROM ({agg})) WHERE rn <= 3"
)


def plan(sql: str, **kw):
    kw.setdefault("state_ttl", "7 days")
    kw.setdefault("watermark_delay", None)
    return compile_query(sql, schemas=SCHEMAS, materialization="upsert_table", **kw)


def test_the_aggregate_streams_as_partials_and_each_batch_reranks_its_partitions():
    p = plan(TOPN.format(cols="*", part="category", agg=AGG))
    assert p.spark_sql == "SELECT category AS __k0, item AS __k1, price AS __a0 FROM a.bids"
    assert (p.upsert.unique_key, p.output_mode, p.kind) == (
        ("category", "rn"),
        "append",
        "updating",
    )
    assert p.upsert.rank_keys == ("__k0",)  # the partials' key columns of the partition
    assert p.upsert.partials.keys == ("__k0", "__k1")
    ranked = (
        "SELECT * FROM (SELECT category, item, total, ROW_NUMBER() OVER (PARTITION BY category "
        "ORDER BY total DESC, category, item) AS rn FROM {}) WHERE rn <= 3"
    )  # the other columns break ties, ascending: one order in batch and stream
    assert p.rank_sql_for("v") == ranked.format("v AS __rank_input")
    oracle = p.emitted_sql({"a.bids": "src"}, 0)
    assert oracle == ranked.format(
        "(SELECT category, item, SUM(price) AS total FROM src AS bids GROUP BY category, item)"
    )


def test_named_columns_and_a_partition_of_two_keys():
    agg = "SELECT item, category, MAX(price) AS total FROM a.bids GROUP BY category, item"
    p = plan(TOPN.format(cols="category, item, total", part="item, category", agg=agg))
    assert p.upsert.unique_key == ("item", "category", "rn")
    assert p.upsert.rank_keys == ("__k1", "__k0")


WINDOWED = (
    "SELECT window_start, window_end, item, SUM(price) AS total FROM TABLE(TUMBLE(TABLE a.bids, "
    "DESCRIPTOR(ts), INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, item"
)


@pytest.mark.parametrize(
    "sql,kw,text",
    [
        (
            TOPN.format(cols="*", part="item", agg=WINDOWED),
            {"watermark_delay": "1 minute"},
            "not partitioned by window_start",
        ),
        (TOPN.format(cols="*", part="category", agg=AGG), {"state_ttl": None}, "without state_ttl"),
        (
            TOPN.format(cols="*", part="total", agg=AGG),
            {},
            "other than its GROUP BY keys",
        ),
        (
            TOPN.format(cols="*", part="category", agg=AGG + " HAVING SUM(price) > 1"),
            {},
            "HAVING",
        ),
        (
            TOPN.format(cols="category, upper(item) AS u, total", part="category", agg=AGG),
            {},
            "computed columns",
        ),
    ],
)
def test_refused_shapes(sql, kw, text):
    with pytest.raises(SqlError) as err:
        plan(sql, **kw)
    assert err.value.code == "SSV131" and text in str(err.value)


def test_a_global_top_n_of_an_aggregate_has_the_rank_as_key():
    sql = (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY total DESC) AS rn FROM ("
        + AGG
        + ")) WHERE rn <= 2"
    )
    p = plan(sql)
    assert (p.upsert.unique_key, p.upsert.rank_keys) == (("rn",), ())
    assert "ORDER BY total DESC, category, item) AS rn" in p.rank_sql_for("v")


def test_top_1_of_an_aggregate_is_a_top_n():
    p = plan(TOPN.format(cols="*", part="category", agg=AGG).replace("rn <= 3", "rn = 1"))
    assert (p.upsert.unique_key, p.upsert.rank_keys) == (("category", "rn"), ("__k0",))
    assert p.rank_sql_for("v").endswith("FROM v AS __rank_input) WHERE rn = 1")
    with pytest.raises(SqlError) as err:
        plan(
            TOPN.format(cols="*", part="category", agg=AGG)
            .replace("rn <= 3", "rn = 1")
            .replace("SELECT * FROM (SELECT *", "SELECT item FROM (SELECT *")
        )
    assert err.value.code == "SSV131" and "outer SELECT is not SELECT *" in str(err.value)


@pytest.mark.parametrize("function", ["RANK", "DENSE_RANK"])
def test_rank_and_dense_rank_keep_ties_keyed_by_the_groups(function):
    sql = TOPN.format(cols="*", part="category", agg=AGG).replace("ROW_NUMBER", function)
    p = plan(sql)
    assert (p.upsert.unique_key, p.upsert.keep_column) == (("category", "item"), "__keep")
    ranked = (
        f"SELECT * FROM (SELECT category, item, total, {function}() OVER (PARTITION BY category "
        "ORDER BY total DESC) AS rn{} FROM {}) WHERE rn <= 3"
    )  # no tie-breaker: ties share a rank in batch and stream
    assert p.rank_sql_for("v") == ranked.format(", TRUE AS __keep", "v AS __rank_input")
    assert p.emitted_sql({"a.bids": "src"}, 0) == ranked.format(
        "", "(SELECT category, item, SUM(price) AS total FROM src AS bids GROUP BY category, item)"
    )


def test_rank_needs_the_group_keys_shown():
    sql = TOPN.format(cols="category, total", part="category", agg=AGG).replace(
        "ROW_NUMBER", "RANK"
    )
    with pytest.raises(SqlError) as info:
        plan(sql)
    assert info.value.code == "SSV131" and "GROUP BY keys" in str(info.value)


def test_constant_domain_keeps_partials_without_expiry():
    from dbt.adapters.spark_streaming.sql.state import NEVER_EXPIRES_US

    sql = TOPN.format(cols="*", part="category", agg=AGG)
    p = plan(sql, state_ttl=None, constant_domain=["category", "item"])
    assert p.upsert.partials.ttl_ms == NEVER_EXPIRES_US // 1000
    with pytest.raises(SqlError) as info:  # item's values are not declared a fixed set
        plan(sql, state_ttl=None, constant_domain=["category"])
    assert info.value.code == "SSV131" and "constant_domain" in str(info.value)
