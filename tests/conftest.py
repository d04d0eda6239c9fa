import os
import sys

import pytest

# Spark's Python workers must run this interpreter (it has pyarrow, deltalake, this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Most JVMs of the tests live for one short command (a `dbt run` in a subprocess, a continuous
# model's runner): C1 only and the serial GC spend less CPU on compiling and collecting there
# (test_exactly_once.py 113 -> 97 s, the kill harness 152 -> 117 s in CI). Every JVM started
# from the tests inherits it, the in-process session's too, where the heaviest tests took
# 20-25% longer in CI (TestUpsertShapes 78 -> 96 s): the suite as a whole about even (49.1 ->
# 48.5 min). To do: give it to the subprocesses only. It changes no result
# (tests/scaleout/projects.py gives the same to the cluster's driver and executors).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

pytest_plugins = ["dbt.tests.fixtures.project"]


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="also run the cases marked `full`: more crash points and seeds of the long harnesses",
    )


def pytest_collection_modifyitems(config, items):
    """Cases marked `full` (more of a harness CI already runs one case of) run with --full."""
    if config.getoption("--full"):
        return
    skip = pytest.mark.skip(reason="a further case of a long harness: run with --full (README)")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory) -> str:
    """One warehouse (and so one SparkSession and catalog) per test session; each test
    class gets its own schema in it."""
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="class")
def dbt_profile_target(warehouse):
    return {
        "type": "spark_streaming",
        "method": "session",
        "warehouse_path": warehouse,
        "threads": 1,
    }
