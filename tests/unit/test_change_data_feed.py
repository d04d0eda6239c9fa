"""Delta Change Data Feed without Spark: the commit delta/cdf.py writes (read back by
deltalake's load_cdf), the mapping of changelog ops to change types and back, the files a
change feed reads per version (delta/log.py change_files), and config `read_change_feed`."""

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta import cdf
from dbt.adapters.spark_streaming.delta.history import CHECKPOINT_INTERVAL
from dbt.adapters.spark_streaming.delta.log import OP, change_files, commit_actions
from dbt.adapters.spark_streaming.delta.source import _with_op
from dbt.adapters.spark_streaming.delta.upsert_driver import write
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.admission import source_options

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64())])


def test_change_rows_and_back():
    changes = pa.table(
        {"k": ["a", "a", "b", "c"], "n": [1, 2, 3, 4], "_op": ["-U", "+U", "+I", "-D"]}
    )
    rows = cdf.change_rows(changes, SCHEMA)
    assert rows.column_names == ["k", "n", "_change_type"]
    kinds = rows.column("_change_type").to_pylist()
    assert kinds == ["update_preimage", "update_postimage", "insert", "delete"]
    back = _with_op(rows.to_batches()[0])
    assert back.column(OP).to_pylist() == ["-U", "+U", "+I", "-D"]


def test_commit_with_cdc_files_is_read_by_load_cdf(tmp_path):
    path = str(tmp_path / "t")
    DeltaTable.create(path, schema=SCHEMA, configuration={cdf.PROPERTY: "true"})
    assert cdf.enabled(DeltaTable(path))
    # version 1: inserts only, no cdc files (readers take the adds as inserts)
    first = write(pa.table({"k": ["a", "b"], "n": [1, 2]}), path, SCHEMA, "part-00000-")
    cdf.commit(path, 1, {"add": first}, ("app", 0), {"meta": "{}"}, {})
    # version 2: a updated, b deleted: the file is rewritten, the changes in a cdc file
    second = write(pa.table({"k": ["a"], "n": [5]}), path, SCHEMA, "part-00001-")
    changes = pa.table({"k": ["a", "a", "b"], "n": [1, 5, 2], "_op": ["-U", "+U", "-D"]})
    cdc = write(
        cdf.change_rows(changes, SCHEMA),
        cdf.location(path),
        cdf.cdc_schema(SCHEMA),
        "cdc-app-00001-",
    )
    actions = {"add": second, "remove": [first[0]["path"]], "cdc": cdc}
    cdf.commit(path, 2, actions, ("app", 1), {"meta": json.dumps({"batch_id": 1})}, {})
    table = DeltaTable(path)
    assert table.version() == 2 and table.transaction_version("app") == 1
    assert table.history(1)[0]["meta"] == '{"batch_id": 1}'
    assert table.to_pyarrow_table().to_pylist() == [{"k": "a", "n": 5}]
    feed = pa.table(table.load_cdf(starting_version=0).read_all()).to_pylist()
    assert sorted((r["_commit_version"], r["_change_type"], r["k"], r["n"]) for r in feed) == [
        (1, "insert", "a", 1),
        (1, "insert", "b", 2),
        (2, "delete", "b", 2),
        (2, "update_postimage", "a", 5),
        (2, "update_preimage", "a", 1),
    ]
    with pytest.raises(FileExistsError):  # a version is written once
        cdf.commit(path, 2, {"add": second}, ("app", 1), {}, {})
    # change_files: the cdc file of version 2; the add of version 1 as inserts
    files = change_files(path, commit_actions(path, 2))
    assert [f.path.rsplit("/", 2)[-2] for f in files] == ["_change_data"]
    files = change_files(path, commit_actions(path, 1))
    assert [f.partition_values for f in files] == [{OP: "+I"}]


def test_change_files_without_cdc_actions():
    commit = [
        {"commitInfo": {}},
        {"remove": {"path": "old.parquet", "dataChange": True, "size": 3}},
        {"add": {"path": "new.parquet", "dataChange": True, "size": 4}},
        {"add": {"path": "compacted.parquet", "dataChange": False, "size": 5}},
    ]
    files = change_files("/t", commit)
    assert [(f.path, f.partition_values[OP]) for f in files] == [
        ("/t/old.parquet", "-D"),
        ("/t/new.parquet", "+I"),
    ]


def test_read_change_feed_config():
    assert source_options({"read_change_feed": True})["readChangeFeed"] == "true"
    assert "readChangeFeed" not in source_options({})
    with pytest.raises(StreamingError, match="read_change_feed"):
        source_options({"read_change_feed": "yes"})


def test_every_100th_version_gets_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    DeltaTable.create(path, schema=SCHEMA, configuration={cdf.PROPERTY: "true"})
    rows = write(pa.table({"k": ["a"], "n": [1]}), path, SCHEMA, "part-00000-")
    for version in range(1, CHECKPOINT_INTERVAL + 1):
        cdf.commit(path, version, {"add": rows} if version == 1 else {}, ("app", version), {}, {})
    log = tmp_path / "t" / "_delta_log"
    assert (log / f"{CHECKPOINT_INTERVAL:020d}.checkpoint.parquet").exists()
    table = DeltaTable(path)
    assert table.version() == 100 and table.transaction_version("app") == 100
    assert table.to_pyarrow_table().to_pylist() == [{"k": "a", "n": 1}]


def test_the_tables_log_settings_checkpoint_and_clean_it(tmp_path):
    """delta.checkpointInterval and delta.logRetentionDuration of the table, as delta-rs's own
    commits follow them: a checkpoint every 3 versions here, and the log before the last one
    older than the retention (none here) removed; the table reads the same."""
    path = str(tmp_path / "t")
    config = {"delta.checkpointInterval": "3", "delta.logRetentionDuration": "interval 0 seconds"}
    DeltaTable.create(path, schema=SCHEMA, configuration={cdf.PROPERTY: "true", **config})
    config = DeltaTable(path).metadata().configuration
    for version in range(1, 8):
        rows = write(pa.table({"k": [str(version)], "n": [version]}), path, SCHEMA, f"p{version}-")
        cdf.commit(path, version, {"add": rows}, ("app", version), {}, config)
    log = sorted(p.name for p in (tmp_path / "t" / "_delta_log").iterdir())
    # (the checkpoint of version 3 was made, then expired with the commits before version 6)
    assert log == [f"{6:020d}.checkpoint.parquet", f"{6:020d}.json", f"{7:020d}.json"] + [
        "_last_checkpoint"
    ], log
    table = DeltaTable(path)
    assert table.version() == 7 and table.transaction_version("app") == 7
    assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == list(range(1, 8))
    # off: checkpoints, no cleanup
    path = str(tmp_path / "kept")
    off = {**config, "delta.enableExpiredLogCleanup": "false"}
    DeltaTable.create(path, schema=SCHEMA, configuration=off)
    for version in range(1, 7):
        cdf.commit(path, version, {}, ("app", version), {}, off)
    log = sorted(p.name for p in (tmp_path / "kept" / "_delta_log").iterdir())
    assert f"{6:020d}.checkpoint.parquet" in log and f"{1:020d}.json" in log, log
