"""Lifecycle of a streaming model: one run at a time (the lock), and `--full-refresh` that a
crash at any point leaves with the old table or the new one, never a mix or nothing."""

import json
import os
import socket
import subprocess
import sys

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.spark_streaming.faults import ENV, EXIT_CODE

from .helpers import commits, rows, table_path
from .test_streaming_view import BIDS_CSV

DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
MODEL = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""
CHANGED = MODEL.replace("SUM(price) AS total", "SUM(price) AS total, COUNT(*) AS n")


class Base:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"bids.csv": BIDS_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": MODEL}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }


def control_path(project, kind: str, suffix: str = "") -> str:
    """The model's file under `<warehouse>/.dbt_streaming/<kind>/` (locks, refresh)."""
    return os.path.join(
        project.adapter.config.credentials.warehouse_path,
        ".dbt_streaming",
        kind,
        f"{project.test_schema}.per_10min{suffix}",
    )


def lock_file(project) -> str:
    return control_path(project, "locks", ".lock")


class TestLock(Base):
    def test_second_run_refused_and_stale_lock_broken(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        before = rows(table_path(project, "per_10min"))
        assert not os.path.exists(lock_file(project))  # released after the run

        # A live process (this one) on this host holds the lock: refused at once, table untouched.
        with open(lock_file(project), "w") as fh:
            json.dump(
                {"pid": os.getpid(), "host": socket.gethostname(), "since": "2026-11-22 08:00:00"},
                fh,
            )
        _, out = run_dbt_and_capture(["run"], expect_pass=False)
        assert "SSR307" in out and f"process {os.getpid()} on host {socket.gethostname()}" in out
        assert rows(table_path(project, "per_10min")) == before

        # Its process is gone: the lock is stale, broken, and the run proceeds.
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        with open(lock_file(project), "w") as fh:
            json.dump(
                {"pid": gone.pid, "host": socket.gethostname(), "since": "2026-11-22 08:00:00"}, fh
            )
        run_dbt(["run"])
        assert not os.path.exists(lock_file(project))


def dbt_subprocess(project, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if fault:
        env[ENV] = fault
    return subprocess.run(
        [DBT, *args, "--project-dir", project.project_root, "--profiles-dir", project.profiles_dir],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
class TestFullRefreshCrashSafety(Base):
    def test_crash_leaves_old_or_new_table(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        path = table_path(project, "per_10min")
        old = rows(path)
        with open(os.path.join(project.project_root, "models", "per_10min.sql"), "w") as fh:
            fh.write(CHANGED)
        _, out = run_dbt_and_capture(["run"], expect_pass=False)
        assert "SSR301" in out  # a changed query over old state needs --full-refresh
        assert (
            "(- SELECT window_start, window_end, SUM(price) AS total / "
            "+ SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS n)"
        ) in out

        # Crash while the new table is being built, then once it is built but not swapped in:
        # the old table is still there, unchanged.
        for fault in ("during_write@0", "refresh_built"):
            proc = dbt_subprocess(project, "run", "--full-refresh", fault=fault)
            assert proc.returncode == EXIT_CODE, proc.stdout + proc.stderr
            assert rows(path) == old, fault

        # Crash right after the swap: old and new table were exchanged in one step, so the
        # table is already the new one (readers never find none); the next run, even without
        # --full-refresh, finishes the refresh (deletes the old table from the build's place).
        proc = dbt_subprocess(project, "run", "--full-refresh", fault="refresh_swapping")
        assert proc.returncode == EXIT_CODE, proc.stdout + proc.stderr
        new = rows(path)
        _, out = run_dbt_and_capture(["run"])
        assert "finished a full refresh that was interrupted" in out
        assert rows(path) == new
        assert not any(os.scandir(os.path.dirname(control_path(project, "refresh")))), (
            "the old table is deleted from the build's place"
        )
        assert [r[:3] for r in new] == old and [r[3] for r in new] == [3]  # 08:00 window: 3 bids
        assert len({c["fingerprint"] for c in commits(path)}) == 1  # only the new query's commits
        run_dbt(["run"])  # and it keeps running from the new checkpoint
        assert rows(path) == new


DOUBLED = """
{{ config(materialized='streaming_view') }}
SELECT window_start, total * 2 AS doubled FROM {{ ref('per_10min') }}
"""


class TestUpstreamRebuilt(Base):
    """A downstream model's positions are versions of its source's Delta table: after the
    upstream's --full-refresh (a new table, a new history) they mean nothing, so the downstream
    is refused (SSR327) instead of skipping or repeating rows, and its --full-refresh works."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": MODEL, "doubled.sql": DOUBLED}

    def test_downstream_of_a_rebuilt_table_is_refused(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        down = table_path(project, "doubled")
        before, versions = rows(down), len(commits(down))
        totals = [(r[0], r[2] * 2) for r in rows(table_path(project, "per_10min"))]
        assert sorted(before) == sorted(totals) and before
        run_dbt(["run", "-s", "per_10min", "--full-refresh"])
        _, out = run_dbt_and_capture(["run", "-s", "doubled"], expect_pass=False)
        assert "SSR327" in out and "another Delta table" in out, out[-2000:]
        assert rows(down) == before and len(commits(down)) == versions  # untouched
        run_dbt(["run", "-s", "doubled", "--full-refresh"])  # the advice, followed
        assert sorted(rows(down)) == sorted(totals)
        run_dbt(["run"])  # and both go on
        assert sorted(rows(down)) == sorted(totals)
