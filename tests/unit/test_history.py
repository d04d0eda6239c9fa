"""Our metadata of a model table's commits outlives the Delta log's retention
(delta/history.py): kept in segments beside the table before the log is cleaned up, read back
with the right versions, and a gap (what neither knows any more) is HistoryGone."""

import json
import os
import shutil

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from dbt.adapters.spark_streaming.delta import history
from dbt.adapters.spark_streaming.delta.history import (
    META_KEY,
    NEWEST,
    HistoryGone,
    commit_history,
    last_metadata,
)
from dbt.adapters.spark_streaming.delta.sink import append_files, create_table
from dbt.adapters.spark_streaming.delta.writer import FileWriter
from dbt.adapters.spark_streaming.layout import history_path

SCHEMA = pa.schema([("n", pa.int64())])
SHORT = {"delta.checkpointInterval": "3", "delta.logRetentionDuration": "interval 0 seconds"}


def _commit(path: str, n: int) -> None:
    rows = pa.record_batch([pa.array([n])], schema=SCHEMA)
    files = [
        r for b in FileWriter(path, SCHEMA, f"part-{n:05d}-")(iter([rows])) for r in b.to_pylist()
    ]
    meta = {"batch_id": n, "watermark_ms": 1000 * n}
    props = CommitProperties(
        app_transactions=[Transaction("app", n)], custom_metadata={META_KEY: json.dumps(meta)}
    )
    append_files(path, files, SCHEMA, props, model=True)


def _table(tmp_path, config: dict, batches: int) -> str:
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"created": True}, config)
    for n in range(1, batches + 1):
        _commit(path, n)
    return path


def _log(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "_delta_log")))


def test_the_history_outlives_the_log(tmp_path):
    path = _table(tmp_path, SHORT, 10)
    assert f"{0:020d}.json" not in _log(path)  # cleaned up at the checkpoints
    history = commit_history(path)
    assert [(c["table_version"], c.get("batch_id")) for c in history] == [(0, None)] + [
        (n, n) for n in range(1, 11)
    ]
    assert [c["watermark_ms"] for c in history[1:]] == [1000 * n for n in range(1, 11)]
    # one segment, rewritten at each checkpoint until it covers SEGMENT_VERSIONS versions
    assert sorted(os.listdir(history_path(path))) == [f"{0:020d}-{9:020d}.json", NEWEST]
    assert last_metadata(path) == {"batch_id": 10, "watermark_ms": 10000, "table_version": 10}
    assert sorted(DeltaTable(path).to_pyarrow_table().column("n").to_pylist()) == list(range(1, 11))


def test_segments_grow_to_their_size_then_a_new_one_starts(tmp_path, monkeypatch):
    """A checkpoint every 3 versions, segments of 5 or more: the newest segment is rewritten
    and the one it replaces removed, the folder is not listed once the hint names the newest,
    and segments a crash left overlapping read the same."""
    monkeypatch.setattr(history, "SEGMENT_VERSIONS", 5)
    path = _table(tmp_path, SHORT, 6)
    assert sorted(os.listdir(history_path(path))) == [f"{0:020d}-{6:020d}.json", NEWEST]
    listed = []
    monkeypatch.setattr(history, "_segments", lambda p: listed.append(p) or [])
    for n in range(7, 13):
        _commit(path, n)
    assert listed == []
    monkeypatch.undo()
    assert sorted(os.listdir(history_path(path))) == [
        f"{0:020d}-{6:020d}.json",
        f"{7:020d}-{12:020d}.json",
        NEWEST,
    ]
    expected = [(0, None)] + [(n, n) for n in range(1, 13)]
    assert [(c["table_version"], c.get("batch_id")) for c in commit_history(path)] == expected
    folder = history_path(path)  # a crash after a rewrite, before the removal
    shutil.copy(
        os.path.join(folder, f"{7:020d}-{12:020d}.json"),
        os.path.join(folder, f"{7:020d}-{9:020d}.json"),
    )
    assert [(c["table_version"], c.get("batch_id")) for c in commit_history(path)] == expected


