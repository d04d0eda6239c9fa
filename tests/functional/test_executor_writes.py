"""A streaming_view's micro-batch is written by Spark tasks (delta/writer.py): one Parquet file
per task, committed by the driver as one Delta commit; the files of a batch that crashed
before its commit do not outlive the batch's next commit."""

import json
import os

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.faults import EXIT_CODE

from .helpers import append_bids, commits, rows, table_path, ts
from .test_exactly_once import dbt_run, events, write_project

SOURCES_YML = """
version: 2
sources:
  - name: feed
    schema: "{{ target.schema }}"
    tables:
      - name: bids
        meta: {location: "%s"}
"""

COPY = """
{{ config(materialized='streaming_view') }}
SELECT item, price * 2 AS doubled, bidtime FROM {{ source('feed', 'bids') }} WHERE price > 1
"""

VERSIONS = [
    [("2020-04-15 08:07:00", 2, "A"), ("2020-04-15 08:11:00", 1, "B")],
    [("2020-04-15 08:05:00", 4, "C")],
    [("2020-04-15 08:09:00", 5, "D"), ("2020-04-15 08:13:00", 3, "E")],
    [("2020-04-15 08:17:00", 6, "F")],
]
LATER = [[("2020-04-15 09:00:00", 7, "G")], [("2020-04-15 09:01:00", 0.5, "H")]]
# the tasks reading the four versions' files: a partition per core of the session (local[*]),
# at most one per file (delta/source.py)
TASKS = min(len(VERSIONS), os.cpu_count() or 1)


def added(path: str, version: int) -> list[dict]:
    """The add actions of one commit of the Delta table at `path`."""
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [a["add"] for a in map(json.loads, fh) if "add" in a]


def expected(versions) -> list[tuple]:
    return sorted(
        (item, price * 2.0, ts(at)) for v in versions for at, price, item in v if price > 1
    )


class TestMicroBatchFilesFromTasks:
    @pytest.fixture(scope="class")
    def location(self, tmp_path_factory):
        path = str(tmp_path_factory.mktemp("feed") / "bids")
        for bids in VERSIONS:  # four versions, four files: the first batch reads them in TASKS
            append_bids(path, bids)
        return path

    @pytest.fixture(scope="class")
    def models(self, location):
        return {"sources.yml": SOURCES_YML % location, "copy.sql": COPY}

    def test_each_task_writes_a_file_and_the_batch_is_one_commit(self, project, location):
        run_dbt(["run"])
        out = table_path(project, "copy")
        assert rows(out) == expected(VERSIONS)
        (first,) = [c for c in commits(out) if c["batch_id"] == 0]
        files = added(out, first["table_version"])
        # the first batch read 4 files in TASKS Spark partitions: a file per task, one commit
        assert sorted(f["path"][: len("part-00000-00000")] for f in files) == [
            f"part-00000-0000{task}" for task in range(TASKS)
        ]
        assert sum(json.loads(f["stats"])["numRecords"] for f in files) == len(expected(VERSIONS))

        for bids in LATER:
            append_bids(location, bids)
        run_dbt(["run"])
        assert rows(out) == expected(VERSIONS + LATER)
        (second,) = [c for c in commits(out) if c["batch_id"] == 1]
        assert second["sources"] == {f"{project.test_schema}.bids": 5}
        files = added(out, second["table_version"])
        # two new versions, two tasks; the one holding only H (filtered out) writes no file
        assert [f["path"][: len("part-00001-00000")] for f in files] == ["part-00001-00000"]
        assert json.loads(files[0]["stats"])["numRecords"] == 1
        assert json.loads(files[0]["stats"])["minValues"]["item"] == "G"


TABLE = """
{{ config(materialized='table') }}
SELECT item, price{{ var('extra', '') }} FROM {{ source('feed', 'bids') }}
"""
APPEND = """
{{ config(materialized='incremental') }}
SELECT item, price FROM {{ source('feed', 'bids') }}
{% if is_incremental() %} WHERE item > (SELECT MAX(item) FROM {{ this }}) {% endif %}
"""


