"""The executor side of a write (delta/writer.py: one Parquet file per task, its Delta stats)
and the driver side (delta/sink.py: the commits of those files), without Spark."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta.sink import (
    append_files,
    batch_prefix,
    remove_orphans,
    replace_files,
)
from dbt.adapters.spark_streaming.delta.writer import FileWriter

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("x", pa.float64()), ("ts", pa.timestamp("us"))]
)


def batch(ids, names, xs) -> pa.RecordBatch:
    # upper-case names and int32 ids: the writer matches names case-insensitively and casts;
    # no `ts` column: the writer fills it with NULLs
    return pa.RecordBatch.from_pydict(
        {"ID": pa.array(ids, pa.int32()), "name": names, "x": pa.array(xs, pa.float64())}
    )


def write(location, batches, prefix="part-00007-") -> list[dict]:
    out = list(FileWriter(str(location), SCHEMA, prefix)(iter(batches)))
    return [row for b in out for row in b.to_pylist()]


def test_a_task_writes_one_file_with_its_rows_and_delta_stats(tmp_path):
    files = write(
        tmp_path,
        [batch([3, 1], ["c", None], [1.5, 2.5]), batch([], [], []), batch([9], ["a"], [-1.0])],
    )
    assert len(files) == 1 and files[0]["rows"] == 3
    name = files[0]["path"]
    assert name.startswith("part-00007-00000-") and name.endswith(".snappy.parquet")
    assert files[0]["size"] == os.path.getsize(tmp_path / name)
    table = pq.read_table(tmp_path / name)
    assert table.schema == SCHEMA
    assert table.to_pydict() == {
        "id": [3, 1, 9],
        "name": ["c", None, "a"],
        "x": [1.5, 2.5, -1.0],
        "ts": [None, None, None],
    }
    assert json.loads(files[0]["stats"]) == {
        "numRecords": 3,
        "minValues": {"id": 1, "name": "a", "x": -1.0},
        "maxValues": {"id": 9, "name": "c", "x": 2.5},
        "nullCount": {"id": 0, "name": 1, "x": 0, "ts": 3},
    }


def test_an_empty_partition_writes_no_file(tmp_path):
    assert write(tmp_path, [batch([], [], [])]) == []
    assert os.listdir(tmp_path) == []


def test_non_finite_bounds_are_left_out_of_the_stats(tmp_path):
    (f,) = write(tmp_path, [batch([1], ["a"], [1.0]), batch([2], ["b"], [float("inf")])])
    stats = json.loads(f["stats"])
    assert "x" not in stats["minValues"] and "x" not in stats["maxValues"]
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 2


def test_append_replace_and_orphans(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([0], pa.int64())}))
    # an overwrite with another schema replaces the table in one commit, keeping its properties
    first = write(path, [batch([1, 2], ["a", "b"], [1.0, 2.0])], prefix="part-aaaa-")
    replace_files(path, first, SCHEMA)
    dt = DeltaTable(path)
    assert dt.version() == 1 and dt.schema().to_arrow() == SCHEMA
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == [1, 2]
    # the same schema: an overwrite transaction
    second = write(path, [batch([5], ["e"], [5.0])], prefix="part-bbbb-")
    replace_files(path, second, SCHEMA)
    assert DeltaTable(path).to_pyarrow_table()["id"].to_pylist() == [5]
    # a micro-batch: an attempt that crashed left a file; the replay's commit deletes it
    crashed = write(path, [batch([6], ["f"], [6.0])], prefix=batch_prefix(3))
    replay = write(path, [batch([6], ["f"], [6.0])], prefix=batch_prefix(3))
    other = write(path, [batch([7], ["g"], [7.0])], prefix=batch_prefix(4))
    assert remove_orphans(path, batch_prefix(3), {replay[0]["path"]}) == [crashed[0]["path"]]
    append_files(path, replay, SCHEMA, CommitProperties())
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == [5, 6]
    on_disk = {n for n in os.listdir(path) if n.endswith(".parquet")}
    assert {replay[0]["path"], other[0]["path"], second[0]["path"]} <= on_disk
    assert crashed[0]["path"] not in on_disk
    # a file the table references is never an orphan, whatever its name
    assert remove_orphans(path, batch_prefix(3), set()) == []
    assert remove_orphans(path, batch_prefix(4), set()) == [other[0]["path"]]


def test_dates_and_timestamps_get_statistics_rounded_outwards(tmp_path):
    """Delta keeps timestamps at millisecond precision: the min is rounded down and the max up,
    so that the bounds still hold for microsecond values (delta-rs reads them back typed)."""
    import datetime as dt

    utc = dt.timezone.utc
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("d", pa.date32())])
    rows = pa.RecordBatch.from_pydict(
        {
            "t": [
                dt.datetime(2020, 1, 1, 0, 0, 0, 1500, utc),
                dt.datetime(2020, 1, 2, 0, 0, 0, 2500, utc),
            ],
            "d": [dt.date(2020, 1, 1), dt.date(2021, 3, 4)],
        },
        schema=schema,
    )
    (written,) = [
        r for b in FileWriter(str(tmp_path), schema, "p-")(iter([rows])) for r in b.to_pylist()
    ]
    stats = json.loads(written["stats"])
    assert stats["minValues"] == {"t": "2020-01-01T00:00:00.001Z", "d": "2020-01-01"}
    assert stats["maxValues"] == {"t": "2020-01-02T00:00:00.003Z", "d": "2021-03-04"}
    DeltaTable.create(str(tmp_path), schema=schema)
    append_files(str(tmp_path), [written], schema, CommitProperties())
    (action,) = pa.table(DeltaTable(str(tmp_path)).get_add_actions(flatten=True)).to_pylist()
    assert action["min.t"] == dt.datetime(2020, 1, 1, 0, 0, 0, 1000, utc)
    assert action["max.t"] == dt.datetime(2020, 1, 2, 0, 0, 0, 3000, utc)
    assert action["max.d"] == dt.date(2021, 3, 4)


def test_a_max_timestamp_that_cannot_be_rounded_up_has_no_max(tmp_path):
    """9999-12-31 23:59:59.999999 (a common 'valid to' sentinel) cannot be rounded up to the next
    millisecond: the file gets no max for that column, and is written."""
    import datetime as dt

    schema = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, dt.timezone.utc)
    rows = pa.RecordBatch.from_pydict({"t": [last]}, schema=schema)
    (written,) = [
        r for b in FileWriter(str(tmp_path), schema, "p-")(iter([rows])) for r in b.to_pylist()
    ]
    stats = json.loads(written["stats"])
    assert stats["minValues"] == {"t": "9999-12-31T23:59:59.999Z"} and stats["maxValues"] == {}
