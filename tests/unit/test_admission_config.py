"""Admission control configs (runtime/admission.py) and the Delta-side pieces of the source that
need no Spark: where a stream starts, and the files the oracle gives each recorded batch
(delta/source.py files_by_batch), for commits with and without positions."""

import datetime as dt
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta import offsets
from dbt.adapters.spark_streaming.delta.log import Log, starting_position
from dbt.adapters.spark_streaming.delta.source import (
    READ_ALL,
    consumed,
    files_by_batch,
    read_limits,
)
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.admission import check_start, parse_size, source_options


@pytest.mark.parametrize(
    "config, options",
    [
        ({}, {}),
        ({"max_files_per_trigger": 5}, {"maxFilesPerTrigger": "5"}),
        ({"max_files_per_trigger": "7"}, {"maxFilesPerTrigger": "7"}),
        ({"max_bytes_per_trigger": "1g"}, {"maxBytesPerTrigger": str(1 << 30)}),
        ({"max_bytes_per_trigger": "64 MB"}, {"maxBytesPerTrigger": str(64 << 20)}),
        ({"max_bytes_per_trigger": 1000}, {"maxBytesPerTrigger": "1000"}),
        ({"starting_version": 0}, {"startingVersion": "0"}),
        ({"starting_version": 12}, {"startingVersion": "12"}),
        ({"starting_version": "latest"}, {"startingVersion": "latest"}),
        ({"starting_timestamp": "2024-05-01"}, {"startingTimestamp": "2024-05-01T00:00:00"}),
        ({"starting_timestamp": dt.date(2024, 5, 1)}, {"startingTimestamp": "2024-05-01"}),
        (
            {"starting_timestamp": "2024-05-01 12:00:00+02:00"},
            {"startingTimestamp": "2024-05-01T12:00:00+02:00"},
        ),
    ],
)
def test_configs_become_source_options(config, options):
    assert source_options(config) == options


@pytest.mark.parametrize(
    "config, allowed",
    [
        ({"max_files_per_trigger": 0}, "positive integer"),
        ({"max_files_per_trigger": True}, "positive integer"),
        ({"max_files_per_trigger": "many"}, "positive integer"),
        ({"max_bytes_per_trigger": "1 banana"}, "'1g'"),
        ({"max_bytes_per_trigger": -5}, "'1g'"),
        ({"starting_version": -1}, "'latest'"),
        ({"starting_version": "first"}, "'latest'"),
        ({"starting_timestamp": "yesterday"}, "ISO date"),
        ({"starting_version": 3, "starting_timestamp": "2024-05-01"}, "only one of them"),
    ],
)
def test_bad_configs_are_ssc201_naming_the_allowed_values(config, allowed):
    with pytest.raises(StreamingError) as err:
        source_options(config)
    assert err.value.code == "SSC201" and allowed in str(err.value)


def test_sizes():
    assert parse_size("10k") == 10240 and parse_size("2gb") == 2 << 30 and parse_size("7") == 7
    assert parse_size(0) is None and parse_size("1.5g") is None


def test_read_limits_as_delta():
    assert read_limits({}) == (1000, None)
    assert read_limits({"maxFilesPerTrigger": "5"}) == (5, None)
    assert read_limits({"maxBytesPerTrigger": "100"}) == (None, 100)  # no file default then
    assert read_limits({"maxFilesPerTrigger": "5", "maxBytesPerTrigger": "9"}) == (5, 9)
    # a temporal join's changelog: whole versions, whatever the model's limits
    assert read_limits({"maxFilesPerTrigger": "5", READ_ALL: "true"}) == (None, None)


