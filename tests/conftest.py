import os
import sys

import pytest

from dbt.adapters.spark_streaming.runtime import session

# Spark's Python workers must run this interpreter (it has pyarrow, deltalake, this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Most JVMs of the tests live for one short command (a `dbt run` in a subprocess, a continuous
# model's runner): C1 only and the serial GC spend less CPU on compiling and collecting there
# (test_exactly_once.py 113 -> 97 s, the kill harness 152 -> 117 s in CI; a cluster test's
# `dbt run`, driver and executors, 120 -> 52 CPU-s). Every JVM started from the tests inherits
# it (the scale-out tests' cluster daemons and executors too) but the in-process session's, which
# runs the heaviest tests for the whole test session (they took 20-25% longer with it in CI:
# TestUpsertShapes 78 -> 96 s). It changes no result.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# No driver class archive (runtime/cds.py) in the tests' JVMs unless a test asks: their start
# does not depend on what the machine's cache holds, and no archive is made behind the tests
# (tests/functional/test_cds.py makes and maps one of its own).
os.environ.setdefault("DBT_SPARK_STREAMING_CDS", "off")
_get_spark = session.get_spark


def _get_spark_with_the_jvm_defaults(*args, **kwargs):
    options = os.environ.pop("JAVA_TOOL_OPTIONS", None)
    try:
        return _get_spark(*args, **kwargs)
    finally:
        if options is not None:
            os.environ["JAVA_TOOL_OPTIONS"] = options


session.get_spark = _get_spark_with_the_jvm_defaults  # its callers import it when they call it

pytest_plugins = ["dbt.tests.fixtures.project"]


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="also run the cases marked `full`: more crash points and seeds of the long harnesses",
    )


def _first(item) -> int:
    """Where an item's class or module goes in the run: the long ones first (scripts/test.sh
    runs two processes, each taking the next class or module in this order, so a long one
    started last would end the run alone), the unit tests last."""
    path = item.nodeid
    if path.startswith(("tests/scaleout/", "tests/reliability/")):
        return 0
    if "slow" in item.keywords:  # dbt in subprocesses (crash tests)
        return 1
    return 3 if path.startswith("tests/unit/") else 2


def pytest_collection_modifyitems(config, items):
    """The long classes and modules first (_first). Cases marked `full` (more of a harness CI
    already runs one case of) run with --full."""
    items.sort(key=_first)  # stable: a class's and a module's tests stay together, in order
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
