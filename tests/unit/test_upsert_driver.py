"""The driver-side MERGE of small upsert batches (delta/upsert_driver.py) in Arrow alone: key
matching as Spark's <=> (NULL and NaN keys), the last row of a repeated key, the changes and
the rewritten rows; and config `driver_merge_max_rows`."""

import pyarrow as pa
import pytest

from dbt.adapters.spark_streaming.delta.upsert_driver import (
    KEEP,
    SEQ,
    Merge,
    bounds,
    last_per_key,
)
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.upsert import driver_merge_rows

SCHEMA = pa.schema([("k", pa.string()), ("f", pa.float64()), ("v", pa.int64())])


def new_rows(rows, keep=None):
    t = pa.table({n: [r[i] for r in rows] for i, n in enumerate(SCHEMA.names)}, schema=SCHEMA)
    return t.append_column(KEEP, pa.array(keep or [True] * len(rows), pa.bool_()))


def test_merge_changes_and_rewritten_rows():
    nan = float("nan")
    files = ["f0", "f1", "f2"]
    contents = [
        pa.table({"k": ["a", None], "f": [1.0, nan], "v": [1, 2]}, schema=SCHEMA),
        pa.table({"k": ["b", "c"], "f": [nan, 2.0], "v": [3, 4]}, schema=SCHEMA),
        pa.table({"k": ["z"], "f": [0.0], "v": [9]}, schema=SCHEMA),
    ]
    # NULL key updated, (b, NaN) unchanged, c deleted (HAVING), d inserted; z's file untouched
    new = new_rows(
        [(None, nan, 20), ("b", nan, 3), ("c", 2.0, 4), ("d", 1.0, 5)], [True, True, False, True]
    )
    merge = Merge(new, files, contents, SCHEMA, ["k"])
    assert merge.count() == 4 and merge.touched() == ["f0", "f1"]
    extra = {"_batch_id": pa.array([7] * 4, pa.int64())}
    changes = sorted(
        ((r["k"], r["v"], r["_op"], r["_batch_id"]) for r in merge.changes(extra).to_pylist()),
        key=str,
    )
    assert changes == sorted(
        [(None, 2, "-U", 7), (None, 20, "+U", 7), ("c", 4, "-D", 7), ("d", 5, "+I", 7)], key=str
    )
    rows = sorted(((r["k"], r["v"]) for r in merge.rewritten().to_pylist()), key=str)
    assert rows == sorted([("a", 1), ("b", 3), (None, 20), ("d", 5)], key=str)


def test_float_keys_match_nan_and_the_last_row_wins():
    schema = pa.schema([("x", pa.float64()), ("v", pa.int64())])
    batch = pa.table(
        {
            "x": [float("nan"), 1.0, float("nan"), 1.0],
            "v": [1, 2, 3, 4],
            KEEP: [True] * 4,
            SEQ: [3, 0, 2, 1],
        }
    )
    last = last_per_key(batch, ["x"])  # in SEQ order: (1, 2), (1, 4), (nan, 3), (nan, 1)
    assert sorted(last.column("v").to_pylist()) == [1, 4]
    current = [pa.table({"x": [float("nan")], "v": [1]}, schema=schema)]
    merge = Merge(last, ["f"], current, schema, ["x"])
    assert merge.count() == 1 and merge.touched() == []  # NaN's row unchanged, 1.0 inserted
    b = bounds(last, ["x"])
    assert b.column("rows")[0].as_py() == 2 and b.column("nulls_x")[0].as_py() == 0


def test_driver_merge_max_rows_config():
    assert driver_merge_rows({}) == 100_000
    assert driver_merge_rows({"driver_merge_max_rows": 0}) == 0
    for bad in (-1, "10", True, 1.5):
        with pytest.raises(StreamingError, match="SSC201"):
            driver_merge_rows({"driver_merge_max_rows": bad})
