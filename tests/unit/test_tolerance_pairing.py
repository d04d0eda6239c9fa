"""float_tolerance of snapshot_equivalence: differing rows pair up only when every non-float
value is equal and every float is within the tolerance (runtime/equivalence.py)."""

from dbt.adapters.spark_streaming.runtime.equivalence import _pair_within_tolerance


def test_pairs_within_tolerance_only():
    missing = [{"k": "a", "x": 1.0}, {"k": "b", "x": 2.0}, {"k": "c", "x": None}]
    unexpected = [{"k": "a", "x": 1.0 + 1e-12}, {"k": "b", "x": 2.1}, {"k": "c", "x": None}]
    left, right = _pair_within_tolerance(missing, unexpected, ["x"], 1e-9)
    assert left == [{"k": "b", "x": 2.0}] and right == [{"k": "b", "x": 2.1}]


def test_non_float_columns_must_be_equal_and_each_row_pairs_once():
    missing = [{"k": "a", "x": 1.0}, {"k": "a", "x": 1.0}]
    unexpected = [{"k": "A", "x": 1.0}, {"k": "a", "x": 1.0}]
    left, right = _pair_within_tolerance(missing, unexpected, ["x"], 0.5)
    assert left == [{"k": "a", "x": 1.0}] and right == [{"k": "A", "x": 1.0}]
