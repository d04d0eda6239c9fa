"""Concurrent runs of one model, through real `dbt run` processes: one proceeds, the other fails
fast with SSR307 naming the holder; a lock left by a killed process is taken over; no row lost.

A run is held at a point with the pause hook (faults.py, DBT_SPARK_STREAMING_PAUSE) while it
holds the model's lock, so the contention is certain, not a matter of timing. The project is
the kill harness's (kill.py): `per_item` (available-now) and `per_item_live` (continuous); its
`upsert_table` is not run here."""

import os
import signal
import time
from pathlib import Path

import pytest
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.runtime.continuous import runner

from .kill import (
    Figures,
    check_windowed,
    dbt,
    events,
    finish,
    kill_group,
    make_project,
    runner_pids,
    source,
    stop_runners,
    table,
    wait_caught_up,
)

pytestmark = pytest.mark.slow
LIVE = "crash.per_item_live"


def held(proc, flag: str, timeout: float = 600.0) -> int:
    """Wait until `proc` is held at its pause (it wrote its pid to `flag`); that pid."""
    deadline = time.time() + timeout
    while not (os.path.exists(flag) and Path(flag).read_text()):
        assert proc.poll() is None, finish(proc, 10)[1][-3000:]
        assert time.time() < deadline, "the run never reached its pause"
        time.sleep(0.5)
    return int(Path(flag).read_text())


def refused(root, model: str, holder: int) -> None:
    """A `dbt run -s model` now fails with SSR307 naming process `holder`, writing nothing."""
    before = sorted(os.walk(table(root, model)))
    code, out = finish(dbt(root, "run", "-s", model), 600)
    assert code == 1 and "SSR307" in out and f"process {holder} on host" in out, out[-3000:]
    assert sorted(os.walk(table(root, model))) == before


def exact(root, *models: str) -> None:
    fig = Figures()
    for model in models:
        check_windowed(root, model, fig)
    assert (fig.lost, fig.duplicated, fig.wrong) == (0, 0, 0) and fig.rows_checked > 0, fig


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The harness's project, `per_item` run once over the source's first version."""
    root = tmp_path_factory.mktemp("concurrency")
    make_project(root)
    write_deltalake(source(root), events(1, 0, 200))
    try:
        code, out = finish(dbt(root, "run", "-s", "per_item"), 900)
        assert code == 0, out[-4000:]
        yield root
    finally:
        stop_runners(root)


@pytest.mark.full  # the lock's refusal and a stale lock: test_lifecycle.py TestLock
def test_two_runs_at_once_then_the_holder_killed(root):
    flag = str(root / "held_available_now")
    write_deltalake(source(root), events(2, 20, 200), mode="append")
    first = dbt(root, "run", "-s", "per_item", pause=f"before_write={flag}")
    pid = held(first, flag)
    assert pid == first.pid  # dbt's own process holds the lock, its Spark driver inside
    refused(root, "per_item", first.pid)

    # the holder killed (its process group, Spark's JVM with it) while it holds the lock
    kill_group(first.pid)
    first.wait()
    assert os.path.exists(root / "warehouse" / ".dbt_streaming" / "locks" / "crash.per_item.lock")
    code, out = finish(dbt(root, "run", "-s", "per_item"), 600)
    assert code == 0, out[-3000:]
    exact(root, "per_item")


def test_continuous_model_starting_then_its_runner_killed(root):
    flag = str(root / "held_continuous")
    write_deltalake(source(root), events(3, 40, 200), mode="append")
    # `dbt run` holds the lock, its runner not yet started: a second run of the model is refused
    first = dbt(root, "run", "-s", "per_item_live", pause=f"runner_start={flag}")
    held(first, flag)
    refused(root, "per_item_live", first.pid)
    os.remove(flag)
    code, out = finish(first, 600)
    assert code == 0 and "running continuously" in out, out[-3000:]
    (only,) = runner_pids(root)  # one runner, and its status says so
    st = runner.status(str(root / "warehouse"), LIVE)
    assert st["pid"] == only and st["alive"] and st["state"] == "running"

    # the runner killed: it leaves its lock; the next `dbt run` takes it over and restarts it
    os.kill(only, signal.SIGKILL)
    write_deltalake(source(root), events(4, 60, 200), mode="append")
    code, out = finish(dbt(root, "run", "-s", "per_item", "per_item_live"), 600)
    assert code == 0 and "restarting it from its checkpoint" in out, out[-3000:]
    assert runner_pids(root) not in ([], [only])
    wait_caught_up(root, ["per_item_live"])
    exact(root, "per_item", "per_item_live")
