"""The checks before a stream starts (runtime/preflight.py) and the reading of a failed query's
error (runtime/failures.py), without Spark."""

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta.log import added_files
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime import failures, preflight

OFFSET = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"table":"s.t","version":0}'
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}'


def _checkpoint(tmp_path, batches=2) -> str:
    ckpt = tmp_path / "checkpoint"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    (ckpt / "metadata").write_text('{"id":"abc"}')
    for b in range(batches):
        (ckpt / "offsets" / str(b)).write_text(OFFSET)
        (ckpt / "commits" / str(b)).write_text(COMMIT)
        (ckpt / "offsets" / f".{b}.crc").write_text("x")  # not a batch
    return str(ckpt)


def _damage(ckpt: str) -> str:
    with pytest.raises(StreamingError) as info:
        preflight.check_checkpoint(ckpt, "m")
    assert info.value.code == "SSR323" and "--full-refresh -s m" in str(info.value)
    return str(info.value)


def test_sound_checkpoint_and_none_pass(tmp_path):
    preflight.check_checkpoint(_checkpoint(tmp_path), "m")
    preflight.check_checkpoint(str(tmp_path / "nothing"), "m")
    ckpt = _checkpoint(tmp_path / "planned")
    os.remove(os.path.join(ckpt, "commits", "1"))  # planned, not committed: Spark runs it again
    preflight.check_checkpoint(ckpt, "m")


@pytest.mark.parametrize(
    "damage, phrase",
    [
        (lambda c: open(os.path.join(c, "offsets", "1"), "w").write(OFFSET[:30]), "truncated"),
        (lambda c: open(os.path.join(c, "offsets", "1"), "w").close(), "offsets/1: empty"),
        (lambda c: open(os.path.join(c, "commits", "1"), "w").write("{"), "commits/1"),
        (lambda c: os.remove(os.path.join(c, "offsets", "1")), "offsets/1: missing"),
        (lambda c: os.remove(os.path.join(c, "metadata")), "metadata: missing"),
        (lambda c: open(os.path.join(c, "metadata"), "w").write('{"i'), "metadata: unreadable"),
    ],
)
def test_damaged_checkpoint_is_refused(tmp_path, damage, phrase):
    ckpt = _checkpoint(tmp_path)
    damage(ckpt)
    assert phrase in _damage(ckpt)


def test_resume_positions(tmp_path):
    ckpt = _checkpoint(tmp_path)
    done, planned = preflight.resume_positions(ckpt)
    assert done["s.t"].version == 0 and planned == {}
    os.remove(os.path.join(ckpt, "commits", "1"))
    assert preflight.resume_positions(ckpt)[1]["s.t"].version == 0


def _table(tmp_path) -> str:
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1, 2]}))
    write_deltalake(path, pa.table({"a": [3]}), mode="append")
    DeltaTable(path).delete("a = 1")  # version 2 removes data
    write_deltalake(path, pa.table({"a": [4]}), mode="append")
    return path


def test_change_commit_names_version_and_choices_or_is_skipped(tmp_path):
    path = _table(tmp_path)
    with pytest.raises(StreamingError) as info:
        added_files(path, 0, 3)
    text = str(info.value)
    assert info.value.code == "SSD401" and "version 2 removes data" in text
    assert "skip_change_commits: true" in text and "--full-refresh" in text
    assert len(added_files(path, 0, 3, skip_change_commits=True)) == 2  # versions 1 and 3


def test_optimize_adds_nothing_to_read(tmp_path):
    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, pa.table({"a": [i]}), mode="append")
    DeltaTable(path).optimize.compact()
    assert added_files(path, 2, 3) == []


def test_columns_changed(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1], "b": ["x"]}))
    write_deltalake(
        path, pa.table({"a": [2], "b": ["y"], "c": [1.0]}), mode="append", schema_mode="merge"
    )
    preflight._check_columns("m", "s.t", path, 0)  # a new column is not a change
    preflight.check_columns(
        "m", path, pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    )
    with pytest.raises(StreamingError) as info:
        preflight.check_columns("m", path, pa.schema([("a", pa.int64()), ("b", pa.string())]))
    assert info.value.code == "SSR321" and "-c" in str(info.value)


