"""Benchmark: the fixed cost of a `dbt run` of one streaming model that has nothing new to read.

What it measures, in fresh processes (as a user runs them), interleaved, best of N:
  * baseline: `python -c` that imports pyspark, starts `SparkSession.builder.getOrCreate()`
              (local[*], the same driver memory) and runs one trivial query (`range(1).collect()`);
  * dbt run:  `dbt run -s bids_per_10min` (the CLI, a new process) on a copy of
              integration_tests/ (10 models, 6 seeds), after a first `dbt seed` + `dbt run`
              built every table: the model's source has no new version, so the run has nothing
              to read.
Prints both, their ratio (target: at most 2), and with --phases the timeline of one more
`dbt run` (seconds from process start to each step: imports, dbt's parse, the Spark session,
the catalog binding, the query's start, its end, the commit), logged by wrappers installed in
that process.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_cold_start.py [--repeat 5] [--phases] [--model bids_per_10min]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(HERE, "work", "cold_start")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
PYTHON = sys.executable
DBT = os.path.join(os.path.dirname(PYTHON), "dbt")

BASELINE = (
    "from pyspark.sql import SparkSession\n"
    "s = SparkSession.builder.master('local[*]').config('spark.driver.memory', '4g')"
    ".getOrCreate()\n"
    "assert s.range(1).collect()[0][0] == 0\n"
)

# --phases: run in the timed `dbt run` process, before dbt: wraps the steps worth timing and
# prints "PHASE <seconds since process start> <step>" lines.
PHASES = r"""
import functools, sys, time
T0 = float(sys.argv.pop(1))
def mark(what):
    print(f"PHASE {time.time() - T0:7.2f} {what}", flush=True)
mark("python started, dbt imports next")
from dbt.cli.main import cli
mark("dbt imported")
from dbt.adapters.spark_streaming import connections
from dbt.adapters.spark_streaming.runtime import catalog, session, streaming
import inspect
def wrap(owner, name, label):
    fn = getattr(owner, name)
    static = isinstance(inspect.getattr_static(owner, name), (classmethod, staticmethod))
    @functools.wraps(fn)
    def timed(*a, **k):
        mark(f"{label} ...")
        try:
            return fn(*a, **k)
        finally:
            mark(f"{label} done")
    setattr(owner, name, staticmethod(timed) if static else timed)
from dbt.parser.manifest import ManifestLoader
from dbt.adapters.spark_streaming.impl import SparkStreamingAdapter
wrap(ManifestLoader, "get_full_manifest", "dbt parse (manifest)")
wrap(SparkStreamingAdapter, "run_streaming_model", "materialization calls the adapter")
wrap(session, "get_spark", "SparkSession start")
wrap(catalog.Catalog, "bind_all", "catalog bind_all")
wrap(catalog.Catalog, "bind_source_of", "catalog bind (lazy)") if hasattr(
    catalog.Catalog, "bind_source_of") else None
wrap(streaming, "run_streaming_model", "run_streaming_model")
wrap(streaming, "_plan_dataframe", "plan DataFrame")
wrap(streaming, "_start", "query start")
wrap(streaming, "_wait", "query runs")
wrap(streaming, "_finish", "finish (rebind, summary)")
from dbt.adapters.spark_streaming.runtime import sink
from dbt.adapters.spark_streaming.delta import sink as delta_sink
wrap(sink.ModelSink, "__call__", "  foreachBatch (the sink)")
wrap(sink.ModelSink, "ensure_table", "    create the table")
wrap(delta_sink.BatchCommitter, "commit", "    write the files and commit")
from pyspark.sql.streaming.readwriter import DataStreamReader
from pyspark.sql.session import SparkSession
wrap(DataStreamReader, "load", "  readStream load (the source's schema)")
wrap(SparkSession, "sql", "  spark.sql")
import atexit
atexit.register(mark, "process exits")
sys.argv[0] = "dbt"
cli()
"""


def setup() -> None:
    """A copy of integration_tests/ (warehouse under bench/work), seeded and run once."""
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(
        os.path.join(ROOT, "integration_tests"),
        PROJECT,
        ignore=shutil.ignore_patterns("warehouse", "target", "logs"),
    )
    with open(os.path.join(PROJECT, "profiles.yml")) as fh:
        profile = fh.read().replace("./warehouse", WAREHOUSE)
    with open(os.path.join(PROJECT, "profiles.yml"), "w") as fh:
        fh.write(profile)
    for args in (["seed"], ["run"]):
        dbt(*args)


def phases_command() -> list[str]:
    """The command that stands for the dbt CLI and prints the PHASE lines of its run."""
    return [PYTHON, "-c", PHASES, repr(time.time())]


def print_timeline(out: str, model: str) -> None:
    """The PHASE lines of a run's output (`phases_command`), and its model's start and end."""
    print("timeline of one more run (seconds since the process started):")
    for line in out.splitlines():
        if line.startswith("PHASE"):
            print("  " + line[6:])
        elif model in line and (" START " in line or " OK " in line):
            print("  " + line.strip())


def dbt(*args: str, phases: bool = False) -> tuple[float, str]:
    """Run the dbt CLI in a new process; (wall seconds, output)."""
    cmd = [DBT, *args, "--project-dir", PROJECT, "--profiles-dir", PROJECT]
    t0 = time.time()
    if phases:
        cmd = [*phases_command(), *cmd[1:]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT)
    took = time.time() - t0
    if out.returncode != 0:
        sys.exit(f"FAIL: dbt {' '.join(args)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return took, out.stdout


def baseline() -> float:
    t0 = time.time()
    subprocess.run([PYTHON, "-c", BASELINE], check=True, capture_output=True)
    return time.time() - t0


def model_result(model: str) -> dict:
    """The model's entry in the last run's run_results.json."""
    with open(os.path.join(PROJECT, "target", "run_results.json")) as fh:
        results = json.load(fh)["results"]
    return next(r for r in results if r["unique_id"].endswith(f".{model}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default="bids_per_10min")
    ap.add_argument("--phases", action="store_true", help="print one run's timeline")
    ap.add_argument("--no-setup", action="store_true", help="reuse bench/work/cold_start")
    args = ap.parse_args()
    if not args.no_setup:
        setup()
    bases, runs, models = [], [], []
    for i in range(args.repeat):
        bases.append(baseline())
        took, _ = dbt("run", "-s", args.model)
        result = model_result(args.model)
        if result["adapter_response"].get("rows_read"):
            sys.exit(f"FAIL: the run read rows: {result['adapter_response']}")
        runs.append(took)
        models.append(result["execution_time"])
        print(
            f"  repeat {i + 1}: baseline {bases[-1]:.2f} s, dbt run {took:.2f} s "
            f"(model {models[-1]:.2f} s)",
            flush=True,
        )
    best_base, best_run = min(bases), min(runs)
    print(
        f"bare Spark (getOrCreate + range(1).collect()): {best_base:.2f} s (best of {args.repeat})"
    )
    print(
        f"dbt run -s {args.model}, no new data:          {best_run:.2f} s "
        f"(model {min(models):.2f} s)"
    )
    print(f"ratio: {best_run / best_base:.2f} (target <= 2)")
    if args.phases:
        _, out = dbt("run", "-s", args.model, phases=True)
        print_timeline(out, args.model)


if __name__ == "__main__":
    main()
