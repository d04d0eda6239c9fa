"""The trigger / continuous config of continuous mode (runtime/continuous/runner.py), without
Spark."""

import pytest

from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.backlog import Backlog
from dbt.adapters.spark_streaming.runtime.continuous.host import Host
from dbt.adapters.spark_streaming.runtime.continuous.pipeline import shuffle_partitions
from dbt.adapters.spark_streaming.runtime.continuous.runner import (
    DOWNSTREAM,
    POOL,
    Monitor,
    processing_time,
    status_table,
)


@pytest.mark.parametrize(
    "config, interval",
    [
        ({}, None),
        ({"trigger": "available_now"}, None),
        ({"trigger": {"available_now": True}}, None),
        ({"continuous": False}, None),
        ({"continuous": True}, "10 seconds"),
        ({"trigger": {"processing_time": "2 seconds"}}, "2 seconds"),
        ({"trigger": {"processing_time": "1 minute"}, "continuous": True}, "1 minute"),
    ],
)
def test_interval(config, interval):
    assert processing_time(config) == interval


@pytest.mark.parametrize(
    "config",
    [
        {"trigger": "sometimes"},
        {"trigger": {"processing_time": "soon"}},
        {"trigger": {"processing_time": "0 seconds"}},
        {"trigger": {"processing_time": "1 second", "available_now": True}},
        {"trigger": {"processing_time": "1 second"}, "continuous": False},
        {"continuous": "yes"},
    ],
)
def test_bad_config(config):
    with pytest.raises(StreamingError) as err:
        processing_time(config)
    assert err.value.code == "SSC201"


def test_status_table():
    text = status_table(
        [
            {
                "model": "a.m",
                "state": "running",
                "runner": "pid 7 every 2 seconds",
                "last_batch": 3,
                "input_rows_per_s": 12.5,
                "watermark": None,
                "lag_versions": {"a.bids": 0},
                "late_rows": 0,
                "last_error": None,
            }
        ]
    )
    header, line = text.splitlines()
    assert header.split() == [
        "model",
        "state",
        "runner",
        "last_batch",
        "input_rows_per_s",
        "watermark",
        "lag_versions",
        "late_rows",
        "last_error",
    ]
    assert line.split() == [
        "a.m",
        "running",
        "pid",
        "7",
        "every",
        "2",
        "seconds",
        "3",
        "12.5",
        "-",
        "a.bids",
        "0",
        "0",
        "-",
    ]


class _Context:
    """SparkContext's local properties, as the query's thread sees them."""

    def __init__(self, pool):
        self.props = {"spark.scheduler.pool": pool}

    def getLocalProperty(self, key):
        return self.props.get(key)

    def setLocalProperty(self, key, value):
        self.props[key] = value


def test_a_model_leaves_its_pool_once_caught_up(tmp_path):
    monitor = Monitor(str(tmp_path), {"model": "s.m"})
    sc = _Context("s.m")  # host.py starts the query in the model's pool
    monitor.pool(sc)  # its first trigger: the backlog, in its own pool
    assert sc.props[POOL] == "s.m" and monitor.st["pool"] == "s.m"
    monitor.st["ready"] = True
    monitor.pool(sc)  # then first come, first served with the other models
    assert sc.props[POOL] is None and monitor.st["pool"] == "default"
    monitor.pool(sc)
    assert sc.props[POOL] is None and monitor.st["pool"] == "default"


def test_a_model_downstream_of_another_goes_first(tmp_path):
    """The runner sends the micro-batches of a model that streams from another model's table
    to the DOWNSTREAM pool (host.POOLS: its tasks launch first), the others' to the default."""
    host = object.__new__(Host)  # its models, without a session or files
    host.monitors, host.threads = {}, {}
    for name, target, sources, running in [
        ("s.a", "/w/a", {"/w/src"}, True),
        ("s.b", "/w/b", {"/w/a"}, True),
        ("s.c", "/w/c", {"/w/b/_dbt_streaming/changelog", "/w/src"}, True),  # b's changelog
        ("s.self", "/w/self", {"/w/self"}, True),  # its own table: not downstream
        ("s.ab", "/w/ab", {"/w/a_b"}, True),  # a table whose name starts with a's
        ("s.gone", "/w/gone", {"/w/src"}, False),  # stopped
        ("s.d", "/w/d", {"/w/gone"}, True),  # reads the stopped one's table
    ]:
        home = tmp_path / name
        home.mkdir()
        monitor = Monitor(str(home), {"model": name})
        monitor.target, monitor.sources = target, frozenset(sources)
        host.monitors[name] = monitor
        host.threads[name] = type("Thread", (), {"is_alive": lambda self, r=running: r})()
    host.rank()
    assert {n: m.shared for n, m in host.monitors.items()} == {
        "s.a": None,
        "s.b": DOWNSTREAM,
        "s.c": DOWNSTREAM,
        "s.self": None,
        "s.ab": None,
        "s.gone": None,
        "s.d": None,
    }
    b = host.monitors["s.b"]
    sc = _Context("s.b")
    b.st["ready"] = True
    b.pool(sc)
    assert sc.props[POOL] == DOWNSTREAM and b.st["pool"] == DOWNSTREAM
    b.pool(sc)
    assert b.st["pool"] == DOWNSTREAM


