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


# Group windows and FLOOR / CEIL: the same plan as the equivalent window TVF query.
B = "analytics.bids"
H = "INTERVAL '1' HOUR"
TUMBLE_H = f"TABLE(TUMBLE(TABLE {B}, DESCRIPTOR(bidtime), {H}))"
EQUIVALENT = [
    (
        f"SELECT item, TUMBLE_START(bidtime, {H}) AS ws, TUMBLE_END(bidtime, {H}) AS we, "
        f"TUMBLE_ROWTIME(bidtime, {H}) AS rt, SUM(price) AS total FROM {B} "
        f"GROUP BY TUMBLE(bidtime, {H}), item",
        "SELECT item, window_start AS ws, window_end AS we, window_time AS rt, SUM(price) AS total "
        f"FROM {TUMBLE_H} GROUP BY window_start, window_end, item",
    ),
    (  # the auxiliary function's interval spelled otherwise
        f"SELECT TUMBLE_END(bidtime, INTERVAL 60 MINUTES) AS we, COUNT(*) AS n FROM {B} "
        f"GROUP BY TUMBLE(bidtime, {H})",
        f"SELECT window_end AS we, COUNT(*) AS n FROM {TUMBLE_H} GROUP BY window_start, window_end",
    ),
    (  # an alias, qualified columns, HAVING, lower case
        f"select b.item, tumble_end(b.bidtime, {H}) as we, count(*) as n from {B} as b "
        f"group by b.item, tumble(b.bidtime, {H}) having count(*) > 1",
        f"SELECT b.item, window_end AS we, COUNT(*) AS n FROM {TUMBLE_H} AS b "
        "GROUP BY window_start, window_end, b.item HAVING COUNT(*) > 1",
    ),
    (
        f"SELECT HOP_START(bidtime, INTERVAL '10' MINUTE, {H}) AS ws, "
        f"HOP_END(bidtime, INTERVAL '10' MINUTE, {H}) AS we, MAX(price) AS top FROM {B} "
        f"GROUP BY HOP(bidtime, INTERVAL '10' MINUTE, {H})",
        "SELECT window_start AS ws, window_end AS we, MAX(price) AS top FROM "
        f"TABLE(HOP(TABLE {B}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE, {H})) "
        "GROUP BY window_start, window_end",
    ),
    (
        f"SELECT item, SESSION_START(bidtime, INTERVAL '10' MINUTE) AS ss, "
        f"SESSION_END(bidtime, INTERVAL '10' MINUTE) AS se, COUNT(*) AS n FROM {B} "
        "GROUP BY SESSION(bidtime, INTERVAL '10' MINUTE), item",
        "SELECT item, window_start AS ss, window_end AS se, COUNT(*) AS n FROM "
        f"TABLE(SESSION(TABLE {B} PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)) "
        "GROUP BY window_start, window_end, item",
    ),
    (  # Calcite's alignment: windows start at 0:12, 0:42, ...
        "SELECT TUMBLE_START(bidtime, INTERVAL '30' MINUTE, TIME '0:12') AS ws, COUNT(*) AS n "
        f"FROM {B} GROUP BY TUMBLE(bidtime, INTERVAL '30' MINUTE, TIME '0:12')",
        "SELECT window_start AS ws, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE "
        f"{B}, DESCRIPTOR(bidtime), INTERVAL '30' MINUTE, INTERVAL '12' MINUTE)) "
        "GROUP BY window_start, window_end",
    ),
    (  # the time of day modulo the size (HOP: the slide)
        "SELECT HOP_END(bidtime, INTERVAL '20' MINUTE, INTERVAL '1' HOUR, TIME '13:05:30') AS we, "
        f"COUNT(*) AS n FROM {B} "
        "GROUP BY HOP(bidtime, INTERVAL '20' MINUTE, INTERVAL '1' HOUR, TIME '13:05:30')",
        "SELECT window_end AS we, COUNT(*) AS n FROM TABLE(HOP(TABLE "
        f"{B}, DESCRIPTOR(bidtime), INTERVAL '20' MINUTE, INTERVAL '1' HOUR, "
        "INTERVAL '330' SECOND)) GROUP BY window_start, window_end",
    ),
    (
        f"SELECT FLOOR(bidtime TO HOUR) AS h, item, COUNT(*) AS n FROM {B} "
        "GROUP BY FLOOR(bidtime TO HOUR), item",
        f"SELECT window_start AS h, item, COUNT(*) AS n FROM {TUMBLE_H} "
        "GROUP BY window_start, window_end, item",
    ),
    (  # (h - 1 hour, h] under h: windows offset by 1 microsecond, minus it
        f"SELECT CEIL(bidtime TO DAY) AS d, SUM(price) AS total FROM {B} "
        "GROUP BY CEIL(bidtime TO DAY)",
        "SELECT window_end - INTERVAL '1' MICROSECOND AS d, SUM(price) AS total FROM "
        f"TABLE(TUMBLE(TABLE {B}, DESCRIPTOR(bidtime), INTERVAL '1' DAY, "
        "INTERVAL '1' MICROSECOND)) GROUP BY window_start, window_end",
    ),
    (  # group windows in a subquery
        f"SELECT item, n FROM (SELECT item, COUNT(*) AS n FROM {B} "
        f"GROUP BY TUMBLE(bidtime, {H}), item) WHERE n > 2",
        f"SELECT item, n FROM (SELECT item, COUNT(*) AS n FROM {TUMBLE_H} "
        "GROUP BY window_start, window_end, item) WHERE n > 2",
    ),
]


