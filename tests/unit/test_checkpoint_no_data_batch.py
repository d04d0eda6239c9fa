"""runtime/checkpoint.py: the no-data batch planned after a crash, on checkpoints shaped as
Spark 4 writes them (OffsetSeqLog v1, CommitLog v1, Hadoop `.crc` files beside)."""

import json

from dbt.adapters.spark_streaming.runtime.checkpoint import (
    caught_up,
    committed_offsets,
    plan_no_data_batch,
)

CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.multipleWatermarkPolicy": "min"}
SOURCE = '{"table": "feed.events", "version": 1}'


def offsets(watermark_ms: int, ts_ms: int, *sources: str) -> str:
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": ts_ms, "conf": CONF}
    return "\n".join(["v1", json.dumps(meta, separators=(",", ":")), *sources])


def checkpoint(tmp_path, next_watermark_ms=2000, committed=True, state=True):
    """Batches 0 (watermark 0) and 1 (watermark 1000) planned, batch 0 committed, batch 1 if
    `committed` with `next_watermark_ms`."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    (tmp_path / "offsets" / "0").write_text(
        offsets(0, 10, '{"table": "feed.events", "version": 0}')
    )
    (tmp_path / "offsets" / "1").write_text(offsets(1000, 20, SOURCE))
    (tmp_path / "offsets" / ".1.crc").write_bytes(b"crc")
    (tmp_path / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":1000}')
    if committed:
        (tmp_path / "commits" / "1").write_text(
            f'v1\n{{"nextBatchWatermarkMs":{next_watermark_ms}}}'
        )
    if state:
        (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    return str(tmp_path)


def test_plans_the_batch_spark_would_have_planned(tmp_path):
    path = checkpoint(tmp_path)
    (tmp_path / "offsets" / ".2.crc").write_bytes(b"stale")  # of no file: it would fail the read
    assert plan_no_data_batch(path, now_ms=30) == 2
    text = (tmp_path / "offsets" / "2").read_text()
    assert text == offsets(2000, 30, SOURCE)  # same version line, conf and source offsets
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == [".1.crc", "0", "1", "2"]
    assert plan_no_data_batch(path) is None  # planned, not committed: Spark runs it


def test_nothing_to_plan(tmp_path):
    assert plan_no_data_batch(str(tmp_path / "none")) is None  # a new query
    cases = {
        "not_committed": {"committed": False},  # Spark runs batch 1 again itself
        "stateless": {"state": False},  # Spark runs no batch without data for it
        "watermark_unchanged": {"next_watermark_ms": 1000},  # its no-data batch ran, or none due
    }
    for name, kwargs in cases.items():
        (tmp_path / name).mkdir()
        assert plan_no_data_batch(checkpoint(tmp_path / name, **kwargs)) is None, name
        assert not (tmp_path / name / "offsets" / "2").exists(), name


def test_caught_up_only_when_spark_would_run_no_batch(tmp_path):
    """A run skips the query when its last batch is committed, owes no watermark batch, and the
    source has no file after that batch's offset (versions 0 and 1 here)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    source = str(tmp_path / "events")
    for i in range(2):
        write_deltalake(source, pa.table({"x": [i]}), mode="append")
    streams = {"feed.events": source}
    for name in ("done", "owed", "running", "stateless"):
        (tmp_path / name).mkdir()
    done = checkpoint(tmp_path / "done", next_watermark_ms=1000)
    assert committed_offsets(done) == [json.loads(SOURCE)]
    assert caught_up(done, streams)
    assert not caught_up(done, {"other.table": source})  # not the query's sources
    owed = checkpoint(tmp_path / "owed")  # batch 1 advanced the watermark: a batch is owed
    assert committed_offsets(owed) is None and not caught_up(owed, streams)
    running = checkpoint(tmp_path / "running", committed=False)  # Spark runs batch 1 again
    assert not caught_up(running, streams)
    assert not caught_up(str(tmp_path / "new"), streams)  # no checkpoint: a new query
    stateless = checkpoint(tmp_path / "stateless", state=False)  # owes nothing without state
    assert caught_up(stateless, streams)
    write_deltalake(source, pa.table({"x": [2]}), mode="append")  # version 2: new data
    assert not caught_up(done, streams) and not caught_up(stateless, streams)
