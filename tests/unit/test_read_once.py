"""Within `read_once` (delta/log.py), a thread loads each Delta table once: a run's compile,
checks and plan see one version of each source and read its log once; the tables the run
writes are read afresh, as is everything after `release()` and on other threads. No Spark."""

import threading

import pyarrow as pa
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.delta import log, types


def append(path: str) -> None:
    write_deltalake(path, pa.table({"v": [1]}), mode="append")


def test_a_source_is_loaded_once_and_the_own_table_afresh(tmp_path):
    source, own = str(tmp_path / "source"), str(tmp_path / "own")
    append(source), append(own)
    with log.read_once(own):
        first = log.table(source)
        append(source), append(own)  # commits while the run prepares
        assert log.table(source) is first and log.latest_version(source) == 0
        assert log.table_id(source) == str(first.metadata().id)
        assert types.table_columns(source) == [("v", "bigint")]
        assert log.latest_version(own) == 1  # what the run writes: never pinned
        assert log.table(source, 0) is first and log.table(source, 1).version() == 1
        seen = []
        thread = threading.Thread(target=lambda: seen.append(log.latest_version(source)))
        thread.start(), thread.join()
        assert seen == [1]  # another thread (another model) reads afresh
        log.release()
        assert log.latest_version(source) == 1
    assert log.latest_version(source) == 1


def test_an_older_version_read_first_is_not_pinned(tmp_path):
    source = str(tmp_path / "source")
    append(source), append(source)
    with log.read_once():
        assert log.table(source, 0).version() == 0
        assert log.latest_version(source) == 1
