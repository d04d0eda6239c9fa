"""Error reporting of the SQL front-end: codes, messages and positions."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query, parse_watermark_delay

SCHEMAS = {
    "analytics.bids": {"bidtime": "timestamp", "price": "double", "item": "string",
                       "day": "date"},
}
T = "TABLE analytics.bids, DESCRIPTOR(bidtime)"
AGG = "SELECT window_start, window_end, COUNT(*) AS n FROM TABLE({}) GROUP BY window_start, window_end"

BAD = [
    # (sql, code, substring of str(e))
    ("SELECT FROM WHERE", "SSV101", "does not parse"),
    ("SELECT * FROM TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime)", "SSV101", "parse"),
    ("SELECT 1; SELECT 2", "SSV101", "single SELECT"),
    ("INSERT INTO t SELECT 1", "SSV101", "single SELECT"),
    (AGG.format(f"TUMBLE({T})"), "SSV102", "missing argument(s) SIZE"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '1' MINUTE, INTERVAL '0' MINUTE, INTERVAL '1' MINUTE)"),
     "SSV102", "too many arguments"),
    (AGG.format(f"TUMBLE({T}, WIDTH => INTERVAL '1' MINUTE)"), "SSV102", "unknown named argument WIDTH"),
    (AGG.format(f"TUMBLE({T}, SIZE => INTERVAL '1' MINUTE, SIZE => INTERVAL '2' MINUTE)"),
     "SSV102", "given twice"),
    (AGG.format(f"TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE, "
                f"DATA => TABLE analytics.bids)"), "SSV102", "DATA is given twice"),
    (AGG.format("TUMBLE(DATA => TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
     "SSV102", "positional argument follows a named one"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '0' MINUTES)"), "SSV102", "positive interval"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '-5' MINUTES)"), "SSV102", "positive interval"),
    (AGG.format(f"TUMBLE({T}, 10)"), "SSV102", "interval literal"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' FORTNIGHTS)"), "SSV102", "interval literal"),
    (AGG.format("TUMBLE(analytics.bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
     "SSV102", "DATA must be TABLE <name>"),
    (AGG.format("TUMBLE(TABLE analytics.bids, bidtime, INTERVAL '1' MINUTE)"),
     "SSV102", "TIMECOL must be DESCRIPTOR"),
    (AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime, item), INTERVAL '1' MINUTE)"),
     "SSV102", "TIMECOL must be DESCRIPTOR"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' MINUTES, INTERVAL '10' MINUTES)"), "SSV102", "OFFSET"),
    (AGG.format(f"TUMBLE({T}, INTERVAL '10' MINUTES, INTERVAL '-11' MINUTES)"), "SSV102", "OFFSET"),
    (AGG.format(f"HOP({T}, INTERVAL '3' MINUTES, INTERVAL '10' MINUTES)"), "SSV102", "whole multiple"),
    (AGG.format(f"HOP({T}, INTERVAL '5' MINUTES)"), "SSV102", "missing argument(s) SIZE"),
    (AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE)"),
     "SSV103", "bidtime, price, item, day"),
    (AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(price), INTERVAL '1' MINUTE)"),
     "SSV103", "has type double"),
    (AGG.format("TUMBLE(TABLE analytics.bids, DESCRIPTOR(day), INTERVAL '1' MINUTE)"),
     "SSV103", "has type date"),
    (AGG.format("TUMBLE(TABLE analytics.asks, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)"),
     "SSV104", "analytics.asks"),
    ("SELECT item, COUNT(*) FROM analytics.bids GROUP BY item", "SSV106", "upsert_table"),
    ("SELECT COUNT(*) FROM analytics.bids", "SSV106", "upsert_table"),
    ("SELECT DISTINCT item FROM analytics.bids", "SSV106", "upsert_table"),
    (f"SELECT item, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP BY item",
     "SSV106", "materialized='upsert_table'"),
    ("SELECT item FROM analytics.bids UNION SELECT item FROM analytics.bids", "SSV106", "upsert_table"),
    (f"WITH w AS (SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE))) "
     "SELECT window_start, window_end, COUNT(*) FROM w GROUP BY window_start, window_end",
     "SSV106", "directly in this SELECT's FROM"),
    (f"SELECT window_start, window_end, COUNT(DISTINCT item) FROM TABLE(TUMBLE({T}, "
     "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end", "SSV108", "approx_count_distinct"),
    ("SELECT FROM WHERE", "SSV101", "'WHERE'"),
    (f"SELECT window_start, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP BY window_start",
     "SSV107", "window_end"),
    (f"SELECT window_end, COUNT(*) FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) GROUP BY window_end",
     "SSV107", "window_start"),
    ("SELECT * FROM analytics.bids ORDER BY price", "SSV108", "not supported yet"),
    ("SELECT * FROM analytics.bids LIMIT 10", "SSV108", "not supported yet"),
    ("SELECT item, ROW_NUMBER() OVER (PARTITION BY item ORDER BY price) FROM analytics.bids",
     "SSV108", "not supported yet"),
    (f"SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) a JOIN "
     f"TABLE(TUMBLE({T}, INTERVAL '1' MINUTE)) b ON a.item = b.item", "SSV108", "not supported yet"),
    (AGG.format(f"CUMULATE({T}, INTERVAL '1' MINUTE, INTERVAL '10' MINUTES)"), "SSV120",
     "not supported yet"),
    (AGG.format(f"SESSION({T}, INTERVAL '1' MINUTE)"), "SSV120", "not supported yet"),
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
    # upsert_table does not need one; streaming_view projections neither
    plan = compile_query(sql, schemas=SCHEMAS, watermark_delay=None, materialization="upsert_table")
    assert plan.kind == "append"
    compile_query(f"SELECT * FROM TABLE(TUMBLE({T}, INTERVAL '1' MINUTE))", schemas=SCHEMAS,
                  watermark_delay=None)


def test_error_positions():
    sql = "SELECT *\nFROM TABLE(TUMBLE(TABLE analytics.bids,\n  DESCRIPTOR(ts), INTERVAL '1' MINUTE))"
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
    [("1 minute", 60_000_000), ("30 seconds", 30_000_000), ("2 hours", 7_200_000_000),
     ("0 seconds", 0), ("500 milliseconds", 500_000), ("1 hour 30 minutes", 5_400_000_000),
     (" 10 MINUTES ", 600_000_000), ("1 day", 86_400_000_000), (None, None)],
)
def test_watermark_delay(text, us):
    assert parse_watermark_delay(text) == us


@pytest.mark.parametrize("text", ["", "soon", "1", "minute", "-1 minute", "1 fortnight", "1.5 hours"])
def test_bad_watermark_delay(text):
    with pytest.raises(SqlError) as info:
        compile_query("SELECT * FROM analytics.bids", schemas=SCHEMAS, watermark_delay=text)
    assert info.value.code == "SSV110"
    assert "watermark_delay" in str(info.value)
