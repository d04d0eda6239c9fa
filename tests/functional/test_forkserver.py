"""The process Spark starts for a streaming query's offsets runs in a child of the session's fork
server (runtime/session.py, runtime/workerpath/spark_streaming_forkserver.py), reads the source
right, and ends with the query; so do pyspark's daemons, which live with the session (each is
the leader of a process group of its own: the offsets runners are not)."""

import os
import time

import pyarrow as pa
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.delta.source import FORMAT
from dbt.adapters.spark_streaming.runtime import session
from dbt.adapters.spark_streaming.runtime.session import get_spark


def _children(pid: int, daemons: bool = False) -> set[int]:
    """The fork server's children that run a query's offsets (else its daemons)."""
    out = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid and fields[0] != "Z":
            if (int(fields[2]) == int(entry)) == daemons:
                out.add(int(entry))
    return out


def _wait(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_query_offsets_process_is_a_child_of_the_fork_server(tmp_path):
    spark = get_spark()
    server = session._forkserver
    assert server is not None and server.poll() is None
    assert _children(server.pid) == set()
    path = str(tmp_path / "events")
    write_deltalake(path, pa.table({"n": list(range(100))}))
    write_deltalake(path, pa.table({"n": list(range(100, 250))}), mode="append")
    query = (
        spark.readStream.format(FORMAT)
        .option("table", "events")
        .load(path)
        .writeStream.format("memory")
        .queryName("forkserver_events")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        _wait(lambda: query.lastProgress is not None, "no micro-batch")
        children = _children(server.pid)
        assert len(children) == 1  # the runner, forked from the server, lives with the query
        got = sorted(r.n for r in spark.sql("SELECT n FROM forkserver_events").collect())
        assert got == list(range(250))
        # the daemons of the data source's lookup, creation and read plan, and the tasks'
        assert len(_children(server.pid, daemons=True)) >= 3
    finally:
        query.stop()
    _wait(lambda: not _children(server.pid), "the runner outlived its query", seconds=30)
