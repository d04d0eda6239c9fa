"""Random SIGKILL harness: `python -m tests.reliability.kill --kills 50` (from the repo root).

One dbt project (tests/functional/test_exactly_once.py's, one Delta source `feed.events`) with
six models: `per_item`, a `streaming_view` window aggregate; `per_bucket`, an `upsert_table`
(a GROUP BY without windows; its changelog too); and four continuous models sharing one runner
process (runtime/continuous/): `per_item_live` and `per_item_live_3s`, the window aggregate
every 2 and 3 seconds, `per_bucket_live` and `per_bucket_live_3s`, the upsert table likewise.
Every model compacts its tables every 3 small files (`auto_compact`), so kills land inside
compactions too.

Each round appends a Delta version to the source, starts `dbt run` in a process group of its
own and SIGKILLs that group at a random moment (seeded), together with the runner (a session
of its own, all four continuous models in it), twice (`--per-round`); then runs `dbt run`
again, which must succeed with no manual step, runs `dbt run-operation vacuum` with a
retention of 0 beside the running runner, waits until every continuous model has caught
up with its available-now twin, and compares every table with the query run in batch over the
whole input (pandas over the source snapshot the table's last commit consumed): the window
aggregates restricted to the windows that commit's watermark closed, the upsert tables and
their changelogs replayed in full. Prints kills, rounds, rows checked, lost, duplicated."""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.faults import ENV, PAUSE_ENV
from dbt.adapters.spark_streaming.runtime.continuous import pipeline
from tests.functional.helpers import commits
from tests.functional.test_exactly_once import DBT, MODEL, events, oracle, write_project
from tests.functional.test_upsert_table import changelog, replay

SCHEMA = "crash"
UPSERT = """
{{ config(materialized='upsert_table', constant_domain=['item', 'bucket']) }}
SELECT item, CAST(price AS INT) AS bucket, COUNT(*) AS n, SUM(price) AS total
FROM {{ source('feed', 'events') }}
GROUP BY item, CAST(price AS INT)
"""


def live(model: str, after: str, interval: str) -> str:
    """`model` in continuous mode: its config's `after` followed by a processing_time trigger."""
    return model.replace(after, f"{after}, trigger={{'processing_time': '{interval}'}}")


# each continuous model (in the one runner) and the available-now model it must catch up with
LIVE = {
    "per_item_live": ("per_item", live(MODEL, "watermark_delay='1 minute'", "2 seconds")),
    "per_item_live_3s": ("per_item", live(MODEL, "watermark_delay='1 minute'", "3 seconds")),
    "per_bucket_live": ("per_bucket", live(UPSERT, "'bucket']", "2 seconds")),
    "per_bucket_live_3s": ("per_bucket", live(UPSERT, "'bucket']", "3 seconds")),
}
WINDOWED = ("per_item", "per_item_live", "per_item_live_3s")
UPSERTS = ("per_bucket", "per_bucket_live", "per_bucket_live_3s")
ROWS_PER_APPEND = 200
VACUUM = "{retention_hours: 0}"


@dataclass
class Figures:
    """What the harness counts: rounds, SIGKILLs sent (a process group each), rows compared,
    and the rows lost, duplicated or wrong (present once with other values)."""

    rounds: int = 0
    kills: int = 0
    dbt_kills: int = 0
    runner_kills: int = 0
    rows_checked: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    failed_runs: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"kills {self.kills} (dbt run {self.dbt_kills}, runner {self.runner_kills}), rounds "
            f"{self.rounds}, rows checked {self.rows_checked}, lost {self.lost}, duplicated "
            f"{self.duplicated}, wrong {self.wrong}, failed runs {len(self.failed_runs)}"
        )


def compacting(sql: str) -> str:
    """`sql` with its tables compacted every 3 small files: kills land inside compactions."""
    return sql.replace("config(", f"config({COMPACT}, ", 1)


COMPACT = "auto_compact={'min_files': 3}"


def make_project(root: Path) -> None:
    """The project under root/project, its warehouse and the source's first version."""
    write_project(root, compacting(MODEL))
    models = root / "project" / "models"
    (models / "per_bucket.sql").write_text(compacting(UPSERT))
    for name, (_, sql) in LIVE.items():
        (models / f"{name}.sql").write_text(compacting(sql))


