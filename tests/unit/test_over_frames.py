"""The OVER operator's frame arithmetic (runtime/over.py), without Spark: rows are (time,
arrival, row, (argument,)) as the operator holds them."""

from dbt.adapters.spark_streaming.runtime.over import _emit, _empty, _keep
from dbt.adapters.spark_streaming.sql.over import RANGE, ROWS, UNBOUNDED_RANGE, UNBOUNDED_ROWS


def rows(*pairs, aggregates=1):
    """Each aggregate's argument is the row's value."""
    return [(t, i, (t,), (v,) * aggregates) for i, (t, v) in enumerate(pairs)]


def sums(out):
    return [(r[0], res[0]) for r, res in out]


def test_range_includes_peers_and_its_lower_bound():
    ready = rows((0, 1), (5, 2), (5, 3), (12, 5), (15, 6))
    assert sums(_emit(ready, [], None, RANGE, 10, ["sum"])) == [
        (0, 1), (5, 6), (5, 6), (12, 10), (15, 16)
    ]  # fmt: skip


def test_range_continues_from_kept_rows():
    first, second = rows((0, 1), (5, 2)), [(12, 9, (12,), (5,))]
    kept = _keep(first, RANGE, 10)
    assert sums(_emit(second, kept, None, RANGE, 10, ["sum"])) == [(12, 7)]
    assert _keep(kept + second, RANGE, 10) == [first[1], second[0]]


def test_rows_takes_the_last_n_and_count_skips_nulls():
    ready = rows((1, 1), (2, None), (3, 3), (4, 4), aggregates=3)
    out = _emit(ready, [], None, ROWS, 2, ["sum", "count", "avg"])
    assert [res for _, res in out] == [[1, 1, 1.0], [1, 1, 1.0], [4, 2, 2.0], [7, 2, 3.5]]
    assert _keep(ready, ROWS, 2) == ready[-2:] and _keep(ready, ROWS, 0) == []


def test_unbounded_accumulates_across_calls():
    accs = [_empty(), _empty()]
    out = _emit(rows((1, 4), (2, 2), aggregates=2), [], accs, UNBOUNDED_ROWS, None, ["min", "max"])
    assert [res for _, res in out] == [[4, 4], [2, 4]]
    out = _emit(rows((3, 7), aggregates=2), [], accs, UNBOUNDED_ROWS, None, ["min", "max"])
    assert [res for _, res in out] == [[2, 7]]


def test_unbounded_range_gives_peers_the_same_result():
    out = _emit(rows((1, 1), (2, 2), (2, 3)), [], [_empty()], UNBOUNDED_RANGE, None, ["sum"])
    assert sums(out) == [(1, 1), (2, 6), (2, 6)]
    nan = _emit(rows((1, float("nan"))), [], [_empty()], UNBOUNDED_ROWS, None, ["sum"])
    assert sums(nan) == [(1, None)]  # pandas gives a NULL double as NaN
