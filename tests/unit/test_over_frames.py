"""The OVER operator (runtime/over.py) without Spark: the unbounded frames' accumulators, and
what the operator of a RANGE or ROWS frame outputs per call (the due rows after the kept rows
their frames may reach), driven through a stand-in for Spark's GroupState."""

import math
import pickle
from statistics import pstdev, pvariance, stdev, variance

import pandas as pd
import pytest
from groupstate import State
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    FloatType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dbt.adapters.spark_streaming.runtime import failures
from dbt.adapters.spark_streaming.runtime.exact import reader, writer
from dbt.adapters.spark_streaming.runtime.over import ROW, _emit, _empty, _keep, _operator
from dbt.adapters.spark_streaming.sql import compile_query
from dbt.adapters.spark_streaming.sql.over import RANGE, ROWS, UNBOUNDED_RANGE, UNBOUNDED_ROWS


def rows(*pairs, aggregates=1):
    """(time, arrival, row, (argument,)) as the operator holds them; each argument the value."""
    return [(t, i, (t,), (v,) * aggregates) for i, (t, v) in enumerate(pairs)]


def sums(out):
    return [(r[0], res[0]) for r, res in out]


def test_unbounded_accumulates_across_calls():
    accs = [_empty("min"), _empty("max")]
    out = _emit(rows((1, 4), (2, 2), aggregates=2), accs, UNBOUNDED_ROWS, ["min", "max"])
    assert [res for _, res in out] == [[4, 4], [2, 4]]
    out = _emit(rows((3, 7), aggregates=2), accs, UNBOUNDED_ROWS, ["min", "max"])
    assert [res for _, res in out] == [[2, 7]]


def test_unbounded_range_gives_peers_the_same_result():
    out = _emit(rows((1, 1), (2, 2), (2, 3)), [_empty("sum")], UNBOUNDED_RANGE, ["sum"])
    assert sums(out) == [(1, 1), (2, 6), (2, 6)]
    nan = _emit(
        rows((1, 2.0), (2, float("nan")), (3, None)), [_empty("sum")], UNBOUNDED_ROWS, ["sum"]
    )
    assert sums(nan)[0] == (1, 2.0) and all(math.isnan(s) for _, s in sums(nan)[1:])  # as Spark


def test_min_and_max_order_nan_above_every_number_as_spark():
    values = [(1, 3.0), (2, float("nan")), (3, -1.0), (4, None)]
    out = _emit(rows(*values, aggregates=2), [_empty("min"), _empty("max")], UNBOUNDED_ROWS,
                ["min", "max"])  # fmt: skip
    assert [res[0] for _, res in out] == [3.0, 3.0, -1.0, -1.0]
    assert [res[1] == 3.0 or math.isnan(res[1]) for _, res in out] == [True] * 4
    assert math.isnan(out[-1][1][1])


def test_values_cross_pandas_unchanged():
    """A BIGINT beyond 2**53 beside a NULL, and NaN, infinities and -0.0, through the carried
    struct (runtime/exact.py), as the operator's rows go."""
    schema = StructType(
        [
            StructField("big", LongType()),
            StructField("d", DoubleType()),
            StructField("f", FloatType()),
        ]
    )
    values = [
        (2**62 + 1, float("nan"), 0.1),
        (None, float("-inf"), None),
        (-(2**62) - 1, -0.0, 3.5),
    ]
    write, read = writer(schema), reader(schema)
    packed = pd.DataFrame({"r": [write(v) for v in values]})["r"].tolist()
    assert packed[0] == {"big": 2**62 + 1, "d": "nan", "f": "0.1"}
    back = [tuple(read(p).values()) for p in packed]
    assert repr(back) == repr(values)


@pytest.mark.parametrize(
    "function, statistic",
    [
        ("stddev_samp", stdev),
        ("stddev_pop", pstdev),
        ("var_samp", variance),
        ("var_pop", pvariance),
    ],
)
def test_unbounded_variance_family_is_welfords(function, statistic):
    values = [4, 2, None, 7.5, 1]
    out = _emit(rows(*enumerate(values)), [_empty(function)], UNBOUNDED_ROWS, [function])
    got = [res[0] for _, res in out]
    seen = [v for v in values if v is not None]
    assert got[0] is None or function.endswith("_pop")  # a sample of one row has none
    for i, n in ((1, 2), (2, 2), (3, 3), (4, 4)):  # after i rows, n non-null values
        assert math.isclose(got[i], statistic(seen[:n]), abs_tol=1e-12), (i, got[i])


def test_unbounded_count_if_and_bools():
    flags = [True, None, False, True]
    fns = ["count_if", "bool_and", "bool_or"]
    accs = [_empty(f) for f in fns]
    out = _emit(rows(*enumerate(flags), aggregates=3), accs, UNBOUNDED_ROWS, fns)
    assert [res for _, res in out] == [
        [1, True, True], [1, True, True], [1, False, True], [2, False, True],
    ]  # fmt: skip


def test_keep_holds_what_later_frames_reach():
    held = rows((0, 1), (5, 2), (12, 5))
    assert _keep(held, RANGE, 10) == held[1:]  # 12 - 10 = 2: the row at 0 leaves
    assert _keep(held, ROWS, 2) == held[-2:] and _keep(held, ROWS, 0) == []


