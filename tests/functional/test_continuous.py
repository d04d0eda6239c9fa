"""Continuous mode: `dbt run` starts the model's query in a detached runner process; a second
`dbt run` is a no-op while it is healthy and restarts it (from its checkpoint) when it died;
`stream_status` shows it and `stream_stop` stops it. The table is compared with exact rows
and with the snapshot_equivalence test."""

import os
import signal
import time

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.spark_streaming.runtime.continuous import runner

from . import test_lifecycle as lifecycle
from .helpers import append_bids, commits, rows, table_path, ts

MODEL = """
{{ config(materialized='streaming_view', watermark_delay='1 minute', \
trigger={'processing_time': '2 seconds'}) }}
SELECT window_start, window_end, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""
CHANGED = MODEL.replace("SUM(price) AS total", "SUM(price) AS total, COUNT(*) AS n")
TESTS = "models:\n  - {name: per_10min, data_tests: [snapshot_equivalence]}\n"


def window(start: str, end: str, *values) -> tuple:
    return (ts(f"2020-04-15 {start}"), ts(f"2020-04-15 {end}"), *values)


def wait_for(check, timeout: float = 300.0):
    """Poll `check()` until it returns a true value (which is returned)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {check.__doc__ or check}")


class Base(lifecycle.Base):
    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": MODEL, "tests.yml": TESTS}

    @pytest.fixture(scope="class", autouse=True)
    def stop_runners_after(self, project):
        yield
        warehouse = project.adapter.config.credentials.warehouse_path
        for name in runner.names(warehouse):  # never leave a runner behind, even on failure
            st = runner.status(warehouse, name)
            if st and st["alive"]:
                os.kill(st["pid"], signal.SIGKILL)

    def status(self, project) -> dict:
        return runner.status(
            project.adapter.config.credentials.warehouse_path, f"{project.test_schema}.per_10min"
        )


class TestContinuous(Base):
    def test_run_status_kill_restart_stop(self, project):
        path = table_path(project, "per_10min")
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["run"])
        assert "running continuously every 2 seconds" in out
        first = self.status(project)
        assert first["alive"] and first["state"] == "running"
        # dbt run returned after the first batch: the closed window is there.
        assert rows(path) == [window("08:00", "08:10", 11.0)]

        # Unchanged model, healthy runner: a logged no-op.
        _, out = run_dbt_and_capture(["run"])
        assert "nothing to do" in out and self.status(project)["pid"] == first["pid"]

        # New data appears within the trigger interval plus one batch, without dbt.
        appended = time.time()
        append_bids(
            os.path.join(
                project.adapter.config.credentials.warehouse_path, project.test_schema, "bids"
            ),
            [("2020-04-15 08:25:00", 7, "G"), ("2020-04-15 08:31:00", 8, "H")],
        )
        wait_for(lambda: len(rows(path)) == 3)
        latency = time.time() - appended
        assert rows(path) == [
            window("08:00", "08:10", 11.0),
            window("08:10", "08:20", 10.0),
            window("08:20", "08:30", 7.0),
        ]
        assert latency < 120, latency  # 2 s trigger + one batch; generous for a loaded CI machine
        # every batch's input rows counted once: the 6 seeded, then the 2 appended
        wait_for(lambda: self.status(project)["rows_read"] >= 8)
        assert self.status(project)["rows_read"] == 8

        _, out = run_dbt_and_capture(["run-operation", "stream_status"])
        line = next(ln for ln in out.splitlines() if f"{project.test_schema}.per_10min" in ln)
        assert " running " in line and f"pid {first['pid']}" in line and "bids 0" in line, line

        # SIGKILL: the runner dies mid-flight; data keeps arriving.
        os.kill(first["pid"], signal.SIGKILL)
        wait_for(lambda: not self.status(project)["alive"])
        assert self.status(project)["state"] == "dead"
        append_bids(
            os.path.join(
                project.adapter.config.credentials.warehouse_path, project.test_schema, "bids"
            ),
            [("2020-04-15 08:33:00", 1, "I"), ("2020-04-15 08:45:00", 2, "J")],
        )
        _, out = run_dbt_and_capture(["run"])
        assert "its runner dead" in out and "restarting it from its checkpoint" in out
        second = self.status(project)
        assert second["alive"] and second["pid"] != first["pid"]
        wait_for(lambda: len(rows(path)) == 4)
        # No loss, no duplicate: every window once, batch ids strictly increasing.
        assert rows(path) == [
            window("08:00", "08:10", 11.0),
            window("08:10", "08:20", 10.0),
            window("08:20", "08:30", 7.0),
            window("08:30", "08:40", 9.0),
        ]
        batch_ids = [c["batch_id"] for c in commits(path) if c["batch_id"] is not None]
        assert batch_ids == sorted(set(batch_ids))
        run_dbt(["test"])  # snapshot equivalence while the runner runs

        _, out = run_dbt_and_capture(
            ["run-operation", "stream_stop", "--args", "{model: per_10min}"]
        )
        assert f"{project.test_schema}.per_10min: stopped" in out
        st = self.status(project)
        assert st["state"] == "stopped" and not st["alive"]
        assert not os.path.exists(
            os.path.join(
                project.adapter.config.credentials.warehouse_path,
                ".dbt_streaming",
                "locks",
                f"{project.test_schema}.per_10min.lock",
            )
        )
        _, out = run_dbt_and_capture(["run-operation", "stream_status"])
        assert " stopped " in next(
            ln for ln in out.splitlines() if f"{project.test_schema}.per_10min" in ln
        )


