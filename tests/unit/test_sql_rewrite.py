"""Rewrite of Flink window TVFs into Spark SQL (dbt.adapters.spark_streaming.sql)."""

import pytest
import sqlglot

from dbt.adapters.spark_streaming.sql import SparkStreaming, SqlError, WindowSpec, compile_query

SCHEMAS = {
    "analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string"},
    "analytics.items": {"id": "string", "name": "string"},
}
MIN = 60_000_000
W10 = "WINDOW(bidtime, '600 seconds', '600 seconds', '0 seconds') AS __w"
WM = "WATERMARK bidtime DELAY OF INTERVAL '60' SECONDS"
INNER = f"(SELECT *, {W10} FROM analytics.bids {WM})"
PROJ = (
    "SELECT bidtime, price, item, __w.start AS window_start, __w.end AS window_end, "
    f"__w.end - INTERVAL '1' MILLISECOND AS window_time FROM {INNER}"
)
TUMBLE = "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"


def norm(sql: str) -> str:
    """Normalize SQL text through the dialect (whitespace, keyword case)."""
    return sqlglot.parse_one(sql, read=SparkStreaming).sql(dialect=SparkStreaming)


def compile_(sql, delay="1 minute", materialization="streaming_view", dimensions=None, **kw):
    """Compile with analytics.items, where read, joined as a table (config `dimensions`), as in
    enrichment models."""
    if dimensions is None:
        dimensions = ["analytics.items"] if "analytics.items" in sql.lower() else []
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay=delay,
        materialization=materialization,
        dimensions=dimensions,
        **kw,
    )


REWRITES = [
    pytest.param(
        f"SELECT window_start, window_end, COUNT(DISTINCT item) AS items FROM {TUMBLE} "
        "GROUP BY window_start, window_end",
        "SELECT __w.start AS window_start, __w.end AS window_end, SIZE(COLLECT_SET(item)) AS items "
        f"FROM {INNER} AS bids GROUP BY __w",
        id="count-distinct-as-collect-set",
    ),
    pytest.param(
        f"""SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS bids
        FROM {TUMBLE}
        GROUP BY window_start, window_end, item""",
        "SELECT __w.start AS window_start, __w.end AS window_end, item, SUM(price) AS total, "
        f"COUNT(*) AS bids FROM {INNER} AS bids GROUP BY __w, item",
        id="flip145-tumble-aggregate",
    ),
    pytest.param(
        f"SELECT * FROM {TUMBLE}", f"SELECT * FROM ({PROJ}) AS bids", id="flip145-select-star"
    ),
    pytest.param(
        f"SELECT item, window_start FROM {TUMBLE} AS t WHERE price > 2",
        f"SELECT item, window_start FROM ({PROJ}) AS t WHERE price > 2",
        id="projection-filter-alias",
    ),
    pytest.param(
        f"SELECT t.window_start AS ws, window_time, COUNT(*) c FROM {TUMBLE} t WHERE price > 1 "
        "GROUP BY t.window_start, t.window_end HAVING COUNT(*) > 2",
        "SELECT __w.start AS ws, __w.end - INTERVAL '1' MILLISECOND AS window_time, COUNT(*) AS c "
        f"FROM {INNER} AS t WHERE price > 1 GROUP BY __w HAVING COUNT(*) > 2",
        id="qualified-refs-where-having",
    ),
    pytest.param(
        f"SELECT DATE_FORMAT(window_end, 'HH:mm') AS e, window_time + INTERVAL 1 SECOND AS x, "
        f"COUNT(*) AS n FROM {TUMBLE} GROUP BY window_end, window_start",
        "SELECT DATE_FORMAT(__w.end, 'HH:mm') AS e, (__w.end - INTERVAL '1' MILLISECOND) + "
        f"INTERVAL '1' SECOND AS x, COUNT(*) AS n FROM {INNER} AS bids GROUP BY __w",
        id="window-columns-inside-expressions",
    ),
    pytest.param(
        f"WITH agg AS (SELECT window_start, window_end, COUNT(*) AS n FROM {TUMBLE} "
        "GROUP BY window_start, window_end) SELECT * FROM agg WHERE n > 10",
        "WITH agg AS (SELECT __w.start AS window_start, __w.end AS window_end, COUNT(*) AS n "
        f"FROM {INNER} AS bids GROUP BY __w) SELECT * FROM agg WHERE n > 10",
        id="aggregate-in-cte",
    ),
    pytest.param(
        f"WITH src AS (SELECT * FROM {TUMBLE}) SELECT item FROM src",
        f"WITH src AS (SELECT * FROM ({PROJ}) AS bids) SELECT item FROM src",
        id="tvf-in-cte",
    ),
    pytest.param(
        f"SELECT b.item, i.name FROM {TUMBLE} AS b JOIN analytics.items AS i ON b.item = i.id",
        f"SELECT b.item, i.name FROM ({PROJ}) AS b JOIN analytics.items AS i ON b.item = i.id",
        id="join-static-table",
    ),
    pytest.param(
        f"SELECT window_start, window_end, i.name, COUNT(*) AS n FROM {TUMBLE} AS b "
        "JOIN analytics.items AS i ON b.item = i.id GROUP BY window_start, window_end, i.name",
        "SELECT __w.start AS window_start, __w.end AS window_end, i.name, COUNT(*) AS n "
        f"FROM {INNER} AS b JOIN analytics.items AS i ON b.item = i.id GROUP BY __w, i.name",
        id="window-aggregate-with-join",
    ),
    pytest.param(
        f"SELECT window_start, window_end, COUNT(*) AS n FROM {TUMBLE} "
        "WHERE window_start >= '2024-01-01' AND price > 1 GROUP BY window_start, window_end",
        "SELECT __w.start AS window_start, __w.end AS window_end, COUNT(*) AS n "
        f"FROM {INNER} AS bids WHERE __w.start >= '2024-01-01' AND price > 1 GROUP BY __w",
        id="window-column-in-aggregate-where",
    ),
    pytest.param(
        f"SELECT window_start, window_end, item, APPROX_COUNT_DISTINCT(price) AS d FROM {TUMBLE} "
        "GROUP BY window_start, window_end, item, window_time",
        "SELECT __w.start AS window_start, __w.end AS window_end, item, "
        f"APPROX_COUNT_DISTINCT(price) AS d FROM {INNER} AS bids GROUP BY __w, item",
        id="group-by-window-time-too",
    ),
    pytest.param(
        f"SELECT * FROM (SELECT item, window_end FROM {TUMBLE}) AS s WHERE item <> 'x' "
        "UNION ALL SELECT item, bidtime FROM analytics.bids",
        f"SELECT * FROM (SELECT item, window_end FROM ({PROJ}) AS bids) AS s WHERE item <> 'x' "
        "UNION ALL SELECT item, bidtime FROM analytics.bids",
        id="union-all-of-append-queries",
    ),
    pytest.param(
        "SELECT item FROM analytics.bids WHERE price > 1 UNION ALL SELECT name FROM "
        "analytics.items",
        "SELECT item FROM analytics.bids WHERE price > 1 UNION ALL SELECT name FROM "
        "analytics.items",
        id="passthrough-union-all",
    ),
]


@pytest.mark.parametrize("sql,expected", REWRITES)
def test_rewrite(sql, expected):
    plan = compile_(sql)
    assert plan.spark_sql == norm(expected)
    assert plan.kind == "append"


