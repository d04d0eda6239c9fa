"""Continuous models share a runner: one process, one SparkSession, a query per model
(runtime/continuous/). `dbt run` hands each model to the runner of its `pipeline` (default:
one); a changed model is restarted there without touching the others; a model whose query
fails is restarted with backoff, then given up, while the others keep committing; stopping
one model leaves the others running, and stopping the last ends the runner. Rows are checked
exactly and with snapshot_equivalence."""

import json
import os
import time

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.layout import checkpoint_path
from dbt.adapters.spark_streaming.runtime.continuous import pipeline, runner
from dbt.adapters.spark_streaming.runtime.continuous.host import RUNNER_DRIVER_MEMORY
from dbt.adapters.spark_streaming.runtime.lifecycle import alive
from dbt.adapters.spark_streaming.runtime.session import DEFAULTS

from . import test_continuous as continuous
from .helpers import append_bids, equivalence_tests, rows, table_path, ts
from .test_continuous import wait_for, window
from .test_streaming_view import BIDS_CSV

CONTINUOUS = "trigger={'processing_time': '1 second'}"
W10 = f"""
{{{{ config(materialized='streaming_view', watermark_delay='1 minute', {CONTINUOUS}) }}}}
SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{{{ ref('bids') }}}}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""
BY_ITEM = f"""
{{{{ config(materialized='upsert_table', unique_key='item', constant_domain='item', \
{CONTINUOUS}) }}}}
SELECT item, COUNT(*) AS bids, MAX(price) AS top FROM {{{{ ref('bids') }}}} GROUP BY item
"""
# a chain: an upsert_table over the continuous streaming_view w10
HOURLY = f"""
{{{{ config(materialized='upsert_table', unique_key='hour', constant_domain='hour', \
{CONTINUOUS}) }}}}
SELECT date_trunc('HOUR', window_start) AS hour, SUM(total) AS total, SUM(bids) AS bids
FROM {{{{ ref('w10') }}}} GROUP BY date_trunc('HOUR', window_start)
"""
# fails on a price below 1, once it runs
PER_UNIT = f"""
{{{{ config(materialized='streaming_view', max_restarts=1, {CONTINUOUS}) }}}}
SELECT bidtime, item, price * COALESCE(CAST(assert_true(price >= 1, 'a price below 1') AS INT), 1)
  AS price
FROM {{{{ ref('bids') }}}}
"""
# a runner of its own
SOLO = f"""
{{{{ config(materialized='streaming_view', watermark_delay='1 minute', pipeline=false, \
{CONTINUOUS}) }}}}
SELECT window_start, window_end, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{{{ ref('bids') }}}}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""
MODELS = {"w10": W10, "by_item": BY_ITEM, "hourly": HOURLY, "per_unit": PER_UNIT, "solo": SOLO}
SHARED = ["w10", "by_item", "hourly", "per_unit"]


def shuffle_partitions(project, model: str) -> str:
    """The shuffle partitions the model's query started with (its checkpoint's first batch)."""
    offsets = os.path.join(checkpoint_path(table_path(project, model)), "offsets", "0")
    with open(offsets) as fh:
        return json.loads(fh.read().splitlines()[1])["conf"]["spark.sql.shuffle.partitions"]


