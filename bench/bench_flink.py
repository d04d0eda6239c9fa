"""Benchmark: one `dbt run` of the TUMBLE 1-minute by 1,000 items model against PyFlink.

What it measures, for each size N (events): the wall time of one process doing the whole job
from scratch, as a user runs it, on the same events:
  * ours:  `dbt run` (a subprocess, `local[*]`) of the `streaming_view` of bench_cluster.py
           (`SUM(price)`, `COUNT(*)` per item and 1-minute TUMBLE window, watermark delay
           1 minute) over a Delta source of N bids in `--versions` versions (bench_tumble's
           generator, +-5 s out of order): the high-cardinality case, ~0.43 output rows per
           input row;
  * unsplit: the same with `split_backlog=false` (the state store takes every window), the
           baseline measured in the same run;
  * cluster (with `--cluster`): ours with the `spark://` URL of bench_cluster.py's standalone
           cluster on 127.0.0.1 (2 workers of 1 core and 2 GB), started once before the timed
           runs and stopped at the end; each run's application launches its two executors;
  * flink: PyFlink's Table API in streaming mode (a subprocess of another interpreter: PyFlink
           pins a pyarrow that deltalake cannot use) running the same query as a window TVF
           over the same events as CSV (the filesystem connector), watermark `bidtime -
           INTERVAL '1' MINUTE`, parallelism 2 (the cores), into CSV files.
Then the events/s of each at each size and the slope between sizes (marginal events/s:
(N2 - N1) / (t2 - t1), so fixed costs cancel), and ours / flink (target: slope >= 1.5x).

Checked after every run: ours read N rows and emitted the (minute, item) groups whose window
the final watermark closed; Flink, at the end of its bounded input, closes every window, so it
emits all groups; every row of ours equals Flink's row of that window and item (count, and
sum to 6 decimals); unsplit's and the cluster's tables equal ours; each cluster run ran an
executor on both workers.

PyFlink is optional: without `--flink-python` (or FLINK_PYTHON), only ours is timed. To set it
up (PyPI, ~400 MB, Java 17):
  python3.11 -m venv /tmp/flinkvenv && /tmp/flinkvenv/bin/pip install apache-flink==2.3.0
Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_flink.py --flink-python /tmp/flinkvenv/bin/python \
      [--events 1000000 10000000] [--versions 10] [--repeat 1] [--cluster]
Work files go to bench/work/flink/ and bench/work/cluster/ (gitignored).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from deltalake import DeltaTable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import bench_cluster as bc  # noqa: E402  (the model, its project, `dbt run` and its checks)
import bench_cold_start as bcs  # noqa: E402  (the timeline of a run: --phases)
import bench_tumble as bt  # noqa: E402  (the event generator)

WORK = os.path.join(HERE, "work", "flink")
CSV = os.path.join(WORK, "bids.csv")
FLINK_OUT = os.path.join(WORK, "out")
FLINK_JOB = '''
import sys
from pyflink.table import EnvironmentSettings, TableEnvironment

csv, out, parallelism = sys.argv[1:4]
env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
env.get_config().set("parallelism.default", parallelism)
env.execute_sql(f"""CREATE TABLE bids (bidtime TIMESTAMP(3), price DOUBLE, item STRING,
    WATERMARK FOR bidtime AS bidtime - INTERVAL '1' MINUTE)
    WITH ('connector' = 'filesystem', 'path' = '{csv}', 'format' = 'csv')""")
env.execute_sql(f"""CREATE TABLE per_minute (window_start TIMESTAMP(3), window_end TIMESTAMP(3),
    item STRING, total DOUBLE, bids BIGINT)
    WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv')""")
env.execute_sql("""INSERT INTO per_minute
    SELECT window_start, window_end, item, SUM(price), COUNT(*)
    FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end, item""").wait()
