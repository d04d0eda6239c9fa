"""dbt projects run on the cluster tests' Spark: writing them, running dbt in subprocesses,
reading their Delta tables back with delta-rs, and finding where Spark ran their tasks (from
the applications' event logs)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta import storage
from dbt.adapters.spark_streaming.delta.partials import UPDATED
from dbt.adapters.spark_streaming.faults import ENV as FAULT_ENV

REPO = Path(__file__).resolve().parents[2]
BIN = os.path.dirname(sys.executable)
DBT = os.path.join(BIN, "dbt")

# scripts/demo.sh, step by step ({warehouse} is the project's warehouse)
DEMO = [
    ["dbt", "seed"],
    ["dbt", "run"],
    ["dbt", "test"],
    ["python", "scripts/append_bids.py", "{warehouse}"],
    ["dbt", "run"],
    ["dbt", "test", "--vars", "{phase: 2}"],
]
# the steps of DEMO that write tables (dbt test only reads them)
DEMO_WRITES = [step for step in DEMO if step[:2] != ["dbt", "test"]]


def write_profile(
    project: Path, name: str, master: str, warehouse: Path | str, conf: dict, **keys
) -> None:
    """profiles.yml (JSON is YAML) of a `session` profile on `master`; `keys` are more profile
    keys (checkpoint_root, storage_options). Its JVMs (driver, executors) get the tests' light
    JVM options from the environment (tests/conftest.py)."""
    target = {
        "type": "spark_streaming",
        "method": "session",
        "master": master,
        "schema": "analytics",
        "warehouse_path": str(warehouse),
        "threads": 1,
        "server_side_parameters": conf,
        **keys,
    }
    profile = {name: {"target": "t", "outputs": {"t": target}}}
    (project / "profiles.yml").write_text(json.dumps(profile, indent=2))


def event_log_conf(events: Path) -> dict:
    """Spark settings that leave each application's event log (uncompressed) under `events`."""
    events.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # one file per application
    }


def s3_keys(s3, root: Path) -> dict:
    """The profile keys of a warehouse on the moto S3 server `s3` (conftest.py), under a
    prefix of its own: its checkpoint_root is root/checkpoints."""
    return {
        "warehouse_path": f"s3://warehouse/{root.name}",
        "checkpoint_root": str(root / "checkpoints"),
        "storage_options": s3.env,
    }


def demo_project(root: Path, master: str, conf: dict, **keys) -> Path:
    """A copy of integration_tests/ under root/project, its warehouse root/warehouse unless
    `keys` say otherwise (s3_keys)."""
    project = root / "project"
    project.mkdir(parents=True)
    for name in ("dbt_project.yml", "models", "seeds", "tests", "scripts"):
        source = REPO / "integration_tests" / name
        if source.is_dir():
            shutil.copytree(source, project / name)
        else:
            shutil.copy(source, project / name)
    keys.setdefault("warehouse_path", str(root / "warehouse"))
    write_profile(project, "integration_tests", master, keys.pop("warehouse_path"), conf, **keys)
    return project


def warehouse_of(project: Path) -> str:
    """The warehouse_path of the project's profile (a directory or an s3:// URI)."""
    profile = json.loads((project / "profiles.yml").read_text())
    (target,) = [t for p in profile.values() for t in p["outputs"].values()]
    return target["warehouse_path"]


def env(fault: str | None = None) -> dict[str, str]:
    """The subprocesses' environment: no PYSPARK_PYTHON (the adapter must set it itself) and
    no injected fault unless `fault` is given."""
    out = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, "PYSPARK_PYTHON")}
    out["PATH"] = BIN + os.pathsep + out.get("PATH", "")
    if fault:
        out[FAULT_ENV] = fault
    return out


def run(project: Path, args: list[str], fault: str | None = None, timeout: float = 600):
    """One step (`dbt ...` or `python ...`) in the project's directory; (process, seconds)."""
    args = [a.replace("{warehouse}", warehouse_of(project)) for a in args]
    if args[0] == "dbt":
        args = [DBT, *args[1:], "--project-dir", str(project), "--profiles-dir", str(project)]
    elif args[0] == "python":
        args = [sys.executable, *args[1:]]
    started = time.time()
    done = subprocess.run(
        args, cwd=project, env=env(fault), capture_output=True, text=True, timeout=timeout
    )
    return done, round(time.time() - started, 1)


def run_flow(project: Path, steps: list[list[str]]) -> list[tuple[str, float]]:
    """Run `steps` in order, asserting each succeeds; [(step, seconds), ...]."""
    timings = []
    for step in steps:
        done, seconds = run(project, step)
        name = " ".join(step)
        assert done.returncode == 0, f"{name} failed on {project}:\n{done.stdout[-4000:]}"
        timings.append((name, seconds))
    return timings


def rows(path: str) -> list[tuple]:
    """The rows of the Delta table at `path`, sorted (None sorts apart from other values),
    without the processing time a state_ttl partials table keeps (it differs run to run)."""
    table = DeltaTable(path).to_pyarrow_table()
    if UPDATED in table.column_names:
        table = table.drop_columns([UPDATED])
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def tables(warehouse: str) -> dict[str, list[tuple]]:
    """Every Delta table under `warehouse` (a directory or an s3:// URI: models, seeds,
    changelogs, partials) by relative path, with its sorted rows. The adapter's own files
    (locks, runners) are skipped."""
    out = {}

    def walk(path: str, rel: str) -> None:
        if storage.is_delta(path):
            out[rel] = rows(path)
        for name in storage.list_dirs(path):
            if name not in ("_delta_log", ".dbt_streaming"):
                walk(storage.join(path, name), f"{rel}/{name}" if rel else name)

    walk(warehouse, "")
    return out


def tasks_by_worker(events: Path) -> dict[str, dict[str, int]]:
    """Per application (its event log under `events`): the tasks that ended, counted by where
    they ran: a worker (its web UI address, from the executor's log URLs) or `driver`."""
    out = {}
    for path in sorted(events.iterdir()):
        where, counts = {"driver": "driver"}, collections.Counter()
        with open(path) as fh:
            for line in fh:
                event = json.loads(line)
                if event["Event"] == "SparkListenerExecutorAdded":
                    url = urlparse(event["Executor Info"]["Log Urls"]["stderr"])
                    where[event["Executor ID"]] = url.netloc
                elif event["Event"] == "SparkListenerTaskEnd":
                    counts[where.get(event["Task Info"]["Executor ID"], "unknown")] += 1
        out[path.name.removesuffix(".inprogress")] = dict(counts)
    return out
