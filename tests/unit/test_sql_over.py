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
    # the named window is inlined (Spark's batch side has no refined named windows)
    assert "SUM(units) OVER (PARTITION BY product ORDER BY rowtime RANGE BETWEEN" in oracle
    assert "WINDOW w" not in oracle
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
        ("PERCENTILE(units, 0.5) OVER (ORDER BY rowtime)", "SSV171", "every row (or value)"),
        ("COUNT(DISTINCT units) OVER (ORDER BY rowtime)", "SSV171", "unbounded frame"),
        ("SUM(DISTINCT units) OVER (ORDER BY rowtime ROWS 2 PRECEDING)", "SSV172", "DISTINCT"),
        ("LAG(units) OVER (ORDER BY rowtime ROWS 1 PRECEDING)", "SSV172", "LAG and LEAD"),
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


NAMED = "FROM a.orders WINDOW w AS (PARTITION BY product ORDER BY rowtime)"


@pytest.mark.parametrize(
    "sql",
    [
        # the standard's refinement of a named window: its frame is the referring window's
        f"SELECT product, rowtime, SUM(units) OVER (w ROWS 2 PRECEDING) AS s {NAMED}",
        # Calcite's: OVER w (frame), and a WINDOW with ORDER BY before PARTITION BY
        "SELECT product, rowtime, SUM(units) OVER w (ROWS 2 PRECEDING) AS s FROM a.orders "
        "WINDOW w AS (ORDER BY rowtime PARTITION BY product)",
        # a named window naming another
        "SELECT product, rowtime, SUM(units) OVER w2 AS s FROM a.orders WINDOW "
        "w1 AS (PARTITION BY product ORDER BY rowtime), w2 AS (w1 ROWS 2 PRECEDING)",
        # the ORDER BY added by the referring window
        "SELECT product, rowtime, SUM(units) OVER (w ORDER BY rowtime ROWS 2 PRECEDING) AS s "
        "FROM a.orders WINDOW w AS (PARTITION BY product)",
    ],
)
def test_a_named_window_refined_takes_the_refinement(sql):
    """Before, `OVER (w ROWS 2 PRECEDING)` ran as w's own frame (RANGE UNBOUNDED): wrong rows."""
    p = plan(sql)
    assert (p.over.frame, p.over.preceding, len(p.over.keys)) == (ROWS, 2, 1)
    inline = plan(
        "SELECT product, rowtime, SUM(units) OVER (PARTITION BY product ORDER BY rowtime "
        "ROWS 2 PRECEDING) AS s FROM a.orders"
    )
    assert p.fingerprint == inline.fingerprint
    assert p.emitted_sql({"a.orders": "v"}, 0) == inline.emitted_sql({"a.orders": "v"}, 0)


def test_calcite_sliding_window_example_as_written_with_one_frame():
    p = plan(
        "SELECT STREAM rowtime, product, units,\n"
        "  AVG(units) OVER product (RANGE INTERVAL '10' MINUTE PRECEDING) AS m10\n"
        "FROM a.orders\nWINDOW product AS (\n  ORDER BY rowtime\n  PARTITION BY product)"
    )
    assert (p.over.frame, p.over.preceding) == (RANGE, 600_000_000)
    assert [a.function for a in p.over.aggregates] == ["avg"]


@pytest.mark.parametrize(
    "sql, words",
    [
        (
            f"SELECT SUM(units) OVER (w PARTITION BY units ROWS 2 PRECEDING) AS s {NAMED}",
            "PARTITION",
        ),
        (f"SELECT SUM(units) OVER (w ORDER BY rowtime) AS s {NAMED}", "ORDER BY"),
        ("SELECT SUM(units) OVER v AS s FROM a.orders WINDOW w AS (ORDER BY rowtime)", "names no"),
        ("SELECT SUM(units) OVER w AS s FROM a.orders WINDOW w AS (w ROWS 2 PRECEDING)", "itself"),
        # Calcite's full example has two frames over one window: one OVER window per model
        (
            "SELECT product, rowtime, AVG(units) OVER w (RANGE INTERVAL '10' MINUTE PRECEDING) "
            "AS m10, AVG(units) OVER w (RANGE INTERVAL '7' DAY PRECEDING) AS d7 FROM a.orders "
            "WINDOW w AS (ORDER BY rowtime PARTITION BY product)",
            "different windows",
        ),
    ],
)
def test_named_windows_refused(sql, words):
    with pytest.raises(SqlError) as info:
        plan(sql)
    assert info.value.code == "SSV172" and words in str(info.value), str(info.value)


@pytest.mark.parametrize("materialization", ["streaming_view", "upsert_table"])
def test_an_unbounded_ranking_over_an_aggregate_is_its_own_error(materialization):
    """Flink's Streaming Concepts' "Computing Updates" query: no bound, so every update re-ranks the
    rows."""
    with pytest.raises(SqlError) as info:
        plan(
            "SELECT product, RANK() OVER (ORDER BY last) AS r FROM "
            "(SELECT product, MAX(rowtime) AS last FROM a.orders GROUP BY product)",
            materialization,
        )
    assert info.value.code == "SSV174" and "WHERE r <= N" in str(info.value)


def test_any_aggregate_over_a_bounded_frame():
    """Spark evaluates them over the frame's rows in each micro-batch (OverSpec.frame_items);
    COUNT(DISTINCT x) as SIZE(COLLECT_SET(x)), in the oracle too."""
    p = plan(
        "SELECT product, STDDEV_POP(units) OVER w AS sd, COUNT(DISTINCT units % 3) OVER w AS n, "
        "PERCENTILE(units * 2, 0.5) OVER w AS `p 50`, COUNT(*) OVER w AS c FROM a.orders "
        "WINDOW w AS (PARTITION BY product ORDER BY rowtime ROWS 3 PRECEDING)"
    )
    window = (
        "OVER (PARTITION BY __dss_p0 ORDER BY __dss_time_us NULLS LAST, __dss_seq NULLS LAST "
        "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)"
    )
    assert p.over.frame_items == (
        "__dss_c0 AS `product`",
        f"STDDEV_POP(__dss_a4) {window} AS `sd`",
        f"SIZE(COLLECT_SET(__dss_a5) {window}) AS `n`",
        f"PERCENTILE(__dss_a6, 0.5) {window} AS `p 50`",
        f"COUNT(*) {window} AS `c`",
        "__dss_emit",
    )
    assert "units AS __dss_a4, units % 3 AS __dss_a5, units * 2 AS __dss_a6 FROM" in p.spark_sql
    oracle = p.emitted_sql({"a.orders": "v"}, 0)
    assert "SIZE(COLLECT_SET(units % 3) OVER (PARTITION BY product" in oracle
    assert "COUNT(DISTINCT" not in oracle
    unbounded = plan("SELECT SUM(units) OVER (ORDER BY rowtime) AS s FROM a.orders")
    assert unbounded.over.frame_items == () and unbounded.over.aggregates[0].function == "sum"
