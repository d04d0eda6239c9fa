"""The run lock of a model (runtime/lifecycle.model_lock), without Spark: a live holder refuses
(SSR307, naming it), what a killed process leaves is taken over, a runner takes over the lock of
the `dbt run` that started it."""

import json
import os
import socket
import subprocess
import sys

import pytest

from dbt.adapters.spark_streaming import layout
from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.lifecycle import model_lock, started_at

NAME = "analytics.per_item"


def lock(warehouse) -> str:
    return layout.lock_path(str(warehouse), NAME)


def holder(warehouse) -> dict:
    with open(lock(warehouse)) as fh:
        return json.load(fh)


def write_lock(warehouse, owner) -> None:
    os.makedirs(os.path.dirname(lock(warehouse)), exist_ok=True)
    with open(lock(warehouse), "w") as fh:
        fh.write(owner if isinstance(owner, str) else json.dumps(owner))


def gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_held_then_released(tmp_path):
    with model_lock(str(tmp_path), NAME):
        owner = holder(tmp_path)
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        assert owner["start"] == started_at(os.getpid()) is not None
        with pytest.raises(StreamingError) as err:  # a second holder, even this process
            with model_lock(str(tmp_path), NAME):
                pass
        assert err.value.code == "SSR307"
        assert f"process {os.getpid()} on host {socket.gethostname()}" in str(err.value)
    assert not os.path.exists(lock(tmp_path))
    left = os.listdir(os.path.dirname(lock(tmp_path)))
    assert left == [f"{NAME}.lock.guard"]  # no temporary file left; the guard stays


@pytest.mark.parametrize(
    "owner",
    [
        "",  # a lock file without content (an older version killed while writing it)
        "{not json",
        {"pid": "gone", "host": socket.gethostname()},
        {"pid": None, "host": socket.gethostname()},
    ],
)
def test_a_lock_naming_no_one_is_taken_over(tmp_path, owner):
    write_lock(tmp_path, owner)
    with model_lock(str(tmp_path), NAME):
        assert holder(tmp_path)["pid"] == os.getpid()
    assert not os.path.exists(lock(tmp_path))


def test_a_killed_holder_and_a_reused_pid_are_taken_over(tmp_path):
    write_lock(tmp_path, {"pid": gone_pid(), "host": socket.gethostname()})
    with model_lock(str(tmp_path), NAME):
        pass
    # the pid runs, but it is another process than the one that took the lock
    write_lock(
        tmp_path,
        {"pid": os.getpid(), "start": started_at(os.getpid()) - 1, "host": socket.gethostname()},
    )
    with model_lock(str(tmp_path), NAME):
        assert holder(tmp_path)["start"] == started_at(os.getpid())


def test_another_hosts_lock_is_respected(tmp_path):
    write_lock(tmp_path, {"pid": 1, "host": "elsewhere", "since": "2026-11-22 08:00:00"})
    with pytest.raises(StreamingError) as err:
        with model_lock(str(tmp_path), NAME):
            pass
    assert "process 1 on host elsewhere holds its lock since 2026-11-22 08:00:00" in str(err.value)
    assert holder(tmp_path)["host"] == "elsewhere"


def test_a_runner_takes_over_the_lock_of_the_run_that_started_it(tmp_path):
    starter = {"pid": os.getppid(), "host": socket.gethostname()}  # a live process, not us
    write_lock(tmp_path, starter)
    with pytest.raises(StreamingError):  # anyone else is refused
        with model_lock(str(tmp_path), NAME):
            pass
    with model_lock(str(tmp_path), NAME, take_over_from=os.getppid()):
        assert holder(tmp_path)["pid"] == os.getpid()
    assert not os.path.exists(lock(tmp_path))


def test_the_starter_leaves_a_lock_taken_over(tmp_path):
    with model_lock(str(tmp_path), NAME):
        write_lock(tmp_path, {"pid": os.getppid(), "host": socket.gethostname()})  # the runner
    assert holder(tmp_path)["pid"] == os.getppid()
