"""What a dbt command prints: dbt's lines and ours. Spark's and the JVM's output (its warnings,
Spark's logging, a failed task's stack, py4j's traceback after a failed micro-batch) goes to
spark.log beside dbt.log, or to the console with `--debug` (runtime/session.py)."""

import os
import re

import pytest
from dbt.tests.util import run_dbt

from .helpers import equivalence_tests, rows, table_path
from .test_lifecycle import MODEL, Base, dbt_subprocess

# fails in its first micro-batch (a task's error, raised inside the foreachBatch call)
BAD = """
{{ config(materialized='streaming_view') }}
SELECT bidtime, item, CAST(assert_true(price > 100, 'a price of 100 or less') AS INT) AS price
FROM {{ ref('bids') }}
"""
# lines of the JVM and Spark seen on the console before (issue 37)
JVM_LINES = [
    "WARNING: Using incubator modules",
    "log4j",
    "WARN Utils",
    "SPARK_LOCAL_IP",
    'Setting default log level to "WARN"',
    "setLogLevel",
    "Traceback",
    "py4j",
]
LOG4J = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN|ERROR) ")  # Spark's log lines


def jvm_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if any(s in ln for s in JVM_LINES) or LOG4J.search(ln)]


class TestQuietConsole(Base):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "per_10min.sql": MODEL,
            "bad.sql": BAD,
            "tests.yml": equivalence_tests(["per_10min"]),
        }

    def test_the_console_has_dbts_lines_and_ours(self, project):
        log = os.path.join(os.environ["DBT_LOG_PATH"], "spark.log")  # the test's dbt.log's dir
        run_dbt(["seed"])  # no Spark
        run = dbt_subprocess(project, "run")
        console = run.stdout + run.stderr
        assert run.returncode == 1, console[-3000:]
        assert jvm_lines(console) == [], console
        assert "1 of 2 START sql streaming_view model" in console
        assert "SSR" in console and "a price of 100 or less" in console, console
        assert rows(table_path(project, "per_10min"))  # the good model committed
        with open(log) as fh:
            spark_log = fh.read()
        # the JVM's start and the failed micro-batch's stacks are there
        assert "WARNING: Using incubator modules" in spark_log
        assert "a price of 100 or less" in spark_log
        assert "py4j.clientserver ERROR" in spark_log and "Traceback" in spark_log
        assert "WARN Utils: Your hostname" not in spark_log  # SPARK_LOCAL_IP on local[*]

        test = dbt_subprocess(project, "test")
        console = test.stdout + test.stderr
        assert test.returncode == 0, console[-3000:]
        assert jvm_lines(console) == [] and "PASS=1" in console, console

        # --debug: the JVM's output on the console (a full refresh starts Spark)
        debug = dbt_subprocess(project, "--debug", "run", "-s", "per_10min", "--full-refresh")
        assert debug.returncode == 0, (debug.stdout + debug.stderr)[-3000:]
        assert "WARNING: Using incubator modules" in debug.stdout + debug.stderr