def test_no_watermark_clause_without_delay():
    plan = compile_(f"SELECT * FROM {TUMBLE}", delay=None)
    assert "WATERMARK" not in plan.spark_sql
    assert f"FROM (SELECT *, {W10} FROM analytics.bids)) AS bids" in plan.spark_sql
    assert plan.watermark_delay_us is None


AGG = "SELECT window_start, window_end, COUNT(*) AS n FROM {} GROUP BY window_start, window_end"
TABLE_FORMS = [
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(DATA => TABLE analytics.bids, TIMECOL => DESCRIPTOR(bidtime), "
    "SIZE => INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(SIZE => INTERVAL '10' MINUTES, DATA => TABLE analytics.bids, "
    "TIMECOL => DESCRIPTOR(bidtime)))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), SIZE => INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(TABLE analytics.bids, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL "
    "'10' MINUTES))",
    "TABLE(TUMBLE(TABLE `analytics`.`bids`, DESCRIPTOR(`bidtime`), INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(TABLE Analytics.BIDS, DESCRIPTOR(BidTime), INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(TABLE spark_catalog.analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))",
    "TABLE(TUMBLE(TABLE `spark_catalog`.`analytics`.`bids`, DESCRIPTOR(bidtime), INTERVAL "
    "'10' MINUTE))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10 minutes'))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL 10 MINUTES))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '600' SECONDS))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '600' SECOND))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '600000' MILLISECOND))",
    "table(tumble(table analytics.bids, descriptor(bidtime), interval '10' minutes))",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) AS bids",
    "TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) bids",
]


@pytest.mark.parametrize("tvf", TABLE_FORMS)
def test_argument_forms_are_equivalent(tvf):
    plan = compile_(AGG.format(tvf))
    assert plan.spark_sql == compile_(AGG.format(TABLE_FORMS[0])).spark_sql
    assert plan.sources == ("analytics.bids",)
    assert plan.windows == (
        WindowSpec("analytics.bids", "bidtime", "tumble", 10 * MIN, 10 * MIN, 0),
    )


INTERVALS = [
    ("INTERVAL '10' MINUTES", 10 * MIN, "600 seconds"),
    ("INTERVAL '1' MINUTE", MIN, "60 seconds"),
    ("INTERVAL '1' HOUR", 60 * MIN, "3600 seconds"),
    ("INTERVAL '2' HOURS", 120 * MIN, "7200 seconds"),
    ("INTERVAL '90' SECOND", 90_000_000, "90 seconds"),
    ("INTERVAL '90' SECONDS", 90_000_000, "90 seconds"),
    ("INTERVAL '2' DAY", 2 * 86_400_000_000, "172800 seconds"),
    ("INTERVAL '2' DAYS", 2 * 86_400_000_000, "172800 seconds"),
    ("INTERVAL '500' MILLISECOND", 500_000, "500 milliseconds"),
    ("INTERVAL '1500' MILLISECONDS", 1_500_000, "1500 milliseconds"),
    ("INTERVAL '10 minutes'", 10 * MIN, "600 seconds"),
    ("INTERVAL '1 hour 30 minutes'", 90 * MIN, "5400 seconds"),
]


@pytest.mark.parametrize("interval,us,spark", INTERVALS)
def test_interval_spellings(interval, us, spark):
    sql = AGG.format(f"TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), {interval}))")
    plan = compile_(sql)
    assert plan.windows[0].size_us == us
    assert f"WINDOW(bidtime, '{spark}', '{spark}', '0 seconds')" in plan.spark_sql


@pytest.mark.parametrize(
    "offset,us,spark",
    [
        ("INTERVAL '1' MINUTES", MIN, "60 seconds"),
        ("INTERVAL '-1' MINUTES", -MIN, "-60 seconds"),
        ("-INTERVAL '1' MINUTE", -MIN, "-60 seconds"),
        ("INTERVAL '0' SECONDS", 0, "0 seconds"),
    ],
)
@pytest.mark.parametrize("named", [False, True])
def test_offset(offset, us, spark, named):
    arg = f"OFFSET => {offset}" if named else offset
    sql = AGG.format(
        f"TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES, {arg}))"
    )
    plan = compile_(sql)
    assert plan.windows[0].offset_us == us
    assert f"'600 seconds', '600 seconds', '{spark}')" in plan.spark_sql


@pytest.mark.parametrize(
    "hop",
    [
        "TABLE(HOP(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL "
        "'10' MINUTES))",
        "TABLE(HOP(DATA => TABLE analytics.bids, TIMECOL => DESCRIPTOR(bidtime), "
        "SLIDE => INTERVAL '5' MINUTES, SIZE => INTERVAL '10' MINUTES))",
        "TABLE(HOP(TABLE analytics.bids, DESCRIPTOR(bidtime), SIZE => INTERVAL '10' MINUTES, "
        "SLIDE => INTERVAL '5' MINUTES, OFFSET => INTERVAL '0' MINUTES))",
    ],
)
def test_hop(hop):
    plan = compile_(AGG.format(hop))
    assert plan.windows == (WindowSpec("analytics.bids", "bidtime", "hop", 10 * MIN, 5 * MIN, 0),)
    assert "WINDOW(bidtime, '600 seconds', '300 seconds', '0 seconds') AS __w" in plan.spark_sql
    assert plan.kind == "append"


def test_plan_metadata():
    plan = compile_(
        f"SELECT b.item, i.name FROM {TUMBLE} AS b JOIN `Analytics`.`Items` i ON b.item = i.id "
        "JOIN analytics.bids x ON x.item = b.item",
        delay="30 seconds",
        dimensions=("items", "bids"),
    )
    assert plan.sources == ("analytics.bids", "analytics.items")
    assert plan.watermark_delay_us == 30_000_000
    assert plan.kind == "append"
    assert "JOIN analytics.items AS i" in plan.spark_sql


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT item, COUNT(*) FROM analytics.bids GROUP BY item",
        "SELECT DISTINCT item FROM analytics.bids",
        f"SELECT item, COUNT(*) FROM {TUMBLE} GROUP BY item",
    ],
)
def test_updating_allowed_in_upsert_table(sql):
    plan = compile_(sql, delay=None, materialization="upsert_table", constant_domain=["item"])
    assert plan.kind == "updating" and plan.upsert.unique_key == ("item",)


def test_sql_for_binds_sources():
    plan = compile_(
        f"SELECT b.item, bids.name FROM {TUMBLE} AS b JOIN analytics.items AS i ON b.item = i.id "
        "JOIN other.bids ON bids.id = i.id",
        dimensions=("analytics.items", "other.bids"),
    )
    out = plan.sql_for({"analytics.bids": "ssv_src_1", "analytics.items": "ssv_src_2"})
    assert "analytics." not in out
    assert "FROM ssv_src_1 WATERMARK bidtime" in out
    assert "JOIN ssv_src_2 AS i" in out
    assert "JOIN other.bids ON" in out  # unbound source unchanged
    out2 = plan.sql_for({"other.bids": "v"})
    assert "JOIN v AS bids ON bids.id = i.id" in out2  # keeps its correlation name
    assert plan.sql_for({}) == plan.spark_sql


def test_fingerprint_stable_under_formatting():
    a = compile_(AGG.format(TUMBLE))
    b = compile_(
        "-- my model\nselect   window_start,\n  window_end, /* n */ COUNT(*)   as n\nfrom\n"
        + TUMBLE
        + "\n  group by window_start,window_end\n"
    )
    c = compile_(AGG.format(TUMBLE).replace("COUNT(*)", "SUM(price)"))
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    assert len(a.fingerprint) == 64


def test_rewritten_sql_reparses():
    plan = compile_(AGG.format(TUMBLE))
    assert norm(plan.spark_sql) == plan.spark_sql


