"""Window SEMI / ANTI joins in the SQL front-end (sql/semijoin.py): IN / EXISTS become a window
LEFT SEMI JOIN, NOT EXISTS a LEFT window join keeping the rows without partner, NOT IN and other
forms are refused."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query

SCHEMAS = {
    "a.l": {"ts": "timestamp", "k": "bigint", "n": "bigint"},
    "a.r": {"ts": "timestamp", "k": "bigint", "m": "bigint"},
}
L = "TABLE(TUMBLE(TABLE a.l, DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
R = "TABLE(TUMBLE(TABLE a.r, DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
BOUNDS = "L.window_start = R.window_start AND L.window_end = R.window_end"
W = 1_577_875_800_000_000
BINDINGS = {"a.l": "vl", "a.r": "vr"}


def compile_(sql, **kw):
    kw.setdefault("watermark_delay", "1 minute")
    return compile_query(sql, schemas=SCHEMAS, **kw)


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT * FROM {L} WHERE (window_start, window_end, k) IN "
        f"(SELECT window_start, window_end, k FROM {R})",
        f"SELECT * FROM {L} L WHERE L.k IN (SELECT k FROM {R} R WHERE {BOUNDS})",
        f"SELECT * FROM (SELECT * FROM {L}) L WHERE EXISTS "
        f"(SELECT * FROM (SELECT * FROM {R}) R WHERE L.k = R.k AND {BOUNDS})",
    ],
)
def test_in_and_exists_become_a_window_semi_join(sql):
    plan = compile_(sql)
    assert " LEFT SEMI JOIN " in plan.spark_sql and ".__w = " in plan.spark_sql
    assert plan.spark_sql.startswith("SELECT l.ts, l.k, l.n, l.window_start") or (
        plan.spark_sql.startswith("SELECT L.ts, L.k, L.n, L.window_start")
    )
    emitted = plan.emitted_sql(BINDINGS, W)
    assert emitted.count("__w.end > __dss_late_wm") == 2  # both sides drop late rows
    assert "TIMESTAMP_MICROS" not in emitted  # matched rows are emitted at once


def test_subquery_conditions_stay_with_its_rows():
    plan = compile_(
        f"SELECT L.k FROM {L} L WHERE L.n > 1 AND EXISTS (SELECT * FROM {R} R "
        f"WHERE R.m > 5 AND L.k = R.k AND {BOUNDS})"
    )
    sql = plan.spark_sql
    assert "WHERE R.m > 5) AS R ON L.k = R.k AND L.__w = R.__w WHERE L.n > 1" in sql


def test_not_exists_is_a_left_window_join_of_rows_without_partner():
    plan = compile_(
        f"SELECT L.k, L.window_end FROM {L} L WHERE NOT EXISTS "
        f"(SELECT * FROM (SELECT * FROM {R}) R WHERE L.k = R.k AND R.m > 0 AND {BOUNDS})"
    )
    assert " LEFT JOIN " in plan.spark_sql and "WHERE R.__w IS NULL" in plan.spark_sql
    assert "WHERE m > 0" in plan.spark_sql  # the subquery's own condition, inside it
    emitted = plan.emitted_sql(BINDINGS, W)
    assert f"<= TIMESTAMP_MICROS({W})" in emitted  # emitted when its window closes


@pytest.mark.parametrize(
    "sql,code,text",
    [
        (
            f"SELECT * FROM {L} WHERE (window_start, window_end, k) NOT IN "
            f"(SELECT window_start, window_end, k FROM {R})",
            "SSV155",
            "Write NOT EXISTS",
        ),
        (f"SELECT * FROM {L} L WHERE L.k IN (SELECT k FROM {R} R)", "SSV107", "window_start"),
        (
            f"SELECT * FROM a.l WHERE k IN (SELECT k FROM {R})",
            "SSV155",
            "does not read one window TVF",
        ),
        (
            f"SELECT * FROM {L} L WHERE (window_start, k) IN (SELECT window_start FROM {R})",
            "SSV155",
            "do not pair up",
        ),
        (
            f"SELECT * FROM {L} L WHERE EXISTS (SELECT * FROM {R} R WHERE L.k = R.k AND "
            f"{BOUNDS}) AND EXISTS (SELECT * FROM {R} R WHERE {BOUNDS})",
            "SSV155",
            "two window SEMI / ANTI subqueries",
        ),
        (
            f"SELECT * FROM {L} L WHERE EXISTS (SELECT * FROM TABLE(HOP(TABLE a.r, "
            f"DESCRIPTOR(ts), INTERVAL '1' MINUTES, INTERVAL '5' MINUTES)) R WHERE {BOUNDS})",
            "SSV122",
            "different windows",
        ),
    ],
)
def test_refused(sql, code, text):
    with pytest.raises(SqlError) as err:
        compile_(sql)
    assert err.value.code == code and text in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM a.l WHERE k IN (SELECT k FROM a.r)",
        "SELECT * FROM a.l L WHERE EXISTS (SELECT 1 FROM a.r R WHERE R.k = L.k)",
        "SELECT * FROM a.l L WHERE NOT EXISTS (SELECT 1 FROM a.r R WHERE R.k = L.k)",
        "SELECT * FROM (SELECT * FROM a.l) x WHERE k NOT IN (SELECT k FROM a.r)",
    ],
)
def test_a_subquery_of_two_streams_without_window_is_unbounded_state(sql):
    with pytest.raises(SqlError) as err:
        compile_(sql)
    assert err.value.code == "SSV150" and "subquery" in str(err.value)
    compile_(sql, dimensions=["a.r"])  # the subquery reads a table: no state
