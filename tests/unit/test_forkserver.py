"""runtime/workerpath/spark_streaming_forkserver.py without Spark: the process Spark would start
for a query's offsets (`python -m pyspark.sql.streaming.python_streaming_source_runner`), or a
daemon of pyspark's workers (`python -m pyspark.daemon pyspark.worker`), hands itself over to
the server, which runs its module in a child forked from its warm imports; when the server is
not there, or would import other files, the process runs the module itself.

Outside Spark the runner fails at once (no JVM to connect to): where its traceback comes from
tells which process ran it."""

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest

from dbt.adapters.spark_streaming.runtime.session import (
    FORKSERVER_ENV,
    WORKER_PATH,
    forkserver_command,
)

RUNNER = [sys.executable, "-m", "pyspark.sql.streaming.python_streaming_source_runner"]


def _module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(WORKER_PATH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _environment(socket_path):
    """This process's, less a JVM's port (the runner fails at once without one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_WORKER_FACTORY")}
    return {**env, "PYTHONPATH": WORKER_PATH, FORKSERVER_ENV: socket_path}


@pytest.fixture
def server(tmp_path):
    path = str(tmp_path / "socket")
    process = subprocess.Popen(
        forkserver_command(path), stdin=subprocess.PIPE, env=_environment(path)
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield process, path
    process.stdin.close()
    process.wait(timeout=10)


def _run_runner(env):
    return subprocess.run(RUNNER, env=env, capture_output=True, text=True, timeout=60)


def test_the_runner_runs_in_a_child_of_the_server(server):
    process, path = server
    run = _run_runner(_environment(path))
    # the runner's own failure (no JVM), raised in the forked child and passed on as its status
    assert run.returncode == 1 and "get_sock_file_to_executor" in run.stderr
    assert "spark_streaming_forkserver.py" in run.stderr and "_run_child" in run.stderr
    assert process.poll() is None  # the server goes on serving
    again = _run_runner(_environment(path))
    assert again.returncode == 1 and "_run_child" in again.stderr


def test_a_removed_working_directory_is_no_obstacle(server, tmp_path):
    """The JVM's working directory can be removed under it (a test's or a bench's)."""
    _, path = server
    gone = tmp_path / "gone"
    gone.mkdir()
    code = "import os, subprocess as s, sys; os.rmdir(os.getcwd()); sys.exit(s.call(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, *RUNNER],
        cwd=gone,
        env=_environment(path),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "_run_child" in run.stderr
    assert "Error in sitecustomize" not in run.stderr
    # and the child's imports do not look in it (they would fail: FileNotFoundError)
    module_path = _module("spark_streaming_forkserver").module_path
    assert module_path(None, ["/a", "/b"]) == ["/a", "/b"]
    assert module_path("/w", ["/a"]) == ["/w", "/a"]


@pytest.mark.parametrize("setting", ["no-socket", "off"])
def test_without_a_server_the_runner_runs_itself(tmp_path, setting):
    run = _run_runner(_environment(str(tmp_path / setting) if setting != "off" else "off"))
    assert run.returncode == 1 and "get_sock_file_to_executor" in run.stderr
    assert "_run_child" not in run.stderr and "Error in sitecustomize" not in run.stderr


def test_the_server_refuses_another_hash_seed(server):
    """PySpark gives its processes PYTHONHASHSEED; the server's runs must hash strings alike."""
    _, path = server
    run = _run_runner({**_environment(path), "PYTHONHASHSEED": "7"})
    assert run.returncode == 1 and "get_sock_file_to_executor" in run.stderr
    assert "_run_child" not in run.stderr


def test_the_server_refuses_a_process_that_would_import_other_files(server, tmp_path):
    """A PYTHONPATH entry with a module named like one the server imported (py4j): the process
    would import another file than the server has, so it runs the runner itself."""
    _, path = server
    shadow = tmp_path / "shadow"
    (shadow / "py4j").mkdir(parents=True)
    (shadow / "py4j" / "__init__.py").write_text("raise ImportError('the shadowing py4j')\n")
    env = _environment(path)
    env["PYTHONPATH"] = os.pathsep.join([WORKER_PATH, str(shadow)])
    run = _run_runner(env)
    assert run.returncode == 1 and "the shadowing py4j" in run.stderr
    assert "_run_child" not in run.stderr


def test_the_server_ends_with_its_standard_input(server):
    process, _ = server
    process.stdin.close()
    assert process.wait(timeout=10) == 0


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid:
            out.add(int(entry))
    return out


def _ignores_interrupts(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        mask = next(int(line.split()[1], 16) for line in fh if line.startswith("SigIgn:"))
    return bool(mask & 1 << signal.SIGINT - 1)


def _daemon(env, server_pid: int, deaf: bool = False) -> tuple[list[tuple], int]:
    """Start a daemon as Spark does (`deaf`: with ^C ignored, as the JVM's children are), read
    its port, close its standard input (the JVM's way to stop it): (the command line of each of
    the server's new children while it ran and whether it ignored ^C, its exit status)."""
    before = _children(server_pid)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "pyspark.daemon", "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if deaf else None,
    )
    port = int.from_bytes(daemon.stdout.read(4), "big")
    assert 0 < port < 65536  # written where Spark reads it
    children = []
    for child in _children(server_pid) - before:
        with open(f"/proc/{child}/cmdline", "rb") as fh:
            children.append((fh.read(), _ignores_interrupts(child)))
    daemon.stdin.close()
    return children, daemon.wait(timeout=30)


def test_a_daemon_of_workers_runs_in_a_child_of_the_server(server):
    process, path = server
    children, status = _daemon(_environment(path), process.pid)
    ((child, deaf),) = children
    assert b"spark_streaming_forkserver" in child and not deaf  # a fork of the server
    alone = _daemon(_environment("off"), process.pid)
    assert alone == ([], status)  # its status passed on
    # started with ^C ignored (a ^C to dbt must not stop Spark's daemons), it keeps it so
    ((child, deaf),), _ = _daemon(_environment(path), process.pid, deaf=True)
    assert deaf
    assert process.poll() is None


@pytest.mark.parametrize(
    "argv, run",
    [
        (["-m", "pyspark.sql.streaming.python_streaming_source_runner"], True),
        (["-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"], True),
        (["-m", "pyspark.daemon", "other.worker"], False),
        (["-m", "pyspark.daemon"], False),
        (["-c", "pass"], False),
    ],
)
def test_what_the_server_runs(argv, run, monkeypatch):
    forkserver = _module("spark_streaming_forkserver")
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, *argv])
    assert forkserver.command() == (argv[1:] if run else None)
