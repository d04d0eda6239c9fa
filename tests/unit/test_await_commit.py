"""A continuous query's source waits for its table's next commit when a trigger finds nothing
new (delta/source.py AWAIT_COMMIT_MS): it returns that commit's end as soon as the commit
lands, its start when the wait is over or the runner's stop file appears, and never waits under
the available-now trigger or at a query's first trigger. No Spark."""

import threading
import time

import pyarrow as pa
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.delta.source import (
    AWAIT_COMMIT_MS,
    AWAIT_STOP_FILE,
    AWAIT_WATERMARK,
    DeltaStreamReader,
)


def append(path: str, n: int = 1) -> None:
    write_deltalake(path, pa.table({"v": list(range(n))}), mode="append")


def reader(path: str, **options) -> DeltaStreamReader:
    return DeltaStreamReader(path, "t", None, {k: str(v) for k, v in options.items()})


def later(seconds: float, action) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    thread.start()
    return thread


def test_a_commit_during_the_wait_is_returned_as_it_lands(tmp_path):
    path = str(tmp_path / "t")
    append(path)
    r = reader(path, **{AWAIT_COMMIT_MS: 20_000})
    end = r.latestOffset(r.initialOffset(), None)
    committer = later(0.5, lambda: append(path, 3))
    began = time.monotonic()
    new = r.latestOffset(end, None)
    took = time.monotonic() - began
    committer.join()
    assert new != end and new["version"] == 1, new
    assert took < 10, took  # at the commit, not at the end of the 20-second wait


def test_nothing_new_returns_the_start_after_the_wait(tmp_path):
    path = str(tmp_path / "t")
    append(path)
    r = reader(path, **{AWAIT_COMMIT_MS: 600})
    end = r.latestOffset(r.initialOffset(), None)
    began = time.monotonic()
    assert r.latestOffset(end, None) == end
    assert time.monotonic() - began >= 0.6


def test_the_stop_file_ends_the_wait(tmp_path):
    path, stop = str(tmp_path / "t"), tmp_path / "stop"
    append(path)
    r = reader(path, **{AWAIT_COMMIT_MS: 60_000, AWAIT_STOP_FILE: stop})
    end = r.latestOffset(r.initialOffset(), None)
    stopper = later(0.5, stop.touch)
    began = time.monotonic()
    assert r.latestOffset(end, None) == end
    stopper.join()
    assert time.monotonic() - began < 30  # not the 60-second wait
    began = time.monotonic()
    assert r.latestOffset(end, None) == end  # the file is there: no wait at all
    assert time.monotonic() - began < 5


def test_no_wait_without_the_option_or_under_available_now(tmp_path):
    path = str(tmp_path / "t")
    append(path)
    for r in (reader(path), reader(path, **{AWAIT_COMMIT_MS: 60_000})):
        if AWAIT_COMMIT_MS in r.options:
            r.prepareForTriggerAvailableNow()
        end = r.latestOffset(r.initialOffset(), None)
        began = time.monotonic()
        assert r.latestOffset(end, None) == end
        assert time.monotonic() - began < 5


def test_no_wait_at_the_querys_first_trigger(tmp_path):
    """A query's first trigger reports at once what there is (dbt waits for it)."""
    path = str(tmp_path / "t")
    append(path)
    end = reader(path).latestOffset(reader(path).initialOffset(), None)
    r = reader(path, **{AWAIT_COMMIT_MS: 60_000})  # a restarted query, caught up
    began = time.monotonic()
    assert r.latestOffset(end, None) == end
    assert time.monotonic() - began < 5


def test_with_a_watermark_no_wait_at_the_trigger_after_data(tmp_path):
    """The trigger after a batch of data may have to apply the watermark it moved (Spark asks
    the sources first): no wait there; at the next one, yes."""
    path = str(tmp_path / "t")
    append(path)
    r = reader(path, **{AWAIT_COMMIT_MS: 600, AWAIT_WATERMARK: "true"})
    start = r.initialOffset()
    end = r.latestOffset(start, None)  # the first trigger: the snapshot
    began = time.monotonic()
    assert r.latestOffset(end, None) == end  # after data: at once
    assert time.monotonic() - began < 0.5
    assert r.latestOffset(end, None) == end  # then it waits
    assert time.monotonic() - began >= 0.6
