"""A process's session (runtime/session.py) keeps its catalog directory and the fork server's
socket in a temp directory of its own, and removes it as the process exits."""

import os
import subprocess
import sys
import tempfile

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