def source(root: Path) -> str:
    return str(root / "feed" / "events")


def table(root: Path, name: str) -> str:
    return str(root / "warehouse" / SCHEMA / name)


def env() -> dict:
    out = {k: v for k, v in os.environ.items() if k not in (ENV, PAUSE_ENV)}
    out.setdefault("PYSPARK_PYTHON", sys.executable)
    return out


def dbt(root: Path, *args: str, pause: str | None = None) -> subprocess.Popen:
    """`dbt <args>` of the project, in a process group of its own (its Spark JVM included);
    `pause`: a DBT_SPARK_STREAMING_PAUSE (faults.py)."""
    project = str(root / "project")
    return subprocess.Popen(
        [DBT, *args, "--project-dir", project, "--profiles-dir", project],
        env={**env(), PAUSE_ENV: pause} if pause else env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def runner_pids(root: Path) -> list[int]:
    """The pids of the runner processes of this project's warehouse (each leads a session of
    its own), found by their command line: a runner killed before its status says so counts."""
    marker = str(root / "warehouse")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if pipeline.MODULE in argv and any(a.startswith(marker) for a in argv):
            pids.append(int(entry))
    return pids


def kill_group(pgid: int) -> bool:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def stop_runners(root: Path) -> None:
    """SIGKILL every runner of the project (the harness never leaves one behind)."""
    for pid in runner_pids(root):
        kill_group(pid)


def wait_caught_up(root: Path, names=tuple(LIVE), timeout: float = 600.0) -> None:
    """Until each continuous model of `names` has a last commit that read what its
    available-now twin's has (the same query over the same input, brought up to date by the
    `dbt run` that just ended), and a window aggregate has its watermark."""
    deadline = time.time() + timeout
    for name in names:
        twin = LIVE[name][0]
        target = commits(table(root, twin))[-1]
        while True:
            last = commits(table(root, name))[-1]
            if (last["sources"], last["watermark"]) == (target["sources"], target["watermark"]):
                break
            if time.time() > deadline:
                raise AssertionError(f"{name} did not catch up with {twin} in {timeout}s")
            time.sleep(1)


def snapshot(path: str) -> tuple[pd.DataFrame, dict]:
    """The table at its latest version and the metadata of the commit that made it."""
    dt = DeltaTable(path)
    version = dt.version()
    meta = [m for m in commits(path) if m["table_version"] <= version][-1]
    return dt.to_pandas(), meta


def compare(actual: pd.DataFrame, expected: pd.DataFrame, keys: list[str], fig: Figures) -> None:
    """Count expected rows missing (lost), rows there more than once or with a greater count
    (duplicated), and rows with other values (wrong)."""
    fig.rows_checked += len(expected)
    got = actual.groupby(keys, as_index=False).agg(
        copies=("n", "size"), n=("n", "sum"), total=("total", "sum")
    )
    both = expected.merge(got, on=keys, how="outer", suffixes=("", "_got"), indicator=True)
    fig.lost += int((both["_merge"] == "left_only").sum())
    fig.duplicated += int((both["_merge"] == "right_only").sum())
    matched = both[both["_merge"] == "both"]
    fig.duplicated += int((matched["copies"] - 1).sum())
    single = matched[matched["copies"] == 1]
    fig.lost += int((single["n_got"] < single["n"]).sum())
    fig.duplicated += int((single["n_got"] > single["n"]).sum())
    fig.wrong += int(
        ((single["n_got"] == single["n"]) & ~np.isclose(single["total_got"], single["total"])).sum()
    )


def check_windowed(root: Path, name: str, fig: Figures) -> None:
    """Compare window aggregate `name` with the batch query over the source snapshot its last
    commit consumed, restricted to the windows that commit's watermark closed."""
    actual, meta = snapshot(table(root, name))
    expected = oracle(source(root), meta["sources"]["feed.events"], meta["watermark"])
    compare(actual, expected, ["window_start", "item"], fig)


def check_upsert(root: Path, name: str, fig: Figures) -> None:
    """Compare upsert table `name`, and its changelog replayed by key, with the batch query."""
    actual, meta = snapshot(table(root, name))
    df = DeltaTable(source(root), version=meta["sources"]["feed.events"]).to_pandas()
    df["bucket"] = df["price"].astype(int)
    expected = df.groupby(["item", "bucket"], as_index=False).agg(
        n=("price", "size"), total=("price", "sum")
    )
    compare(actual, expected, ["item", "bucket"], fig)
    replayed = pd.DataFrame(
        replay(changelog(table(root, name)), key=2), columns=list(actual.columns)
    )
    compare(replayed, expected, ["item", "bucket"], fig)


def check(root: Path, fig: Figures) -> None:
    """Compare every table (and the changelog) with the batch query over its input."""
    for name in WINDOWED:
        check_windowed(root, name, fig)
    for name in UPSERTS:
        check_upsert(root, name, fig)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, _ = proc.communicate()
        return -1, out + "\n[harness] timed out"
    return proc.returncode, out


def kill_at_random(root: Path, rng: random.Random, span: float, fig: Figures) -> str:
    """Start `dbt run`, SIGKILL its process group at a moment drawn from [0, span) and every
    runner of the project with it; what happened, for the log."""
    moment = rng.uniform(0, span)
    proc = dbt(root, "run")
    try:
        proc.wait(timeout=moment)
        note = f"dbt run ended (rc {proc.returncode}) before its kill at {moment:.0f}s"
    except subprocess.TimeoutExpired:
        fig.dbt_kills += kill_group(proc.pid)
        note = f"dbt run killed at {moment:.0f}s"
    proc.communicate()
    for pid in runner_pids(root):
        fig.runner_kills += kill_group(pid)
        note += f", runner {pid} killed"
    fig.kills = fig.dbt_kills + fig.runner_kills
    return note


def run_rounds(root: Path, kills: int, seed: int, per_round: int = 2, log=print) -> Figures:
    """Rounds of: append, `per_round` times `dbt run` killed at a random moment (and the runner
    with it), `dbt run` to the end, check; until `kills` process groups were killed."""
    rng = random.Random(seed)
    fig = Figures()
    begun = time.time()
    make_project(root)
    write_deltalake(source(root), events(seed, 0, ROWS_PER_APPEND))
    span = 60.0  # kill moments are drawn from [0, span): the last clean run's duration
    try:
        code, out = finish(dbt(root, "run"), 1800)
        assert code == 0, out[-4000:]
        while fig.kills < kills:
            fig.rounds += 1
            minute = 20 * fig.rounds
            write_deltalake(
                source(root), events(seed + fig.rounds, minute, ROWS_PER_APPEND), mode="append"
            )
            notes = [kill_at_random(root, rng, span, fig) for _ in range(per_round)]
            started = time.time()
            code, out = finish(dbt(root, "run"), 1800)
            if code != 0:
                fig.failed_runs.append(f"round {fig.rounds}: {out[-3000:]}")
                code, out = finish(dbt(root, "run"), 1800)  # count it, and go on if it can
                assert code == 0, out[-4000:]
            span = max(10.0, time.time() - started)
            # the files compactions and MERGEs removed deleted, beside the running runner
            code, out = finish(dbt(root, "run-operation", "vacuum", "--args", VACUUM), 600)
            assert code == 0, out[-4000:]
            wait_caught_up(root)
            check(root, fig)
            elapsed = time.time() - begun
            log(f"round {fig.rounds} ({elapsed:.0f} s): {'; '.join(notes)}; {fig.line()}")
    finally:
        stop_runners(root)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="process groups to SIGKILL")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-round", type=int, default=2, help="killed runs per round")
    parser.add_argument("--dir", help="where to build the project (default: a temp dir)")
    args = parser.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="kill_harness_"))
    started = time.time()
    fig = run_rounds(
        root, args.kills, args.seed, args.per_round, log=lambda s: print(s, flush=True)
    )
    print(f"{fig.line()}; {time.time() - started:.0f} s; project in {root}")
    for failure in fig.failed_runs:
        print(failure)
    bad = fig.lost or fig.duplicated or fig.wrong or fig.failed_runs
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
