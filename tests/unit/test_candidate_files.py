"""The files an upsert_table's batch reads (delta/upsert.py candidate_files), on tables written
by delta-rs: statistics that Delta writers round (timestamps to milliseconds) or leave out (NaN)
never rule out a file that holds a key of the batch."""

import datetime as dt

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta.upsert import candidate_files

UTC = dt.timezone.utc


def bounds(column: str, lo, hi, type_) -> pa.Table:
    return pa.table(
        {
            "rows": [1],
            f"min_{column}": pa.array([lo], type_),
            f"max_{column}": pa.array([hi], type_),
            f"nulls_{column}": [0],
        }
    )


def test_a_timestamp_above_the_truncated_max_still_matches(tmp_path):
    key = dt.datetime(2020, 1, 1, 0, 0, 0, 123456, UTC)
    ts = pa.timestamp("us", tz="UTC")
    write_deltalake(str(tmp_path), pa.table({"t": pa.array([key], ts), "n": [1]}))
    table = DeltaTable(str(tmp_path))
    (action,) = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert action["max.t"] < key  # delta-rs keeps milliseconds
    assert candidate_files(table, bounds("t", key, key, ts), ["t"]) == [action["path"]]
    later = key + dt.timedelta(milliseconds=1)
    assert candidate_files(table, bounds("t", later, later, ts), ["t"]) == []


def test_float_keys_are_not_pruned(tmp_path):
    """Spark's max of {1.0, NaN} is NaN, which compares with nothing; files' statistics leave NaN
    out. Float keys read every file."""
    write_deltalake(str(tmp_path), pa.table({"x": [1.0, float("nan")], "n": [1, 2]}))
    write_deltalake(str(tmp_path), pa.table({"x": [5.0], "n": [3]}), mode="append")
    table = DeltaTable(str(tmp_path))
    nan = float("nan")
    assert len(candidate_files(table, bounds("x", 1.0, nan, pa.float64()), ["x"])) == 2
    assert len(candidate_files(table, bounds("x", 7.0, 9.0, pa.float64()), ["x"])) == 2