@pytest.fixture
def table(tmp_path):
    """Versions 0..3, one file each, committed a little apart."""
    path = str(tmp_path / "t")
    stamps = []
    for i in range(4):
        write_deltalake(path, pa.table({"v": [i]}), mode="append")
        stamps.append(DeltaTable(path).history(1)[0]["timestamp"])
        time.sleep(0.05)
    return path, stamps


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def test_starting_positions(table, tmp_path):
    path, stamps = table
    assert starting_position(path, {}) == offsets.ORIGIN
    assert starting_position(path, {"startingVersion": "2"}) == offsets.starting(2)
    assert starting_position(path, {"startingVersion": "latest"}) == offsets.starting(4)
    assert starting_position(path, {"startingTimestamp": iso(stamps[2])}) == offsets.starting(2)
    assert starting_position(path, {"startingTimestamp": iso(stamps[2] - 1)}) == offsets.starting(2)
    assert starting_position(path, {"startingTimestamp": "2000-01-01"}) == offsets.starting(0)
    for options, got in (
        ({"startingVersion": "9"}, "Got: 9"),
        ({"startingTimestamp": iso(stamps[3] + 60_000)}, "starting_timestamp"),
    ):
        with pytest.raises(StreamingError) as err:
            starting_position(path, options)
        assert (
            err.value.code == "SSC201"
            and got in str(err.value)
            and "latest version 3" in str(err.value)
        )
    # checked only for a new stream: a checkpoint with offsets keeps its own position
    with pytest.raises(StreamingError):
        check_start({"startingVersion": "9"}, {"s.t": path}, str(tmp_path / "cp"))
    (tmp_path / "cp" / "offsets").mkdir(parents=True)
    (tmp_path / "cp" / "offsets" / "0").write_text("v1\n{}\n")
    check_start({"startingVersion": "9"}, {"s.t": path}, str(tmp_path / "cp"))


def values(files) -> list:
    import pyarrow.parquet as pq

    return [(pq.read_table(f).column("v")[0].as_py(), c["wm"]) for f, c in files]


def test_oracle_files_per_batch_old_and_new_commits(table):
    path, _ = table
    # commits written before positions: `sources` versions only, the first read the snapshot
    old = [{"sources": {"t": 1}}, {"sources": {"t": 3}}]
    assert consumed(old[0]) == {"t": 1}
    schedule = [[consumed(b)["t"], wm] for b, wm in zip(old, (10, 20), strict=True)]
    assert sorted(values(files_by_batch(path, -1, schedule, "wm"))) == [
        (0, 10),
        (1, 10),
        (2, 20),
        (3, 20),
    ]
    # an old checkpoint continued with positions: the snapshot of v1 in two batches of one file,
    # then version 2 and 3, one batch each
    snap = Log(path).files(1, offsets.BY_PATH)  # the order of offsets without "order"
    split = [
        {"sources": {"t": 1}, "positions": {"t": {"version": 1, "index": 0, "snapshot": True}}},
        {"sources": {"t": 1}, "positions": {"t": {"version": 1}}},
        {"sources": {"t": 2}},  # old
        {"sources": {"t": 3}, "positions": {"t": {"version": 3}}},
        {"sources": {"t": 3}, "positions": {"t": {"version": 3}}},  # a no-data batch
    ]
    schedule = [[consumed(b)["t"], wm] for b, wm in zip(split, (1, 2, 3, 4, 5), strict=True)]
    got = values(files_by_batch(path, -1, schedule, "wm"))
    first = values([(snap[0].path, {"wm": None})])[0][0]  # the snapshot's files in path order
    assert got == [(first, 1), (1 - first, 2), (2, 3), (3, 4)]
    # from a later run's start (late rows of that run only)
    assert values(files_by_batch(path, {"version": 2}, schedule[3:], "wm")) == [(3, 4)]
    # a stream that began at starting_version 2 read versions 2 and 3 only
    began = [[{"version": 2, "index": -1, "snapshot": False, "start": 2}, 0]]
    began += [[{"version": 3, "start": 2}, 7]]
    assert values(files_by_batch(path, -1, began, "wm")) == [(2, 7), (3, 7)]
    # ... and its later run from a position inside version 2 (no whole-history check then)
    later = [[{"version": 3, "start": 2}, 8]]
    assert values(files_by_batch(path, {"version": 2, "index": 0, "start": 2}, later, "wm")) == [
        (3, 8)
    ]


def test_oracle_reads_a_compacted_table_as_its_stream_did(table):
    """A compaction (dataChange false) is counted back to the files it replaced, which stay on
    storage: the oracle reads what the stream read."""
    path, _ = table
    read = files_by_batch(path, -1, [[1, 0], [3, 0]], "wm")
    DeltaTable(path).optimize.compact()  # v4 compacts v0..v3
    assert files_by_batch(path, -1, [[1, 0], [4, 0]], "wm") == read
    assert len(read) == 4


def test_oracle_refuses_a_rewritten_table(table):
    path, _ = table
    write_deltalake(path, pa.table({"v": [9]}), mode="overwrite")  # v4 removes v0..v3's rows
    with pytest.raises(StreamingError) as err:
        files_by_batch(path, -1, [[1, 0], [4, 0]], "wm")
    assert err.value.code in ("SSD401", "SSD402"), err.value