def java_command(pid: int) -> list[str]:
    """The command line of the JVM that process `pid` started (its child running java)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().decode().split("\0")
        except (OSError, ValueError):
            continue
        if parent == pid and argv[0].endswith("java"):
            return argv
    raise AssertionError(f"no JVM under process {pid}")


class TestSharedRunner(continuous.Base):  # bids seeded; runners killed after the class
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{n}.sql": sql for n, sql in MODELS.items()} | {
            "tests.yml": equivalence_tests(MODELS)
        }

    def model_status(self, project, model: str) -> dict:
        control = project.adapter.config.credentials.warehouse_path
        return runner.status(control, f"{project.test_schema}.{model}")

    def test_models_share_a_runner(self, project):
        control = project.adapter.config.credentials.warehouse_path
        bids = table_path(project, "bids")
        run_dbt(["seed"])
        results = run_dbt(["run"])
        assert [r.status for r in results] == ["success"] * len(MODELS)
        first = {m: self.model_status(project, m) for m in MODELS}
        shared = {first[m]["pid"] for m in SHARED}
        assert len(shared) == 1 and all(first[m]["pipeline"] == "default" for m in SHARED)
        (pid,) = shared
        assert first["solo"]["pid"] != pid
        assert first["solo"]["pipeline"] == f"{project.test_schema}.solo"
        host = pipeline.status(control, "default")
        assert host["alive"] and host["pid"] == pid
        # the runner's JVM has Spark's default heap, not a `dbt run`'s 4g
        assert f"-Xmx{RUNNER_DRIVER_MEMORY}" in java_command(pid)
        assert rows(table_path(project, "w10")) == [window("08:00", "08:10", 11.0, 3)]

        # New data reaches every model, the chain's end included, without dbt.
        append_bids(bids, [("2020-04-15 08:25:00", 7, "G"), ("2020-04-15 08:31:00", 8, "A")])
        closed = [
            window("08:00", "08:10", 11.0, 3),
            window("08:10", "08:20", 10.0, 3),
            window("08:20", "08:30", 7.0, 1),
        ]
        wait_for(lambda: rows(table_path(project, "w10")) == closed)
        wait_for(lambda: rows(table_path(project, "solo")) == [w[:2] + w[3:] for w in closed])
        wait_for(lambda: rows(table_path(project, "hourly")) == [(ts("2020-04-15 08:00"), 28.0, 7)])
        wait_for(lambda: ("A", 2, 8.0) in rows(table_path(project, "by_item")))
        assert len(rows(table_path(project, "per_unit"))) == 8
        # caught up, their micro-batches share the runner's pool (runner.Monitor.pool), those
        # of the chain's second model the pool that goes first
        pools = {m: self.model_status(project, m)["pool"] for m in SHARED[:3]}
        assert pools == {"w10": "default", "by_item": "default", "hourly": "downstream"}, pools
        # one shuffle partition per query in the shared runner, the session's in one's own
        assert shuffle_partitions(project, "w10") == "1"
        assert shuffle_partitions(project, "solo") == DEFAULTS["spark.sql.shuffle.partitions"]

        # A change that keeps the state restarts that model's query only.
        with open(os.path.join(project.project_root, "models", "by_item.sql"), "w") as fh:
            fh.write(BY_ITEM.replace("MAX(price) AS top", "ROUND(MAX(price), 1) AS top"))
        _, out = run_dbt_and_capture(["run"])
        assert "its query changed" in out and out.count("nothing to do") == len(MODELS) - 1, out
        now = {m: self.model_status(project, m) for m in MODELS}
        assert now["by_item"]["request"] != first["by_item"]["request"]
        assert now["by_item"]["alive"] and now["by_item"]["pid"] == pid
        for m in MODELS:
            if m != "by_item":
                assert now[m]["request"] == first[m]["request"] and now[m]["alive"], m

        # Bad data: per_unit's query fails, is restarted once, fails again and is given up;
        # the others go on committing in the same process.
        append_bids(bids, [("2020-04-15 08:41:00", 0.5, "B")])
        failed = wait_for(
            lambda: (st := self.model_status(project, "per_unit"))["state"] == "failed" and st
        )
        assert failed["restarts"] == 1 and failed["gave_up"] == "after 1 restarts", failed
        assert failed["error"]["code"].startswith("SSR") and "a price below 1" in str(
            failed["error"]
        ), failed["error"]
        append_bids(bids, [("2020-04-15 08:52:00", 2, "C")])
        wait_for(lambda: window("08:40", "08:50", 0.5, 1) in rows(table_path(project, "w10")))
        assert alive(pid) and all(self.model_status(project, m)["alive"] for m in SHARED[:3])

        _, out = run_dbt_and_capture(["run-operation", "stream_status"])
        line = next(ln for ln in out.splitlines() if f"{project.test_schema}.per_unit" in ln)
        assert " failed " in line and "a price below 1" in line, line

        # Stop one model: the others keep running; stop the rest: the runners end.
        run_dbt(["run-operation", "stream_stop", "--args", "{model: w10}"])
        assert self.model_status(project, "w10")["state"] == "stopped"
        assert alive(pid) and self.model_status(project, "hourly")["alive"]
        _, out = run_dbt_and_capture(["run-operation", "stream_stop"])
        assert all(not self.model_status(project, m)["alive"] for m in MODELS)
        wait_for(lambda: not alive(pid) and not alive(first["solo"]["pid"]))
        assert pipeline.status(control, "default")["state"] == "stopped"

        # Every table equals its query over the input it consumed.
        assert [r.status for r in run_dbt(["test"])] == ["pass"] * len(MODELS)


# A chain of three continuous models, each taking in the commit of the one before as it lands
# (delta/source.py AWAIT_COMMIT_MS), with triggers long enough to tell that from polling.
EVERY_20S = "trigger={'processing_time': '20 seconds'}"
CHAIN = {
    "clean": f"""
{{{{ config(materialized='streaming_view', {EVERY_20S}) }}}}
SELECT bidtime, item, price FROM {{{{ ref('bids') }}}} WHERE price > 0
""",
    "per_item": f"""
{{{{ config(materialized='upsert_table', unique_key='item', constant_domain='item', \
{EVERY_20S}) }}}}
SELECT item, COUNT(*) AS bids, SUM(price) AS total FROM {{{{ ref('clean') }}}} GROUP BY item
""",
    "per_count": f"""
{{{{ config(materialized='upsert_table', constant_domain=['bids'], {EVERY_20S}) }}}}
SELECT bids, COUNT(*) AS items, SUM(total) AS total FROM {{{{ ref('per_item') }}}} GROUP BY bids
""",
}


class TestChainFreshness(continuous.Base):
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{n}.sql": sql for n, sql in CHAIN.items()} | {
            "tests.yml": equivalence_tests(CHAIN)
        }

    def test_each_model_takes_the_commit_before_it_as_it_lands(self, project):
        end = table_path(project, "per_count")
        run_dbt(["seed"])
        run_dbt(["run"])
        wait_for(lambda: rows(end) == [(1, 6, 21.0)])
        # Spark starts a 20-second trigger at each multiple of 20 s of the clock; each query's
        # source waits for a commit until 16 s past it. An append 1 s past a multiple must
        # reach the end of the chain before the next one: by polling at their triggers, the
        # three queries would take it in at the next three (20, 40 and 60 s later).
        boundary = (time.time() // 20 + 1) * 20
        time.sleep(boundary + 1 - time.time())
        append_bids(table_path(project, "bids"), [("2020-04-15 08:30:00", 4, "A")])
        appended = time.time()
        expected = [(1, 5, 19.0), (2, 1, 6.0)]
        wait_for(lambda: rows(end) == expected, timeout=boundary + 19 - appended)
        landed = {m: round(commit_time(table_path(project, m)) - appended, 2) for m in CHAIN}
        print(f"append -> commit, s: {landed}")  # seen with -s
        assert all(0 < t < 19 for t in landed.values()), landed

        # 2 s into the next interval every source is waiting for a commit, until 16 s past:
        # a stop ends the waits (Spark cannot interrupt them) instead of waiting for them.
        time.sleep(boundary + 22 - time.time())
        stopping = time.time()
        run_dbt(["run-operation", "stream_stop"])
        stopped = time.time() - stopping
        print(f"stream_stop of the three: {stopped:.1f} s")
        assert stopped < 12, stopped
        assert [r.status for r in run_dbt(["test"])] == ["pass"] * len(CHAIN)


# a join of two streams, asks (the left one, which Spark asks first) and bids
ASKS_CSV = "asktime,ask,item\n2020-04-15 08:29:30,3.5,A\n"
MATCHED = f"""
{{{{ config(materialized='streaming_view', watermark_delay='1 minute', {EVERY_20S}) }}}}
SELECT a.asktime, a.item, a.ask, b.bidtime, b.price
FROM {{{{ ref('asks') }}}} a JOIN {{{{ ref('bids') }}}} b
  ON a.item = b.item AND b.bidtime BETWEEN a.asktime AND a.asktime + INTERVAL '1' MINUTE