class TestChangeWhileRunning(Base):
    def test_changed_query_refused_then_full_refresh(self, project, request):
        path = table_path(project, "per_10min")
        run_dbt(["seed"])
        run_dbt(["run"])
        before, pid = rows(path), self.status(project)["pid"]

        # A changed query is refused before anything runs; the runner keeps running the old one.
        with open(os.path.join(project.project_root, "models", "per_10min.sql"), "w") as fh:
            fh.write(CHANGED)
        _, out = run_dbt_and_capture(["run"], expect_pass=False)
        assert "SSR301" in out and "--full-refresh" in out and "COUNT(*) AS n" in out
        assert (
            rows(path) == before
            and self.status(project)["pid"] == pid
            and self.status(project)["alive"]
        )

        # A change after the aggregation keeps the state: its query is restarted on it.
        request = self.status(project)["request"]
        with open(os.path.join(project.project_root, "models", "per_10min.sql"), "w") as fh:
            fh.write(MODEL.replace("SUM(price) AS total", "ROUND(SUM(price), 2) AS total"))
        _, out = run_dbt_and_capture(["run"])
        assert "class keeps_state" in out and "its query changed" in out, out
        restarted = self.status(project)
        assert restarted["alive"] and restarted["request"] != request and rows(path) == before
        request = restarted["request"]
        with open(os.path.join(project.project_root, "models", "per_10min.sql"), "w") as fh:
            fh.write(CHANGED)

        # --full-refresh stops the query, rebuilds, and starts the new query in a runner.
        _, out = run_dbt_and_capture(["run", "--full-refresh"])
        assert "stopping its query in its runner" in out and "running continuously" in out
        new = self.status(project)
        assert new["alive"] and new["request"] != request
        assert rows(path) == [window("08:00", "08:10", 11.0, 3)]
        run_dbt(["run-operation", "stream_stop"])
        assert self.status(project)["state"] == "stopped"


OVER = """
{{ config(materialized='streaming_view', watermark_delay='1 minute', \
trigger={'processing_time': '2 seconds'}) }}
SELECT bidtime, item, price,
       SUM(price) OVER (ORDER BY bidtime ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS pair
FROM {{ ref('bids') }}
"""


def bid(hhmm: str, item: str, price: float, pair: float) -> tuple:
    return (ts(f"2020-04-15 {hhmm}"), item, price, pair)


class TestOverContinuous(Base):
    """An OVER aggregation run continuously: the runner emits each row once the watermark
    passes it, its frame taken across batches, and the table equals the batch query."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": OVER, "tests.yml": TESTS}

    def test_rows_emitted_as_the_watermark_passes(self, project):
        path = table_path(project, "per_10min")
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["run"])
        assert "running continuously every 2 seconds" in out
        first = [bid("08:05", "C", 4, 4), bid("08:07", "A", 2, 6), bid("08:09", "D", 5, 7),
                 bid("08:11", "B", 3, 8), bid("08:13", "E", 1, 4)]  # fmt: skip
        wait_for(lambda: len(rows(path)) == 5)
        assert rows(path) == first  # watermark 08:16: 08:17 waits
        append_bids(
            os.path.join(
                project.adapter.config.credentials.warehouse_path, project.test_schema, "bids"
            ),
            [("2020-04-15 08:25:00", 7, "G"), ("2020-04-15 08:31:00", 8, "H")],
        )
        wait_for(lambda: len(rows(path)) == 7)
        assert rows(path) == first + [bid("08:17", "F", 6, 7), bid("08:25", "G", 7, 13)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
        run_dbt(["run-operation", "stream_stop"])
        assert self.status(project)["state"] == "stopped"