def test_sql_for_without_tree_reparses_spark_sql():
    from dataclasses import replace

    plan = compile_(AGG.format(TUMBLE))
    detached = replace(plan, _tree=None)
    assert detached == plan
    assert detached.sql_for({"analytics.bids": "v1"}) == plan.sql_for({"analytics.bids": "v1"})


def test_sources_in_order_of_appearance_without_ctes():
    plan = compile_(
        "WITH a AS (SELECT * FROM s.z) SELECT * FROM a JOIN s.y ON a.k = y.k "
        "JOIN `S`.`Z` AS z2 ON z2.k = a.k JOIN x ON x.k = a.k",
        dimensions=("s.y", "x", "s.z"),
    )
    assert plan.sources == ("s.z", "s.y", "x")


# CUMULATE: Spark's sliding window of the max size and the step (__v), kept when it starts at
# or before the row's max window start, as __w: its end is the cumulative window's end.
CUM = (
    "TABLE(CUMULATE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL "
    "'10' MINUTES))"
)


def cum_inner(
    size: int = 600, step: int = 120, offset: int = 0, ts: str = "bidtime", table: str = "bids"
) -> str:
    """The windowed input of a CUMULATE (sizes in seconds)."""
    into = f"UNIX_MICROS({ts})" + (f" - {offset % size * 10**6}" if offset % size else "")
    return (
        f"(SELECT * EXCEPT (__v), __v AS __w FROM (SELECT *, WINDOW({ts}, '{size} seconds', "
        f"'{step} seconds', '{offset % step} seconds') AS __v FROM analytics.{table} "
        f"WATERMARK {ts} DELAY OF INTERVAL '60' SECONDS) "
        f"WHERE __v.start <= {ts} - PMOD({into}, {size * 10**6}) * INTERVAL '1' MICROSECOND)"
    )


def cum_start(size: int = 600, offset: int = 0) -> str:
    off = offset % size * 10**6
    into = f"{off} - UNIX_MICROS(__w.start)" if off else "-UNIX_MICROS(__w.start)"
    return f"__w.start + PMOD({into}, {size * 10**6}) * INTERVAL '1' MICROSECOND"


CUM_INNER = cum_inner()
CUM_START = cum_start()
CUM_WINDOWS = (
    f"{CUM_START} AS window_start, __w.end AS window_end, "
    "__w.end - INTERVAL '1' MILLISECOND AS window_time"
)
# SESSION: Spark's session_window; without PARTITION BY a constant key __p.
SES = (
    "TABLE(SESSION(TABLE analytics.bids PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL "
    "'5' MINUTES))"
)
SES_W = "SESSION_WINDOW(bidtime, '300 seconds') AS __w"
SES_WINDOWS = (
    "__w.start AS window_start, __w.end AS window_end, "
    "__w.end - INTERVAL '1' MILLISECOND AS window_time"
)