"""


class TestJoinFreshness(continuous.Base):
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"bids.csv": BIDS_CSV, "asks.csv": ASKS_CSV}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        bids = {"bidtime": "timestamp", "price": "double", "item": "string"}
        asks = {"asktime": "timestamp", "ask": "double", "item": "string"}
        return {
            "seeds": {"test": {"bids": {"+column_types": bids}, "asks": {"+column_types": asks}}}
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {"matched.sql": MATCHED, "tests.yml": equivalence_tests({"matched": MATCHED})}

    def test_a_join_takes_a_commit_to_its_second_stream_as_it_lands(self, project):
        path = table_path(project, "matched")
        run_dbt(["seed"])
        run_dbt(["run"])
        assert rows(path) == []
        # As in TestChainFreshness: an append 1 s past a trigger is in the table before the
        # next one. The asks stream's source waits, watching the bids table too; the bids
        # commit ends its wait, and the bids source, asked after it, reads the commit. Not
        # at the next trigger: the first batch had data, so its sources do not wait there
        # (a batch that applies the watermark may be due).
        boundary = (time.time() // 20 + 2) * 20
        time.sleep(boundary + 1 - time.time())
        append_bids(table_path(project, "bids"), [("2020-04-15 08:30:00", 4, "A")])
        appended = time.time()
        expected = [(ts("2020-04-15 08:29:30"), "A", 3.5, ts("2020-04-15 08:30:00"), 4.0)]
        wait_for(lambda: rows(path) == expected, timeout=boundary + 19 - appended)
        print(f"append -> commit: {commit_time(path) - appended:.2f} s")  # seen with -s
        run_dbt(["run-operation", "stream_stop"])
        assert [r.status for r in run_dbt(["test"])] == ["pass"]


def commit_time(path: str) -> float:
    """When the latest version of the Delta table at `path` was committed (epoch seconds)."""
    return DeltaTable(path).history(1)[0]["timestamp"] / 1000
