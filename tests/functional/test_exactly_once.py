"""Exactly once across crashes: `dbt run` is killed (fault hook, os._exit) at each point of a
micro-batch, then run again; the table must equal the batch oracle over the consumed
snapshot, with no window lost or duplicated.

Each `dbt run` is a real subprocess. Events are random with bounded disorder (<= 40 s,
below the 1-minute watermark delay, so no row is late and the oracle is exact)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta import origins
from dbt.adapters.spark_streaming.faults import ENV, EXIT_CODE

from .helpers import committed_once, write_crash_project

pytestmark = pytest.mark.slow

DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
MODEL = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ source('feed', 'events') }}, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
GROUP BY window_start, window_end, item
"""


def events(seed: int, start_minute: int, n: int = 400) -> pa.Table:
    """n events over 20 minutes from start_minute, shuffled within 40 s of disorder."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2024-01-01T00:00:00", "us") + np.timedelta64(start_minute * 60, "s")
    offsets = np.sort(rng.integers(0, 20 * 60 * 10**6, n)) + rng.integers(-40 * 10**6, 1, n)
    ts = pa.array(base + np.maximum(offsets, 0).astype("timedelta64[us]"), pa.timestamp("us")).cast(
        pa.timestamp("us", tz="UTC")
    )
    return pa.table(
        {"ts": ts, "item": rng.choice(list("abc"), n), "price": np.round(rng.random(n) * 10, 2)}
    )


def oracle(source: str, version: int, watermark: str) -> pd.DataFrame:
    """The query in batch over the source snapshot, restricted to windows the watermark closed."""
    df = DeltaTable(source, version=version).to_pandas()
    df["window_start"] = df["ts"].dt.floor("5min")
    out = df.groupby(["window_start", "item"], as_index=False).agg(
        total=("price", "sum"), n=("price", "size")
    )
    out = out[out["window_start"] + pd.Timedelta("5min") <= pd.Timestamp(watermark, tz="UTC")]
    return out.sort_values(["window_start", "item"]).reset_index(drop=True)


def dbt_run(project: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if fault:
        env[ENV] = fault
    return subprocess.run(
        [DBT, "run", "--project-dir", project, "--profiles-dir", project],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def write_project(root, model: str = MODEL) -> None:
    """The dbt project under root/project (one model, per_item), with its warehouse and source
    under root."""
    project, source = root / "project", root / "feed" / "events"
    write_crash_project(project, root / "warehouse")
    (project / "models" / "sources.yml").write_text(
        "version: 2\nsources:\n  - name: feed\n    schema: feed\n    tables:\n"
        f"      - name: events\n        meta: {{location: '{source}'}}\n"
    )
    (project / "models" / "per_item.sql").write_text(model)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A project whose model has run once over the first source version (batches 0 and 1)."""
    root = tmp_path_factory.mktemp("exactly_once_base")
    write_project(root)
    write_deltalake(str(root / "feed" / "events"), events(1, 0))
    first = dbt_run(str(root / "project"))
    assert first.returncode == 0, first.stdout[-3000:]
    return root


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param("before_write@2", marks=pytest.mark.full),
        "during_write@2",
        "after_delta_commit@2",
        pytest.param("after_delta_commit@3", marks=pytest.mark.full),
    ],
)
def test_crash_then_rerun_loses_and_duplicates_nothing(base, tmp_path, fault):
    crash_and_rerun(base, tmp_path, fault)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param("after_compaction@2", marks=pytest.mark.full),
        pytest.param("compaction_written", marks=pytest.mark.full),
        "compaction_committed",
    ],
)
def test_a_crash_in_or_after_a_compaction_loses_and_duplicates_nothing(base, tmp_path, fault):
    """Compacted after batch 2's commit (every 2 small files), killed with its files written
    but not committed, committed but not recorded as final (delta/origins.py), or after it,
    before Spark's checkpoint commit: the rerun replays batch 2, compacts again, and leaves no
    record pending; every file a compaction replaced is read where its rows went."""
    compacting = MODEL.replace("'1 minute'", "'1 minute', auto_compact={'min_files': 2}")
    out = crash_and_rerun(base, tmp_path, fault, compacting)
    assert "OPTIMIZE" in [h.get("operation") for h in DeltaTable(out).history()]
    folder = os.path.join(out, "_dbt_streaming", "compacted")
    assert [r for r in os.listdir(folder) if r.endswith(".json")]
    assert os.listdir(os.path.join(folder, "pending")) == [origins.BESIDE_SETTLED]
    moved = origins.moved(out)
    assert all(os.path.exists(os.path.join(out, f)) for f, _, _ in moved.values())


def test_a_crash_after_a_vacuum_loses_and_duplicates_nothing(base, tmp_path):
    """The model's run vacuums (its last vacuum an hour ago, retention 0) after batch 2's
    commit and compaction, and is killed before Spark's checkpoint commit: the rerun replays
    batch 2 over the vacuumed table."""
    model = MODEL.replace(
        "'1 minute'",
        "'1 minute', auto_compact={'min_files': 2}, "
        "tblproperties={'delta.deletedFileRetentionDuration': 'interval 0 seconds'}",
    )

    def vacuum_due(out: str) -> None:
        os.remove(os.path.join(out, "_dbt_streaming", "vacuumed"))

    out = crash_and_rerun(base, tmp_path, "after_vacuum@2", model, vacuum_due)
    stored = {f for f in os.listdir(out) if f.endswith(".parquet")}
    live = {os.path.basename(u) for u in DeltaTable(out).file_uris()}
    log = os.path.join(out, "_delta_log")
    added = {
        json.loads(line)["add"]["path"]
        for name in os.listdir(log)
        if name.endswith(".json")
        for line in open(os.path.join(log, name))
        if '"add"' in line
    }
    assert live <= stored and added - stored  # files compactions replaced were deleted


def crash_and_rerun(base, tmp_path, fault: str, model: str = MODEL, before=None) -> str:
    """Kill `dbt run` at `fault` (after `before(table path)`), run again; the table must equal
    the oracle. Its path."""
    root = tmp_path / "case"
    shutil.copytree(base, root)
    write_project(root, model)  # point the copy's profile and source at the copy
    project, source = str(root / "project"), str(root / "feed" / "events")
    out = str(root / "warehouse" / "crash" / "per_item")
    if before is not None:
        before(out)
    write_deltalake(source, events(2, 20), mode="append")  # batch 2 = data, batch 3 = watermark

    crashed = dbt_run(project, fault)
    assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
    assert f"injected fault {fault.replace('@', ' at batch ')}" in crashed.stderr

    write_deltalake(source, events(3, 40), mode="append")
    rerun = dbt_run(project)
    assert rerun.returncode == 0, rerun.stdout[-3000:]

    meta = committed_once(out)
    last = meta[-1]
    assert last["sources"] == {"feed.events": 2}
    actual = (
        DeltaTable(out).to_pandas().sort_values(["window_start", "item"]).reset_index(drop=True)
    )
    expected = oracle(source, 2, last["watermark"])
    assert not actual.duplicated(["window_start", "item"]).any()
    assert len(actual) == len(expected) > 0
    pd.testing.assert_series_equal(
        actual["window_start"], expected["window_start"], check_dtype=False
    )
    assert list(actual["item"]) == list(expected["item"])
    assert np.allclose(actual["total"], expected["total"]) and list(actual["n"]) == list(
        expected["n"]
    )
    return out
