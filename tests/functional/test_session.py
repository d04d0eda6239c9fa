"""A process's session (runtime/session.py) keeps its catalog directory and the fork server's
socket in a temp directory of its own, and removes it as the process exits; it is made without
the session extensions found on the class path, its JVM with the Parallel collector."""

import os
import subprocess
import sys
import tempfile

import pytest

from dbt.adapters.spark_streaming.runtime.session import FORKSERVER_ENV

SCRIPT = """
import os

import pyarrow as pa
from deltalake import write_deltalake
from dbt.adapters.spark_streaming.delta.source import FORMAT
from dbt.adapters.spark_streaming.runtime import session

spark = session.get_spark()
spark.sql("CREATE DATABASE leftover")
spark.sql("CREATE TABLE leftover.t (n INT) USING parquet")  # a directory in the catalog's
write_deltalake({events!r}, pa.table({{"n": list(range(10))}}))
query = (
    spark.readStream.format(FORMAT).option("table", "events").load({events!r})
    .writeStream.format("noop").option("checkpointLocation", {checkpoint!r})
    .trigger(availableNow=True).start()
)
query.awaitTermination()
assert query.lastProgress["numInputRows"] == 10
print(spark.conf.get("spark.sql.warehouse.dir"))
print(os.environ[session.FORKSERVER_ENV])
"""


def test_a_process_leaves_nothing_in_the_temp_directory(tmp_path):
    script = SCRIPT.format(events=str(tmp_path / "events"), checkpoint=str(tmp_path / "checkpoint"))
    with tempfile.TemporaryDirectory() as temp:  # short: a socket's path has a length limit
        env = {**os.environ, "TMPDIR": temp}  # Python's temp dir; the JVM's stays /tmp
        env.pop(FORKSERVER_ENV, None)  # the suite's own session's socket
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-3000:]
        catalog, socket = run.stdout.split()[-2:]
        # both were in one directory of the process's own, under TMPDIR
        assert os.path.dirname(catalog.removeprefix("file:")) == os.path.dirname(socket)
        assert os.path.dirname(os.path.dirname(socket)) == temp
        assert os.listdir(temp) == []


# spark-mllib's session extension, which Java's ServiceLoader finds on Spark's class path
PROVIDER = "org.apache.spark.sql.ml.InternalFunctionRegistration"

LOADED = """
import subprocess
from dbt.adapters.spark_streaming.runtime import session

spark = session.get_spark("local[1]", {conf!r})
assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == "1000"  # a static setting
assert spark.conf.get("spark.sql.warehouse.dir").endswith("/catalog")  # the session's own
assert spark.conf.get("spark.sql.session.timeZone") == "UTC"  # a runtime one
assert spark.range(3).selectExpr("sum(id)").collect()[0][0] == 3
pid = spark._jvm.java.lang.ProcessHandle.current().pid()
jcmd = ["jcmd", str(pid), "VM.class_hierarchy", "-s", {provider!r}]
print({provider!r} in subprocess.run(jcmd, capture_output=True, text=True, check=True).stdout)
beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print(",".join(sorted(beans.get(i).getName().replace(" ", "_") for i in range(beans.size()))))
"""


@pytest.mark.parametrize(
    "conf, loaded",
    [({}, False), ({"spark.sql.extensions": PROVIDER}, True)],
    ids=["default", "configured"],
)
def test_the_session_skips_the_class_paths_extensions_not_the_configured_ones(conf, loaded):
    """The session is made without the extensions found on the class path (runtime/session.py
    DEFAULTS: ~0.5 s of its start); one named by `spark.sql.extensions` still loads, and
    the profile's settings reach the session. Its JVM collects with the Parallel collector
    (session.collector; not the tests' JAVA_TOOL_OPTIONS, which name one)."""
    script = LOADED.format(conf=conf, provider=PROVIDER)
    env = {k: v for k, v in os.environ.items() if k not in (FORKSERVER_ENV, "JAVA_TOOL_OPTIONS")}
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-2:] == [str(loaded), "PS_MarkSweep,PS_Scavenge"]  # Parallel