CUMULATE_SESSION_REWRITES = [
    pytest.param(
        f"SELECT window_start, window_end, SUM(price) FROM {CUM} GROUP BY window_start, window_end",
        f"SELECT {CUM_START} AS window_start, __w.end AS window_end, SUM(price) FROM {CUM_INNER} "
        "AS bids GROUP BY __w",
        id="flip145-cumulate-aggregate",
    ),
    pytest.param(
        f"SELECT * FROM {CUM}",
        f"SELECT * FROM (SELECT bidtime, price, item, {CUM_WINDOWS} FROM {CUM_INNER}) AS bids",
        id="cumulate-rows",
    ),
    pytest.param(
        f"SELECT c.item, window_time, COUNT(*) AS n FROM {CUM} AS c WHERE window_end > "
        "'2020-04-15' GROUP BY c.item, c.window_end, window_start, window_time HAVING "
        "MAX(window_end) > '2020-04-15'",
        "SELECT c.item, __w.end - INTERVAL '1' MILLISECOND AS window_time, COUNT(*) AS n FROM "
        f"{CUM_INNER} AS c WHERE __w.end > '2020-04-15' GROUP BY c.item, __w HAVING "
        "MAX(__w.end) > '2020-04-15'",
        id="cumulate-window-columns-in-expressions",
    ),
    pytest.param(
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(CUMULATE(TABLE analytics.bids, "
        "DESCRIPTOR(bidtime), INTERVAL '1' HOUR, INTERVAL '1' DAY, INTERVAL '-2' HOURS)) GROUP BY "
        "window_start, window_end",
        f"SELECT {cum_start(86400, -7200)} AS window_start, __w.end AS window_end, COUNT(*) "
        f"FROM {cum_inner(86400, 3600, -7200)} AS bids GROUP BY __w",
        id="cumulate-daily-negative-offset",
    ),
    pytest.param(
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(CUMULATE(TABLE analytics.bids, "
        "DESCRIPTOR(bidtime), INTERVAL '90' SECONDS, INTERVAL '90' MINUTE, INTERVAL '100' "
        "SECOND)) GROUP BY window_start, window_end",
        f"SELECT {cum_start(5400, 100)} AS window_start, __w.end AS window_end, COUNT(*) "
        f"FROM {cum_inner(5400, 90, 100)} AS bids GROUP BY __w",
        id="cumulate-offset-beyond-the-step",
    ),
    pytest.param(
        f"SELECT window_start, window_end, item, SUM(price) AS total FROM {SES} GROUP BY item, "
        "window_start, window_end",
        "SELECT __w.start AS window_start, __w.end AS window_end, item, SUM(price) AS total "
        f"FROM (SELECT *, {SES_W} FROM analytics.bids {WM}) AS bids GROUP BY item, __w",
        id="flink-session-aggregate-partitioned",
    ),
    pytest.param(
        "SELECT window_start, window_end, SUM(price) FROM TABLE(SESSION(TABLE analytics.bids, "
        "DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) AS s GROUP BY window_start, window_end",
        "SELECT __w.start AS window_start, __w.end AS window_end, SUM(price) "
        f"FROM (SELECT *, {SES_W}, 0 AS __p FROM analytics.bids {WM}) AS s GROUP BY __w, __p",
        id="session-aggregate-without-partition-gets-constant-key",
    ),
    pytest.param(
        "SELECT item, price, window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE "
        "analytics.bids PARTITION BY (item, price), DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) "
        "GROUP BY window_start, window_end, price, item HAVING COUNT(*) > 1",
        "SELECT item, price, __w.start AS window_start, __w.end AS window_end, COUNT(*) "
        f"FROM (SELECT *, {SES_W} FROM analytics.bids {WM}) AS bids GROUP BY __w, price, item "
        "HAVING COUNT(*) > 1",
        id="session-aggregate-two-partition-keys",
    ),
    pytest.param(
        f"SELECT * FROM {SES} WHERE price > 1",
        f"SELECT * FROM (SELECT INLINE(__rows), {SES_WINDOWS} FROM (SELECT __w, "
        "COLLECT_LIST(STRUCT(bidtime AS bidtime, price AS price, item AS item)) AS __rows FROM "
        f"(SELECT *, {SES_W} FROM analytics.bids {WM}) GROUP BY __w, item)) AS bids "
        "WHERE price > 1",
        id="session-rows-partitioned",
    ),
    pytest.param(
        "SELECT item, window_end FROM TABLE(SESSION(TABLE analytics.bids, DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTES))",
        f"SELECT item, window_end FROM (SELECT INLINE(__rows), {SES_WINDOWS} FROM (SELECT __w, "
        "COLLECT_LIST(STRUCT(bidtime AS bidtime, price AS price, item AS item)) AS __rows FROM "
        f"(SELECT *, {SES_W}, 0 AS __p FROM analytics.bids {WM}) GROUP BY __w, __p)) AS bids",
        id="session-rows-unpartitioned",
    ),
]


@pytest.mark.parametrize("sql,expected", CUMULATE_SESSION_REWRITES)
def test_rewrite_cumulate_session(sql, expected):
    plan = compile_(sql)
    assert plan.spark_sql == norm(expected)
    assert norm(plan.spark_sql) == plan.spark_sql
    assert plan.kind == "append"


CUMULATE_FORMS = [
    CUM,
    "TABLE(CUMULATE(DATA => TABLE analytics.bids, TIMECOL => DESCRIPTOR(bidtime), STEP => INTERVAL "
    "'2' MINUTES, SIZE => INTERVAL '10' MINUTES))",
    "TABLE(CUMULATE(SIZE => INTERVAL '10' MINUTES, STEP => INTERVAL '2' MINUTES, TIMECOL => "
    "DESCRIPTOR(bidtime), DATA => TABLE analytics.bids))",
    "TABLE(CUMULATE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, SIZE => "
    "INTERVAL '10' MINUTES, `OFFSET` => INTERVAL '0' MINUTES))",
    "TABLE(CUMULATE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '120' SECOND, INTERVAL "
    "'600' SECONDS, INTERVAL '0' SECONDS))",
    "table(cumulate(table Analytics.Bids, descriptor(BidTime), interval '2 minutes', interval 10 "
    "minute)) bids",
]


@pytest.mark.parametrize("tvf", CUMULATE_FORMS)
def test_cumulate_argument_forms_are_equivalent(tvf):
    plan = compile_(AGG.format(tvf))
    assert plan.spark_sql == compile_(AGG.format(CUMULATE_FORMS[0])).spark_sql
    assert plan.windows == (
        WindowSpec("analytics.bids", "bidtime", "cumulate", 10 * MIN, 2 * MIN, 0),
    )


SESSION_FORMS = [
    SES,
    "TABLE(SESSION(DATA => TABLE analytics.bids PARTITION BY item, TIMECOL => DESCRIPTOR(bidtime), "
    "GAP => INTERVAL '5' MINUTES))",
    "TABLE(SESSION(GAP => INTERVAL '300' SECONDS, DATA => TABLE analytics.bids PARTITION BY "
    "(item), TIMECOL => DESCRIPTOR(bidtime)))",
    "TABLE(SESSION(TABLE analytics.bids PARTITION BY (ITEM, item), DESCRIPTOR(bidtime), GAP => "
    "INTERVAL '5' MINUTE))",
    "table(session(table `analytics`.`bids` partition by `item`, descriptor(bidtime), interval "
    "'5 minutes')) AS bids",
]


@pytest.mark.parametrize("tvf", SESSION_FORMS)
def test_session_argument_forms_are_equivalent(tvf):
    sql = (
        "SELECT window_start, window_end, item, COUNT(*) AS n FROM {} GROUP BY window_start, "
        "window_end, item"
    )
    plan = compile_(sql.format(tvf))
    assert plan.spark_sql == compile_(sql.format(SESSION_FORMS[0])).spark_sql
    assert plan.windows == (
        WindowSpec("analytics.bids", "bidtime", "session", 5 * MIN, 5 * MIN, 0, ("item",)),
    )


@pytest.mark.parametrize("interval,us,spark", INTERVALS)
def test_session_gap_spellings(interval, us, spark):
    sql = AGG.format(f"TABLE(SESSION(TABLE analytics.bids, DESCRIPTOR(bidtime), {interval}))")
    plan = compile_(sql)
    assert plan.windows[0].size_us == us
    assert f"SESSION_WINDOW(bidtime, '{spark}') AS __w" in plan.spark_sql


@pytest.mark.parametrize(
    "offset,us,normalized",
    [
        ("INTERVAL '1' MINUTES", MIN, "- 60000000"),
        ("INTERVAL '-1' MINUTES", -MIN, "- 540000000"),
        ("-INTERVAL '3' MINUTE", -3 * MIN, "- 420000000"),
        ("INTERVAL '0' SECONDS", 0, ""),
    ],
)
@pytest.mark.parametrize("named", [False, True])
def test_cumulate_offset(offset, us, normalized, named):
    arg = f"OFFSET => {offset}" if named else offset
    plan = compile_(
        AGG.format(
            "TABLE(CUMULATE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, "
            f"INTERVAL '10' MINUTES, {arg}))"
        )
    )
    assert plan.windows[0].offset_us == us
    # Spark's sliding windows are aligned on the step grid: the offset modulo the step.
    in_step = us % (2 * MIN) // 1_000_000
    assert f"'600 seconds', '120 seconds', '{in_step} seconds') AS __v" in plan.spark_sql
    assert (
        f"PMOD(UNIX_MICROS(bidtime){' ' + normalized if normalized else ''}, 600000000)"
        in plan.spark_sql
    )


def test_cumulate_session_sql_for_binds_sources():
    for tvf in (CUM, SES):
        plan = compile_(f"SELECT * FROM {tvf}")
        out = plan.sql_for({"analytics.bids": "v1"})
        assert (
            "FROM v1 WATERMARK bidtime DELAY OF INTERVAL '60' SECONDS" in out
            and "analytics." not in out
        )


def test_session_group_keys_may_be_qualified():
    plan = compile_(
        f"SELECT b.item, window_start, window_end, COUNT(*) FROM {SES} AS b "
        "JOIN analytics.items AS i ON b.item = i.id GROUP BY b.item, window_start, window_end"
    )
    assert plan.spark_sql.endswith("GROUP BY b.item, __w")


def test_session_in_upsert_table():
    sql = f"SELECT item, COUNT(*) FROM {SES} GROUP BY item"
    assert (
        compile_(sql, materialization="upsert_table", constant_domain=["item"]).kind == "updating"
    )
    with pytest.raises(SqlError) as info:  # SESSION rows are closed by the watermark
        compile_(sql, delay=None, materialization="upsert_table")
    assert info.value.code == "SSV105"


# Window Top-N / deduplication: ROW_NUMBER() over the rows of a window TVF, filtered by rownum.
def topn(
    tvf=TUMBLE,
    partition="window_start, window_end",
    order="price DESC",
    where="rownum <= 3",
    select="*",
    outer="*",
):
    return (
        f"SELECT {outer} FROM (SELECT {select}, ROW_NUMBER() OVER (PARTITION BY {partition} "
        f"ORDER BY {order}) AS rownum FROM {tvf}) WHERE {where}"
    )


def cmp_(field, a_null, a_less):
    """The comparator term of one ORDER BY key: a_null = its value when only __a is NULL,
    a_less = its value when __a < __b (-1: __a first)."""
    a, b = f"__a.{field}", f"__b.{field}"
    return (
        f"NULLIF(CASE WHEN {a} IS NULL AND {b} IS NULL THEN 0 WHEN {a} IS NULL THEN {a_null} "
        f"WHEN {b} IS NULL THEN {-a_null} WHEN {a} < {b} THEN {a_less} WHEN {a} > {b} THEN "
        f"{-a_less} ELSE 0 END, 0)"
    )


ROW = "bidtime AS bidtime, price AS price, item AS item"
OUT = (
    "__r.bidtime AS bidtime, __r.price AS price, __r.item AS item, __w.start AS window_start, "
    "__w.end AS window_end, __w.end - INTERVAL '1' MILLISECOND AS window_time, __i + 1 AS rownum"
)


def test_window_topn_rewrite():
    """FLIP-145 window Top-N: a window aggregate (GROUP BY __w and the partition keys) keeping
    each group's first N rows in ROW_NUMBER order, unnested with rownum = position."""
    plan = compile_(topn(partition="window_start, item, window_end"))
    assert plan.spark_sql == norm(
        f"SELECT * FROM (SELECT INLINE(TRANSFORM(__top, (__r, __i) -> STRUCT({OUT}))) FROM ("
        f"SELECT __w, SLICE(ARRAY_SORT(COLLECT_LIST(STRUCT(price AS __o0, {ROW})), "
        f"(__a, __b) -> COALESCE({cmp_('__o0', 1, 1)}, 0)), 1, 3) AS __top "
        f"FROM {INNER} AS bids GROUP BY __w, item)) WHERE rownum <= 3"
    )
    assert plan.kind == "append"


@pytest.mark.parametrize(
    "order,terms",
    [
        ("price DESC", [cmp_("__o0", 1, 1)]),  # Spark's ROW_NUMBER: DESC puts NULLs last
        ("price", [cmp_("__o0", -1, -1)]),  # ASC: NULLs first
        (
            "price DESC NULLS FIRST, bidtime ASC NULLS LAST",
            [cmp_("__o0", -1, 1), cmp_("__o1", 1, -1)],
        ),
    ],
)
def test_window_topn_order(order, terms):
    sql = compile_(topn(order=order)).spark_sql
    assert f"(__a, __b) -> COALESCE({', '.join(terms)}, 0)" in sql


@pytest.mark.parametrize(
    "where,n",
    [
        ("rownum <= 3", 3),
        ("rownum < 4", 3),
        ("3 >= rownum", 3),
        ("4 > rownum", 3),
        ("rownum BETWEEN 1 AND 3", 3),
        ("(rownum <= 3)", 3),
        ("rownum = 1", 1),
        ("1 = rownum", 1),
        ("rownum <= 1", 1),
        ("rownum < 2", 1),
    ],
)
def test_window_topn_limit_forms(where, n):
    sql = compile_(topn(where=where)).spark_sql
    assert f", 1, {n}) AS __top" in sql and sql.endswith(
        f"WHERE {norm('SELECT 1 WHERE ' + where)[15:]}"
    )


def test_window_dedup_explicit_columns_and_qualified_rownum():
    plan = compile_(
        topn(
            select="item, price, window_end",
            order="bidtime DESC",
            where="t.rownum = 1",
            outer="item, rownum",
        ).replace(") WHERE", ") AS t WHERE")
    )
    assert plan.spark_sql.startswith(
        norm(
            "SELECT item, rownum FROM (SELECT INLINE(TRANSFORM(__top, (__r, __i) -> "
            "STRUCT(__r.item AS item, __r.price AS price, __w.end AS window_end, __i + 1 AS "
            "rownum))) FROM (SELECT __w, SLICE(ARRAY_SORT(COLLECT_LIST(STRUCT(bidtime AS __o0, "
            f"{ROW})), (__a, __b) -> COALESCE({cmp_('__o0', 1, 1)}, 0)), 1, 1) AS __top FROM "
            f"{INNER} AS bids GROUP BY __w)) AS t"
        )
    )


def test_window_topn_inner_where_is_kept():
    sql = compile_(
        topn(select="*", order="price").replace(
            f"FROM {TUMBLE})", f"FROM {TUMBLE} WHERE price > 1)"
        )
    ).spark_sql
    assert f"FROM {INNER} AS bids WHERE price > 1 GROUP BY __w)" in sql


def test_window_topn_hop_and_cumulate():
    hop = compile_(
        topn(
            tvf="TABLE(HOP(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, "
            "INTERVAL '10' MINUTES))"
        )
    ).spark_sql
    assert (
        "WINDOW(bidtime, '600 seconds', '300 seconds', '0 seconds') AS __w" in hop
        and "GROUP BY __w)" in hop
    )
    cum = compile_(
        topn(
            tvf="TABLE(CUMULATE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, "
            "INTERVAL '10' MINUTES))",
            partition="window_end, window_start, item",
        )
    ).spark_sql
    assert "SELECT __w, SLICE(" in cum and "GROUP BY __w, item)" in cum
    assert f"{CUM_START} AS window_start, __w.end AS window_end" in cum


def test_window_topn_is_found_by_the_oracle():
    """snapshot_equivalence: the Top-N aggregate groups by __w over the windowed input."""
    plan = compile_(topn())
    emitted = plan.emitted_sql({"analytics.bids": "b"}, 0)
    assert (
        "WHERE __w.end > __dss_late_wm) AS bids GROUP BY __w HAVING MAX(__w.end) <= "
        "TIMESTAMP_MICROS(0)" in emitted
    )
    assert len(plan.late_rows_sql({"analytics.bids": "b"})) == 1


def test_window_topn_in_a_cte_and_in_upsert_table():
    plan = compile_(f"WITH top AS ({topn()}) SELECT item, price FROM top")
    assert "GROUP BY __w)) WHERE rownum <= 3) SELECT item, price FROM top" in plan.spark_sql
    plan = compile_(topn(), materialization="upsert_table")
    assert (plan.kind, plan.output_mode) == ("append", "append")
    assert plan.upsert.unique_key == ("window_start", "window_end", "rownum")


# Window Top-N over a window aggregate (FLIP-145's example): the two aggregates chain.
SUPPLIERS = {
    "analytics.bid": {
        "bidtime": "timestamp",
        "price": "decimal(10,2)",
        "item": "string",
        "supplier_id": "string",
    }
}
BID_AGG = (
    "SELECT window_start, window_end, supplier_id, SUM(price) as price, COUNT(*) as cnt "
    "FROM TABLE(TUMBLE(TABLE analytics.Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) "
    "GROUP BY window_start, window_end, supplier_id"
)
FLIP145_TOPN = f"""SELECT * FROM (
    SELECT *,
      ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM ({BID_AGG})
  ) WHERE rownum <= 3"""
BID_INNER = f"(SELECT *, {W10} FROM analytics.bid {WM}) AS bid"
AGG_OUT = (
    "__r.window_start AS window_start, __r.window_end AS window_end, __r.supplier_id AS "
    "supplier_id, __r.price AS price, __r.cnt AS cnt"
)
AGG_ROW = (
    "window_start AS window_start, window_end AS window_end, supplier_id AS supplier_id, price AS "
    "price, cnt AS cnt"
)


def test_window_topn_over_window_aggregate_rewrite():
    """The window aggregate (GROUP BY __w, supplier_id) also projects __w; the Top-N is a second
    aggregate grouping its rows by __w. Spark chains them in append mode: the second emits a
    window in the micro-batch in which the first closes it."""
    plan = compile_query(FLIP145_TOPN, schemas=SUPPLIERS, watermark_delay="1 minute")
    assert plan.spark_sql == norm(
        f"SELECT * FROM (SELECT INLINE(TRANSFORM(__top, (__r, __i) -> STRUCT({AGG_OUT}, __i + 1 AS "
        "rownum))) FROM (SELECT __w, SLICE(ARRAY_SORT(COLLECT_LIST(STRUCT(price AS __o0, "
        f"{AGG_ROW})), (__a, __b) -> COALESCE({cmp_('__o0', 1, 1)}, 0)), 1, 3) AS __top "
        "FROM (SELECT __w.start AS window_start, __w.end AS window_end, supplier_id, SUM(price) AS "
        f"price, COUNT(*) AS cnt, __w FROM {BID_INNER} GROUP BY __w, supplier_id) GROUP BY __w)) "
        "WHERE rownum <= 3"
    )
    assert (plan.kind, plan.sources) == ("append", ("analytics.bid",))
    # snapshot_equivalence: only the first aggregate reads the windowed input, drops late rows
    # and waits for the watermark; the Top-N ranks the windows it has emitted.
    emitted = plan.emitted_sql({"analytics.bid": "b"}, 0)
    assert emitted.count("HAVING MAX(__w.end) <= TIMESTAMP_MICROS(0)") == 1
    assert "WHERE __w.end > __dss_late_wm) AS bid GROUP BY __w, supplier_id HAVING" in emitted
    assert len(plan.late_rows_sql({"analytics.bid": "b"})) == 1


def test_window_topn_over_window_aggregate_variants():
    """Aliased, qualified and renamed window bounds, explicit columns, a filter between the
    aggregates, CUMULATE (ranked per cumulative window: its __w) and partition keys."""
    agg = (
        "SELECT t.window_start AS ws, window_end, supplier_id, item, SUM(price) AS total FROM "
        "TABLE(CUMULATE(TABLE analytics.bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL "
        "'10' MINUTES)) AS t GROUP BY window_start, window_end, supplier_id, item"
    )
    sql = (
        "SELECT ws, supplier_id, total, r FROM (SELECT supplier_id, a.total, ws, RANK() OVER "
        f"(PARTITION BY a.ws, item, window_end ORDER BY total DESC) AS r FROM ({agg}) AS a WHERE "
        "total > 2) WHERE r <= 2"
    )
    plan = compile_query(sql, schemas=SUPPLIERS, watermark_delay="1 minute")
    out = plan.spark_sql
    assert "GROUP BY __w, supplier_id, item) AS a WHERE total > 2 GROUP BY __w, item)" in out
    assert (
        "SUM(price) AS total, __w FROM (SELECT * EXCEPT (__v), __v AS __w FROM (SELECT *, " in out
    )
    assert (
        "STRUCT(__r.supplier_id AS supplier_id, __r.total AS total, __r.ws AS ws, "
        "ARRAY_MAX(FILTER(SLICE(__starts, 1, 2), __j -> __j <= __i + 1)) AS r)"
    ) in out
    assert out.startswith("SELECT ws, supplier_id, total, r FROM (SELECT INLINE(")
    assert plan.kind == "append"
    # in an upsert_table: keyed by window, partition keys and row number (ROW_NUMBER only)
    plan = compile_query(
        FLIP145_TOPN, schemas=SUPPLIERS, watermark_delay="1 minute", materialization="upsert_table"
    )
    assert (plan.output_mode, plan.upsert.unique_key) == (
        "append",
        ("window_start", "window_end", "rownum"),
    )


STARTS = (
    "FILTER(SEQUENCE(1, SIZE(__top)), __j -> __j = 1 OR COALESCE({}, 0) <> 0) AS __starts"
).format(
    cmp_("__o0", 1, 1)
    .replace("__a.", "ELEMENT_AT(__top, GREATEST(__j - 1, 1)).")
    .replace("__b.", "ELEMENT_AT(__top, __j).")
)


@pytest.mark.parametrize(
    "function,kept,rank",
    [
        # RANK: the rows before the first value starting past N; a row's rank is where its value
        # starts
        (
            "RANK",
            "COALESCE(ARRAY_MIN(FILTER(__starts, __j -> __j > 3)) - 1, SIZE(__top))",
            "ARRAY_MAX(FILTER(SLICE(__starts, 1, 3), __j -> __j <= __i + 1))",
        ),
        # DENSE_RANK: the rows before the (N+1)-th value; a row's rank counts the values up to it
        (
            "DENSE_RANK",
            "COALESCE(ARRAY_MIN(SLICE(__starts, 4, 1)) - 1, SIZE(__top))",
            "SIZE(FILTER(SLICE(__starts, 1, 3), __j -> __j <= __i + 1))",
        ),
    ],
)
def test_window_rank_and_dense_rank(function, kept, rank):
    """RANK / DENSE_RANK: the aggregate keeps each group's rows sorted (no slice), a projection
    finds where each ORDER BY value starts, and ties share a rank (a group may keep more than N)."""
    plan = compile_(topn().replace("ROW_NUMBER()", f"{function}()"))
    assert plan.spark_sql == norm(
        f"SELECT * FROM (SELECT INLINE(TRANSFORM(SLICE(__top, 1, {kept}), (__r, __i) -> STRUCT("
        f"{OUT.replace('__i + 1', rank)}))) FROM (SELECT __w, __top, {STARTS} FROM ("
        f"SELECT __w, ARRAY_SORT(COLLECT_LIST(STRUCT(price AS __o0, {ROW})), "
        f"(__a, __b) -> COALESCE({cmp_('__o0', 1, 1)}, 0)) AS __top "
        f"FROM {INNER} AS bids GROUP BY __w))) WHERE rownum <= 3"
    )
    assert plan.kind == "append"
    # the oracle still finds the window aggregate; a Top-N over a window aggregate works the same
    assert "GROUP BY __w HAVING MAX(__w.end) <= TIMESTAMP_MICROS(0)" in plan.emitted_sql(
        {"analytics.bids": "b"}, 0
    )
    over_agg = compile_query(
        FLIP145_TOPN.replace("ROW_NUMBER()", f"{function}()"),
        schemas=SUPPLIERS,
        watermark_delay="1 minute",
    ).spark_sql
    assert f"SLICE(__top, 1, {kept})" in over_agg and "__w FROM (SELECT *, WINDOW(" in over_agg


def test_window_rank_multiple_order_keys_compare_all():
    sql = compile_(topn(order="price DESC, item").replace("ROW_NUMBER()", "DENSE_RANK()")).spark_sql
    prev, cur = "ELEMENT_AT(__top, GREATEST(__j - 1, 1)).", "ELEMENT_AT(__top, __j)."
    terms = [cmp_("__o0", 1, 1), cmp_("__o1", -1, -1)]
    assert (
        "COALESCE({}, 0) <> 0) AS __starts".format(
            ", ".join(terms).replace("__a.", prev).replace("__b.", cur)
        )
        in sql
    )


# --- Window joins (sql/joins.py): each side keeps its window struct __w, the join is on it.

JOIN_SCHEMAS = {
    "analytics.lt": {"row_time": "timestamp", "num": "int", "id": "string"},
    "analytics.rt": {"row_time": "timestamp", "num": "int", "id": "string"},
}
T5 = "TABLE(TUMBLE(TABLE analytics.{}, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
W5 = "WINDOW(row_time, '300 seconds', '300 seconds', '0 seconds') AS __w"
WM_J = "WATERMARK row_time DELAY OF INTERVAL '60' SECONDS"
BOUNDS = (
    "__w.start AS window_start, __w.end AS window_end, __w.end - INTERVAL '1' MILLISECOND "
    "AS window_time"
)
# A side: the input's columns (the time column without its watermark), the bounds and __w.
SIDE = (
    "(SELECT row_time + INTERVAL '0' SECOND AS row_time, num, id, " + BOUNDS + ", __w "
    f"FROM (SELECT *, {W5} FROM analytics.{{}} {WM_J}))"
)
ON_BOUNDS = "L.window_start = R.window_start AND L.window_end = R.window_end"
PICK = (
    "SELECT L.num AS l_num, L.id AS l_id, R.num AS r_num, R.id AS r_id, "
    "COALESCE(L.window_start, R.window_start) AS window_start"
)

JOIN_REWRITES = [
    pytest.param(
        f"{PICK} FROM (SELECT * FROM {T5.format('lt')}) L FULL JOIN (SELECT * FROM "
        f"{T5.format('rt')}) R ON L.num = R.num AND {ON_BOUNDS}",
        f"{PICK} FROM (SELECT * FROM {SIDE.format('lt')} AS lt) AS L FULL JOIN "
        f"(SELECT * FROM {SIDE.format('rt')} AS rt) AS R ON L.num = R.num AND L.__w = R.__w "
        "AND NOT L.num IS NULL AND NOT R.num IS NULL",
        id="flink-docs-full-join-subqueries",
    ),
    pytest.param(
        f"{PICK} FROM {T5.format('lt')} L JOIN {T5.format('rt')} R ON {ON_BOUNDS} AND "
        "L.num = R.num",
        f"{PICK} FROM {SIDE.format('lt')} AS L JOIN {SIDE.format('rt')} AS R ON L.__w = R.__w AND "
        "L.num = R.num",
        id="inner-direct",
    ),
    pytest.param(
        f"{PICK} FROM {T5.format('lt')} AS L LEFT OUTER JOIN {T5.format('rt')} AS R "
        "ON R.window_end = L.window_end AND L.num = R.num AND R.window_start = L.window_start "
        "AND L.id < R.id",
        f"{PICK} FROM {SIDE.format('lt')} AS L LEFT OUTER JOIN {SIDE.format('rt')} AS R "
        "ON L.num = R.num AND L.__w = R.__w AND L.id < R.id",
        id="left-reversed-bounds-non-equi",
    ),
    pytest.param(
        f"{PICK} FROM {T5.format('lt')} L RIGHT JOIN {T5.format('rt')} R ON ({ON_BOUNDS}) "
        "AND L.num > 2",
        f"{PICK} FROM {SIDE.format('lt')} AS L RIGHT JOIN {SIDE.format('rt')} AS R ON L.__w = "
        "R.__w AND L.num > 2",
        id="right-parenthesized",
    ),
    pytest.param(
        f"SELECT * FROM {T5.format('lt')} L JOIN {T5.format('rt')} R ON {ON_BOUNDS}",
        "SELECT L.row_time, L.num, L.id, L.window_start, L.window_end, L.window_time, R.row_time, "
        f"R.num, R.id, R.window_start, R.window_end, R.window_time FROM {SIDE.format('lt')} AS L "
        f"JOIN {SIDE.format('rt')} AS R ON L.__w = R.__w",
        id="star-expanded-without-window-struct",
    ),
    pytest.param(
        "SELECT L.*, R.id FROM (SELECT num, window_start, window_end AS window_end FROM "
        f"{T5.format('lt')} WHERE num > 1) L JOIN {T5.format('rt')} R ON {ON_BOUNDS}",
        "SELECT L.num, L.window_start, L.window_end, R.id FROM (SELECT num, window_start, "
        f"window_end AS window_end, __w FROM {SIDE.format('lt')} AS lt WHERE num > 1) AS L JOIN "
        f"{SIDE.format('rt')} AS R ON L.__w = R.__w",
        id="explicit-subquery-gets-window-struct",
    ),
    pytest.param(
        "SELECT L.num FROM TABLE(HOP(TABLE analytics.lt, DESCRIPTOR(row_time), INTERVAL '1' "
        "MINUTE, INTERVAL '3' MINUTES)) L FULL OUTER JOIN TABLE(HOP(DATA => TABLE analytics.rt, "
        "TIMECOL => DESCRIPTOR(row_time), SLIDE => INTERVAL '60' SECONDS, SIZE => INTERVAL '3' "
        f"MINUTES)) R ON {ON_BOUNDS}",
        "SELECT L.num FROM (SELECT row_time + INTERVAL '0' SECOND AS row_time, num, id, "
        + BOUNDS
        + ", __w "
        "FROM (SELECT *, WINDOW(row_time, '180 seconds', '60 seconds', '0 seconds') AS __w FROM "
        f"analytics.lt {WM_J})) AS L FULL OUTER JOIN (SELECT row_time + INTERVAL '0' SECOND AS "
        f"row_time, num, id, {BOUNDS}, __w FROM (SELECT *, WINDOW(row_time, '180 seconds', "
        f"'60 seconds', '0 seconds') AS __w FROM analytics.rt {WM_J})) AS R ON L.__w = R.__w",
        id="hop-positional-and-named",
    ),
    pytest.param(
        "SELECT L.num, R.window_end FROM TABLE(CUMULATE(TABLE analytics.lt, DESCRIPTOR(row_time), "
        "INTERVAL '1' MINUTE, INTERVAL '4' MINUTES)) L JOIN TABLE(CUMULATE(TABLE analytics.rt, "
        "DESCRIPTOR(row_time), INTERVAL '1' MINUTE, INTERVAL '4' MINUTES)) R ON L.id = R.id "
        f"AND {ON_BOUNDS}",
        "SELECT L.num, R.window_end FROM (SELECT row_time + INTERVAL '0' SECOND AS row_time, num, "
        f"id, {cum_start(240)} AS window_start, __w.end AS window_end, __w.end - INTERVAL '1' "
        f"MILLISECOND AS window_time, __w FROM {cum_inner(240, 60, 0, 'row_time', 'lt')}) AS L "
        "JOIN (SELECT row_time + INTERVAL '0' SECOND AS row_time, num, id, "
        f"{cum_start(240)} AS window_start, __w.end AS window_end, __w.end - INTERVAL '1' "
        f"MILLISECOND AS window_time, __w FROM {cum_inner(240, 60, 0, 'row_time', 'rt')}) AS R "
        "ON L.id = R.id AND L.__w = R.__w",
        id="cumulate-joins-on-window",
    ),
]


@pytest.mark.parametrize("sql,expected", JOIN_REWRITES)
def test_rewrite_window_join(sql, expected):
    plan = compile_query(sql, schemas=JOIN_SCHEMAS, watermark_delay="1 minute")
    assert plan.spark_sql == norm(expected)
    assert plan.kind == "append"
    assert plan.sources == ("analytics.lt", "analytics.rt")


def test_window_join_with_a_table_is_not_a_window_join():
    """A TVF joined with a plain relation stays an ordinary (enrichment) join."""
    plan = compile_query(
        f"SELECT L.num FROM {T5.format('lt')} L JOIN analytics.rt R ON L.num = R.num",
        schemas=JOIN_SCHEMAS,
        watermark_delay="1 minute",
        dimensions=["analytics.rt"],
    )
    assert "__w = " not in plan.spark_sql and "INTERVAL '0' SECOND" not in plan.spark_sql


def test_window_self_join_reads_its_source_once():
    plan = compile_query(
        f"SELECT L.num, R.num AS r FROM {T5.format('lt')} L JOIN {T5.format('lt')} R "
        f"ON L.id = R.id AND {ON_BOUNDS} AND L.num < R.num",
        schemas=JOIN_SCHEMAS,
        watermark_delay="1 minute",
    )
    assert plan.sources == ("analytics.lt",)
    assert plan.spark_sql == norm(
        f"SELECT L.num, R.num AS r FROM {SIDE.format('lt')} AS L JOIN {SIDE.format('lt')} "
        "AS R ON L.id = R.id AND L.__w = R.__w AND L.num < R.num"
    )
    assert plan.sql_for({"analytics.lt": "v"}).count("FROM v WATERMARK") == 2


# --- Window joins of window aggregates: each aggregate keeps __w as an
# output column, and the join is on it. Spark chains the aggregates and the join in append mode.

AGG_T5 = (
    "(SELECT id, window_start, window_end, SUM(num) AS total FROM {tvf} GROUP BY window_start, "
    "window_end, id)"
)
AGG_T5_OUT = (
    "(SELECT id, __w.start AS window_start, __w.end AS window_end, SUM(num) AS total, __w "
    f"FROM (SELECT *, {W5} FROM analytics.{{t}} {WM_J}) AS {{t}} GROUP BY __w, id)"
)


def test_rewrite_window_join_of_window_aggregates():
    sql = (
        "SELECT a.id, a.window_start, a.total, b.total AS r_total FROM "
        f"{AGG_T5.format(tvf=T5.format('lt'))} a JOIN {AGG_T5.format(tvf=T5.format('rt'))} b ON "
        "a.id = b.id AND a.window_start = b.window_start AND a.window_end = b.window_end"
    )
    plan = compile_query(sql, schemas=JOIN_SCHEMAS, watermark_delay="1 minute")
    assert plan.spark_sql == norm(
        "SELECT a.id, a.window_start, a.total, b.total AS r_total FROM "
        f"{AGG_T5_OUT.format(t='lt')} AS a JOIN {AGG_T5_OUT.format(t='rt')} AS b ON a.id = b.id "
        "AND a.__w = b.__w"
    )
    assert plan.kind == "append"


FLIP_VIEW = """
SELECT a.item_id, a.seller_id, a.window_start, a.window_end, a.sales, a.item_buyer_cnt,
  b.slr_buyer_cnt
FROM (SELECT item_id, seller_id, window_start, window_end, SUM(price) AS sales,
        COUNT(DISTINCT user_id) AS item_buyer_cnt
      FROM TABLE(CUMULATE(TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES,
        INTERVAL '1' HOUR))
      GROUP BY item_id, seller_id, window_start, window_end) a
LEFT JOIN (SELECT seller_id, window_start, window_end, COUNT(DISTINCT user_id) AS slr_buyer_cnt
      FROM TABLE(CUMULATE(TABLE analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES,
        INTERVAL '1' HOUR))
      GROUP BY seller_id, window_start, window_end) b
ON a.seller_id = b.seller_id AND a.window_start = b.window_start AND a.window_end = b.window_end"""
ORDER_SCHEMAS = {
    "analytics.orders": {
        "pay_time": "timestamp",
        "item_id": "string",
        "seller_id": "string",
        "price": "double",
        "user_id": "string",
    }
}
C1H = f"{cum_inner(3600, 600, 0, 'pay_time', 'orders')} AS orders"
C1H_START = cum_start(3600)


def test_rewrite_flip145_cumulate_aggregates_left_join():
    plan = compile_query(FLIP_VIEW, schemas=ORDER_SCHEMAS, watermark_delay="1 minute")
    assert plan.spark_sql == norm(
        "SELECT a.item_id, a.seller_id, a.window_start, a.window_end, a.sales, a.item_buyer_cnt, "
        f"b.slr_buyer_cnt FROM (SELECT item_id, seller_id, {C1H_START} AS window_start, __w.end "
        "AS window_end, SUM(price) AS sales, SIZE(COLLECT_SET(user_id)) AS item_buyer_cnt, __w "
        f"FROM {C1H} GROUP BY item_id, seller_id, __w) AS a LEFT JOIN (SELECT seller_id, "
        f"{C1H_START} AS window_start, __w.end AS window_end, SIZE(COLLECT_SET(user_id)) AS "
        f"slr_buyer_cnt, __w FROM {C1H} GROUP BY seller_id, __w) AS b ON a.seller_id = "
        "b.seller_id AND a.__w = b.__w"
    )
    assert plan.sources == ("analytics.orders",)


# --- Window Top-N over a window join of window aggregates (FLIP-145's cumulative example,
# whole): the join passes on its left side's __w and the Top-N groups by it.

FLIP_TOPN = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY "
    "sales DESC, item_id) AS rownum FROM {src}) WHERE rownum <= 3"
)


def test_window_topn_over_window_join_cte_and_subquery():
    cte = compile_query(
        f"WITH trd_itm_ord_mm AS ({FLIP_VIEW}) " + FLIP_TOPN.format(src="trd_itm_ord_mm"),
        schemas=ORDER_SCHEMAS,
        watermark_delay="1 minute",
    )
    sub = compile_query(
        FLIP_TOPN.format(src=f"({FLIP_VIEW}) AS trd_itm_ord_mm"),
        schemas=ORDER_SCHEMAS,
        watermark_delay="1 minute",
    )
    assert cte.spark_sql == sub.spark_sql
    out = cte.spark_sql
    assert "WITH" not in out and cte.kind == "append"
    assert (
        f"b.slr_buyer_cnt, a.__w FROM (SELECT item_id, seller_id, {C1H_START} AS window_start"
        in out
    )
    assert out.endswith(
        "ON a.seller_id = b.seller_id AND a.__w = b.__w) AS trd_itm_ord_mm "
        "GROUP BY __w)) WHERE rownum <= 3"
    )
    assert out.startswith(
        "SELECT * FROM (SELECT INLINE(TRANSFORM(__top, (__r, __i) -> STRUCT(__r.item_id AS "
        "item_id, __r.seller_id AS seller_id, __r.window_start AS window_start, __r.window_end AS "
        "window_end, __r.sales AS sales, __r.item_buyer_cnt AS item_buyer_cnt, __r.slr_buyer_cnt "
        "AS slr_buyer_cnt, __i + 1 AS rownum))) FROM (SELECT __w, SLICE(ARRAY_SORT("
    )
    # snapshot_equivalence: each aggregate drops late rows and keeps closed windows, once.
    emitted = cte.emitted_sql({"analytics.orders": "o"}, 0)
    assert emitted.count("HAVING MAX(__w.end) <= TIMESTAMP_MICROS(0)") == 2
    assert emitted.count("WHERE __w.end > __dss_late_wm") == 2
    assert len(cte.late_rows_sql({"analytics.orders": "o"})) == 2


def test_window_topn_over_right_window_join_ranks_by_the_right_window():
    view = FLIP_VIEW.replace("LEFT JOIN", "RIGHT JOIN").replace(
        "a.window_start, a.window_end", "b.window_start, b.window_end"
    )
    out = compile_query(
        FLIP_TOPN.format(src=f"({view})"), schemas=ORDER_SCHEMAS, watermark_delay="1 minute"
    ).spark_sql
    assert "b.slr_buyer_cnt, b.__w FROM" in out and "GROUP BY __w)) WHERE rownum <= 3" in out


def test_window_topn_over_cte_of_window_aggregate_is_inlined():
    """A CTE used only as a Top-N's FROM becomes that subquery; a CTE used elsewhere stays."""
    cte = compile_query(
        f"WITH agg AS ({BID_AGG}) " + FLIP145_TOPN.replace(f"({BID_AGG})", "agg"),
        schemas=SUPPLIERS,
        watermark_delay="1 minute",
    )
    sub = compile_query(
        FLIP145_TOPN.replace(f"({BID_AGG})", f"({BID_AGG}) AS agg"),
        schemas=SUPPLIERS,
        watermark_delay="1 minute",
    )
    assert cte.spark_sql == sub.spark_sql and "WITH" not in cte.spark_sql
    kept = compile_query(
        f"WITH agg AS ({BID_AGG}) SELECT supplier_id FROM agg",
        schemas=SUPPLIERS,
        watermark_delay="1 minute",
    )
    assert kept.spark_sql.startswith("WITH agg AS (")
