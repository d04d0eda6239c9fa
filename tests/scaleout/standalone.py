"""A Spark standalone cluster on loopback, started from the pyspark wheel's `spark-class`: one
master and `workers` workers, each daemon in a process group of its own (its executors and their
Python workers are its children), stopped by killing those groups.

    with StandaloneCluster(tmp_dir) as cluster:
        cluster.url         # spark://127.0.0.1:<port>, for a profile's `master`
        cluster.state()     # the master's web UI JSON (workers, active and completed apps)

The daemons get an environment without PYSPARK_PYTHON and without this virtualenv on PATH, so an
executor only runs this interpreter if the application asks for it (as the adapter does).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pyspark

SPARK_CLASS = os.path.join(os.path.dirname(sys.executable), "spark-class")
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def daemon_env() -> dict[str, str]:
    """The daemons' environment: SPARK_HOME of the wheel; no PYSPARK_PYTHON and no venv on PATH."""
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_DAEMON_MEMORY"] = "256m"
    env["SPARK_DAEMON_JAVA_OPTS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # less CPU
    return env


class StandaloneCluster:
    def __init__(self, root: str, workers: int = 2, cores: int = 2, memory: str = "2g"):
        self.root = root
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.worker_ui_ports = [free_port() for _ in range(workers)]
        self.url = f"spark://127.0.0.1:{self.port}"
        self.ui = f"http://127.0.0.1:{self.ui_port}"
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(os.path.join(self.root, f"{name}.log"), "w")
        self.procs.append(
            subprocess.Popen(
                [SPARK_CLASS, *args],
                cwd=self.root,
                env=daemon_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as a whole in stop()
            )
        )
        log.close()

    def start(self, timeout: float = 180.0) -> "StandaloneCluster":
        """Start the master and the workers; return once every worker is ALIVE at the master."""
        os.makedirs(self.root, exist_ok=True)
        self._spawn(
            "master",
            [MASTER, "--host", "127.0.0.1", "--port", str(self.port)]
            + ["--webui-port", str(self.ui_port)],
        )
        for i, ui_port in enumerate(self.worker_ui_ports):
            work_dir = os.path.join(self.root, f"worker{i}")
            os.makedirs(work_dir, exist_ok=True)
            self._spawn(
                f"worker{i}",
                [WORKER, self.url, "--host", "127.0.0.1", "--cores", str(self.cores)]
                + ["--memory", self.memory, "--webui-port", str(ui_port), "--work-dir", work_dir],
            )
        deadline = time.time() + timeout
        while True:
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"spark daemon(s) exited at start: {dead}; {self.log_tail()}")
            try:
                if len(self.alive_workers()) == self.n_workers:
                    return self
            except OSError:
                pass  # the master's web UI is not up yet
            if time.time() > deadline:
                raise RuntimeError(f"workers not registered after {timeout}s; {self.log_tail()}")
            time.sleep(1)

    def state(self) -> dict:
        """The master's JSON: url, workers, aliveworkers, activeapps, completedapps, ..."""
        return get_json(f"{self.ui}/json/")

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]

    def worker_state(self, i: int) -> dict:
        """Worker i's JSON: its executors (running and finished, with their app ids)."""
        return get_json(f"http://127.0.0.1:{self.worker_ui_ports[i]}/json/")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for name in ["master"] + [f"worker{i}" for i in range(self.n_workers)]:
            try:
                with open(os.path.join(self.root, f"{name}.log")) as fh:
                    out.append(f"--- {name}.log\n" + "\n".join(fh.read().splitlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM each daemon's process group (workers first), then SIGKILL what is left."""
        for proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.time() + grace
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)  # the group may outlive its leader
            proc.wait()
        self.procs = []

    def __enter__(self) -> "StandaloneCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
