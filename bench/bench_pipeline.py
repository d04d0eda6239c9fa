"""Benchmark: what continuous models cost when they share a runner (runtime/continuous/pipeline.py).

A project of `--models` continuous models (default 20, 1-second triggers) over `--sources`
Delta sources (default 4): per source, window aggregates (TUMBLE 1 and 5 minutes per item, HOP,
a filtered one), and on source 0 a 3-model chain (a window aggregate, an upsert_table over it,
an upsert_table over that). Measured, in this order:

  start:   the wall time of the `dbt run` that starts them all (threads 2);
  memory:  the PSS (proportional set size: a page shared by n processes counts 1/n in each, as
           the forked source processes share their parent's) of the runner and every process
           under it (its Spark JVM, the fork server and the processes forked from it, Spark's
           Python workers), summed, after the start and after the appends; by kind of process;
  idle:    the CPU time of those processes over `--idle` seconds with nothing arriving, as a
           share of one core; by kind of process;
  latency: `--appends` appends to source 0, one a second, while the other models run with
           nothing to read; for each, the time from the source's Delta commit to the commit
           of each model reading it that consumed it (p50, p99), and to the chain's last
           model (end to end, through its two upstreams).
  CPU:     the CPU time of the runner's processes over the appends (and the 15 s after them
           that let the last ones through the chain), as a share of one core,
           by kind of process; with `--jfr FILE`, a JFR recording of the runner's JVM over
           them (read it with `jfr print --events jdk.ExecutionSample FILE`);
  failure: one of the models is a filter over source 0 whose `assert_true` fails on a
           negative price. `--appends` more appends, the first with such a row: that model
           fails, is restarted with backoff and fails again, while the other readers of
           source 0 go on; their commits per second and latency, against the phase before.
  backlog: with `--backlog ROWS`, a `dbt run` hands the runner one more model (TUMBLE 1
           minute per item) over a source of ROWS rows in 100 files, and `--appends` more
           appends to source 0 go on while it starts: the latency of source 0's readers
           meanwhile, against the healthy phase, and that `dbt run`'s time.

The baseline, measured in the same run: `--baseline` models (default 2) each with a runner of
its own (`pipeline: false`, the mode before shared runners), whose memory per model is printed
beside the shared runner's, with the ratio (the per-model runners of 20 models would not fit
this machine's memory, so they are not started).

Run (from the repo root, with the project venv):
  .venv/bin/python bench/bench_pipeline.py [--models 20] [--sources 4] [--appends 30]
      [--idle 30] [--baseline 2] [--backlog 0] [--conf spark.key=value ...] [--jfr FILE]
      [--master local[N]]
`--conf` puts Spark settings in the profile's `server_side_parameters` (e.g. a default of the
adapter's set back to Spark's, to measure what it does).
Work files go to bench/work/pipeline/ (gitignored).
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
import pyarrow.compute  # noqa: F401 - pa.compute
from deltalake import DeltaTable, write_deltalake

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work", "pipeline")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
META = "dbt_spark_streaming"
TRIGGER = "trigger={'processing_time': '1 second'}"
BASE = 1_704_067_200  # 2024-01-01T00:00:00Z
ROWS = 200  # rows per append

WINDOWS = [  # (name, model SQL over source {src}); each source gets these in turn
    (
        "tumble1",
        "SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n FROM "
        "TABLE(TUMBLE(TABLE {src}, DESCRIPTOR(ts), INTERVAL '1' MINUTES)) "
        "GROUP BY window_start, window_end, item",
    ),
    (
        "tumble5",
        "SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS n FROM "
        "TABLE(TUMBLE(TABLE {src}, DESCRIPTOR(ts), INTERVAL '5' MINUTES)) "
        "GROUP BY window_start, window_end",
    ),
    (
        "hop",
        "SELECT window_start, window_end, MAX(price) AS top FROM "
        "TABLE(HOP(TABLE {src}, DESCRIPTOR(ts), INTERVAL '1' MINUTES, INTERVAL '5' MINUTES)) "
        "GROUP BY window_start, window_end",
    ),
    (
        "cheap",
        "SELECT window_start, window_end, COUNT(*) AS n FROM "
        "TABLE(TUMBLE(TABLE {src}, DESCRIPTOR(ts), INTERVAL '2' MINUTES)) "
        "WHERE price < 50 GROUP BY window_start, window_end",
    ),
]
GUARD = (  # the model that fails in the failure phase
    "SELECT ts, item, price FROM {src} WHERE assert_true(price >= 0, 'a negative price') IS NULL"
)
CHAIN = {
    "chain_a": "SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n FROM "
    "TABLE(TUMBLE(TABLE {src}, DESCRIPTOR(ts), INTERVAL '1' MINUTES)) "
    "GROUP BY window_start, window_end, item",
    "chain_b": "SELECT item, SUM(total) AS total, SUM(n) AS n FROM {{ ref('chain_a') }} "
    "GROUP BY item",
    "chain_c": "SELECT item, SUM(total) AS total, SUM(n) AS n FROM {{ ref('chain_b') }} "
    "GROUP BY item",
}


def source_ref(i: int) -> str:
    return "{{ source('bench', 'events_%d') }}" % i


def model_files(models: int, sources: int, own_runner: bool) -> dict[str, str]:
    """`models` continuous models: the chain on source 0 first, then window aggregates over
    the sources in turn. name -> SQL."""
    extra = ", pipeline=false" if own_runner else ""
    out = {}
    for name, sql in CHAIN.items():
        if len(out) == models:
            break
        if name == "chain_a":
            config = f"materialized='streaming_view', watermark_delay='10 seconds', {TRIGGER}"
        else:
            config = "materialized='upsert_table', unique_key='item', constant_domain='item', "
            config += TRIGGER
        out[name] = "{{ config(%s%s) }}\n%s\n" % (
            config,
            extra,
            sql.replace("{src}", source_ref(0)),
        )
    if len(out) < models:
        out["guard_0"] = "{{ config(materialized='streaming_view', %s%s) }}\n%s\n" % (
            TRIGGER,
            extra,
            GUARD.replace("{src}", source_ref(0)),
        )
    k = 0
    while len(out) < models:
        i = k % sources
        name, sql = WINDOWS[(k // sources) % len(WINDOWS)]
        config = f"materialized='streaming_view', watermark_delay='10 seconds', {TRIGGER}"
        out[f"{name}_{i}_{k}"] = "{{ config(%s%s) }}\n%s\n" % (
            config,
            extra,
            sql.replace("{src}", source_ref(i)),
        )
        k += 1
    return out


def write_project(
    root: str, models: dict[str, str], sources: int, conf: dict, master: str = "local[*]"
) -> None:
    project = os.path.join(root, "project")
    os.makedirs(os.path.join(project, "models"))
    files = {
        "dbt_project.yml": "name: bench_pipeline\nversion: '1.0'\nconfig-version: 2\nprofile: b\n",
        "profiles.yml": (
            "b:\n  target: local\n  outputs:\n    local:\n      type: spark_streaming\n"
            f"      method: session\n      schema: bench\n      master: '{master}'\n"
            f"      warehouse_path: {os.path.join(root, 'warehouse')}\n      threads: 2\n"
            f"      server_side_parameters: {json.dumps(conf)}\n"
        ),
        "models/sources.yml": "version: 2\nsources:\n  - name: bench\n    schema: bench\n"
        "    tables: ["
        + ", ".join(["{name: events_%d}" % i for i in range(sources)] + ["{name: backlog}"])
        + "]\n",
    } | {f"models/{n}.sql": sql for n, sql in models.items()}
    for name, text in files.items():
        with open(os.path.join(project, name), "w") as fh:
            fh.write(text)


def events(seed: int, second: int, bad: bool = False) -> pa.Table:
    """ROWS events of the minute before `second` (seconds after BASE), out of order, DOUBLE
    prices with two decimals, 20 items; `bad`: one price negative."""
    rng = np.random.default_rng(seed)
    ts = (BASE + second - rng.integers(0, 60, ROWS)) * 1_000_000
    price = np.round(rng.uniform(0.01, 100, ROWS), 2)
    if bad:
        price[0] = -1.0
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "item": pa.array([f"i{j}" for j in rng.integers(0, 20, ROWS)]),
            "price": pa.array(price),
        }
    )


def backlog_events(seed: int, rows: int) -> pa.Table:
    """`rows` events spread over the day before BASE, as events() makes them."""
    rng = np.random.default_rng(seed)
    ts = (BASE - rng.integers(0, 86_400, rows)) * 1_000_000
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "item": pa.array(np.char.add("i", rng.integers(0, 20, rows).astype(str))),
            "price": pa.array(np.round(rng.uniform(0.01, 100, rows), 2)),
        }
    )


def source_path(root: str, i: int) -> str:
    return os.path.join(root, "warehouse", "bench", f"events_{i}")


def table(root: str, name: str) -> str:
    return os.path.join(root, "warehouse", "bench", name)


def dbt(root: str, *args: str) -> float:
    project = os.path.join(root, "project")
    started = time.time()
    out = subprocess.run(
        [DBT, *args, "--project-dir", project, "--profiles-dir", project],
        capture_output=True,
        text=True,
        cwd=project,
    )
    if out.returncode:
        sys.exit(f"dbt {' '.join(args)} failed:\n{out.stdout[-5000:]}")
    return time.time() - started


def runner_pids(root: str) -> list[int]:
    """The pids of the project's runners (their status files)."""
    home = os.path.join(root, "warehouse", ".dbt_streaming", "pipelines")
    pids = []
    for name in os.listdir(home) if os.path.isdir(home) else []:
        with open(os.path.join(home, name, "status.json")) as fh:
            st = json.load(fh)
        if st.get("state") == "running":
            pids.append(st["pid"])
    return pids


