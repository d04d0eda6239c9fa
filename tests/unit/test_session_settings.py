"""The SparkSession's settings (runtime/session.py), without Spark: executor sizing only with a
cluster master, and the profile's server_side_parameters over every default; the driver's
garbage collector unless Java options are chosen elsewhere."""

import os

import pytest

from dbt.adapters.spark_streaming.delta.source import PARTITIONS_ENV, _partitions
from dbt.adapters.spark_streaming.runtime.session import (
    CLUSTER_DEFAULTS,
    COLLECTOR,
    DRIVER_OPTIONS,
    JAVA_ENVIRONMENT,
    collector,
    machine_cores,
    read_partitions,
    spark_settings,
)


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


@pytest.mark.parametrize(
    "master, conf, cores",
    [
        ("local[*]", {}, machine_cores()),
        ("local[3]", {}, 3),
        ("local", {}, 1),
        ("local[4, 2]", {}, 4),
        ("local-cluster[2, 1, 1024]", {}, 2),
        ("spark://h:7077", {}, 2),  # CLUSTER_DEFAULTS' spark.cores.max
        ("k8s://x", {"spark.executor.instances": "3", "spark.executor.cores": "2"}, 6),
        ("yarn", {"spark.executor.instances": "3"}, 3),  # CLUSTER_DEFAULTS' 1 core each
        ("yarn", {"spark.cores.max": None}, None),
        ("local[*]", {"spark.default.parallelism": "5"}, 5),
    ],
)
def test_a_read_makes_a_partition_per_core_of_the_application(master, conf, cores, monkeypatch):
    settings = {k: v for k, v in spark_settings(master, conf).items() if v is not None}
    env = read_partitions(master, settings)
    assert env == ({} if cores is None else {f"spark.executorEnv.{PARTITIONS_ENV}": str(cores)})
    files = [(f"/t/{i}.parquet", {}) for i in range(10)]
    monkeypatch.delenv(PARTITIONS_ENV, raising=False)
    assert len(_partitions(files)) == 8  # without it: at most 8
    for value, expected in [("3", 3), ("1", 1), ("20", 8)]:
        monkeypatch.setenv(PARTITIONS_ENV, value)
        parts = _partitions(files)
        assert len(parts) == expected
        assert [f for p in parts for f in p.files] == files  # in order


def test_local_star_counts_the_cores_this_process_may_use(monkeypatch):
    """A container's cpuset, not the machine's cores (os.cpu_count())."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3})
    assert read_partitions("local[*]", {}) == {f"spark.executorEnv.{PARTITIONS_ENV}": "2"}


@pytest.fixture
def no_java_options(tmp_path, monkeypatch):
    for name in JAVA_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf
    return tmp_path


def test_the_driver_collects_with_the_parallel_collector(no_java_options):
    assert collector(spark_settings("local[*]", None)) == {DRIVER_OPTIONS: COLLECTOR}
    assert collector(spark_settings("spark://127.0.0.1:7077", {})) == {DRIVER_OPTIONS: COLLECTOR}
    default = {"spark.driver.defaultJavaOptions": "-Xss4m"}  # no collector named there
    assert collector(spark_settings("local[*]", default)) == {DRIVER_OPTIONS: COLLECTOR}


@pytest.mark.parametrize(
    "conf",
    [
        {DRIVER_OPTIONS: "-Xss4m"},  # a profile's (or a runner's) own options
        {"spark.driver.defaultJavaOptions": "-XX:+UseG1GC -Xss4m"},
        {"spark.driver.defaultJavaOptions": "-XX:+UseShenandoahGC"},
    ],
)
def test_no_collector_where_the_profile_chooses_java_options(no_java_options, conf):
    assert collector(spark_settings("local[*]", conf)) == {}


@pytest.mark.parametrize("name", JAVA_ENVIRONMENT)
def test_no_collector_where_the_environment_names_one(no_java_options, monkeypatch, name):
    monkeypatch.setenv(name, "-XX:TieredStopAtLevel=1")
    assert collector({}) == {DRIVER_OPTIONS: COLLECTOR}  # no collector named: ours
    monkeypatch.setenv(name, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    assert collector({}) == {}  # two would stop the JVM


@pytest.mark.parametrize("key", [DRIVER_OPTIONS, "spark.driver.defaultJavaOptions"])
def test_no_collector_where_spark_defaults_sets_java_options(no_java_options, key):
    (no_java_options / "spark-defaults.conf").write_text(f"{key}  -Xss4m\n")
    assert collector({}) == {}


@pytest.mark.parametrize(
    "name, value",
    [
        ("JDK_JAVA_OPTIONS", "@/etc/java/args"),  # an argument file
        ("JAVA_TOOL_OPTIONS", "-XX:Flags=/etc/java/flags"),
        ("_JAVA_OPTIONS", "-XX:VMOptionsFile=/etc/java/options"),
        ("PYSPARK_SUBMIT_ARGS", "--driver-java-options -Xss4m pyspark-shell"),
        ("PYSPARK_SUBMIT_ARGS", "--conf spark.driver.extraJavaOptions=-Xss4m pyspark-shell"),
        ("PYSPARK_SUBMIT_ARGS", "--properties-file /etc/spark.conf pyspark-shell"),
    ],
)
def test_no_collector_where_options_come_from_elsewhere(no_java_options, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert collector({}) == {}


@pytest.mark.parametrize("name", ["spark-env.sh", "java-opts"])
def test_no_collector_where_spark_conf_may_set_java_options(no_java_options, name):
    (no_java_options / name).write_text("export JAVA_TOOL_OPTIONS=-XX:+UseG1GC\n")
    assert collector({}) == {}
