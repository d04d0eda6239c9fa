"""The float tolerance of snapshot_equivalence (runtime/tolerance.py): the rule `within` (`_close`
is the same rule in Spark, exercised by tests/functional/test_float_tolerance.py) and the
greedy second pairing of the rows the Spark pass left."""

from dbt.adapters.spark_streaming.runtime.tolerance import _lines, pair_rows, within

NAN, INF = float("nan"), float("inf")


def test_within_rule():
    assert within(2036.76, 2036.7600000000002, 1e-9, 1e-12)
    assert not within(2036.76, 2036.77, 1e-9, 1e-12)
    assert within(1e9, 1e9 * (1 + 5e-10), 1e-9, 1e-12) and not within(1e9, 1e9 + 2, 1e-9, 1e-12)
    assert within(0.0, 1e-13, 1e-9, 1e-12) and not within(0.0, 1e-11, 1e-9, 1e-12)  # the floor
    assert within(0.0, -0.0, 0, 0)
    assert within(NAN, NAN, 1e-9, 1e-12) and not within(NAN, 1.0, 1e-9, 1e-12)
    assert within(INF, INF, 1e-9, 1e-12) and within(-INF, -INF, 0, 0)
    assert not within(INF, -INF, 1e-9, 1e-12) and not within(INF, 1e308, 1e-9, 1e-12)
    assert within(None, None, 1e-9, 1e-12) and not within(None, 0.0, 1e-9, 1e-12)
    assert not within(0.0, None, 1, 1) and not within(None, NAN, 1, 1)
    assert not within(1.0, 1.0 + 1e-15, 0, 0) and within(1.0, 1.0, 0, 0)  # 0: exact


def test_pair_rows_greedy_within_groups():
    # (key, total, mean): the sorted orders of two float columns need not line up
    missing = [("a", 100.0, 3.0), ("a", 100.00000000000003, 5.0), ("b", 1.0, None), ("c", 1.0, 1.0)]
    unexpected = [("a", 100.00000000000001, 5.0), ("a", 100.00000000000002, 3.0), ("b", 1.0, None)]
    unexpected += [("C", 1.0, 1.0)]
    left, right, pairs = pair_rows(missing, unexpected, {1, 2}, 1e-9, 1e-12)
    assert left == [("c", 1.0, 1.0)] and right == [("C", 1.0, 1.0)] and len(pairs) == 3
    # each row pairs once; beyond the tolerance nothing pairs
    left, right, pairs = pair_rows([("a", 1.0)] * 2, [("a", 1.0 + 1e-12)], {1}, 1e-9, 1e-12)
    assert left == [("a", 1.0)] and right == [] and len(pairs) == 1
    left, right, pairs = pair_rows([("a", 1.0)], [("a", 1.001)], {1}, 1e-9, 1e-12)
    assert (left, right, pairs) == ([("a", 1.0)], [("a", 1.001)], [])


def test_lines_name_the_column_and_the_difference():
    lines = _lines([("a", 10.0, 1.0)], [("a", 10.5, 1.0)], ["item", "total", "n"], {1, 2}, 1e-9, 0)
    assert lines == [
        "total (item a): 10.0 from the batch query, 10.5 in the table: differs by 0.5 "
        "(relative 0.0476), beyond the tolerance (relative 1e-09, absolute 0)"
    ]
    assert _lines([("a", None)], [("a", 1.0)], ["item", "x"], {1}, 1e-9, 0) == [
        "x (item a): None from the batch query, 1.0 in the table"
    ]
