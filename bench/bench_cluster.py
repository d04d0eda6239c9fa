"""Benchmark: one `dbt run` on a 2-worker standalone cluster on loopback vs. `local[*]`.

What it measures, for each size N (events): one `dbt run` from scratch (a subprocess, so each
side is a fresh process, JVM and SparkSession, as a user's `dbt run` is) of a `streaming_view`
over a Delta source of N bids in K versions (bench_tumble's generator with 1,000 items): a
1-minute TUMBLE aggregate by item, the high-cardinality case (about 0.43 output rows per input
row at 2,000 events per minute), with
  * local:   `master: local[*]` (driver and executor threads in one JVM, 2 cores here);
  * cluster: `master: spark://127.0.0.1:<port>` of a standalone cluster this script starts
             (tests/scaleout/standalone.py: a master and 2 workers of 1 core each) and stops:
             2 executors of 1 core, so the same total cores as local[*] on a 2-core machine.
The cluster is started once, before the first timed run; its start is not timed, but every
cluster `dbt run` is an application of its own and pays for launching its executors.

Checked after every run: the model read N rows and dropped no late row; the output has the
expected number of rows (the (minute, item) groups of the source whose window the final
watermark closed, counted with pyarrow) and it is > 0; after each repeat both sides' tables
hold identical rows (sorted; SUM(price) rounded to 6 decimals: float sums depend on the order
rows arrive in); each cluster run's application ran executors on both workers.

Printed per size: wall seconds of the `dbt run` process per side (median of the repeats; the
model's own execution time beside it), events/s, the cluster/local ratio; and per side the
slope between consecutive sizes (marginal events/s: (N2 - N1) / (t2 - t1), fixed costs
cancel). A Markdown table at the end.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_cluster.py [--events 1000000 10000000] [--versions 10] [--repeat 1]
Work files go to bench/work/cluster/ (gitignored) and are recreated on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow.compute as pc
from deltalake import DeltaTable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import bench_tumble as bt  # noqa: E402  (the event generator)

from tests.scaleout.standalone import StandaloneCluster  # noqa: E402

WORK = os.path.join(HERE, "work", "cluster")
SOURCE = os.path.join(WORK, "source", "bids")
BIN = os.path.dirname(sys.executable)
SIDES = ("local", "cluster")
WATERMARK_S = 60  # the model's watermark_delay
MODEL = """{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ source('bench','bids') }}, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, item
"""
# The cluster's executors: as many cores as local[*] has here (2), one per worker.
WORKER_CORES, WORKER_MEMORY = 1, "2g"
CLUSTER_CONF = {
    "spark.executor.cores": str(WORKER_CORES),
    "spark.cores.max": str(2 * WORKER_CORES),
    "spark.executor.memory": WORKER_MEMORY,
}


def loopback_cluster() -> StandaloneCluster:
    """The standalone cluster of the timed runs (not yet started): 2 workers on 127.0.0.1."""
    return StandaloneCluster(
        os.path.join(WORK, "spark"), workers=2, cores=WORKER_CORES, memory=WORKER_MEMORY
    )


def project(side: str, master: str, conf: dict) -> str:
    """A fresh dbt project and warehouse for `side`, reading the shared source; its directory."""
    root = os.path.join(WORK, side)
    shutil.rmtree(root, ignore_errors=True)
    target = {
        "type": "spark_streaming",
        "method": "session",
        "master": master,
        "schema": "bench",
        "warehouse_path": os.path.join(root, "warehouse"),
        "threads": 1,
        "server_side_parameters": conf,
    }
    files = {
        "dbt_project.yml": "name: bench_cluster\nversion: '1.0'\nconfig-version: 2\nprofile: b\n",
        "profiles.yml": json.dumps({"b": {"target": "t", "outputs": {"t": target}}}, indent=2),
        "models/sources.yml": (
            "version: 2\nsources:\n  - name: bench\n    schema: bench\n    tables:\n"
            f"      - name: bids\n        meta: {{location: '{SOURCE}'}}\n"
        ),
        "models/bids_per_minute.sql": MODEL,
    }
    for name, text in files.items():
        path = os.path.join(root, "project", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    return root


def output_path(root: str) -> str:
    return os.path.join(root, "warehouse", "bench", "bids_per_minute")


def dbt_run(root: str, dbt: list[str] | None = None) -> tuple[float, dict]:
    """`dbt run` from scratch in a subprocess; (wall seconds, the model's run_results entry,
    with the run's output under "stdout"). `dbt`: the command that stands for the dbt CLI
    (bench_cold_start's phases wrapper)."""
    shutil.rmtree(os.path.join(root, "warehouse"), ignore_errors=True)
    proj = os.path.join(root, "project")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    started = time.perf_counter()
    done = subprocess.run(
        [
            *(dbt or [os.path.join(BIN, "dbt")]),
            "run",
            "--project-dir",
            proj,
            "--profiles-dir",
            proj,
        ],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"FAIL: dbt run in {root}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    with open(os.path.join(proj, "target", "run_results.json")) as fh:
        (result,) = json.load(fh)["results"]
    result["stdout"] = done.stdout
    return wall, result


def expected_rows(delay_s: int = WATERMARK_S) -> int:
    """(minute, item) groups of the source whose window ends at or before the final watermark
    (the latest event time minus the delay): what the model emits in append mode."""
    table = DeltaTable(SOURCE).to_pyarrow_table(columns=["bidtime", "item"])
    us = pc.cast(table["bidtime"], "int64").to_numpy()
    minute = us // 60_000_000
    closed = (minute + 1) * 60 <= us.max() // 1_000_000 - delay_s
    item = pc.dictionary_encode(table["item"]).combine_chunks().indices.to_numpy()
    return len(np.unique(minute[closed] * 1_000_000 + item[closed]))


def output(root: str):
    """The model's table as sorted rows (SUM rounded: float sums depend on the row order)."""
    table = DeltaTable(output_path(root)).to_pyarrow_table()
    table = table.set_column(
        table.schema.get_field_index("total"), "total", pc.round(table["total"], 6)
    )
    return table.sort_by([("window_start", "ascending"), ("item", "ascending")])


def check_run(side: str, events: int, expected: int, result: dict) -> None:
    response = result["adapter_response"]
    written = DeltaTable(output_path(os.path.join(WORK, side))).to_pyarrow_dataset().count_rows()
    if response["rows_read"] != events or response["late_rows"] or written != expected:
        sys.exit(
            f"FAIL: {side}: read {response['rows_read']} of {events} events, "
            f"{response['late_rows']} late, wrote {written} rows, expected {expected}"
        )
    if not expected:
        sys.exit("FAIL: the expected output is empty")


def check_same() -> int:
    local, cluster = (output(os.path.join(WORK, s)) for s in SIDES)
    if not local.equals(cluster):
        sys.exit(f"FAIL: outputs differ: local {local.num_rows} rows, cluster {cluster.num_rows}")
    return local.num_rows


def check_on_workers(cluster: StandaloneCluster, known: set[str]) -> None:
    """The application of the cluster run just finished (the one not in `known`) ran an
    executor on each worker."""
    deadline = time.time() + 30
    while True:
        apps = {a["id"] for a in cluster.state()["completedapps"]} - known
        workers = [
            {e["appid"] for e in cluster.worker_state(i)["finishedexecutors"]}
            for i in range(cluster.n_workers)
        ]
        if len(apps) == 1 and all(apps <= w for w in workers):
            known |= apps
            return
        if time.time() > deadline:
            sys.exit(f"FAIL: new applications {apps}, executors' apps by worker {workers}")
        time.sleep(1)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--java-options",
        default="",
        help="driver and executor JVM flags for both sides, e.g. the cluster tests' "
        "'-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' (default: the JVM's defaults)",
    )
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed 100k round")
    args = ap.parse_args()
    sizes = sorted(args.events)
    jvm = (
        {
            "spark.driver.extraJavaOptions": args.java_options,
            "spark.executor.extraJavaOptions": args.java_options,
        }
        if args.java_options
        else {}
    )

    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    print(f"load average at start: {loadavg()}")
    t0 = time.perf_counter()
    with loopback_cluster() as cluster:
        print(
            f"cluster {cluster.url}: 2 workers x {WORKER_CORES} core, {WORKER_MEMORY}, "
            f"up in {time.perf_counter() - t0:.1f}s"
        )
        roots = {
            "local": project("local", "local[*]", jvm),
            "cluster": project("cluster", cluster.url, {**jvm, **CLUSTER_CONF}),
        }
        known: set[str] = set()
        walls: dict[int, dict[str, list[float]]] = {}
        model_s: dict[int, dict[str, list[float]]] = {}
        rows = {}
        rounds = ([] if args.no_warmup else [(100_000, 1)]) + [(n, args.repeat) for n in sizes]
        for n, repeat in rounds:
            t0 = time.perf_counter()
            bt.write_events(n, args.versions, items=args.items, path=SOURCE)
            expected = expected_rows()
            print(
                f"{n:,} events in {args.versions} versions (generated in "
                f"{time.perf_counter() - t0:.1f}s), {expected:,} rows expected"
            )
            walls[n], model_s[n] = {s: [] for s in SIDES}, {s: [] for s in SIDES}
            for i in range(repeat):  # alternate the order so neither side always runs first
                for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                    wall, result = dbt_run(roots[side])
                    check_run(side, n, expected, result)
                    if side == "cluster":
                        check_on_workers(cluster, known)
                    walls[n][side].append(wall)
                    model_s[n][side].append(result["execution_time"])
                    print(
                        f"  {side:8} {wall:7.1f}s (model {result['execution_time']:.1f}s)  "
                        f"load {loadavg()}",
                        flush=True,
                    )
                rows[n] = check_same()
    report(sizes, walls, model_s, rows, args)


def report(sizes, walls, model_s, rows, args) -> None:
    med = {n: {s: statistics.median(walls[n][s]) for s in SIDES} for n in sizes}
    mod = {n: {s: statistics.median(model_s[n][s]) for s in SIDES} for n in sizes}
    print(
        f"\nbench_cluster: one `dbt run` from scratch per side, medians of {args.repeat}; "
        f"{args.versions} versions, {args.items} items; outputs identical on both sides; "
        f"load average at end {loadavg()}"
    )
    lines = [
        "| events | output rows | local s (model) | cluster s (model) | local events/s "
        "| cluster events/s | cluster/local |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        loc, clu = med[n]["local"], med[n]["cluster"]
        lines.append(
            f"| {n:,} | {rows[n]:,} | {loc:.1f} ({mod[n]['local']:.1f}) "
            f"| {clu:.1f} ({mod[n]['cluster']:.1f}) | {n / loc:,.0f} | {n / clu:,.0f} "
            f"| {clu / loc:.2f} |"
        )
    for a, b in zip(sizes, sizes[1:], strict=False):
        slopes = {s: (b - a) / (med[b][s] - med[a][s]) for s in SIDES}
        lines.append(
            f"| slope {a:,} -> {b:,} | | | | {slopes['local']:,.0f} | {slopes['cluster']:,.0f} "
            f"| {slopes['local'] / slopes['cluster']:.2f} |"
        )
    print("\n".join(lines))
    for n in sizes:
        runs = "; ".join(f"{s} " + " ".join(f"{x:.1f}" for x in walls[n][s]) for s in SIDES)
        print(f"all runs at {n:,} (s): {runs}")


if __name__ == "__main__":
    main()
