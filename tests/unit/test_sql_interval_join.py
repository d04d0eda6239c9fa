"""Interval joins in the SQL front-end (sql/intervaljoin.py, sql/oracle.py): the rewrite, Spark's
state thresholds, the oracle's emitted rows, and what is refused."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query
from dbt.adapters.spark_streaming.sql.intervaljoin import state_threshold_us

SCHEMAS = {
    "a.orders": {"id": "bigint", "ts": "timestamp", "amount": "bigint", "note": "string"},
    "a.ships": {"orderid": "bigint", "ts": "timestamp", "at": "timestamp"},
}
HOUR_US = 3_600_000_000
W = 1_577_875_800_000_000  # 2020-01-01 10:50 UTC, in microseconds
KEY = "o.id = s.orderid"


def compile_(on: str, kind: str = "", select: str = "o.id, s.ts AS ship_ts", **kw):
    kw.setdefault("watermark_delay", "10 minutes")
    return compile_query(
        f"SELECT {select} FROM a.orders o {kind} JOIN a.ships s ON {on}", schemas=SCHEMAS, **kw
    )


BINDINGS = {"a.orders": "vo", "a.ships": "vs"}


@pytest.mark.parametrize(
    "bound",
    [
        "s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR",
        "s.ts >= o.ts AND s.ts <= o.ts + INTERVAL '1' HOUR",
        "o.ts <= s.ts AND o.ts >= s.ts - INTERVAL '60' MINUTES",
        "s.ts - INTERVAL 1 HOUR <= o.ts AND (s.ts >= o.ts)",
    ],
)
def test_spellings_compile_to_a_watermarked_join(bound):
    plan = compile_(f"{KEY} AND {bound}", "LEFT")
    sql = plan.spark_sql
    assert "(SELECT * FROM a.orders WATERMARK ts DELAY OF INTERVAL '600' SECONDS) AS o" in sql
    assert "(SELECT * FROM a.ships WATERMARK ts DELAY OF INTERVAL '600' SECONDS) AS s" in sql
    assert plan.kind == "append"
    # The left side leaves the state at W - 1 hour - 1 ms: the oracle's unmatched-row rule.
    emitted = plan.emitted_sql(BINDINGS, W)
    assert f"o.ts <= TIMESTAMP_MICROS({W - HOUR_US - 1000})" in emitted
    assert "NOT COALESCE(ts <= __dss_late_wm, FALSE)" in emitted


def test_state_thresholds_follow_spark():
    # <= bound: W + c - 1 ms; < bound: W + c; the lowest bound wins; W + c truncated to ms.
    assert state_threshold_us(W, [(-HOUR_US, False)]) == W - HOUR_US - 1000
    assert state_threshold_us(W, [(-HOUR_US, True)]) == W - HOUR_US
    assert state_threshold_us(W, [(0, True), (-HOUR_US, False)]) == W - HOUR_US - 1000
    assert state_threshold_us(W + 999, [(1500, True)]) == W + 1000


def test_star_is_expanded_and_inner_emits_every_pair():
    plan = compile_(f"{KEY} AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR", select="o.*, s.at")
    assert plan.spark_sql.startswith("SELECT o.id, o.ts, o.amount, o.note, s.at FROM")
    emitted = plan.emitted_sql(BINDINGS, W)
    assert "__dss_present" in emitted and "TIMESTAMP_MICROS" not in emitted
    late = plan.late_rows_sql(BINDINGS)
    assert len(late) == 2 and all("ts <= __dss_late_wm" in q for q in late)


def test_full_join_thresholds_both_sides_and_hides_one_sided_comparisons():
    plan = compile_(
        f"{KEY} AND s.ts BETWEEN o.ts - INTERVAL '1' DAY AND o.ts + INTERVAL '2' DAY "
        "AND o.amount > 10",
        "FULL",
    )
    # Spark would solve `o.amount > 10` for a constant state threshold (rows kept forever).
    assert "COALESCE(o.amount > 10, FALSE)" in plan.spark_sql
    assert "NOT o.id IS NULL AND NOT s.orderid IS NULL" in plan.spark_sql
    emitted = plan.emitted_sql(BINDINGS, W)
    assert f"o.ts <= TIMESTAMP_MICROS({W - 2 * 24 * HOUR_US - 1000})" in emitted
    assert f"s.ts <= TIMESTAMP_MICROS({W - 24 * HOUR_US - 1000})" in emitted


def test_inner_join_bound_in_where():
    plan = compile_query(
        "SELECT o.id FROM a.orders o JOIN a.ships s ON o.id = s.orderid "
        "WHERE s.ts > o.ts AND s.ts < o.ts + INTERVAL '30' MINUTES",
        schemas=SCHEMAS,
        watermark_delay="1 minute",
    )
    assert "WATERMARK ts" in plan.spark_sql


@pytest.mark.parametrize(
    "on,kind,code,text",
    [
        (KEY, "", "SSV150", "s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR"),
        (f"{KEY} AND s.ts >= o.ts", "LEFT", "SSV150", "Bound the event times"),
        (f"{KEY} AND s.ts > o.ts + INTERVAL '1' HOUR", "", "SSV150", "time bound"),
        ("s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR", "", "SSV154", "no equality"),
        (f"{KEY} AND s.at BETWEEN o.ts AND s.ts", "", "SSV150", "time bound"),
        (
            f"{KEY} AND s.ts >= o.ts AND s.at <= o.ts + INTERVAL '1' HOUR",
            "",
            "SSV154",
            "two columns of s: ts and at",
        ),
        (f"{KEY} AND s.ts BETWEEN o.note AND o.note", "", "SSV154", "not a timestamp column"),
        (
            f"{KEY} AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR AND amount > 1",
            "LEFT",
            "SSV154",
            "amount in the ON of an interval join is not qualified",
        ),
    ],
)
def test_refused(on, kind, code, text):
    with pytest.raises(SqlError) as err:
        compile_(on, kind)
    assert err.value.code == code and text in str(err.value), str(err.value)


def test_refused_as_upsert_table_and_without_watermark_delay():
    on = f"{KEY} AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR"
    with pytest.raises(SqlError) as err:
        compile_(on, materialization="upsert_table")
    assert err.value.code == "SSV153" and "streaming_view" in str(err.value)
    with pytest.raises(SqlError) as err:
        compile_(on, watermark_delay=None)
    assert err.value.code == "SSV105" and "interval join" in str(err.value)
