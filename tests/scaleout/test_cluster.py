"""The adapter on a Spark standalone cluster (a master and two workers on loopback, see
standalone.py) with its warehouse on S3 (a moto server on loopback, moto_s3.py): the demo flow
of scripts/demo.sh gives the same tables as with `local[*]` and a local warehouse, its tasks
run on both workers (none in the driver), a run killed mid-batch recovers with no row lost or
duplicated, and a continuous model's runner is an application of its own on the cluster.
Every dbt command is a subprocess, as a user runs it."""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyarrow import fs

from dbt.adapters.spark_streaming.delta import storage
from dbt.adapters.spark_streaming.faults import EXIT_CODE
from dbt.adapters.spark_streaming.runtime.continuous import runner

from .projects import (
    DEMO,
    DEMO_WRITES,
    demo_project,
    event_log_conf,
    rows,
    run,
    run_flow,
    s3_keys,
    tables,
    tasks_by_worker,
    warehouse_of,
    write_profile,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TIMINGS: dict[str, list] = {}  # printed at the end of the module (pytest -s), for the docs


@pytest.fixture(scope="module", autouse=True)
def print_timings():
    yield
    print("\ncluster test timings (s):", json.dumps(TIMINGS, indent=1))


def test_demo_flow_on_the_cluster_and_s3_equals_local(spark_cluster, s3, tmp_path, request):
    events = tmp_path / "events"
    on_cluster = demo_project(
        tmp_path / "cluster",
        spark_cluster.url,
        event_log_conf(events),
        **s3_keys(s3, tmp_path / "cluster"),
    )
    local = demo_project(tmp_path / "local", "local[*]", {})
    # CI runs the last `dbt test` only (it checks the tables after both runs; ~55 s less)
    steps = DEMO if request.config.getoption("--full") else DEMO_WRITES + [DEMO[-1]]
    # The local reference runs meanwhile, without the `dbt test` steps (they write nothing).
    with ThreadPoolExecutor(1) as pool:
        local_flow = pool.submit(run_flow, local, DEMO_WRITES)
        TIMINGS["demo flow on the cluster"] = run_flow(on_cluster, steps)
        TIMINGS["demo flow local[*] (at the same time)"] = local_flow.result()

    expected, actual = (
        tables(warehouse_of(local)),
        tables(warehouse_of(on_cluster)),
    )
    assert sorted(actual) == sorted(expected)
    relations = [t for t in actual if t.count("/") == 1]
    assert len(relations) == 16, relations  # 6 seeds and 10 models
    for name in sorted(expected):
        assert actual[name] == expected[name], name
    assert all(actual[f"analytics/{m}"] for m in ("bids_per_10min", "bids_top_items"))
    # Nothing of the warehouse on the local disk: checkpoints and locks under checkpoint_root.
    assert not (on_cluster / "s3:").exists() and not (tmp_path / "cluster" / "warehouse").exists()
    assert (
        len(os.listdir(tmp_path / "cluster" / "checkpoints" / ".dbt_streaming" / "checkpoints"))
        == 10
    )

    # Where the tasks ran: every application's event log names the executor of each task, and
    # an executor's log URLs name the worker that started it.
    workers = {f"127.0.0.1:{port}" for port in spark_cluster.worker_ui_ports}
    apps = tasks_by_worker(events)
    # one application per dbt command that needs Spark (the session starts on first use, so a
    # command with nothing for Spark to do, as a seed may be, starts none)
    commands = sum(1 for step in steps if step[0] == "dbt")
    assert commands - 1 <= len(apps) <= commands, apps
    total = collections.Counter()
    for app, counts in apps.items():
        total.update(counts)
        if sum(counts.values()) >= 20:
            assert set(counts) == workers, (app, counts)
    assert set(total) == workers and min(total.values()) > 0, total
    TIMINGS["tasks per worker"] = dict(total)
    # The master and the workers saw the same applications.
    assert set(apps) <= {a["id"] for a in spark_cluster.state()["completedapps"]}
    for i in range(len(workers)):
        finished = {e["appid"] for e in spark_cluster.worker_state(i)["finishedexecutors"]}
        assert set(apps) <= finished, (i, finished)


# A small project of its own: one source (feed.events, a Delta table outside the warehouse),
# one model per test.
TUMBLE = """
{{{{ config(materialized='streaming_view', watermark_delay='1 minute'{extra}) }}}}
SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{{{ source('feed', 'events') }}}}, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
GROUP BY window_start, window_end, item
"""
BASE = datetime(2024, 1, 1, tzinfo=timezone.utc)


def small_project(root: Path, master: str, model: str, sql: str, **keys) -> tuple[Path, str]:
    """(project, source location): the source beside the warehouse, which is root/warehouse
    unless `keys` (profile keys: s3_keys) say otherwise."""
    warehouse = keys.pop("warehouse_path", str(root / "warehouse"))
    project, source = root / "project", storage.join(warehouse + "-feed", "events")
    (project / "models").mkdir(parents=True)
    (project / "dbt_project.yml").write_text(
        "name: on_cluster\nversion: '1.0'\nconfig-version: 2\nprofile: on_cluster\n"
    )
    write_profile(project, "on_cluster", master, warehouse, {}, **keys)
    (project / "models" / "sources.yml").write_text(
        "version: 2\nsources:\n  - name: feed\n    schema: feed\n    tables:\n"
        f"      - name: events\n        meta: {{location: '{source}'}}\n"
    )
    (project / "models" / f"{model}.sql").write_text(sql)
    return project, source


def events(start_minute: int, n: int = 200) -> pa.Table:
    """n events 6 s apart from start_minute, over three items."""
    ts = [BASE + timedelta(minutes=start_minute, seconds=6 * i) for i in range(n)]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "item": pa.array(["abc"[i % 3] for i in range(n)]),
            "price": pa.array([float(i % 7) for i in range(n)]),
        }
    )