def log(path: str, version: int) -> list[str]:
    """The kinds of actions of one commit: add, remove, metaData, ..."""
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return sorted(k for a in map(json.loads, fh) for k in a if k != "commitInfo")


class TestBatchWritesFromTasks:
    """`table` and incremental `append` models: Spark tasks write the files, one commit each."""

    @pytest.fixture(scope="class")
    def location(self, tmp_path_factory):
        path = str(tmp_path_factory.mktemp("feed") / "bids")
        for bids in VERSIONS:
            append_bids(path, bids)
        return path

    @pytest.fixture(scope="class")
    def models(self, location):
        return {"sources.yml": SOURCES_YML % location, "snap.sql": TABLE, "inc.sql": APPEND}

    def test_rebuilds_and_appends(self, project, location):
        run_dbt(["run"])
        snap, inc = table_path(project, "snap"), table_path(project, "inc")
        everything = sorted((item, float(price)) for v in VERSIONS for _, price, item in v)
        assert rows(snap) == rows(inc) == everything
        files = added(snap, 0)
        tasks = sorted(f["path"].split("-")[2] for f in files)  # part-<write>-<task>-<uuid>
        assert tasks == [f"0000{task}" for task in range(TASKS)]
        table_id = DeltaTable(snap).metadata().id

        # the same columns: one overwrite commit (removes + adds), same table
        run_dbt(["run", "-s", "snap"])
        assert DeltaTable(snap).version() == 1 and log(snap, 1).count("remove") == TASKS
        assert "metaData" not in log(snap, 1) and DeltaTable(snap).metadata().id == table_id
        assert rows(snap) == everything
        # another column: one commit replaces schema and files
        run_dbt(["run", "-s", "snap", "--vars", "{extra: ', 1 AS one'}"])
        assert DeltaTable(snap).version() == 2 and "metaData" in log(snap, 2)
        assert rows(snap) == [(item, price, 1) for item, price in everything]
        assert len(DeltaTable(snap).file_uris()) == TASKS

        for bids in LATER:
            append_bids(location, bids)
        run_dbt(["run", "-s", "inc"])
        # G and H, written by the one or two tasks that read their files (one file each)
        assert DeltaTable(inc).version() == 1 and set(log(inc, 1)) == {"add"}
        later = sorted((item, float(price)) for v in LATER for _, price, item in v)
        assert rows(inc) == sorted(everything + later)


STATELESS = """
{{ config(materialized='streaming_view') }}
SELECT ts, item, price FROM {{ source('feed', 'events') }}
"""


@pytest.mark.slow
def test_a_crash_after_the_files_leaves_no_orphan_once_the_batch_commits(tmp_path):
    write_project(tmp_path, STATELESS)
    project, source = str(tmp_path / "project"), str(tmp_path / "feed" / "events")
    out = str(tmp_path / "warehouse" / "crash" / "per_item")
    write_deltalake(source, events(1, 0))
    assert dbt_run(project).returncode == 0  # batch 0
    write_deltalake(source, events(2, 20), mode="append")

    crashed = dbt_run(project, "during_write@1")
    assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
    orphans = {n for n in os.listdir(out) if n.startswith("part-00001-")}
    assert orphans, "the crashed attempt wrote its files"
    assert [c["batch_id"] for c in commits(out)] == [None, 0]

    rerun = dbt_run(project)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert [c["batch_id"] for c in commits(out)] == [None, 0, 1]
    referenced = set(pa.table(DeltaTable(out).get_add_actions())["path"].to_pylist())
    on_disk = {n for n in os.listdir(out) if n.endswith(".parquet")}
    assert on_disk == referenced and not orphans & on_disk
    order = [(c, "ascending") for c in ("ts", "item", "price")]
    got = DeltaTable(out).to_pyarrow_table().sort_by(order)
    want = DeltaTable(source).to_pyarrow_table().select(["ts", "item", "price"]).sort_by(order)
    assert got.num_rows == 800 and got.equals(want)