def test_first_error_line_skips_traceback():
    text = (
        'Traceback (most recent call last):\n  File "x.py", line 3, in f\n'
        "    raise Py4JJavaError(\n"
        "py4j.protocol.Py4JJavaError: An error occurred while calling o12.awaitTermination.\n"
    )
    assert failures.first_error_line(text).startswith("py4j.protocol.Py4JJavaError: An error")
    wrapped = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.\n"
        'Traceback (most recent call last):\n  File "x.py", line 3, in f\n'
        "pyspark.errors.exceptions.captured.SparkRuntimeException: [USER_RAISED_EXCEPTION] "
        "a price below 1 SQLSTATE: P0001\n"
    )
    assert failures.first_error_line(wrapped).endswith(
        "[USER_RAISED_EXCEPTION] a price below 1 SQLSTATE: P0001"
    )
    assert failures.first_error_line("x\n[dbt-spark-streaming SSD401] a: b. c") == (
        "[dbt-spark-streaming SSD401] a: b. c"
    )


def test_query_failed_classes():
    state = "raise Py4JJavaError(\n[CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred"
    error = failures.query_failed("m", "s.m", "/c", state)
    assert error.code == "SSR324" and "--full-refresh -s m" in str(error)
    assert "raise" not in error.why
    full = "java.io.IOException: No space left on device"
    assert failures.query_failed("m", "s.m", "/c", full).code == "SSR326"
    assert failures.query_failed("m", "s.m", "/c", "ValueError: x").code == "SSR306"


def test_unwritable(tmp_path):
    preflight.check_writable("m", str(tmp_path / "a" / "b"))
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere on a writable file system")
    os.chmod(tmp_path, 0o500)
    try:
        with pytest.raises(StreamingError) as info:
            preflight.check_writable("m", str(tmp_path / "a"))
        assert info.value.code == "SSR325" and "no write permission" in str(info.value)
    finally:
        os.chmod(tmp_path, 0o700)


@pytest.mark.parametrize(
    "written, sources, words",
    [
        ([("k", pa.string()), ("amount", pa.float64())], ["k", "total"], "total -> amount"),
        (
            [("k", pa.string()), ("big", pa.string()), ("total", pa.float64())],
            ["k", None, "total"],
            "+big",
        ),
        ([("total", pa.float64())], ["total"], "-k"),
        ([("total", pa.float64()), ("k", pa.string())], ["total", "k"], "order"),
        ([("k", pa.int64()), ("total", pa.float64())], None, None),  # k's type changed
        ([("k", pa.string()), ("total", pa.float64())], None, None),  # no change
    ],
)
def test_column_sources(tmp_path, written, sources, words):
    """What a query change that keeps the state does to the table's columns (k, total): a new
    name at the same place with the same type is a rename; a new name otherwise an added
    column; a name kept with another type cannot continue (SSR321)."""
    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"k": ["a"], "total": [1.0]}))
    got = preflight.column_sources(table, pa.schema(written))
    assert got == (None if sources is None else (sources, words))


def test_a_version_gone_from_the_log_is_its_own_error(tmp_path):
    """A source written by delta-rs with a short log retention: its post-commit checkpoint
    removes the expired versions' commits; a stream that stopped before them cannot read them
    (SSD404), while the table itself stays readable from its checkpoint."""
    path = str(tmp_path / "src")
    retention = {
        "delta.checkpointInterval": "2",
        "delta.logRetentionDuration": "interval 0 seconds",
    }
    write_deltalake(path, pa.table({"n": [0]}), configuration=retention)
    for n in range(1, 6):
        write_deltalake(path, pa.table({"n": [n]}), mode="append")
    log = sorted(os.listdir(os.path.join(path, "_delta_log")))
    assert "00000000000000000001.json" not in log and "00000000000000000005.json" in log, log
    assert DeltaTable(path).to_pyarrow_table().num_rows == 6
    with pytest.raises(StreamingError) as info:
        added_files(path, 0, 5)
    assert info.value.code == "SSD404" and "version 1 of source table" in str(info.value)
    assert "--full-refresh" in str(info.value) and "logRetentionDuration" in str(info.value)
    assert [f.path.endswith(".parquet") for f in added_files(path, 4, 5)] == [True]