def tree(pids: list[int]) -> list[int]:
    """`pids` and every process under them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kind(pid: int) -> str:
    """What process `pid` is: the runner, Spark's JVM, a Python process forked for a query's
    source offsets (or the fork server), or one of Spark's Python workers."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace")
    except OSError:
        return "gone"
    if "continuous.host" in argv:
        return "runner"
    if "java" in argv.split("\0")[0]:
        return "jvm"
    if "forkserver" in argv or "streaming_source_runner" in argv:
        return "offsets"
    return "workers"


def by_kind(pids: list[int], value) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid in pids:
        k = kind(pid)
        out[k] = out.get(k, 0.0) + value(pid)
    return out


def cpu_shares(procs: list[int], before: dict[int, float], seconds: float) -> dict[str, float]:
    """The CPU time of `procs` since `before` (pid -> cpu_s) as a share of one core over
    `seconds`, by kind; a process gone meanwhile (a Python worker) counts 0, not minus what it
    had used."""
    return by_kind(procs, lambda pid: max(0.0, cpu_s(pid) - before[pid]) / seconds)


def pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return next(int(ln.split()[1]) for ln in fh if ln.startswith("Pss:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def commit_times(path: str) -> list[tuple[float, dict]]:
    """(commit time in s, our metadata with the table version) of each of the table's commits
    that has it, oldest first."""
    out = []
    for entry in DeltaTable(path).history():
        if META in entry:
            meta = {**json.loads(entry[META]), "version": entry["version"]}
            out.append((entry["timestamp"] / 1000, meta))
    return sorted(out, key=lambda c: c[0])


def source_commit_times(path: str) -> dict[int, float]:
    return {e["version"]: e["timestamp"] / 1000 for e in DeltaTable(path).history()}


def consumed(meta: dict, name: str) -> int:
    return meta["sources"].get(f"bench.{name}", -1)


def first_consuming(commits: list[tuple[float, dict]], name: str, version: int) -> float | None:
    return next((t for t, m in commits if consumed(m, name) >= version), None)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def stop_all(root: str) -> None:
    dbt(root, "run-operation", "stream_stop")


def measure(root: str, models: dict[str, str], sources: int, appends: int, idle: float,
            conf: dict, jfr: str | None = None, backlog: int = 0,
            master: str = "local[*]") -> dict:  # fmt: skip
    write_project(root, models, sources, conf, master)
    for i in range(sources):
        write_deltalake(source_path(root, i), events(i, 0))
    free_before = _available_mb()  # the runners' cost as the machine sees it, beside the PSS
    start = dbt(root, "run")
    pids = runner_pids(root)
    time.sleep(3)
    procs = tree(pids)
    figures = {"start_s": start, "runners": len(pids), "processes": len(procs)}
    figures["pss"] = by_kind(procs, pss_mb)
    figures["available_drop_mb"] = free_before - _available_mb()
    procs = tree(pids)
    cpu0 = {pid: cpu_s(pid) for pid in procs}
    time.sleep(idle)
    figures["idle"] = cpu_shares(procs, cpu0, idle)
    if appends:
        procs = tree(pids)
        cpu0 = {pid: cpu_s(pid) for pid in procs}
        began = time.time()
        if jfr:
            jvm = next(pid for pid in procs if kind(pid) == "jvm")
            jcmd = os.path.join(os.path.dirname(os.readlink(f"/proc/{jvm}/exe")), "jcmd")
            subprocess.run(
                [jcmd, str(jvm), "JFR.start", f"duration={appends}s", f"filename={jfr}",
                 "settings=profile"], check=True, capture_output=True,
            )  # fmt: skip
        figures["healthy"] = appending(root, models, 1, appends)
        span = time.time() - began
        figures["appends_cpu"] = cpu_shares(procs, cpu0, span)
        figures["pss_after"] = by_kind(tree(pids), pss_mb)
        if "guard_0" in models:
            figures["failing"] = appending(root, models, 1 + appends, appends, bad=True)
        if backlog:
            figures["backlog"] = backlog_phase(root, models, 1 + 2 * appends, appends, backlog)
    stop_all(root)
    return figures


def appending(root: str, models: dict[str, str], first: int, appends: int, bad=False) -> dict:
    """Append to source 0 once a second (versions `first`, ...; with `bad` the first append
    holds a negative price); latencies of its readers but the guard, their commits per second
    over the appends, the guard's commits, and (not `bad`) the chain's end to end latencies."""
    began = time.time()
    for k in range(first, first + appends):
        time.sleep(max(0.0, began + k - first + 1 - time.time()))
        rows = events(1000 + k, 60 * k, bad=bad and k == first)
        write_deltalake(source_path(root, 0), rows, mode="append")
    time.sleep(15)  # let the last appends through the chain
    src = source_commit_times(source_path(root, 0))
    versions = range(first, first + appends)
    span = src[versions[-1]] - src[first] + 1
    readers = [n for n in models if n.startswith("chain_a") or n.split("_")[1] == "0"]
    lat, count, guard = [], 0, []
    for name in readers:
        commits = commit_times(table(root, name))
        if name == "guard_0":
            guard = [m for _, m in commits if consumed(m, "events_0") >= first]
            continue
        count += sum(1 for t, _ in commits if src[first] <= t <= src[versions[-1]] + 1)
        for v in versions:
            t = first_consuming(commits, "events_0", v)
            if t is not None:
                lat.append(t - src[v])
    out: dict = {"append_to_commit": lat, "commits_per_s": count / span}
    out["guard_commits"] = len(guard)
    if not bad and {"chain_a", "chain_b", "chain_c"} <= set(models):
        a, b, c = (commit_times(table(root, n)) for n in ("chain_a", "chain_b", "chain_c"))
        a_ver = {m["version"]: consumed(m, "events_0") for _, m in a}
        b_ver = {m["version"]: m["sources"].get("bench.chain_a", -1) for _, m in b}
        log = os.path.join(table(root, "chain_b"), "_dbt_streaming", "changelog")
        log_ver = {  # a version of chain_b's changelog (what chain_c reads) -> of its table
            v: pa.compute.max(
                DeltaTable(log, version=v).to_pyarrow_table()["_commit_version"]
            ).as_py()
            for v in range(DeltaTable(log).version() + 1)
        }

        def reached(meta: dict) -> int:  # the source version chain_c's commit has seen
            b_seen = log_ver.get(meta["sources"].get("bench.chain_b_changelog", -1)) or -1
            a_seen = max((av for bv, av in b_ver.items() if bv <= b_seen), default=-1)
            return max((sv for av, sv in a_ver.items() if av <= a_seen), default=-1)

        out["chain"] = [
            t - src[v]
            for v in versions
            if (t := next((t for t, m in c if reached(m) >= v), None)) is not None
        ]
    return out


def backlog_phase(root: str, models: dict[str, str], first: int, appends: int, rows: int) -> dict:
    """A `dbt run` hands the runner a model over a source of `rows` rows while source 0 takes
    `appends` appends (versions `first`, ...): the latencies of source 0's readers, as
    appending(), and the `dbt run`'s time."""
    path = table(root, "backlog")
    for k in range(100):
        write_deltalake(path, backlog_events(k, rows // 100), mode="append")
    with open(os.path.join(root, "project", "models", "late.sql"), "w") as fh:
        fh.write(
            "{{ config(materialized='streaming_view', watermark_delay='10 seconds', %s) }}\n%s\n"
            % (TRIGGER, WINDOWS[0][1].replace("{src}", "{{ source('bench', 'backlog') }}"))
        )
    started: dict = {}
    thread = threading.Thread(target=lambda: started.update(s=dbt(root, "run", "-s", "late")))
    thread.start()
    out = appending(root, models, first, appends)
    thread.join()
    return {**out, "start_s": started["s"]}


def _available_mb() -> float:
    with open("/proc/meminfo") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith("MemAvailable:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--appends", type=int, default=30)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--baseline", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=0, metavar="ROWS")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--jfr", metavar="FILE", help="a JFR recording of the appends")
    parser.add_argument("--master", default="local[*]", help="the profile's master")
    args = parser.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    shutil.rmtree(WORK, ignore_errors=True)
    results = {}
    if args.baseline:
        root = os.path.join(WORK, "own")
        models = model_files(args.baseline, args.sources, own_runner=True)
        results["own"] = measure(root, models, args.sources, 0, args.idle, conf)
    root = os.path.join(WORK, "shared")
    models = model_files(args.models, args.sources, own_runner=False)
    jfr = args.jfr and os.path.abspath(args.jfr)
    results["shared"] = measure(
        root, models, args.sources, args.appends, args.idle, conf, jfr, args.backlog, args.master
    )

    print(f"{'mode':<22}{'models':>7}{'runners':>8}{'start s':>9}{'PSS MB':>8}{'MB/model':>9}"
          f"{'avail. drop MB':>15}{'idle core':>10}")  # fmt: skip
    for mode, count in (("own", args.baseline), ("shared", args.models)):
        if mode not in results:
            continue
        r = results[mode]
        label = "a runner per model" if mode == "own" else "one shared runner"
        pss = sum(r["pss"].values())
        print(
            f"{label:<22}{count:>7}{r['runners']:>8}{r['start_s']:>9.1f}{pss:>8.0f}"
            f"{pss / count:>9.0f}{r['available_drop_mb']:>15.0f}{sum(r['idle'].values()):>10.1%}"
        )
        print(
            "    PSS MB by process: "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["pss"].items()))
            + "; idle CPU by process: "
            + ", ".join(f"{k} {v:.1%}" for k, v in sorted(r["idle"].items()))
        )
    shared = results["shared"]
    if "own" in results:
        own_per_model = sum(results["own"]["pss"].values()) / args.baseline
        print(
            f"memory of {args.models} models shared / {args.models} x a runner per model: "
            f"{sum(shared['pss'].values()) / (own_per_model * args.models):.2f}"
        )
    if args.appends:
        for phase in ("healthy", "failing", "backlog"):
            if phase not in shared:
                continue
            r = shared[phase]
            lat = r["append_to_commit"]
            print(
                f"{phase}: append -> commit, models reading the appended source but guard_0 "
                f"({len(lat)} commits): p50 {pct(lat, 0.5):.2f} s, p99 {pct(lat, 0.99):.2f} s, "
                f"max {max(lat):.2f} s; {r['commits_per_s']:.2f} commits/s; guard_0 committed "
                f"{r['guard_commits']} times"
            )
            if r.get("chain"):
                chain = r["chain"]
                print(
                    f"append -> the 3-model chain's last commit ({len(chain)} appends): p50 "
                    f"{statistics.median(chain):.2f} s, p99 {pct(chain, 0.99):.2f} s"
                )
        if "backlog" in shared:
            print(
                f"backlog: the `dbt run` handing over a model over {args.backlog:,} rows took "
                f"{shared['backlog']['start_s']:.1f} s"
            )
        if "failing" in shared:
            ratio = shared["failing"]["commits_per_s"] / shared["healthy"]["commits_per_s"]
            print(f"the others' commit rate with guard_0 failing / before: {ratio:.2f}")
        cpu = shared["appends_cpu"]
        print(
            f"CPU over the healthy appends: {sum(cpu.values()):.0%} of a core: "
            + ", ".join(f"{k} {v:.0%}" for k, v in sorted(cpu.items()))
        )
        after = shared["pss_after"]
        print(
            f"PSS after the appends: {sum(after.values()):.0f} MB: "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(after.items()))
        )
        if args.jfr:
            print(f"JFR recording: {args.jfr} (jfr print --events jdk.ExecutionSample {args.jfr})")


if __name__ == "__main__":
    main()