@pytest.mark.parametrize("materialization", ["streaming_view", "upsert_table"])
@pytest.mark.parametrize("group_window,tvf", EQUIVALENT)
def test_group_window_compiles_as_its_window_tvf_query(group_window, tvf, materialization):
    if materialization == "upsert_table" and "SELECT item, n FROM" in tvf:
        pytest.skip("a window aggregate below the top level is not keyed (SSV130 for both)")
    got = compile_(group_window, materialization)
    want = compile_(tvf, materialization)
    assert got.spark_sql == want.spark_sql
    assert got.windows == want.windows
    assert got.upsert == want.upsert


@pytest.mark.parametrize(
    "sql,key",
    [
        (
            f"SELECT item, TUMBLE_START(bidtime, {H}) AS ws, COUNT(*) AS n FROM {B} "
            f"GROUP BY TUMBLE(bidtime, {H}), item",
            ("ws", "item"),
        ),
        (
            f"SELECT item, TUMBLE_END(bidtime, {H}) AS we, COUNT(*) AS n FROM {B} "
            f"GROUP BY TUMBLE(bidtime, {H}), item",
            ("we", "item"),
        ),
        (
            f"SELECT FLOOR(bidtime TO HOUR) AS h, item, COUNT(*) AS n FROM {B} "
            "GROUP BY FLOOR(bidtime TO HOUR), item",
            ("h", "item"),
        ),
        (
            f"SELECT CEIL(bidtime TO HOUR) AS h, item, COUNT(*) AS n FROM {B} "
            "GROUP BY CEIL(bidtime TO HOUR), item",
            ("h", "item"),
        ),
        (
            f"SELECT window_end, item, COUNT(*) AS n FROM TABLE(CUMULATE(TABLE {B}, "
            f"DESCRIPTOR(bidtime), INTERVAL '10' MINUTE, {H})) "
            "GROUP BY window_start, window_end, item",
            ("window_end", "item"),
        ),
    ],
)
def test_upsert_key_of_a_window_aggregate_selecting_one_bound(sql, key):
    plan = compile_(sql, "upsert_table")
    assert plan.upsert is not None and plan.upsert.unique_key == key


def test_upsert_key_of_cumulate_needs_its_end():
    sql = (
        f"SELECT window_start, item, COUNT(*) AS n FROM TABLE(CUMULATE(TABLE {B}, "
        f"DESCRIPTOR(bidtime), INTERVAL '10' MINUTE, {H})) GROUP BY window_start, window_end, item"
    )
    with pytest.raises(SqlError) as info:
        compile_(sql, "upsert_table")
    assert info.value.code == "SSV130"