'''
SIDES = ("ours", "unsplit", "cluster", "flink")  # unsplit: ours with `split_backlog=false`


def write_csv() -> None:
    """The Delta source's events as Flink's CSV reads TIMESTAMP(3) (UTC wall time), version
    by version as our stream reads them; within a version (one micro-batch of ours, whose
    order does not matter to it) in event-time order: a version written as two files read in
    the wrong order would make Flink drop a file's rows as late."""
    table = DeltaTable(bc.SOURCE)
    added: dict[str, int] = {}
    for version in range(table.version() + 1):
        for path in DeltaTable(bc.SOURCE, version=version).file_uris():
            added.setdefault(path, version)
    versions = [
        pd.concat(pq.read_table(p).to_pandas() for p in added if added[p] == v).sort_values(
            "bidtime", kind="stable"
        )
        for v in sorted(set(added.values()))
    ]
    df = pd.concat(versions)
    times = df["bidtime"].dt.tz_convert("UTC").dt.tz_localize(None)
    df["bidtime"] = times.dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3]
    df[["bidtime", "price", "item"]].to_csv(CSV, header=False, index=False)


def run_flink(python: str, parallelism: int) -> float:
    shutil.rmtree(FLINK_OUT, ignore_errors=True)
    job = os.path.join(WORK, "job.py")
    with open(job, "w") as fh:
        fh.write(FLINK_JOB)
    started = time.perf_counter()
    done = subprocess.run(
        [python, job, CSV, FLINK_OUT, str(parallelism)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"FAIL: PyFlink:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall


def check_flink_equals_ours(ours_root: str) -> tuple[int, int]:
    """Every row of ours is Flink's row of that window and item; (our rows, Flink's rows)."""
    cols = ["window_start", "window_end", "item", "total", "bids"]
    parts = glob.glob(os.path.join(FLINK_OUT, "**", "part-*"), recursive=True)
    flink = pd.concat(pd.read_csv(p, header=None, names=cols) for p in parts)
    flink["window_start"] = pd.to_datetime(flink["window_start"])
    ours = DeltaTable(bc.output_path(ours_root)).to_pandas()
    ours["window_start"] = ours["window_start"].dt.tz_convert("UTC").dt.tz_localize(None)
    joined = ours.merge(flink, on=["window_start", "item"], how="left", suffixes=("", "_f"))
    missing = joined["bids_f"].isna().sum()
    differ = (joined["bids"] != joined["bids_f"]).sum() + (
        ~np.isclose(joined["total"], joined["total_f"], atol=1e-6)
    ).sum()
    if missing or differ:
        sys.exit(f"FAIL: {missing} rows of ours not in Flink's output, {differ} differ")
    return len(ours), len(flink)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--parallelism", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--flink-python", default=os.environ.get("FLINK_PYTHON"))
    ap.add_argument(
        "--max-files-per-trigger",
        type=int,
        help="the model's max_files_per_trigger (default: none, Delta's 1,000 files)",
    )
    ap.add_argument(
        "--cluster", action="store_true", help="also ours on a 2-worker loopback cluster"
    )
    ap.add_argument(
        "--phases", action="store_true", help="the timeline of one more run of ours per size"
    )
    args = ap.parse_args()
    if args.max_files_per_trigger:
        bc.MODEL = bc.MODEL.replace(
            "watermark_delay=",
            f"max_files_per_trigger={args.max_files_per_trigger}, watermark_delay=",
        )
    left_out = {"cluster": args.cluster, "flink": args.flink_python}
    sides = tuple(s for s in SIDES if left_out.get(s, True))
    if not args.flink_python:
        print("PyFlink not given (--flink-python / FLINK_PYTHON): timing ours only")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    print(f"load average at start: {bc.loadavg()}")
    with bc.loopback_cluster() if args.cluster else contextlib.nullcontext() as cluster:
        if cluster is not None:
            print(f"cluster {cluster.url}: 2 workers x {bc.WORKER_CORES} core, {bc.WORKER_MEMORY}")
        walls = run_sides(args, sides, cluster)
    report(sorted(args.events), sides, walls, args)


def run_sides(args, sides, cluster) -> dict[int, dict[str, list[float]]]:
    """Each size's wall seconds per side, each run checked."""
    root = bc.project("local", "local[*]", {})
    split_model = bc.MODEL
    bc.MODEL = split_model.replace("watermark_delay=", "split_backlog=false, watermark_delay=")
    roots = {"ours": root, "unsplit": bc.project("unsplit", "local[*]", {})}
    bc.MODEL = split_model
    if cluster is not None:
        roots["cluster"] = bc.project("cluster", cluster.url, bc.CLUSTER_CONF)
    known: set[str] = set()
    sizes = sorted(args.events)
    walls: dict[int, dict[str, list[float]]] = {}
    for n in sizes:
        bt.write_events(n, args.versions, items=args.items, path=bc.SOURCE)
        expected = bc.expected_rows()
        if args.flink_python:
            write_csv()
        walls[n] = {s: [] for s in sides}
        for i in range(args.repeat):  # alternate the order so neither side always runs first
            for side in sides if i % 2 == 0 else sides[::-1]:
                if side in roots:
                    wall, result = bc.dbt_run(roots[side])
                    bc.check_run(os.path.basename(roots[side]), n, expected, result)
                    if side == "cluster":
                        bc.check_on_workers(cluster, known)
                else:
                    wall = run_flink(args.flink_python, args.parallelism)
                walls[n][side].append(wall)
                print(f"  {n:,} events, {side:5} {wall:7.1f}s  load {bc.loadavg()}", flush=True)
            ours = bc.output(root)
            for other in set(roots) - {"ours"}:
                if bc.output(roots[other]) != ours:
                    sys.exit(f"FAIL: ours and {other} wrote different rows")
            if args.flink_python:
                ours_rows, flink_rows = check_flink_equals_ours(root)
                print(f"  rows: ours {ours_rows:,} (all equal Flink's), Flink {flink_rows:,}")
        if args.phases:
            wall, result = bc.dbt_run(root, bcs.phases_command())
            bc.check_run(os.path.basename(root), n, expected, result)
            print(f"  {n:,} events, ours {wall:7.1f}s with the phases wrapper")
            bcs.print_timeline(result["stdout"], "bids_per_minute")
    return walls


def report(sizes, sides, walls, args) -> None:
    med = {n: {s: statistics.median(walls[n][s]) for s in sides} for n in sizes}
    print(
        f"\nbench_flink: one process per run from scratch, medians of {args.repeat}; "
        f"{args.versions} versions, {args.items} items; load average at end {bc.loadavg()}"
    )
    head = " | ".join(f"{s} s | {s} events/s" for s in sides)
    lines = [f"| events | {head} |", "| ---: " * (1 + 2 * len(sides)) + "|"]
    for n in sizes:
        cells = " | ".join(f"{med[n][s]:.1f} | {n / med[n][s]:,.0f}" for s in sides)
        lines.append(f"| {n:,} | {cells} |")
    for a, b in zip(sizes, sizes[1:], strict=False):
        slopes = {s: (b - a) / (med[b][s] - med[a][s]) for s in sides}
        cells = "".join(f" | {slopes[s]:,.0f} |" for s in sides)
        lines.append(f"| slope {a:,} -> {b:,} |{cells}")
        print(f"slope ours / ours unsplit: {slopes['ours'] / slopes['unsplit']:.2f}")
        for side in ("ours", "cluster"):
            if side in slopes and "flink" in slopes:
                ratio = slopes[side] / slopes["flink"]
                print(f"slope {side} / flink: {ratio:.2f} (target >= 1.5)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