def test_a_gap_is_history_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "SEGMENT_VERSIONS", 1)  # a segment per checkpoint
    path = _table(tmp_path, SHORT, 10)
    os.remove(os.path.join(history_path(path), f"{4:020d}-{6:020d}.json"))
    with pytest.raises(HistoryGone):
        commit_history(path)
    shutil.rmtree(history_path(path))
    with pytest.raises(HistoryGone):
        commit_history(path)


def test_without_cleanup_the_log_stays_and_the_history_reads_the_same(tmp_path):
    path = _table(tmp_path, {**SHORT, "delta.enableExpiredLogCleanup": "false"}, 7)
    assert f"{0:020d}.json" in _log(path)
    shutil.rmtree(history_path(path))  # the log alone is whole
    assert [c["table_version"] for c in commit_history(path)] == list(range(8))


def test_the_last_metadata_behind_other_writers_commits(tmp_path):
    """Commits of another writer (an OPTIMIZE, a property change) and a cleanup after them:
    the last metadata is still ours, not 'no table' (a model's next run read it as missing)."""
    path = _table(tmp_path, SHORT, 6)
    for _ in range(4):  # another writer's appends, with delta-rs's own cleanup
        write_deltalake(path, pa.table({"n": [0]}), mode="append")
    assert all(
        META_KEY
        not in json.loads(open(os.path.join(path, "_delta_log", f)).readline()).get(
            "commitInfo", {}
        )
        for f in _log(path)
        if f.endswith(".json")
    )
    assert last_metadata(path) == {"batch_id": 6, "watermark_ms": 6000, "table_version": 6}


def test_versions_are_the_logs_not_a_stale_count(tmp_path):
    """delta-rs's history() numbers entries down from the version a DeltaTable was loaded at;
    ours come from the log's file names."""
    path = _table(tmp_path, {}, 3)
    write_deltalake(path, pa.table({"n": [0]}), mode="append")  # version 4, none of ours
    assert [c["table_version"] for c in commit_history(path)] == [0, 1, 2, 3]


def test_a_segment_rewritten_while_the_history_is_read(tmp_path, monkeypatch):
    """A reader lists the segments, then _keep rewrites the newest with later versions and
    removes it before the reader gets to it: the reader reads the one that replaced it, not
    a gap (which was SST506 for a long history read while its model ran)."""
    path = _table(tmp_path, SHORT, 6)  # one segment, 0-6, still growing
    listed = history._segments(path)
    for n in range(7, 10):
        _commit(path, n)  # rewritten as 0-9 at version 9, 0-6 removed
    assert sorted(os.listdir(history_path(path))) == [f"{0:020d}-{9:020d}.json", NEWEST]
    calls = []
    real = history._segments
    monkeypatch.setattr(
        history, "_segments", lambda p: real(p) if calls else calls.append(1) or listed
    )
    assert sorted(history.entries(path)) == list(range(10))  # without commit_history's retry


def test_a_hint_naming_a_segment_gone_is_dropped(tmp_path):
    """The newest segment removed by hand (or lost): the next checkpoint lists the folder
    instead of failing at every checkpoint from then on."""
    path = _table(tmp_path, SHORT, 6)  # one segment, 0-6, named by the hint
    folder = history_path(path)
    shutil.copy(os.path.join(folder, f"{0:020d}-{6:020d}.json"), os.path.join(folder, "keep"))
    os.remove(os.path.join(folder, f"{0:020d}-{6:020d}.json"))
    os.rename(os.path.join(folder, "keep"), os.path.join(folder, f"{0:020d}-{3:020d}.json"))
    for n in range(7, 10):
        _commit(path, n)
    assert sorted(os.listdir(folder)) == [f"{0:020d}-{9:020d}.json", NEWEST]
    assert [c["table_version"] for c in commit_history(path)] == list(range(10))
