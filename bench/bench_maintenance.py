"""Benchmark: table maintenance of a continuous model over many micro-batches (issue 36): live
files, reads against one file, log replay, storage.

A `streaming_view` projecting a Delta source (`bench.events`) runs continuously (a runner
started by `dbt run`, processing-time trigger `--interval`, auto-compaction at its defaults
unless `--min-files` says otherwise) while the benchmark appends `--rows` rows to the source
every `--interval`, `--appends` times. Every `--vacuum-every` seconds a `dbt run-operation
vacuum` (retention `--retention-hours`) runs beside it, as a scheduled vacuum would. It samples,
as it goes: the model's live files, the data files on storage and their bytes, and the time to
load the model's Delta table (log replay, median of 3) with the log's files and the actions of
its last checkpoint (its live files and the removes it keeps, `--table-retention`). At the end
(runner stopped, every row checked), in the same process:

- a full read of the model's table (deltalake, to Arrow) against the same rows in one file,
  the two alternating, medians of `--read-repeat` (a read takes tens of milliseconds: fewer
  repeats measure the machine's noise);
- a downstream model's first `dbt run` over the table against the same model over the one-file
  copy (the model's time in run_results.json), medians of `--repeat`.

`--reads-only` times the reads again over the tables the last run left.

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_maintenance.py [--appends 2000] [--rows 100] \
      [--interval '1 second'] [--min-files 50] [--vacuum-every 60] [--repeat 3] \
      [--read-repeat 31] [--table-retention '5 minutes'] [--reads-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work", "maintenance")
PROJECT = os.path.join(WORK, "project")
WAREHOUSE = os.path.join(WORK, "warehouse")
EVENTS = os.path.join(WAREHOUSE, "bench", "events")
MODEL = os.path.join(WAREHOUSE, "bench", "events_live")
ONE = os.path.join(WAREHOUSE, "bench", "events_one")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
META = "dbt_spark_streaming"
DOWNSTREAM = (
    "{{ config(materialized='streaming_view', watermark_delay='10 seconds') }}\n"
    "SELECT window_start, window_end, COUNT(*) AS n, SUM(amount2) AS total "
    "FROM TABLE(TUMBLE(TABLE {{ %s }}, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
    "GROUP BY window_start, window_end\n"
)


def files(interval: str, min_files: int | None, retention: str | None) -> dict:
    compact = "" if min_files is None else f", auto_compact={{'min_files': {min_files}}}"
    if retention:  # the log's and the removed files' (tombstones in checkpoints)
        compact += (
            f", tblproperties={{'delta.logRetentionDuration': 'interval {retention}', "
            f"'delta.deletedFileRetentionDuration': 'interval {retention}'}}"
        )
    return {
        "dbt_project.yml": "name: bench_maint\nversion: '1.0'\nconfig-version: 2\nprofile: b\n",
        "profiles.yml": (
            "b:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
            f"      method: session\n      schema: bench\n      warehouse_path: {WAREHOUSE}\n"
            "      threads: 1\n"
        ),
        "models/sources.yml": (
            "version: 2\nsources:\n  - name: bench\n    schema: bench\n"
            "    tables: [{name: events}, {name: events_one}]\n"
        ),
        "models/events_live.sql": (
            "{{ config(materialized='streaming_view', "
            f"trigger={{'processing_time': '{interval}'}}{compact}) }}}}\n"
            "SELECT ts, id, amount * 2 AS amount2 FROM {{ source('bench', 'events') }}\n"
        ),
        "models/down_live.sql": DOWNSTREAM % "ref('events_live')",
        "models/down_one.sql": DOWNSTREAM % "source('bench', 'events_one')",
    }


def events(n: int, start: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "ts": pa.array((1_586_937_600 + ids // 10) * 1_000_000, pa.timestamp("us", tz="UTC")),
            "id": pa.array(ids, pa.int64()),
            "amount": pa.array(ids % 100 / 4.0),
        }
    )


def dbt(*args: str) -> dict:
    """Run dbt; the run_results.json entries by model name."""
    out = subprocess.run(
        [DBT, *args, "--project-dir", PROJECT, "--profiles-dir", PROJECT],
        capture_output=True,
        text=True,
        cwd=PROJECT,
    )
    if out.returncode != 0:
        sys.exit(f"FAIL: dbt {' '.join(args)}\n{out.stdout[-3000:]}")
    with open(os.path.join(PROJECT, "target", "run_results.json")) as fh:
        return {r["unique_id"].split(".")[-1]: r for r in json.load(fh)["results"]}


def consumed(version: int) -> bool:
    """Whether the model's last commit consumed the source's `version`."""
    for entry in DeltaTable(MODEL).history(10):
        meta = entry.get(META)
        if meta:
            return json.loads(meta).get("sources", {}).get("bench.events", -1) >= version
    return False


def sample(started: float) -> dict:
    table = DeltaTable(MODEL)
    live = [u.removeprefix("file://") for u in table.file_uris()]
    on_disk = [e for e in os.scandir(MODEL) if e.name.endswith(".parquet")]
    log = os.path.join(MODEL, "_delta_log")
    checkpoint = {"size": 0}  # none yet
    if os.path.exists(os.path.join(log, "_last_checkpoint")):
        with open(os.path.join(log, "_last_checkpoint")) as fh:
            checkpoint = json.load(fh)
    loads = []
    for _ in range(3):
        t = time.perf_counter()
        DeltaTable(MODEL).file_uris()
        loads.append(time.perf_counter() - t)
    return {
        "s": round(time.time() - started, 1),
        "version": table.version(),
        "live": len(live),
        "stored": len(on_disk),
        "stored_mb": round(sum(e.stat().st_size for e in on_disk) / 2**20, 2),
        "live_mb": round(sum(os.path.getsize(f) for f in live) / 2**20, 2),
        "log_files": len(os.listdir(log)),
        "checkpoint_actions": checkpoint["size"],
        "load_ms": round(statistics.median(loads) * 1000, 1),
    }


def rewritten_rows() -> int:
    """The rows the model table's compactions wrote (their records: delta/origins.py)."""
    folder = os.path.join(MODEL, "_dbt_streaming", "compacted")
    total = 0
    for name in os.listdir(folder):
        if name.endswith(".json") and ".pending" not in name:
            with open(os.path.join(folder, name)) as fh:
                outputs = json.load(fh)["outputs"]
            total += sum(rows for inputs in outputs.values() for _, rows in inputs)
    return total


