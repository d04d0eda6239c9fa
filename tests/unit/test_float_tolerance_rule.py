"""The float tolerance of snapshot_equivalence (runtime/equivalence.py `within`; `_close` is the
same rule in Spark, exercised by tests/functional/test_float_tolerance.py)."""

from dbt.adapters.spark_streaming.runtime.equivalence import within


def test_within_rule():
    assert within(2036.76, 2036.7600000000002, 1e-9, 1e-12)
    assert not within(2036.76, 2036.77, 1e-9, 1e-12)
    assert within(0.0, 1e-13, 1e-9, 1e-12) and not within(0.0, 1e-11, 1e-9, 1e-12)
    assert within(float("nan"), float("nan"), 1e-9, 1e-12)
    assert not within(float("nan"), 1.0, 1e-9, 1e-12)
    assert within(float("inf"), float("inf"), 1e-9, 1e-12)
    assert not within(float("inf"), -float("inf"), 1e-9, 1e-12)
    assert not within(float("inf"), 1e300, 1e-9, 1e-12)
    assert within(None, None, 1e-9, 1e-12) and not within(None, 0.0, 1e-9, 1e-12)
    assert not within(1.0, 1.0 + 1e-15, 0, 0) and within(1.0, 1.0, 0, 0)
