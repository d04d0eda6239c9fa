"""Where a new stream's backlog is split (runtime/backlog.py plan_split), from the source's Delta
statistics, and the source's side of it: the first batch pinned to the split's version, its
rows marked (delta/source.py). No Spark."""

import json
import os
import random
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import WriterProperties, write_deltalake
from pyspark.sql.types import BooleanType, StructField, StructType, TimestampType

from dbt.adapters.spark_streaming.delta.offsets import Position
from dbt.adapters.spark_streaming.delta.source import (
    BACKLOG_AFTER,
    BACKLOG_COLUMN,
    DeltaStreamReader,
    _groups_after,
    _read,
)
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.backlog import FILE, Backlog, enabled, plan_split
from dbt.adapters.spark_streaming.sql import compile_query

SQL = (
    "SELECT window_start, window_end, k, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE feed.ev, "
    "DESCRIPTOR(ts), INTERVAL '5' MINUTES)) GROUP BY window_start, window_end, k"
)


def at(minute: int, second: float = 0.0) -> datetime:
    return datetime(2022, 1, 1, 0, minute, tzinfo=timezone.utc).replace(
        second=int(second), microsecond=int(second % 1 * 1e6)
    )


def write(path, times, kind="us", tz="UTC", mode="append", properties=None):
    write_deltalake(
        path,
        pa.table({"ts": pa.array(times, pa.timestamp(kind, tz=tz)), "k": ["a"] * len(times)}),
        mode=mode,
        writer_properties=properties,
    )


@pytest.fixture
def plan():
    schemas = {"feed.ev": {"ts": "timestamp", "k": "string"}}
    return compile_query(SQL, schemas=schemas, watermark_delay="1 minute")


def split(plan, source, checkpoint, config=None, options=None):
    return plan_split(plan, config or {}, {"feed.ev": str(source)}, str(checkpoint), options or {})


def test_the_split_is_the_first_batchs_watermark_and_is_recorded(plan, tmp_path):
    source, checkpoint = tmp_path / "ev", tmp_path / "checkpoint"
    write(source, [at(3), at(17, 30.0123456)])
    write(source, [at(9)])  # the largest time is in the first file
    got = split(plan, source, checkpoint)
    assert got.hold  # batch 1 is to be planned: the source holds it without data
    # Spark's watermark: the largest event time in milliseconds, less the delay
    expected = int(at(17, 30.012).timestamp() * 1e6) - 60_000_000
    assert (got.source, got.version, got.closed_us) == ("feed.ev", 1, expected)
    with open(checkpoint / FILE) as fh:
        record = {"source": "feed.ev", "version": 1, "closed_us": expected, "rows": 3}
        assert json.load(fh) == record
    write(source, [at(40)])  # a restarted query plans the recorded split, not a new one
    os.makedirs(checkpoint / "commits")
    (checkpoint / "commits" / "0").write_text("v1")
    assert split(plan, source, checkpoint) == got and got.hold
    os.makedirs(checkpoint / "offsets")
    (checkpoint / "offsets" / "1").write_text("v1")  # planned, not committed: replayed as is
    assert split(plan, source, checkpoint) == got and not split(plan, source, checkpoint).hold
    (checkpoint / "commits" / "1").write_text("v1")  # batch 1 emitted the closed windows
    assert split(plan, source, checkpoint) is None


def test_no_split_unless_the_first_batch_reads_the_whole_snapshot(plan, tmp_path):
    source = tmp_path / "ev"
    write(source, [at(3)])
    write(source, [at(9)])
    for n, options in enumerate(
        [{"maxFilesPerTrigger": "1"}, {"maxBytesPerTrigger": "1000"}, {"startingVersion": "1"}]
    ):
        assert split(plan, source, tmp_path / f"c{n}", options=options) is None
    assert split(plan, source, tmp_path / "c", options={"maxFilesPerTrigger": "2"}) is not None
    os.makedirs(tmp_path / "old" / "offsets")  # a checkpoint from before the split
    (tmp_path / "old" / "offsets" / "0").write_text("v1")
    assert split(plan, source, tmp_path / "old") is None
    assert split(plan, source, tmp_path / "off", config={"split_backlog": False}) is None
    assert not any(os.path.exists(tmp_path / c / FILE) for c in ("c0", "c1", "c2", "old", "off"))


def test_no_split_without_timestamp_statistics(plan, tmp_path):
    write(tmp_path / "ntz", [at(3).replace(tzinfo=None)], tz=None)  # timestamp_ntz
    assert split(plan, tmp_path / "ntz", tmp_path / "c1") is None
    write_deltalake(tmp_path / "empty", pa.table({"ts": pa.array([], pa.timestamp("us", "UTC"))}))
    assert split(plan, tmp_path / "empty", tmp_path / "c2") is None


def test_split_backlog_must_be_a_boolean():
    assert enabled({}) and not enabled({"split_backlog": False})
    with pytest.raises(StreamingError, match="SSC201"):
        enabled({"split_backlog": "no"})


