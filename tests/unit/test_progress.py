"""runtime/progress.py: the per-batch log line and the figures of a run's end."""

from dbt.adapters.spark_streaming.runtime.progress import (
    batch_line,
    event_time_lag_s,
    expected_batches,
    state_figures,
)

P = {
    "batchId": 4,
    "numInputRows": 1200,
    "processedRowsPerSecond": 3456.7,
    "eventTime": {"max": "2020-04-15T08:22:00.000Z", "watermark": "2020-04-15T08:21:00.000Z"},
    "stateOperators": [
        {"numRowsTotal": 3, "memoryUsedBytes": 100},
        {"numRowsTotal": 2, "memoryUsedBytes": 50},
    ],
}


def test_batch_line():
    assert batch_line("a.m", P, 2, 5) == (
        "a.m: batch 2 of about 5: 1200 input rows, 3457 rows/s, "
        "watermark 2020-04-15T08:21:00.000Z, 5 state rows"
    )
    # past the estimate (a batch without data closing windows), or none known
    assert batch_line("a.m", P, 6, 5).startswith("a.m: batch 6 of about 6:")
    assert batch_line("a.m", {"eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}}, 1, None) == (
        "a.m: batch 1: 0 input rows, 0 rows/s, watermark none, 0 state rows"
    )


def test_figures():
    assert state_figures(P) == (5, 150)
    older = {"eventTime": {"max": "2020-04-15T08:30:00.000Z", "watermark": "x"}}
    assert event_time_lag_s([older, P]) == 540.0  # the newest event of the run, 08:30
    assert event_time_lag_s([{"numInputRows": 1}]) is None


def test_expected_batches(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = str(tmp_path / "src")
    for i in range(5):
        write_deltalake(path, pa.table({"x": [i]}), mode="append")
    checkpoint = str(tmp_path / "checkpoint")
    assert expected_batches({"s": path}, checkpoint, {"maxFilesPerTrigger": "2"}) == 3
    assert expected_batches({"s": path}, checkpoint, {}) == 1  # 1000 files by default
    assert expected_batches({"s": str(tmp_path / "none")}, checkpoint, {}) is None
