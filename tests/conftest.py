import os
import sys

import pytest

# Spark's Python workers must run this interpreter (it has pyarrow, deltalake, this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

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