def test_the_first_batch_ends_at_the_split_version_its_rows_marked_the_next_has_none(
    plan, tmp_path
):
    source = str(tmp_path / "ev")
    for minute in (1, 2, 3):
        write(source, [at(minute)])
    options = Backlog("feed.ev", 1, 0).reader_options(plan.backlog_window)
    reader = DeltaStreamReader(source, "feed.ev", None, options)
    reader.prepareForTriggerAvailableNow()
    origin = Position(-1).offset("feed.ev")
    first = reader.latestOffset(origin, None)
    assert first == {"table": "feed.ev", "version": 1}
    assert reader.latestOffset(first, None) == first  # batch 1: no data
    assert reader.latestOffset(first, None) == {"table": "feed.ev", "version": 2}
    # a restart after batch 1 was planned (Spark replays it from its log) holds nothing
    options = Backlog("feed.ev", 1, 0, hold=False).reader_options(plan.backlog_window)
    restarted = DeltaStreamReader(source, "feed.ev", None, options)
    restarted.prepareForTriggerAvailableNow()
    assert restarted.latestOffset(first, None) == {"table": "feed.ev", "version": 2}
    marks = [
        {c[BACKLOG_COLUMN] for p in reader.partitions(s, e) for _, c in p.files}
        for s, e in [(origin, first), (first, {"table": "feed.ev", "version": 2})]
    ]
    assert marks == [{"true"}, {"false"}]


def test_the_first_batch_reads_only_the_rows_of_windows_after_the_split(plan, tmp_path):
    """Its source reads the rows whose time is after the split less the window's size (5
    minutes) or NULL, and skips the row groups whose statistics say they hold none; a later
    batch reads every row. The run still counts the snapshot's rows as read."""
    source = str(tmp_path / "ev")
    rng = random.Random(5)
    times = [at(m, rng.uniform(0, 59.999999)) for m in range(30) for _ in range(2)]
    groups_of_5 = WriterProperties(max_row_group_size=5)
    write(source, times[:40], properties=groups_of_5)  # minutes 0-19, in order
    recent = times[40:] + [None]
    rng.shuffle(recent)  # minutes 20-29 and a row without a time, out of order
    write(source, recent, mode="append", properties=groups_of_5)
    write(source, [at(1)], mode="append")
    closed = int(at(14).timestamp() * 1e6)
    after = closed - 5 * 60_000_000  # minute 9: the windows ending at minute 10 are closed
    backlog = Backlog("feed.ev", 1, closed, rows=len(times) + 1)
    options = backlog.reader_options(plan.backlog_window)
    reader = DeltaStreamReader(source, "feed.ev", None, options)
    schema = StructType(
        [StructField("ts", TimestampType()), StructField(BACKLOG_COLUMN, BooleanType())]
    )
    origin, first = Position(-1).offset("feed.ev"), {"table": "feed.ev", "version": 1}

    def read(start, end):
        parts = reader.partitions(start, end)
        return [
            r["ts"]
            for p in parts
            for b in _read(p.files, schema, after=p.after)
            for r in b.to_pylist()
        ]

    got = read(origin, first)
    wanted = [t for t in times if t.timestamp() * 1e6 > after] + [None]
    assert sorted(got, key=str) == sorted(wanted, key=str)
    (old_file,) = [f for f in reader.log.files(0, True)]
    pf = pq.ParquetFile(old_file.path)
    assert pf.metadata.num_row_groups == 8 and _groups_after(pf, "ts", after) == [3, 4, 5, 6, 7]
    assert read(first, {"table": "feed.ev", "version": 2}) == [at(1)]  # later batches: all
    ran = {"addBatch": 5}  # the durations of a trigger that ran a batch
    reports = [
        {"batchId": 0, "numInputRows": len(got), "durationMs": ran},
        {"batchId": 1, "numInputRows": 0, "durationMs": ran},
        {"batchId": 0, "numInputRows": 0, "durationMs": {}},  # a trigger that ran none
    ]
    assert [p["numInputRows"] for p in backlog.counted(reports)] == [len(times) + 1, 0, 0]
    older = Backlog("feed.ev", 1, closed)  # a record without the rows: it reads them all
    assert older.counted(reports) == reports
    assert BACKLOG_AFTER not in older.reader_options(plan.backlog_window)


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_row_groups_are_skipped_by_their_time_statistics_in_any_unit(unit, tmp_path):
    path = str(tmp_path / "f.parquet")
    times = [at(1), at(2), at(3), None, at(4), at(5)]
    table = pa.table({"ts": pa.array(times, pa.timestamp(unit, tz="UTC")), "k": ["a"] * 6})
    pq.write_table(table, path, row_group_size=2)
    pf = pq.ParquetFile(path)
    assert _groups_after(pf, "ts", int(at(2).timestamp() * 1e6)) == [1, 2]  # 1: a NULL
    assert _groups_after(pf, "ts", int(at(1).timestamp() * 1e6)) == [0, 1, 2]
    assert _groups_after(pf, "k", 0) is None  # not a timestamp: every group is read