def expected(*tables: pa.Table, size: int = 5) -> list[tuple]:
    """The windows (`size` minutes, per item) closed by the watermark (latest event - 1
    minute)."""
    data = pa.concat_tables(tables).to_pylist()
    watermark = max(r["ts"] for r in data) - timedelta(minutes=1)
    groups: dict = {}
    for r in data:
        start = r["ts"].replace(minute=r["ts"].minute // size * size, second=0, microsecond=0)
        total, n = groups.get((start, r["item"]), (0.0, 0))
        groups[(start, r["item"])] = (total + r["price"], n + 1)
    out = [
        (start, start + timedelta(minutes=size), item, total, n)
        for (start, item), (total, n) in groups.items()
        if start + timedelta(minutes=size) <= watermark
    ]
    return sorted(out, key=repr)


def batch_ids(path: str) -> list[int]:
    """Batch ids of the table's commits, oldest first (from our commitInfo metadata)."""
    out = []
    for entry in reversed(DeltaTable(path).history()):
        meta = json.loads(entry.get("dbt_spark_streaming") or "{}")
        if meta.get("batch_id") is not None:
            out.append(meta["batch_id"])
    return out


def test_crash_on_the_cluster_and_s3_then_rerun(spark_cluster, s3, tmp_path):
    """The dbt process (the application's driver) dies at batch 1 of the first run once the
    batch's data files are written (during_write), then again while the next run replays that
    batch, after its Delta commit but before Spark's checkpoint commit (after_delta_commit).
    The run after that, with new data, recovers: no row lost or duplicated. The table is
    compacted every 2 small files (the executors write the new files to S3), and once a vacuum
    has run no file is left on S3 but the table's: neither the crashed attempt's nor the ones
    compactions replaced."""
    keys = s3_keys(s3, tmp_path)
    warehouse = keys["warehouse_path"]
    sql = TUMBLE.format(extra=", auto_compact={'min_files': 2}")
    project, source = small_project(tmp_path, spark_cluster.url, "per_item", sql, **keys)
    first, second = events(0), events(20)
    write_deltalake(source, first)
    timings = []
    for fault in ("during_write@1", "after_delta_commit@1"):
        crashed, seconds = run(project, ["dbt", "run"], fault=fault)
        assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
        assert f"injected fault {fault.replace('@', ' at batch ')}" in crashed.stderr
        timings.append([f"dbt run (crashes at {fault})", seconds])

    write_deltalake(source, second, mode="append")
    rerun, seconds = run(project, ["dbt", "run"])
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    TIMINGS["crash and recovery"] = timings + [["dbt run", seconds]]

    table = storage.join(warehouse, "analytics", "per_item")
    ids = batch_ids(table)
    assert ids == sorted(set(ids)) and ids[-1] >= 3, ids  # no batch committed twice
    assert rows(table) == expected(first, second)
    assert "OPTIMIZE" in [h.get("operation") for h in DeltaTable(table).history()]
    vacuum, _ = run(project, ["dbt", "run-operation", "vacuum", "--args", "{retention_hours: 0}"])
    assert vacuum.returncode == 0, vacuum.stdout[-3000:]
    filesystem, path = storage.filesystem(table)
    files = {i.base_name for i in filesystem.get_file_info(fs.FileSelector(path)) if i.is_file}
    assert files == {os.path.basename(p) for p in DeltaTable(table).file_uris()}


def test_continuous_runner_on_the_cluster(spark_cluster, tmp_path):
    """`dbt run` starts the runner of three continuous models (two window aggregates and an
    upsert_table over one of them), a process whose SparkSession is one application on the
    cluster (with executors on both workers), a query per model; they pick up new data by
    themselves, the chain's end included."""
    every = ", trigger={'processing_time': '2 seconds'}"
    project, source = small_project(
        tmp_path, spark_cluster.url, "per_item_live", TUMBLE.format(extra=every)
    )
    models = project / "models"
    (models / "per_item_10.sql").write_text(
        TUMBLE.format(extra=every).replace("INTERVAL '5' MINUTES", "INTERVAL '10' MINUTES")
    )
    (models / "item_totals.sql").write_text(
        f"{{{{ config(materialized='upsert_table', unique_key='item', constant_domain='item'"
        f"{every}) }}}}\nSELECT item, SUM(total) AS total, SUM(n) AS n "
        "FROM {{ ref('per_item_live') }} GROUP BY item"
    )
    warehouse = str(tmp_path / "warehouse")
    names = [f"analytics.{m}" for m in ("per_item_live", "per_item_10", "item_totals")]
    table = {m: str(tmp_path / "warehouse" / "analytics" / m.split(".")[1]) for m in names}
    first, second = events(0), events(20)
    write_deltalake(str(source), first)
    try:
        done, seconds = run(project, ["dbt", "run"])
        assert done.returncode == 0, done.stdout[-3000:]
        assert done.stdout.count("running continuously every 2 seconds") == 3, done.stdout
        st = [runner.status(warehouse, n) for n in names]
        assert all(s["alive"] and s["pipeline"] == "default" for s in st), st
        assert len({s["pid"] for s in st}) == 1, st  # one runner process for the three
        assert rows(table[names[0]]) == expected(first)

        appended = time.time()
        write_deltalake(str(source), second, mode="append")
        windows = expected(first, second)
        wait_for(lambda: rows(table[names[0]]) == windows, 180)
        wait_for(lambda: rows(table[names[1]]) == expected(first, second, size=10), 180)
        wait_for(lambda: rows(table[names[2]]) == totals(windows), 180)
        TIMINGS["continuous"] = [["dbt run", seconds], ["append to rows", time.time() - appended]]

        # dbt has exited: the one application left is the runner's, with an executor on each
        # worker.
        apps = wait_for(lambda: _one(spark_cluster.state()["activeapps"]), 60)
        for i in range(len(spark_cluster.worker_ui_ports)):
            running = spark_cluster.worker_state(i)["executors"]
            assert apps[0]["id"] in {e["appid"] for e in running}, (i, running)
    finally:
        st = [runner.stop(warehouse, n, timeout=60) for n in names]  # as `stream_stop`
        for s in st:
            if s.get("alive"):
                os.kill(s["pid"], signal.SIGKILL)
    assert [s["state"] for s in st] == ["stopped"] * 3, st
    wait_for(lambda: not spark_cluster.state()["activeapps"], 60)  # the last stop ended it


def totals(windows: list[tuple]) -> list[tuple]:
    """Per item, the sum of its windows' totals and counts."""
    out: dict = {}
    for _, _, item, total, n in windows:
        t, c = out.get(item, (0.0, 0))
        out[item] = (t + total, c + n)
    return sorted((item, t, c) for item, (t, c) in out.items())


def _one(items: list) -> list | None:
    return items if len(items) == 1 else None


def wait_for(check, timeout: float):
    """Poll `check()` until it returns a true value (which is returned)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s")
