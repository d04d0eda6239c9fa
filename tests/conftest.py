import os
import sys

import pytest

# Spark's Python workers must run this interpreter (it has pyarrow, deltalake, this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

pytest_plugins = ["dbt.tests.fixtures.project"]


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
