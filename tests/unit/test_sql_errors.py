"""Error reporting of the SQL front-end: codes, messages and positions."""

import pytest
from test_sql_rewrite import FLIP_TOPN, FLIP_VIEW, ORDER_SCHEMAS  # FLIP-145's cumulative example

from dbt.adapters.spark_streaming.sql import SqlError, compile_query, parse_watermark_delay

SCHEMAS = {
    "analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string", "day": "date"},
}
T = "TABLE analytics.bids, DESCRIPTOR(bidtime)"
AGG = (
    "SELECT window_start, window_end, COUNT(*) AS n FROM TABLE({}) GROUP BY "
    "window_start, window_end"
)

TOPN = "SELECT * FROM (SELECT *, {f} OVER ({o}) AS rownum FROM {tvf}) WHERE {w}"
TVF1 = f"TABLE(TUMBLE({T}, INTERVAL '1' MINUTE))"
AGG_K = (
    "SELECT window_start, window_end, item, SUM(price) AS total FROM {} GROUP BY window_start, "
    "window_end, item"
)

BAD = [
    # (sql, code, substring of str(e))
    ("SELECT FROM WHERE", "SSV101", "does not parse"),
    ("SELECT * FROM TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime)", "SSV101", "parse"),
    ("SELECT 1; SELECT 2", "SSV101", "single SELECT"),
    ("INSERT INTO t SELECT 1", "SSV101", "single SELECT"),
    (AGG.format(f"TUMBLE({T})"), "SSV102", "missing argument(s) SIZE"),
    (
        AGG.format(f"TUMBLE({T}, INTERVAL '1' MINUTE, INTERVAL '0' MINUTE, INTERVAL '1' MINUTE)"),
        "SSV102",
        "too many arguments",
    ),
    (
        AGG.format(f"TUMBLE({T}, WIDTH => INTERVAL '1' MINUTE)"),
        "SSV102",
        "unknown named argument WIDTH",
    ),
    (
        AGG.format(f"TUMBLE({T}, SIZE => INTERVAL '1' MINUTE, SIZE => INTERVAL '2' MINUTE)"),
        "SSV102",
        "given twice",
    ),
    (
        AGG.format(
            "TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE, "
            "DATA => TABLE analytics.bids)"
        ),
        "SSV102",
        "DATA is given twice",
    ),
    (
        AGG.format(
            "TUMBLE(DATA => TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"
        ),
        "SSV102",
        "positional argument follows a named one",
    ),
    (AGG.format(f"TUMBLE({T}, INTERVAL '0' MINUTES)"), "SSV102", "positive interval"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '-5' MINUTES)"), "SSV102", "positive interval"),
    (AGG.format(f"TUMBLE({T}, 10)"), "SSV102", "interval literal"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' FORTNIGHTS)"), "SSV102", "interval literal"),
    (
        AGG.format("TUMBLE(analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
        "SSV102",
        "DATA must be TABLE <name>",
    ),
    (
        AGG.format("TUMBLE(TABLE analytics.bids, bidtime, INTERVAL '1' MINUTE)"),
        "SSV102",
        "TIMECOL must be DESCRIPTOR",
    ),
    (
        AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime, item), INTERVAL '1' MINUTE)"),
        "SSV102",
        "TIMECOL must be DESCRIPTOR",
    ),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' MINUTES, INTERVAL '10' MINUTES)"), "SSV102", "OFFSET"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' MINUTES, INTERVAL '-11' MINUTES)"), "SSV102", "OFFSET"),
    (
        AGG.format(f"HOP({T}, INTERVAL '3' MINUTES, INTERVAL '10' MINUTES)"),
        "SSV102",
        "whole multiple",
    ),
    (AGG.format(f"HOP({T}, INTERVAL '5' MINUTES)"), "SSV102", "missing argument(s) SIZE"),
    (
        AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE)"),
        "SSV103",
        "bidtime, price, item, day",
    ),
    (
        AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(price), INTERVAL '1' MINUTE)"),
        "SSV103",
        "has type double",
    ),
    (
        AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(day), INTERVAL '1' MINUTE)"),
        "SSV103",
        "has type date",
    ),
    (
        AGG.format("TUMBLE(TABLE analytics.asks, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
        "SSV104",
        "analytics.asks",
    ),
    ("SELECT item, COUNT(*) FROM analytics.bids GROUP BY item", "SSV106", "upsert_table"),
    ("SELECT COUNT(*) FROM analytics.bids", "SSV106", "upsert_table"),
    ("SELECT DISTINCT item FROM analytics.bids", "SSV106", "upsert_table"),
    (
        f"SELECT item, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP BY item",
        "SSV106",
        "materialized='upsert_table'",
    ),
    (
        "SELECT item FROM analytics.bids UNION SELECT item FROM analytics.bids",
        "SSV106",
        "upsert_table",
    ),
    (
        f"WITH w AS (SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE))) "
        "SELECT window_start, window_end, COUNT(*) FROM w GROUP BY window_start, window_end",
        "SSV106",
        "directly in this SELECT's FROM",
    ),
    (
        f"SELECT window_start, window_end, COUNT(DISTINCT item, price) FROM TABLE(TUMBLE({T}, "
        "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end",
        "SSV108",
        "approx_count_distinct",
    ),
    (
        f"SELECT window_start, window_end, SUM(DISTINCT price) FROM TABLE(TUMBLE({T}, "
        "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end",
        "SSV108",
        "COUNT(DISTINCT x)",
    ),
    ("SELECT FROM WHERE", "SSV101", "'WHERE'"),
    (
        f"SELECT window_start, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP BY "
        "window_start",
        "SSV107",
        "window_end",
    ),
    (
        f"SELECT window_end, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP "
        "BY window_end",
        "SSV107",
        "window_start",
    ),
    ("SELECT * FROM analytics.bids ORDER BY price", "SSV108", "not supported yet"),
    ("SELECT * FROM analytics.bids LIMIT 10", "SSV108", "not supported yet"),
    (
        "SELECT item, ROW_NUMBER() OVER (PARTITION BY item ORDER BY price) FROM analytics.bids",
        "SSV174",
        "unbounded",
    ),
    (
        f"SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) a JOIN "
        f"TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) b ON a.item = b.item",
        "SSV107",
        "window join does not equate",
    ),
    # window Top-N: only ROW_NUMBER over the rows of a TUMBLE / HOP / CUMULATE, partitioned by both
    # window bounds, in a subquery filtered by rownum <= N (or = 1); anything else stays SSV108
    *[
        (TOPN.format(f=f, o=o, tvf=tvf, w=w), "SSV108", "only a window Top-N")
        for f, o, tvf, w in [
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum > 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum = 2",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum <= 0",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum <= price",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum <= 3 AND price > 1",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "item = 'A'",
            ),
            ("RANK()", "PARTITION BY window_start, window_end ORDER BY price", TVF1, "rownum > 3"),
            (
                "DENSE_RANK()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum = 2",
            ),
            (
                "NTILE(4)",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum <= 3",
            ),
            (
                "PERCENT_RANK()",
                "PARTITION BY window_start, window_end ORDER BY price",
                TVF1,
                "rownum <= 3",
            ),
            ("SUM(price)", "PARTITION BY window_start, window_end", TVF1, "rownum <= 3"),
            ("ROW_NUMBER()", "PARTITION BY window_start ORDER BY price", TVF1, "rownum <= 3"),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end, window_time ORDER BY price",
                TVF1,
                "rownum <= 3",
            ),
            ("ROW_NUMBER()", "PARTITION BY window_start, window_end", TVF1, "rownum <= 3"),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY window_end",
                TVF1,
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end, UPPER(item) ORDER BY price",
                TVF1,
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                "analytics.bids",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY price",
                f"TABLE(SESSION({T}, INTERVAL '1' MINUTE))",
                "rownum <= 3",
            ),
            # over a window aggregate: in a subquery of the Top-N's FROM, of TUMBLE / HOP /
            # CUMULATE, partitioned by both of its window bounds
            (
                "RANK()",
                "PARTITION BY window_start ORDER BY total",
                f"({AGG_K.format(TVF1)})",
                "rownum <= 3",
            ),
            (
                "RANK()",
                "PARTITION BY window_start, window_end, window_time ORDER BY total",
                "("
                + AGG_K.format(TVF1).replace("window_end,", "window_end, window_time,", 1)
                + ")",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY total",
                "(" + AGG_K.format(TVF1).replace("window_end, item", "item", 1) + ")",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY total",
                "("
                + AGG_K.format(
                    "TABLE(SESSION(TABLE analytics.bids PARTITION BY item, DESCRIPTOR(bidtime), "
                    "INTERVAL '1' MINUTE))"
                )
                + ")",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY total",
                "(SELECT item, SUM(price) AS total FROM analytics.bids GROUP BY item)",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY total",
                "agg",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY window_start, window_end ORDER BY total",
                f"({AGG_K.format(TVF1)}) AS a JOIN analytics.bids AS b ON a.item = b.item",
                "rownum <= 3",
            ),
            (
                "ROW_NUMBER()",
                "PARTITION BY a.window_start, window_end ORDER BY total",
                f"({AGG_K.format(TVF1)}) AS b",
                "rownum <= 3",
            ),
        ]
    ],
    # a CTE referred to twice stays a CTE, and a Top-N over it is refused
    (
        f"WITH agg AS ({AGG_K.format(TVF1)}) "
        + TOPN.format(
            f="ROW_NUMBER()",
            o="PARTITION BY window_start, window_end ORDER BY total",
            tvf="agg",
            w="rownum <= 3",
        )
        + " UNION ALL SELECT *, 1 AS rownum FROM agg",
        "SSV108",
        "in a subquery of its FROM",
    ),
    # CUMULATE
    (AGG.format(f"CUMULATE({T}, INTERVAL '1' MINUTE)"), "SSV102", "missing argument(s) SIZE"),
    (
        AGG.format(f"CUMULATE({T}, SIZE => INTERVAL '10' MINUTES)"),
        "SSV102",
        "missing argument(s) STEP",
    ),
    (
        AGG.format(
            f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES, INTERVAL '1' MINUTE, "
            "INTERVAL '1' MINUTE)"
        ),
        "SSV102",
        "too many arguments (6)",
    ),
    (
        AGG.format(f"CUMULATE({T}, INTERVAL '3' MINUTE, INTERVAL '10' MINUTES)"),
        "SSV102",
        "CUMULATE size (10 minutes) must be a whole multiple of its step (3 minutes)",
    ),
    (
        AGG.format(f"CUMULATE({T}, INTERVAL '20' MINUTE, INTERVAL '10' MINUTES)"),
        "SSV102",
        "whole multiple",
    ),
    (
        AGG.format(f"CUMULATE({T}, INTERVAL '0' MINUTE, INTERVAL '10' MINUTES)"),
        "SSV102",
        "STEP must be a positive interval",
    ),
    (
        AGG.format(f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '-10' MINUTES)"),
        "SSV102",
        "SIZE must be a positive interval",
    ),
    (AGG.format(f"CUMULATE({T}, INTERVAL '1' MINUTE, 10)"), "SSV102", "interval literal"),
    (
        AGG.format(
            f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES, INTERVAL '-10' MINUTES)"
        ),
        "SSV102",
        "smaller than the window size (10 minutes)",
    ),
    (
        AGG.format(f"CUMULATE({T}, SLIDE => INTERVAL '1' MINUTE, SIZE => INTERVAL '10' MINUTES)"),
        "SSV102",
        "unknown named argument SLIDE",
    ),
    (
        AGG.format(
            f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES, GAP => INTERVAL '1' MINUTE)"
        ),
        "SSV102",
        "unknown named argument GAP",
    ),
    (
        AGG.format(f"CUMULATE({T}, INTERVAL '1' MINUTE)"),
        "SSV102",
        "CUMULATE(TABLE <table>, DESCRIPTOR(<time column>), <step interval>, <max size interval>",
    ),
    (
        AGG.format(
            "CUMULATE(TABLE analytics.bids PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '1' "
            "MINUTE, INTERVAL '10' MINUTES)"
        ),
        "SSV102",
        "PARTITION BY is only allowed for SESSION, not CUMULATE",
    ),
    (
        AGG.format(
            "CUMULATE(TABLE analytics.bids, DESCRIPTOR(price), INTERVAL '1' MINUTE, INTERVAL "
            "'10' MINUTES)"
        ),
        "SSV103",
        "has type double",
    ),
    (
        f"SELECT window_end, COUNT(*) FROM TABLE(CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' "
        "MINUTES)) GROUP BY window_end",
        "SSV107",
        "window_start",
    ),
    (
        f"SELECT item, COUNT(*) FROM TABLE(CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' "
        "MINUTES)) GROUP BY item",
        "SSV106",
        "upsert_table",
    ),
    # SESSION
    (AGG.format(f"SESSION({T})"), "SSV102", "missing argument(s) GAP"),
    (
        AGG.format(f"SESSION({T}, INTERVAL '1' MINUTE, INTERVAL '1' MINUTE)"),
        "SSV102",
        "too many arguments (4)",
    ),
    (
        AGG.format(f"SESSION({T}, SIZE => INTERVAL '1' MINUTE)"),
        "SSV102",
        "unknown named argument SIZE",
    ),
    (
        AGG.format(f"SESSION({T}, GAP => INTERVAL '1' MINUTE, OFFSET => INTERVAL '1' MINUTE)"),
        "SSV102",
        "unknown named argument OFFSET",
    ),
    (
        AGG.format(f"SESSION({T}, INTERVAL '0' SECONDS)"),
        "SSV102",
        "GAP must be a positive interval",
    ),
    (AGG.format(f"SESSION({T}, '5 minutes')"), "SSV102", "GAP must be an interval literal"),
    (
        AGG.format(f"SESSION({T}, INTERVAL '1' MINUTE, INTERVAL '1' MINUTE)"),
        "SSV102",
        "SESSION(TABLE <table> [PARTITION BY <column> | PARTITION BY (<column>, ...)], "
        "DESCRIPTOR(<time column>)",
    ),
    (
        AGG.format(
            "SESSION(TABLE analytics.bids PARTITION BY sku, DESCRIPTOR(bidtime), "
            "INTERVAL '1' MINUTE)"
        ),
        "SSV102",
        "PARTITION BY must list columns of analytics.bids; it has bidtime, price, item, day",
    ),
    (
        AGG.format(
            "SESSION(TABLE analytics.bids PARTITION BY UPPER(item), DESCRIPTOR(bidtime), "
            "INTERVAL '1' MINUTE)"
        ),
        "SSV102",
        "invalid PARTITION BY key UPPER(item)",
    ),
    (
        AGG.format("SESSION(TABLE analytics.bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE)"),
        "SSV103",
        "time column ts",
    ),
    (
        AGG.format("SESSION(TABLE analytics.nope, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
        "SSV104",
        "analytics.nope",
    ),
    (
        f"SELECT window_start, COUNT(*) FROM TABLE(SESSION({T}, INTERVAL '1' MINUTE)) GROUP BY "
        "window_start",
        "SSV107",
        "window_end",
    ),
    (
        f"SELECT item, COUNT(*) FROM TABLE(SESSION({T}, INTERVAL '1' MINUTE)) GROUP BY item",
        "SSV106",
        "upsert_table",
    ),
    (
        f"SELECT item, window_start, window_end, COUNT(*) FROM TABLE(SESSION({T}, INTERVAL '1' "
        "MINUTE)) GROUP BY window_start, window_end, item",
        "SSV121",
        "Got: item; Expected: none",
    ),
    (
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE analytics.bids "
        "PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)) GROUP BY "
        "window_start, window_end",
        "SSV121",
        "Got: none; Expected: item",
    ),
    (
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE analytics.bids "
        "PARTITION BY (item, day), DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)) GROUP BY "
        "window_start, window_end, item",
        "SSV121",
        "Got: item; Expected: item, day",
    ),
    (
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE analytics.bids "
        "PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)) GROUP BY window_start, "
        "window_end, UPPER(item)",
        "SSV121",
        "Got: UPPER(item); Expected: item",
    ),
    (
        "SELECT window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE analytics.bids "
        "PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)) AS b JOIN analytics.items "
        "AS i ON b.item = i.id GROUP BY window_start, window_end, i.item",
        "SSV121",
        "Got: i.item; Expected: item",
    ),
    (
        f"SELECT * FROM TABLE(SESSION({T}, INTERVAL '1' MINUTE)) a JOIN TABLE(SESSION({T}, "
        "INTERVAL '1' MINUTE)) b ON a.item = b.item",
        "SSV108",
        "window joins of SESSION windows are not supported",
    ),
]