@pytest.mark.parametrize(
    "config, partitions",
    [
        ({}, None),  # available now: the session's
        ({"continuous": True}, 1),  # in the shared runner
        ({"continuous": True, "pipeline": "fast"}, 1),
        ({"continuous": True, "pipeline": False}, None),  # a runner of its own
        ({"continuous": True, "shuffle_partitions": 4}, 4),
        ({"shuffle_partitions": 3}, 3),
    ],
)
def test_shuffle_partitions(config, partitions):
    assert shuffle_partitions(config) == partitions


@pytest.mark.parametrize("value", [0, -1, True, "2", 1.5])
def test_bad_shuffle_partitions(value):
    with pytest.raises(StreamingError, match="shuffle_partitions"):
        shuffle_partitions({"shuffle_partitions": value})


class _Query:
    """A query whose last progress report is `reports[-1]`."""

    def __init__(self):
        self.reports: list[dict] = []

    @property
    def lastProgress(self):
        return self.reports[-1] if self.reports else None

    def run(self, batch_id: int, rows: int, late: int = 0) -> None:
        self.reports.append(
            {
                "batchId": batch_id,
                "timestamp": f"2026-11-28T10:00:{batch_id:02d}.000Z",
                "numInputRows": rows,
                "durationMs": {"addBatch": 5},
                "processedRowsPerSecond": 10.0 * rows,
                "stateOperators": [{"numRowsDroppedByWatermark": late}],
            }
        )


def test_every_batch_is_counted_once_into_the_status(tmp_path):
    """A runner counts each progress report once, however often it is asked: as each batch
    starts (the previous batch's report) and by its polls (the last batch's). A poll every few
    seconds alone missed the batches between two polls."""
    monitor = Monitor(str(tmp_path), {"model": "s.m"})
    query = _Query()
    monitor.query = query
    assert monitor.progressed() is None  # batch 0 starts: nothing reported yet
    query.run(0, 5)
    monitor.progressed()  # a poll
    for batch_id, rows, late in [(1, 3, 1), (2, 0, 0), (3, 7, 2)]:
        monitor.progressed()  # the batch starts: batch_id - 1's report (again, for batch 1)
        query.run(batch_id, rows, late)
    assert monitor.progressed() == query.reports[-1]  # a poll: the last batch's
    monitor.progressed()
    assert (monitor.st["rows_read"], monitor.st["late_rows"]) == (15, 3)
    assert monitor.st["input_rows_per_s"] == 70.0
    # idle: Spark reports every 10 s a trigger that ran no batch, with the next batch's id
    query.reports.append({"batchId": 4, "timestamp": "2026-11-28T10:00:03.500Z"})
    monitor.progressed()
    query.run(4, 2)
    monitor.progressed()
    assert (monitor.st["rows_read"], monitor.st["input_rows_per_s"]) == (17, 20.0)


def test_a_split_backlog_counts_its_snapshot_as_read(tmp_path):
    """A backlog split's stream reads only the rows of the windows it keeps in batch 0; the
    status counts the snapshot's rows, as the `dbt run` summary does."""
    monitor = Monitor(str(tmp_path), {"model": "s.m"})
    monitor.counted = Backlog("bids", version=3, closed_us=0, rows=1000).counted
    monitor.query = query = _Query()
    query.run(0, 12)
    monitor.progressed()
    query.run(1, 4)
    monitor.progressed()
    assert monitor.st["rows_read"] == 1004
