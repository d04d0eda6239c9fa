"""Benchmark: the driver's peak memory while a model writes 1M, then 10M rows.

What it measures, for each output size N: one `dbt run` (a subprocess of its own, so each size
starts from a fresh process) of a model over a Delta source of N rows in 8 files, all read by
the first micro-batch (`--model`):
  * copy (default): a stateless streaming_view that copies its source (a projection and a
    filter that keeps every row);
  * upsert: an upsert_table `GROUP BY id` (N keys, all inserted by one micro-batch: its
    copy-on-write MERGE and changelog of N rows);
  * incremental: an incremental model with unique_key id, run twice in the process: the first
    run builds the table, the second MERGEs all N rows again (every key matched).
At the end, in that process:
  * python: the dbt/driver Python process's peak RSS (ru_maxrss = VmHWM);
  * jvm:    the driver JVM's peak RSS (VmHWM of the spark-submit process; in local mode the
            executors run in this JVM too);
  * workers: the largest peak RSS of Spark's Python workers (where the executor tasks write);
and the wall time of its runs. Printed: a table, and the ratios 10M/1M (target with executor
writes: python <= 1.2, i.e. flat: rows do not pass through the driver's Python process).

To compare with another checkout's code (e.g. the driver-side writes before this benchmark was
added), pass that checkout's interpreter: `--python /path/to/other/.venv/bin/python`.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_driver_memory.py [--model copy|upsert|incremental]
      [--rows 1000000 10000000] [--python PY]
Work files go to bench/work/driver_memory/ (gitignored); the sources are kept between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "driver_memory")
FILES = 8
MODELS = {
    "copy": """{{ config(materialized='streaming_view') }}
SELECT id, ts, user_id, amount * 2 AS doubled FROM {{ source('bench', 'events') }}
WHERE amount >= 0
""",
    "upsert": """{{ config(materialized='upsert_table', constant_domain='id') }}
SELECT id, COUNT(*) AS n, SUM(amount) AS total FROM {{ source('bench', 'events') }}
GROUP BY id
""",
    "incremental": """{{ config(materialized='incremental', unique_key='id') }}
SELECT id, ts, user_id, amount * 2 AS doubled FROM {{ source('bench', 'events') }}
""",
}
RUNS = {"copy": 1, "upsert": 1, "incremental": 2}
# Runs in the measured process: dbt run, then the peaks of this process, its JVM and workers.
PROBE = """
import json, os, resource, sys, time
from dbt.cli.main import dbtRunner
started = time.time()
args = ["run", "--project-dir", sys.argv[1], "--profiles-dir", sys.argv[1]]
for _ in range(int(sys.argv[2])):
    result = dbtRunner().invoke(args)
    if not result.success:
        break
wall = time.time() - started

def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM"))
    except (OSError, StopIteration):
        return 0

def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except OSError:
                pass
    return out

from pyspark import SparkContext
jvm = SparkContext._gateway.proc.pid
todo, workers = children(jvm), []
while todo:
    pid = todo.pop()
    workers.append(pid)
    todo += children(pid)
print("PROBE " + json.dumps({
    "ok": result.success,
    "wall_s": round(wall, 1),
    "python_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    "jvm_mb": hwm(jvm) // 1024,
    "workers_mb": max([hwm(p) for p in workers] or [0]) // 1024,
}))
"""


def source(rows: int) -> str:
    """A Delta table of `rows` events in FILES appended versions (kept between runs)."""
    path = os.path.join(WORK, f"source_{rows}")
    if os.path.isdir(path) and DeltaTable(path).version() == FILES - 1:
        return path
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(rows)
    per = rows // FILES
    for i in range(FILES):
        n = per if i < FILES - 1 else rows - per * (FILES - 1)
        ids = np.arange(i * per, i * per + n, dtype=np.int64)
        write_deltalake(
            path,
            pa.table(
                {
                    "id": ids,
                    "ts": pa.array(1_586_937_600_000_000 + ids * 1000, pa.timestamp("us", "UTC")),
                    "user_id": pa.array(rng.integers(0, 100_000, n), pa.int64()),
                    "amount": pa.array(np.round(rng.uniform(0, 100, n), 2)),
                }
            ),
            mode="append",
        )
    return path


def project(rows: int, source_path: str, model: str) -> str:
    root = os.path.join(WORK, f"run_{model}_{rows}")
    shutil.rmtree(root, ignore_errors=True)
    files = {
        "dbt_project.yml": (
            "name: bench_memory\nversion: '1.0'\nconfig-version: 2\nprofile: bench\n"
        ),
        "profiles.yml": (
            "bench:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
            "      method: session\n      schema: bench\n"
            f"      warehouse_path: {os.path.join(root, 'warehouse')}\n      threads: 1\n"
        ),
        "models/sources.yml": (
            "version: 2\nsources:\n  - name: bench\n    schema: bench\n    tables:\n"
            f"      - name: events\n        meta: {{location: '{source_path}'}}\n"
        ),
        "models/out.sql": MODELS[model],
    }
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, "project", name)), exist_ok=True)
        with open(os.path.join(root, "project", name), "w") as fh:
            fh.write(text)
    return root


def measure(rows: int, python: str, model: str) -> dict:
    root = project(rows, source(rows), model)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    started = time.time()
    done = subprocess.run(
        [python, "-c", PROBE, os.path.join(root, "project"), str(RUNS[model])],
        env=env,
        cwd=root,  # not the repo: `python -c` would import the package from the working directory
        capture_output=True,
        text=True,
        timeout=3600,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    if done.returncode or line is None:
        sys.exit(f"dbt run failed ({rows} rows):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    out = json.loads(line[len("PROBE ") :])
    if not out["ok"]:
        sys.exit(f"dbt run failed ({rows} rows):\n{done.stdout[-3000:]}")
    table = DeltaTable(os.path.join(root, "warehouse", "bench", "out"))
    written = table.to_pyarrow_dataset().count_rows()
    if written != rows:
        sys.exit(f"the run wrote {written} rows of {rows}:\n{done.stdout[-3000:]}")
    out["files"] = len(table.file_uris())
    out["process_s"] = round(time.time() - started, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="copy")
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--python", default=sys.executable, help="interpreter of the code to measure")
    args = ap.parse_args()
    results = {n: measure(n, args.python, args.model) for n in args.rows}
    print(f"\nmodel: {args.model}; code: {args.python}")
    print("| rows | files | wall s | python peak MB | JVM peak MB | worker peak MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, r in results.items():
        print(
            f"| {n:,} | {r['files']} | {r['wall_s']} | {r['python_mb']} | {r['jvm_mb']} | "
            f"{r['workers_mb']} |"
        )
    if len(results) > 1:
        lo, hi = results[min(results)], results[max(results)]
        label = f"{max(results) // min(results)}x rows"
        for key in ("python_mb", "jvm_mb", "workers_mb"):
            print(f"{label}: {key.removesuffix('_mb')} peak ratio {hi[key] / lo[key]:.2f}")


if __name__ == "__main__":
    main()