@pytest.mark.parametrize("sql,code,text", BAD)
def test_bad_sql(sql, code, text):
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")
    err = info.value
    assert err.code == code, str(err)
    assert text in str(err)
    assert str(err).startswith(f"[dbt-spark-streaming {code}] {err.what}: {err.why}. {err.fix}")


def test_window_aggregate_needs_watermark_delay():
    sql = AGG.format(f"TUMBLE({T}, INTERVAL '1' MINUTE)")
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay=None)
    assert info.value.code == "SSV105"
    assert "watermark_delay" in str(info.value)
    assert info.value.position == (1, sql.index("GROUP BY window_start") + 10)  # first key
    # upsert_table needs one too (windows close by the watermark); streaming_view projections do not
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay=None, materialization="upsert_table")
    assert info.value.code == "SSV105"
    compile_query(
        f"SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE))",
        schemas=SCHEMAS,
        watermark_delay=None,
    )


def test_error_positions():
    sql = (
        "SELECT *\nFROM TABLE(TUMBLE(TABLE analytics.bids,\n  DESCRIPTOR(ts), INTERVAL '1' MINUTE))"
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")
    assert info.value.position == (3, 14)
    assert str(info.value).endswith("(line 3, column 14)")
    with pytest.raises(SqlError) as info:
        compile_query("SELECT *\nFROM t WHERE (", schemas=SCHEMAS, watermark_delay=None)
    assert info.value.code == "SSV101"
    assert info.value.position is not None and info.value.position[0] == 2
    assert "(line 2, column" in str(info.value)


@pytest.mark.parametrize(
    "text,us",
    [
        ("1 minute", 60_000_000),
        ("30 seconds", 30_000_000),
        ("2 hours", 7_200_000_000),
        ("0 seconds", 0),
        ("500 milliseconds", 500_000),
        ("1 hour 30 minutes", 5_400_000_000),
        (" 10 MINUTES ", 600_000_000),
        ("1 day", 86_400_000_000),
        (None, None),
    ],
)
def test_watermark_delay(text, us):
    assert parse_watermark_delay(text) == us


@pytest.mark.parametrize(
    "text", ["", "soon", "1", "minute", "-1 minute", "1 fortnight", "1.5 hours"]
)
def test_bad_watermark_delay(text):
    with pytest.raises(SqlError) as info:
        compile_query("SELECT * FROM analytics.bids", schemas=SCHEMAS, watermark_delay=text)
    assert info.value.code == "SSV110"
    assert "watermark_delay" in str(info.value)


def test_session_key_error_position():
    sql = (
        "SELECT window_start, window_end, day, COUNT(*)\nFROM TABLE(SESSION(TABLE analytics.bids "
        "PARTITION BY item,\n  DESCRIPTOR(bidtime), INTERVAL '1' MINUTE))\nGROUP BY window_start, "
        "window_end, day"
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")
    assert info.value.code == "SSV121"
    assert info.value.position == (4, 36)  # the offending key


def test_session_partition_by_without_key():
    """``PARTITION BY`` with no key is a syntax error (it raised AttributeError)."""
    sql = (
        "SELECT * FROM TABLE(SESSION(TABLE analytics.bids PARTITION BY , DESCRIPTOR(bidtime), "
        "INTERVAL '1' MINUTE))"
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")
    assert info.value.code == "SSV101"
    assert info.value.position == (1, sql.index(", DESCRIPTOR") + 1)


@pytest.mark.parametrize(
    "tvf",
    [
        f"SESSION({T}, INTERVAL '1' MINUTE)",
        f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES)",
    ],
)
def test_cumulate_and_session_aggregates_need_watermark_delay(tvf):
    with pytest.raises(SqlError) as info:
        compile_query(AGG.format(tvf), schemas=SCHEMAS, watermark_delay=None)
    assert info.value.code == "SSV105"


def test_session_rows_need_watermark_delay():
    """SESSION rows come out of a session window aggregate (see rewrite.py): they need one too,
    while CUMULATE rows (a projection) do not."""
    with pytest.raises(SqlError) as info:
        compile_query(
            f"SELECT * FROM TABLE(SESSION({T}, INTERVAL '1' MINUTE))",
            schemas=SCHEMAS,
            watermark_delay=None,
        )
    assert info.value.code == "SSV105"
    compile_query(
        f"SELECT * FROM TABLE(CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES))",
        schemas=SCHEMAS,
        watermark_delay=None,
    )


def test_window_topn_needs_watermark_delay():
    sql = TOPN.format(
        f="ROW_NUMBER()",
        o="PARTITION BY window_start, window_end ORDER BY price",
        tvf=TVF1,
        w="rownum <= 3",
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay=None)
    assert info.value.code == "SSV105"
    assert info.value.position == (1, sql.index("ROW_NUMBER") + 1)
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay=None, materialization="upsert_table")


def test_window_topn_over_aggregate_errors():
    """A window Top-N over a window aggregate needs the aggregate's columns named (SSV109) and
    a watermark delay (SSV105); by RANK / DENSE_RANK in an upsert_table, a unique_key (SSV130)."""
    unnamed = (
        "SELECT window_start, window_end, item, SUM(price) FROM {} GROUP BY window_start, "
        "window_end, item"
    )
    sql = TOPN.format(
        f="RANK()",
        o="PARTITION BY window_start, window_end ORDER BY item",
        tvf=f"({unnamed.format(TVF1)})",
        w="rownum <= 3",
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=SCHEMAS, watermark_delay="1 minute")
    assert info.value.code == "SSV109" and "got SUM(price)" in str(info.value)
    assert info.value.position == (1, sql.index("SUM(price)") + 1)
    over_agg = TOPN.format(
        f="ROW_NUMBER()",
        o="PARTITION BY window_start, window_end ORDER BY total",
        tvf=f"({AGG_K.format(TVF1)})",
        w="rownum <= 3",
    )
    with pytest.raises(SqlError) as info:
        compile_query(over_agg, schemas=SCHEMAS, watermark_delay=None)
    assert info.value.code == "SSV105"
    for f in ("RANK()", "DENSE_RANK()"):
        sql = TOPN.format(
            f=f, o="PARTITION BY window_start, window_end ORDER BY price", tvf=TVF1, w="rownum <= 3"
        )
        with pytest.raises(SqlError) as info:
            compile_query(
                sql, schemas=SCHEMAS, watermark_delay="1 minute", materialization="upsert_table"
            )
        assert info.value.code == "SSV130" and f"by {f}" in str(info.value)
        assert info.value.position == (1, sql.index(f) + 1)
        plan = compile_query(
            sql,
            schemas=SCHEMAS,
            watermark_delay="1 minute",
            materialization="upsert_table",
            unique_key=["window_start", "window_end", "bidtime", "item"],
        )
        assert plan.upsert.unique_key == ("window_start", "window_end", "bidtime", "item")


# --- Window joins: same windows on both sides, both bounds in ON, qualified ON columns.
JOIN_SCHEMAS = {
    "analytics.lt": {"row_time": "timestamp", "num": "int", "id": "string"},
    "analytics.rt": {"row_time": "timestamp", "num": "int", "id": "string"},
}
LT5 = "TABLE(TUMBLE(TABLE analytics.lt, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
RT5 = "TABLE(TUMBLE(TABLE analytics.rt, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
BOUNDS = "L.window_start = R.window_start AND L.window_end = R.window_end"
RT = "TABLE analytics.rt, DESCRIPTOR(row_time)"
BAD_JOINS = [
    (
        f"SELECT L.num FROM {LT5} L JOIN TABLE(TUMBLE({RT}, INTERVAL '10' MINUTES)) R ON {BOUNDS}",
        "SSV122",
        "Got: TUMBLE (size 10 minutes); Expected: TUMBLE (size 5 minutes)",
    ),
    (
        f"SELECT L.num FROM {LT5} L FULL JOIN TABLE(HOP({RT}, INTERVAL '1' MINUTE, INTERVAL '5' "
        f"MINUTES)) R ON {BOUNDS}",
        "SSV122",
        "Got: HOP (slide 1 minute, size 5 minutes",
    ),
    (
        f"SELECT L.num FROM (SELECT * FROM {LT5}) L LEFT JOIN (SELECT * FROM TABLE(TUMBLE({RT}, "
        f"INTERVAL '5' MINUTES, INTERVAL '1' MINUTE))) R ON {BOUNDS}",
        "SSV122",
        "Got: TUMBLE (size 5 minutes, offset 1 minute); Expected: TUMBLE (size 5 minutes)",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN TABLE(CUMULATE({RT}, INTERVAL '1' MINUTE, INTERVAL '5' "
        f"MINUTES)) R ON {BOUNDS}",
        "SSV122",
        "Got: CUMULATE (step 1 minute, max size 5 minutes",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R ON L.num = R.num AND L.window_start = "
        "R.window_start",
        "SSV107",
        "window join does not equate window_end",
    ),
    (
        f"SELECT L.num FROM {LT5} L RIGHT JOIN {RT5} R ON L.num = R.num AND L.window_end = "
        "R.window_end",
        "SSV107",
        "Add L.window_start = R.window_start to the ON",
    ),
    (
        f"SELECT L.num FROM (SELECT * FROM {LT5}) L FULL JOIN (SELECT * FROM {RT5}) R ON "
        "L.num = R.num",
        "SSV107",
        "does not equate window_start and window_end",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R ON L.window_start = R.window_end AND L.window_end "
        "= R.window_start",
        "SSV107",
        "window_start and window_end",
    ),
    (
        f"SELECT L.num FROM (SELECT num, window_start FROM {LT5}) L JOIN {RT5} R ON {BOUNDS}",
        "SSV107",
        "window join does not equate window_end",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R ON {BOUNDS} AND num > 1",
        "SSV123",
        "column num in the ON",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R USING (num)",
        "SSV108",
        "JOIN ... USING is not supported in a window join",
    ),
    (
        f"SELECT L.num FROM {LT5} L LEFT ANTI JOIN {RT5} R ON {BOUNDS}",
        "SSV108",
        "LEFT ANTI JOIN is not supported",
    ),
    (
        f"SELECT L.num FROM {LT5} L CROSS JOIN {RT5} R",
        "SSV108",
        "CROSS JOIN is not supported in a window join",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R ON {BOUNDS} JOIN {RT5} S ON S.num = L.num",
        "SSV108",
        "more than two inputs",
    ),
    (
        f"SELECT L.window_start, L.window_end, COUNT(*) FROM {LT5} L JOIN {RT5} R ON {BOUNDS} "
        "GROUP BY L.window_start, L.window_end",
        "SSV108",
        "aggregating the rows of a window join",
    ),
    (
        "SELECT L.num FROM TABLE(SESSION(TABLE analytics.lt, DESCRIPTOR(row_time), INTERVAL '1' "
        f"MINUTE)) L JOIN TABLE(SESSION({RT}, INTERVAL '1' MINUTE)) R ON {BOUNDS}",
        "SSV108",
        "SESSION windows",
    ),
    (
        f"SELECT L.num FROM {LT5} L JOIN (SELECT num, COUNT(*) AS n FROM {RT5} GROUP BY num) R ON "
        "L.num = R.num",
        "SSV106",
        "upsert_table",
    ),
    # Window aggregates join each other only, on both bounds, with the same windows.
    (
        f"SELECT L.num FROM {LT5} L JOIN (SELECT num, window_start, window_end, COUNT(*) AS n FROM "
        f"{RT5} GROUP BY window_start, window_end, num) R ON L.num = R.num AND {BOUNDS}",
        "SSV108",
        "a window aggregate with the rows of a window TVF",
    ),
    (
        f"SELECT L.num FROM (SELECT num, window_start, window_end, COUNT(*) AS n FROM {LT5} GROUP "
        "BY window_start, window_end, num) L JOIN (SELECT num, window_start, window_end, COUNT(*) "
        f"AS n FROM {RT5} GROUP BY window_start, window_end, num) R ON L.num = R.num AND "
        "L.window_start = R.window_start",
        "SSV107",
        "window join does not equate window_end",
    ),
    (
        f"SELECT L.num FROM (SELECT num, window_start, window_end, COUNT(*) AS n FROM {LT5} GROUP "
        "BY window_start, window_end, num) L JOIN (SELECT num, window_start, window_end, COUNT(*) "
        f"AS n FROM TABLE(TUMBLE({RT}, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, "
        f"num) R ON L.num = R.num AND {BOUNDS}",
        "SSV122",
        "Got: TUMBLE (size 10 minutes)",
    ),
]


@pytest.mark.parametrize("sql,code,text", BAD_JOINS)
def test_bad_window_join(sql, code, text):
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=JOIN_SCHEMAS, watermark_delay="1 minute")
    err = info.value
    assert err.code == code, str(err)
    assert text in str(err)
    assert err.position is not None


def test_window_join_error_positions():
    sql = (
        f"SELECT L.num\nFROM {LT5} L\nJOIN TABLE(TUMBLE({RT}, INTERVAL '10' MINUTES)) R ON {BOUNDS}"
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=JOIN_SCHEMAS, watermark_delay="1 minute")
    assert info.value.position == (3, 12)  # the right input's TVF
    sql = (
        f"SELECT L.num FROM {LT5} L JOIN {RT5} R\nON L.num = R.num AND L.window_start = "
        "R.window_start"
    )
    with pytest.raises(SqlError) as info:
        compile_query(sql, schemas=JOIN_SCHEMAS, watermark_delay="1 minute")
    assert info.value.code == "SSV107" and info.value.position == (2, 4)


def test_window_join_needs_watermark_delay():
    with pytest.raises(SqlError) as info:
        compile_query(
            f"SELECT L.num FROM {LT5} L JOIN {RT5} R ON {BOUNDS}",
            schemas=JOIN_SCHEMAS,
            watermark_delay=None,
        )
    assert info.value.code == "SSV105"


def test_window_topn_over_window_join_errors():
    """A Top-N over a window join needs a join of two window aggregates, INNER, LEFT or RIGHT
    (its rows carry the window of one side), partitioned by that side's window (SSV108), and
    every column of the join named (SSV109)."""
    rows_join = (
        "(SELECT a.item_id, a.window_start, a.window_end, a.price AS sales FROM TABLE(TUMBLE(TABLE "
        "analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES)) a JOIN TABLE(TUMBLE(TABLE "
        "analytics.orders, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES)) b ON a.item_id = "
        "b.item_id AND a.window_start = b.window_start AND a.window_end = b.window_end)"
    )
    cases = [
        (FLIP_VIEW.replace("LEFT JOIN", "FULL JOIN"), "SSV108", "INNER, LEFT or RIGHT window join"),
        (
            FLIP_VIEW.replace("a.window_start, a.window_end", "b.window_start, b.window_end"),
            "SSV108",
            "partitioned by the window of its left (RIGHT: right) side",
        ),
        (
            FLIP_VIEW.replace(
                "a.item_id, a.seller_id, a.window_start, a.window_end, a.sales, a.item_buyer_cnt",
                "a.*",
                1,
            ),
            "SSV109",
            "got a.*",
        ),
    ]
    for view, code, text in cases:
        with pytest.raises(SqlError) as info:
            compile_query(
                FLIP_TOPN.format(src=f"({view})"), schemas=ORDER_SCHEMAS, watermark_delay="1 minute"
            )
        assert info.value.code == code and text in str(info.value), str(info.value)
        assert info.value.position is not None
    with pytest.raises(SqlError) as info:
        compile_query(
            FLIP_TOPN.format(src=rows_join), schemas=ORDER_SCHEMAS, watermark_delay="1 minute"
        )
    assert info.value.code == "SSV108"
