"""The SparkSession's settings (runtime/session.py), without Spark: executor sizing only with a
cluster master, and the profile's server_side_parameters over every default."""

import pytest

from dbt.adapters.spark_streaming.runtime.session import CLUSTER_DEFAULTS, spark_settings


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local-cluster[2,1,1024]"])
def test_local_master_gets_no_executor_sizing(master):
    settings = spark_settings(master, None)
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert not set(CLUSTER_DEFAULTS) & set(settings)


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k8s:6443"])
def test_cluster_master_gets_small_executors(master):
    settings = spark_settings(master, {})
    assert settings["spark.executor.cores"] == "1"
    assert settings["spark.cores.max"] == "2"
    assert settings["spark.executor.memory"] == "1g"


def test_server_side_parameters_override_the_defaults():
    conf = {"spark.cores.max": "8", "spark.executor.memory": "4g", "spark.driver.memory": "2g"}
    settings = spark_settings("spark://h:7077", conf)
    assert {k: settings[k] for k in conf} == conf
    assert settings["spark.executor.cores"] == "1"
