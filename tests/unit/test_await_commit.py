"""A continuous query's source waits for its table's next commit when a trigger finds nothing
new (delta/source.py AWAIT_COMMIT_MS): it returns that commit's end as soon as the commit
lands, its start when the wait is over or the runner's stop file appears, and never waits under
the available-now trigger or at a query's first trigger. No Spark."""

import json
import threading
import time

import pyarrow as pa
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.delta.source import (
    AWAIT_COMMIT_MS,
    AWAIT_IDLE_MS,
    AWAIT_STOP_FILE,
    AWAIT_TABLES,
    AWAIT_WATERMARK,
    IDLE_AFTER,
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


def test_an_idle_source_waits_longer_and_still_returns_a_commit_as_it_lands(tmp_path):
    """After IDLE_AFTER calls in a row that found nothing, the wait is AWAIT_IDLE_MS (fewer
    triggers for an idle query); a commit still ends it at once, and the calls after data wait
    the short time again."""
    path = str(tmp_path / "t")
    append(path)
    r = reader(path, **{AWAIT_COMMIT_MS: 100, AWAIT_IDLE_MS: 1_500})
    end = r.latestOffset(r.initialOffset(), None)

    def timed_call() -> tuple[dict, float]:
        began = time.monotonic()
        new = r.latestOffset(end, None)
        return new, time.monotonic() - began

    for _ in range(IDLE_AFTER):
        new, took = timed_call()
        assert new == end and 0.1 <= took < 1, took
    new, took = timed_call()
    assert new == end and took >= 1.5, took  # idle: the long wait
    committer = later(0.3, lambda: append(path))
    new, took = timed_call()
    committer.join()
    assert new["version"] == 1 and took < 1.2, (new, took)  # the commit, as it lands
    end = new
    new, took = timed_call()
    assert new == end and 0.1 <= took < 1, took  # data was read: short waits again


def test_a_join_s_source_waits_for_a_commit_to_any_of_the_query_s_tables(tmp_path):
    """A query of two streams: a commit to the other stream's table ends a source's wait (the
    other source, asked after it, reads it); at the next call that source does not wait (the
    other table moved since its last call: its stream may have data for this trigger); its
    own commit is read as it lands; with nothing anywhere it waits the whole time."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    append(a)
    append(b)
    r = reader(a, **{AWAIT_COMMIT_MS: 1_500, AWAIT_TABLES: json.dumps([a, b])})
    end = r.latestOffset(r.initialOffset(), None)

    def timed_call() -> tuple[dict, float]:
        began = time.monotonic()
        new = r.latestOffset(end, None)
        return new, time.monotonic() - began

    committer = later(0.3, lambda: append(b))
    new, took = timed_call()
    committer.join()
    assert new == end and 0.3 <= took < 1.2, took  # b's commit ended the wait
    new, took = timed_call()
    assert new == end and took < 0.3, took  # b moved since the last call: no wait
    committer = later(0.3, lambda: append(a))
    new, took = timed_call()
    committer.join()
    assert new["version"] == 1 and took < 1.2, (new, took)  # a's own commit, as it lands
    end = new
    new, took = timed_call()
    assert new == end and took >= 1.5, took  # nothing anywhere: the whole wait