def reads(repeat: int) -> None:
    """Print a full read of the model's table against the one-file copy, with and without the
    table's load, alternating which goes first, medians of `repeat`."""
    times: dict[str, list[float]] = {k: [] for k in ("model", "one", "data_model", "data_one")}
    model, one = DeltaTable(MODEL), DeltaTable(ONE)  # the data alone, the logs loaded
    for i in range(repeat):
        for name in ("model", "one") if i % 2 else ("one", "model"):
            path, loaded = (MODEL, model) if name == "model" else (ONE, one)
            for key in (name, f"data_{name}"):
                t = time.perf_counter()
                (loaded if key.startswith("data_") else DeltaTable(path)).to_pyarrow_table()
                times[key].append(time.perf_counter() - t)
    m = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"full read (log and data, medians of {repeat}): {m['model']:.4f} s, one file "
        f"{m['one']:.4f} s, ratio {m['model'] / m['one']:.2f} (target <= 1.2); the data alone: "
        f"{m['data_model']:.4f} s against {m['data_one']:.4f} s, "
        f"ratio {m['data_model'] / m['data_one']:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--interval", default="1 second", help="the trigger's and the appends'")
    ap.add_argument("--min-files", type=int, default=None, help="auto_compact min_files")
    ap.add_argument("--vacuum-every", type=float, default=60.0, help="seconds")
    ap.add_argument("--retention-hours", type=int, default=0, help="the vacuums'")
    ap.add_argument(
        "--table-retention",
        default=None,
        help="the model's delta.logRetentionDuration and delta.deletedFileRetentionDuration, "
        "e.g. '5 minutes' (default: Delta's, 30 and 7 days)",
    )
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="the downstream runs'")
    ap.add_argument("--read-repeat", type=int, default=31, help="the full reads'")
    ap.add_argument("--reads-only", action="store_true", help="over the last run's tables")
    args = ap.parse_args()
    if args.reads_only:
        reads(args.read_repeat)
        # a process that ends right after delta-rs read several files aborts ("terminate called
        # without an active exception": a reading thread still ending; deltalake 1.6.6)
        time.sleep(1)
        return
    from dbt.adapters.spark_streaming.sql.intervals import parse_duration

    interval_s = parse_duration(args.interval) / 1e6
    shutil.rmtree(WORK, ignore_errors=True)
    for name, text in files(args.interval, args.min_files, args.table_retention).items():
        os.makedirs(os.path.dirname(os.path.join(PROJECT, name)), exist_ok=True)
        with open(os.path.join(PROJECT, name), "w") as fh:
            fh.write(text)
    write_deltalake(EVENTS, events(args.rows, 0), mode="append")
    write_deltalake(ONE, events(1, 0).schema.empty_table(), mode="append")  # a source to parse
    dbt("run", "-s", "events_live")  # starts the runner
    started, samples, vacuums = time.time(), [sample(time.time())], []
    stop = threading.Event()

    def vacuum_loop():
        while not stop.wait(args.vacuum_every):
            t = time.perf_counter()
            dbt(
                "run-operation",
                "vacuum",
                "--args",
                f"{{model: events_live, retention_hours: {args.retention_hours}}}",
            )
            vacuums.append(time.perf_counter() - t)

    most = [0]  # the most live files seen (looked at every second)

    loads: list[tuple[float, float]] = []  # (seconds, ms) of the watcher's loads

    def watch_loop():
        while not stop.wait(1.0):
            t = time.perf_counter()
            live = len(DeltaTable(MODEL).file_uris())
            loads.append((time.time() - started, (time.perf_counter() - t) * 1000))
            most[0] = max(most[0], live)

    vacuumer = threading.Thread(target=vacuum_loop, daemon=True)
    watcher = threading.Thread(target=watch_loop, daemon=True)
    vacuumer.start()
    watcher.start()
    every = max(args.appends // args.samples, 1)
    try:
        for i in range(1, args.appends + 1):
            t = time.monotonic()
            write_deltalake(EVENTS, events(args.rows, i * args.rows), mode="append")
            if i % every == 0:
                samples.append(sample(started))
                print(samples[-1], flush=True)
            time.sleep(max(interval_s - (time.monotonic() - t), 0))
        last = DeltaTable(EVENTS).version()
        while not consumed(last):
            time.sleep(0.2)
    finally:
        stop.set()
        vacuumer.join()
        watcher.join()
        dbt("run-operation", "stream_stop")
    batches = DeltaTable(MODEL).version()
    got = DeltaTable(MODEL).to_pyarrow_table(columns=["id"]).column("id").to_numpy()
    want = np.arange((args.appends + 1) * args.rows)
    if not np.array_equal(np.sort(got), want):
        sys.exit(f"FAIL: the model holds {len(got)} rows, not the source's {len(want)}")
    samples.append(sample(started))

    # the same rows in one file (a Delta table of one version)
    shutil.rmtree(ONE)
    write_deltalake(ONE, DeltaTable(MODEL).to_pyarrow_table())
    down = {"down_live": [], "down_one": []}
    for _ in range(args.repeat):
        for name in down:
            result = dbt("run", "-s", name, "--full-refresh")[name]
            down[name].append(result["execution_time"])
    first_live, first_one = (statistics.median(down[n]) for n in ("down_live", "down_one"))

    print()
    print(
        f"{args.appends} appends of {args.rows} rows every {args.interval}, auto_compact "
        f"min_files {args.min_files or 50}; {batches} model versions; "
        f"{len(vacuums)} vacuums (median {statistics.median(vacuums) if vacuums else 0:.1f} s)"
    )
    print(f"model table retention: {args.table_retention or 'Delta defaults'}")
    print(
        "| s | model version | live files | files stored | MB stored | MB live | log files "
        "| checkpoint actions | load ms |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in samples:
        print(
            f"| {s['s']} | {s['version']} | {s['live']} | {s['stored']} | {s['stored_mb']} | "
            f"{s['live_mb']} | {s['log_files']} | {s['checkpoint_actions']} | {s['load_ms']} |"
        )
    print(f"max live files (looked at every second): {max(most[0], *(s['live'] for s in samples))}")
    print(f"compactions wrote {rewritten_rows() / len(want):.2f} rows per row appended")
    n = len(loads)  # the table's load every second, by tenth of the run
    tenths = [[m for _, m in loads[n * i // 10 : n * (i + 1) // 10]] for i in range(10)]
    print("table load ms (every second), by tenth of the run: median / 95th percentile")
    print(
        "  "
        + "  ".join(
            f"{statistics.median(ms):.1f}/{sorted(ms)[int(len(ms) * 0.95)]:.1f}"
            for ms in tenths
            if ms
        )
    )
    reads(args.read_repeat)
    print(
        f"downstream first run: {first_live:.2f} s, over one file {first_one:.2f} s, "
        f"ratio {first_live / first_one:.2f} (target <= 1.2)"
    )


if __name__ == "__main__":
    main()