def test_floor_of_a_calendar_unit_is_an_ordinary_group_by():
    sql = (
        f"SELECT FLOOR(bidtime TO MONTH) AS m, COUNT(*) AS n FROM {B} "
        "GROUP BY FLOOR(bidtime TO MONTH)"
    )
    plan = compile_(sql, "upsert_table", state_ttl="7 days")
    assert "DATE_TRUNC('MONTH', bidtime)" in plan.spark_sql
    assert " TO " not in plan.spark_sql
    with pytest.raises(SqlError) as info:
        compile_(sql)
    assert info.value.code == "SSV106"


GROUP_WINDOW_ERRORS = [
    (
        f"SELECT item, COUNT(*) FROM {B} GROUP BY TUMBLE(bidtime, {H}), HOP(bidtime, {H}, {H})",
        "more than one group window",
    ),
    (
        f"SELECT a.item, COUNT(*) FROM {B} a JOIN {B} b ON a.item = b.item "
        f"GROUP BY TUMBLE(a.bidtime, {H}), a.item",
        "over something other than one table",
    ),
    (
        f"WITH c AS (SELECT * FROM {B}) SELECT item, COUNT(*) FROM c "
        f"GROUP BY TUMBLE(bidtime, {H}), item",
        "over something other than one table",
    ),
    (f"SELECT COUNT(*) FROM {B} GROUP BY TUMBLE(bidtime)", "TUMBLE takes"),
    (f"SELECT COUNT(*) FROM {B} GROUP BY TUMBLE({H}, bidtime)", "a column of the table first"),
    (
        f"SELECT COUNT(*) FROM {B} GROUP BY TUMBLE(bidtime, {H}, INTERVAL '5' MINUTE)",
        "invalid alignment",
    ),
    (f"SELECT COUNT(*) FROM {B} GROUP BY TUMBLE(bidtime, {H}, TIME '25:00')", "invalid alignment"),
    (
        f"SELECT HOP_START(bidtime, {H}, {H}) AS s, COUNT(*) FROM {B} "
        f"GROUP BY TUMBLE(bidtime, {H})",
        "does not match the group window",
    ),
    (
        f"SELECT TUMBLE_START(bidtime, INTERVAL '2' HOUR) AS s, COUNT(*) FROM {B} "
        f"GROUP BY TUMBLE(bidtime, {H})",
        "does not match the group window",
    ),
    (f"SELECT TUMBLE_START(bidtime, {H}) AS s FROM {B}", "outside a SELECT grouped by TUMBLE"),
    (f"SELECT TUMBLE(bidtime, {H}) AS s FROM {B}", "outside a GROUP BY"),
    (
        f"SELECT COUNT(*) FROM {B} GROUP BY SESSION(bidtime, {H}), UPPER(item)",
        "not a column",
    ),
]


@pytest.mark.parametrize("sql,text", GROUP_WINDOW_ERRORS)
def test_group_window_errors(sql, text):
    with pytest.raises(SqlError) as info:
        compile_(sql, "upsert_table")
    err = info.value
    assert err.code == "SSV113", str(err)
    assert text in str(err)
    assert err.position is not None


def test_group_window_error_position():
    sql = f"SELECT COUNT(*)\nFROM {B}\nGROUP BY item, TUMBLE(bidtime, {H}, TIME '99:00')"
    with pytest.raises(SqlError) as info:
        compile_(sql)
    assert info.value.position == (3, 56)  # the alignment


def test_group_window_over_an_unknown_column_names_it():
    sql = f"SELECT COUNT(*) FROM {B} GROUP BY TUMBLE(bid_time, {H})"
    with pytest.raises(SqlError) as info:
        compile_(sql)
    assert info.value.code == "SSV103"
    assert "bid_time" in str(info.value)
