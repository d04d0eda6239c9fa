"""A crash between a data micro-batch's commit and the batch without data that would emit the
windows its watermark closed: the next `dbt run`, with no new source data, emits them
(runtime/checkpoint.py), once; a stateless query gets no extra batch.

The state is made as a kill leaves it: `dbt run` with a fault at the no-data batch (after
Spark planned it, before anything was written), then that batch's offset log file deleted, which
is the checkpoint of a process killed after `commits/N` and before `offsets/N+1`."""

import json
import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.faults import EXIT_CODE

from .helpers import commits
from .test_exactly_once import DBT, MODEL, dbt_run, events, oracle, write_project

pytestmark = pytest.mark.slow

TESTS = "version: 2\nmodels:\n  - {name: per_item, data_tests: [snapshot_equivalence]}\n"
# TVF rows without an aggregate: a watermark, no state; Spark runs no batch without data for it.
STATELESS = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, item, price
FROM TABLE(TUMBLE(TABLE {{ source('feed', 'events') }}, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
WHERE price > 5
"""


def write_local_project(root, model: str = MODEL) -> str:
    """test_exactly_once's project (its source at a `meta: {location}`, which a `dbt test` of
    its own must find) with a snapshot_equivalence test. Returns the source's path."""
    write_project(root, model)
    (root / "project" / "models" / "tests.yml").write_text(TESTS)
    return str(root / "feed" / "events")


def dbt_test(project: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [DBT, "test", "--project-dir", project, "--profiles-dir", project],
        capture_output=True,
        text=True,
        timeout=600,
    )


def kill_before_planning(checkpoint: str, batch_id: int) -> None:
    """Make the checkpoint that a kill after `commits/<batch_id - 1>` and before
    `offsets/<batch_id>` leaves: delete that offset file (and its Hadoop checksum)."""
    assert os.path.isfile(os.path.join(checkpoint, "commits", str(batch_id - 1)))
    assert not os.path.exists(os.path.join(checkpoint, "commits", str(batch_id)))
    for name in (str(batch_id), f".{batch_id}.crc"):
        path = os.path.join(checkpoint, "offsets", name)
        if os.path.exists(path):
            os.remove(path)


def table(path: str) -> pd.DataFrame:
    return DeltaTable(path).to_pandas().sort_values(["window_start", "item"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A project whose model has run once over the first source version (batches 0 and 1)."""
    root = tmp_path_factory.mktemp("crash_watermark_base")
    write_deltalake(write_local_project(root), events(1, 0))
    first = dbt_run(str(root / "project"))
    assert first.returncode == 0, first.stdout[-3000:]
    return root


def test_closed_windows_are_emitted_without_new_data(base, tmp_path):
    root = tmp_path / "case"
    shutil.copytree(base, root)
    source = write_local_project(root)  # point the copy's profile and source at the copy
    project = str(root / "project")
    out = str(root / "warehouse" / "crash" / "per_item")
    checkpoint = os.path.join(out, "_dbt_streaming", "checkpoint")
    write_deltalake(source, events(2, 20), mode="append")  # batch 2 = data, batch 3 = watermark

    crashed = dbt_run(project, "before_write@3")
    assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
    kill_before_planning(checkpoint, 3)
    before = table(out)
    watermark_2 = commits(out)[-1]["watermark"]  # batch 2's, not yet the one it advanced to

    rerun = dbt_run(project)  # no new source data
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    meta = commits(out)
    assert [m["batch_id"] for m in meta][-1] == 3, meta
    last = meta[-1]
    assert last["sources"] == {"feed.events": 1} and last["watermark"] > watermark_2
    actual, expected = table(out), oracle(source, 1, last["watermark"])
    assert len(actual) == len(expected) > len(before)
    assert not actual.duplicated(["window_start", "item"]).any()
    pd.testing.assert_series_equal(
        actual["window_start"], expected["window_start"], check_dtype=False
    )
    assert list(actual["item"]) == list(expected["item"])
    assert np.allclose(actual["total"], expected["total"])
    assert list(actual["n"]) == list(expected["n"])

    tested = dbt_test(project)
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "PASS=1" in tested.stdout

    again = dbt_run(project)  # nothing more to emit: no batch, nothing duplicated
    assert again.returncode == 0, again.stdout[-3000:]
    assert len(commits(out)) == len(meta)
    pd.testing.assert_frame_equal(table(out), actual)
    assert sorted(os.listdir(os.path.join(checkpoint, "offsets")))[-1] == "3"

    write_deltalake(source, events(3, 40), mode="append")  # the planned batch 3 is a base
    later = dbt_run(project)
    assert later.returncode == 0, later.stdout[-3000:]
    last = commits(out)[-1]
    assert last["sources"] == {"feed.events": 2} and last["batch_id"] > 3
    actual, expected = table(out), oracle(source, 2, last["watermark"])
    assert len(actual) == len(expected) and not actual.duplicated(["window_start", "item"]).any()
    assert np.allclose(actual["total"], expected["total"])
    assert list(actual["n"]) == list(expected["n"])


def test_stateless_query_gets_no_extra_batch(tmp_path):
    root = tmp_path / "stateless"
    source, project = write_local_project(root, STATELESS), str(root / "project")
    out = str(root / "warehouse" / "crash" / "per_item")
    checkpoint = os.path.join(out, "_dbt_streaming", "checkpoint")
    write_deltalake(source, events(1, 0))
    first = dbt_run(project)
    assert first.returncode == 0, first.stdout[-3000:]
    offsets = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "offsets")) if n.isdigit())
    written = len(DeltaTable(out).to_pandas())
    assert written > 0
    with open(os.path.join(checkpoint, "commits", str(offsets[-1]))) as fh:
        advanced = json.loads(fh.read().split("\n")[1])["nextBatchWatermarkMs"]
    with open(os.path.join(checkpoint, "offsets", str(offsets[-1]))) as fh:
        assert advanced > json.loads(fh.read().split("\n")[1])["batchWatermarkMs"]

    again = dbt_run(project)
    assert again.returncode == 0, again.stdout[-3000:]
    after = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "offsets")) if n.isdigit())
    assert after == offsets
    assert len(DeltaTable(out).to_pandas()) == written