def framed(frame: str):
    schemas = {"a.ev": {"ts": "timestamp", "k": "string", "v": "int"}}
    plan = compile_query(
        f"SELECT k, ts, STDDEV(v) OVER (PARTITION BY k ORDER BY ts {frame}) AS s FROM a.ev",
        schemas=schemas,
        watermark_delay="1 second",
    )
    assert plan.spark_sql.startswith("SELECT k AS __dss_p0"), plan.spark_sql
    out = StructType(
        SOURCE.fields
        + [StructField("__dss_seq", LongType()), StructField("__dss_emit", BooleanType())]
    )
    return plan.over, out


SOURCE = StructType(  # the operator's input rows (sql/over.py) of the query in framed()
    [
        StructField("__dss_p0", StringType()),
        StructField("__dss_time_us", LongType()),
        StructField("__dss_event_time", TimestampType()),
        StructField("__dss_c0", StringType()),
        StructField("__dss_a4", LongType()),
    ]
)


def packed(events) -> pd.DataFrame:
    """The operator's input: (time in ms, value) events of key 'a', packed."""
    write = writer(SOURCE)
    return pd.DataFrame({ROW: [write(("a", t * 1000, None, "a", v)) for t, v in events]})


def call(operator, state, events):
    """One call with (time in ms, value) events of key 'a'; its output as (time ms, value, seq,
    emit) rows."""
    out = list(operator(("a",), iter([packed(events)]), state))
    if not out:
        return []
    return [
        (r["__dss_time_us"] // 1000, r["__dss_a4"], r["__dss_seq"], r["__dss_emit"])
        for r in out[0][ROW].tolist()
    ]


def test_a_range_frame_outputs_due_rows_after_the_kept_rows_they_reach():
    spec, out = framed("RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW")
    assert spec.frame_items[-1] == "__dss_emit"
    assert "RANGE BETWEEN 10000000 PRECEDING" in spec.frame_items[2]
    operator = _operator(spec, SOURCE, out, framed=True)
    state = State(watermark_ms=0)
    assert call(operator, state, [(5000, 2), (1000, 1), (30000, 9)]) == []  # none due
    assert state.timeout == 999  # the earliest pending row's time, less one ms
    state.watermark_ms = 12000
    assert call(operator, state, [(12000, 3)]) == [
        (1000, 1, 1, True), (5000, 2, 0, True), (12000, 3, 3, True),
    ]  # fmt: skip
    state.watermark_ms = 30000
    # the kept rows go with the due one; its frame (from 20 s) leaves them out
    assert call(operator, state, []) == [(5000, 2, 0, False), (12000, 3, 3, False),
                                         (30000, 9, 2, True)]  # fmt: skip
    pending, kept, _, _, _ = pickle.loads(state.get[0])
    assert pending == [] and [r[0] for r in kept] == [30_000_000]


def test_a_rows_frame_keeps_the_last_n_rows():
    spec, out = framed("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW")
    assert "ORDER BY __dss_time_us NULLS LAST, __dss_seq" in spec.frame_items[2]
    operator = _operator(spec, SOURCE, out, framed=True)
    state = State(watermark_ms=10000)
    assert call(operator, state, [(2000, 2), (1000, 1)]) == [(1000, 1, 1, True),
                                                              (2000, 2, 0, True)]  # fmt: skip
    state.watermark_ms = 20000
    assert call(operator, state, [(15000, 5)]) == [(2000, 2, 0, False), (15000, 5, 2, True)]


def test_state_of_the_layout_before_is_refused_for_bounded_frames():
    """A bounded frame's record held other rows before LAYOUT (its query then fails as SSR324,
    naming --full-refresh); an unbounded frame's is the same and goes on."""
    spec, out = framed("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW")
    operator = _operator(spec, SOURCE, out, framed=True)
    state = State(watermark_ms=10000)
    state.update((pickle.dumps(([], [(1_000_000, 0, ("a",), (1,))], [_empty("sum")], 1)),))
    with pytest.raises(RuntimeError) as info:
        call(operator, state, [(2000, 2)])
    error = failures.query_failed("m", "model.p.m", "/ckpt", f"PythonException: {info.value}")
    assert error.code == "SSR324" and "--full-refresh -s m" in str(error)
    running = compile_query(
        "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS s "
        "FROM a.ev",
        schemas={"a.ev": {"ts": "timestamp", "k": "string", "v": "int"}},
        watermark_delay="1 second",
    ).over
    result = StructType([StructField("k", StringType()), StructField("s", LongType())])
    operator = _operator(running, SOURCE, result, framed=False)
    state.update((pickle.dumps(([], [], [[2, 5, 1, 4]], 2)),))  # two rows summed to 5 before
    assert call_running(operator, state, [(2000, 3)]) == [("a", 8)]
    assert pickle.loads(state.get[0])[-1] == 3  # written in this layout


def call_running(operator, state, events):
    out = list(operator(("a",), iter([packed(events)]), state))
    return [tuple(r.values()) for r in out[0][ROW].tolist()]
