"""Bad input found at run time: sources that change under a model, damaged checkpoints, places
that cannot be written. Each case gives a coded error that says what and how to fix, leaves the
table (its Delta version and rows) and the checkpoint's committed batches as they were, and
the test follows the advice and checks the rows after.

One dbt project; each scenario has its own source table (written with delta-rs, read in the
models as `<schema>.<table>`) and model, built by one `dbt run` of them all; the tests of a
scenario run in order (pytest runs a class's tests in the order they are written).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta.log import version_files

from .helpers import rows, table_path

T0 = datetime(2020, 4, 15, 8, 0, tzinfo=timezone.utc)
AGG = (
    "SELECT window_start, window_end, SUM(price) AS total FROM TABLE(TUMBLE(TABLE "
    "{{ target.schema }}.SRC, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) "
    "GROUP BY window_start, window_end"
)
WINDOWED = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }} " + AGG
PLAIN = (
    "{{ config(materialized='streaming_view') }} "
    "SELECT bidtime, item, price FROM {{ target.schema }}.SRC"
)
SKIPPING = PLAIN.replace(
    "materialized='streaming_view'", "materialized='streaming_view', skip_change_commits=true"
)
STAR = "{{ config(materialized='streaming_view') }} SELECT * FROM {{ target.schema }}.SRC"

# model -> (its SQL, its source table)
MODELS = {
    # a new column it does not select; then a changed type; then its state corrupted
    "m_add": (WINDOWED, "src_add"),
    "m_star": (STAR, "src_add"),  # SELECT * over the source that gains a column
    "m_over": (PLAIN, "src_over"),  # source overwritten and vacuumed
    "m_skip": (SKIPPING, "src_skip"),  # skip_change_commits; OPTIMIZE
    "m_file": (PLAIN, "src_file"),  # a data file deleted before it was read
    "m_log": (PLAIN, "src_log"),  # versions removed from the log before they were read
    "m_ckpt": (PLAIN, "src_ckpt"),  # checkpoint files truncated or deleted
    "m_ro": (PLAIN, "src_ro"),  # table directory on a read-only file system
    "m_full": (PLAIN, "src_full"),  # table directory on a full file system
}


def bids(minutes: list[int], price: float = 1.0, item: str = "A", **extra) -> pa.Table:
    """One row per minute offset from T0, each with `price` (as its column type) and `item`."""
    cols = {
        "bidtime": pa.array(
            [T0 + timedelta(minutes=m) for m in minutes], pa.timestamp("us", "UTC")
        ),
        "price": pa.array([price] * len(minutes)),
        "item": pa.array([item] * len(minutes)),
    }
    cols.update({k: pa.array([v] * len(minutes)) for k, v in extra.items()})
    return pa.table(cols)


def closed_totals(path: str, delay_minutes: int = 1) -> list[tuple]:
    """The window aggregate of WINDOWED over the whole snapshot at `path`: 10-minute windows
    that the watermark (latest bidtime - delay) has closed."""
    table = DeltaTable(path).to_pyarrow_table().to_pylist()
    watermark = max(r["bidtime"] for r in table) - timedelta(minutes=delay_minutes)
    sums: dict = {}
    for r in table:
        start = r["bidtime"].replace(minute=r["bidtime"].minute // 10 * 10, second=0)
        sums[start] = sums.get(start, 0) + r["price"]
    return sorted(
        (s, s + timedelta(minutes=10), float(v))
        for s, v in sums.items()
        if s + timedelta(minutes=10) <= watermark
    )


def plain_rows(path: str) -> list[tuple]:
    return sorted(
        (r["bidtime"], r["item"], r["price"])
        for r in DeltaTable(path).to_pyarrow_table().to_pylist()
    )


def checkpoint(project, model: str) -> str:
    return os.path.join(table_path(project, model), "_dbt_streaming", "checkpoint")


def snapshot(project, model: str, everything: bool = True) -> tuple:
    """What a failed run must leave as it was: the table's Delta version and rows, and the
    checkpoint's files (name, size), or with `everything` False its committed batches only (a
    query that failed while running may have planned its next batch: Spark replays it)."""
    path, ckpt = table_path(project, model), checkpoint(project, model)
    files = []
    for root, _, names in os.walk(ckpt):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), ckpt)
            if everything or rel.startswith(("commits", "metadata")):
                files.append((rel, os.path.getsize(os.path.join(root, name))))
    return DeltaTable(path).version(), rows(path), sorted(files)


def fails(model: str, code: str, *phrases: str, args: tuple = ()) -> str:
    """Run `model`, expect it to fail with `code`; the message, which must hold `phrases`."""
    results = run_dbt(["run", "-s", model, *args], expect_pass=False)
    message = results.results[0].message
    assert f"[dbt-spark-streaming {code}]" in message, message
    for phrase in phrases:
        assert phrase in message, message
    return message


def mount(path: str, options: str) -> bool:
    """Mount a tmpfs at `path` (a size-limited or read-only file system); False if this machine
    cannot (no privilege)."""
    os.makedirs(path, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True
        ).returncode
        == 0
    )


def remount(path: str, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", path], check=True, capture_output=True)


class TestSourcesAndCheckpoints:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{m}.sql": sql.replace("SRC", src) for m, (sql, src) in MODELS.items()}

    @pytest.fixture(scope="class")
    def built(self, project):
        """The sources written and every model run once; tmpfs mounted where it can be."""
        for _, src in MODELS.values():
            path = table_path(project, src)
            if not os.path.exists(path):
                write_deltalake(path, bids([1, 2, 11, 12], price=2.0), mode="append")
                write_deltalake(path, bids([21, 22], price=3.0), mode="append")
        mounted = {
            "m_ro": mount(table_path(project, "m_ro"), "size=16m,ro"),
            "m_full": mount(table_path(project, "m_full"), "size=16m"),
        }
        try:
            run_dbt(["run", "--exclude", "m_ro"])
            yield mounted
        finally:  # unmounted even when the first run fails
            for model in ("m_ro", "m_full"):
                if mounted[model]:
                    subprocess.run(
                        ["umount", "-l", table_path(project, model)], capture_output=True
                    )

    # Sources that change under a model

    def test_new_column_not_selected_is_read(self, project, built):
        src = table_path(project, "src_add")
        write_deltalake(
            src, bids([31, 32], price=5.0, bidder="x"), mode="append", schema_mode="merge"
        )
        run_dbt(["run", "-s", "m_add"])
        assert rows(table_path(project, "m_add")) == closed_totals(src)

    def test_star_over_new_column_names_full_refresh(self, project, built):
        before = snapshot(project, "m_star")
        fails("m_star", "SSR321", "+bidder string", "--full-refresh -s m_star")
        assert snapshot(project, "m_star") == before
        run_dbt(["run", "-s", "m_star", "--full-refresh"])
        got = DeltaTable(table_path(project, "m_star")).to_pyarrow_table()
        assert got.column_names == ["bidtime", "price", "item", "bidder"]
        assert sorted(got.column("bidder").to_pylist(), key=lambda v: v or "") == [None] * 6 + [
            "x",
            "x",
        ]

    def test_changed_column_type_refused_before_state_schema_error(self, project, built):
        src = table_path(project, "src_add")
        hand_made_type_change(src, "price", "long")
        write_deltalake(src, bids([41, 42], price=1, bidder="y"), mode="append")
        before = snapshot(project, "m_add")
        fails("m_add", "SSR320", "price double -> bigint", "--full-refresh -s m_add")
        assert snapshot(project, "m_add") == before
        run_dbt(["run", "-s", "m_add", "--full-refresh"])
        assert rows(table_path(project, "m_add")) == closed_totals(src)

    def test_overwritten_and_vacuumed_source_names_version_and_choices(self, project, built):
        src = table_path(project, "src_over")
        write_deltalake(src, bids([50, 51, 52], price=7.0), mode="overwrite")
        DeltaTable(src).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        before = snapshot(project, "m_over")
        fails("m_over", "SSD401", "version 2 removes data", "skip_change_commits", "--full-refresh")
        assert snapshot(project, "m_over") == before
        # the files the model had consumed are gone: a full refresh reads the table as it is
        run_dbt(["run", "-s", "m_over", "--full-refresh"])
        assert rows(table_path(project, "m_over")) == plain_rows(src)

    def test_skip_change_commits_passes_over_deletes(self, project, built):
        src = table_path(project, "src_skip")
        DeltaTable(src).delete("price = 3.0")  # removes the rows of the second version
        write_deltalake(src, bids([60], price=9.0), mode="append")
        run_dbt(["run", "-s", "m_skip"])
        # what the delete removed stays in the model; the append after it is read
        expected = sorted(
            [(T0 + timedelta(minutes=m), "A", 2.0) for m in (1, 2, 11, 12)]
            + [(T0 + timedelta(minutes=m), "A", 3.0) for m in (21, 22)]
            + [(T0 + timedelta(minutes=60), "A", 9.0)]
        )
        assert rows(table_path(project, "m_skip")) == expected

    def test_optimize_commit_is_skipped_silently(self, project, built):
        src = table_path(project, "src_skip")
        write_deltalake(src, bids([61], price=9.5), mode="append")
        metrics = DeltaTable(src).optimize.compact()
        assert metrics["numFilesRemoved"] > 1
        write_deltalake(src, bids([62], price=9.75), mode="append")
        before = rows(table_path(project, "m_skip"))
        run_dbt(["run", "-s", "m_skip"])
        new = [(T0 + timedelta(minutes=61), "A", 9.5), (T0 + timedelta(minutes=62), "A", 9.75)]
        assert rows(table_path(project, "m_skip")) == sorted(before + new)

    def test_data_file_missing_before_it_was_read(self, project, built):
        src = table_path(project, "src_file")
        write_deltalake(src, bids([70, 71], price=4.0), mode="append")
        (lost,) = [f.path for f in version_files(src, DeltaTable(src).version())]
        kept = [r for r in plain_rows(src) if r[0] < T0 + timedelta(minutes=70)]
        os.remove(lost)
        write_deltalake(src, bids([72], price=4.5), mode="append")
        before = snapshot(project, "m_file")
        message = fails("m_file", "SSR322", os.path.basename(lost), "repair()")
        assert snapshot(project, "m_file") == before
        # --full-refresh alone cannot read the lost file either: same error, nothing written
        fails("m_file", "SSR322", os.path.basename(lost), args=("--full-refresh",))
        assert snapshot(project, "m_file") == before
        assert "--full-refresh -s m_file" in message
        DeltaTable(src).repair(dry_run=False)  # the advice: drop it from the log, then rebuild
        run_dbt(["run", "-s", "m_file", "--full-refresh"])
        assert rows(table_path(project, "m_file")) == kept + [
            (T0 + timedelta(minutes=72), "A", 4.5)
        ]

    def test_versions_gone_from_the_source_log(self, project, built):
        src = table_path(project, "src_log")
        # a short log retention on the source: the checkpoints delta-rs makes as it commits
        # remove the commits of the versions the model has still to read
        DeltaTable(src).alter.set_table_properties(
            {"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds"}
        )
        for minute in (100, 101, 102, 103):
            write_deltalake(src, bids([minute], price=6.0), mode="append")
        assert not os.path.exists(os.path.join(src, "_delta_log", f"{2:020d}.json"))
        before = snapshot(project, "m_log")
        fails("m_log", "SSD404", "version 2 of source table", "--full-refresh", "logRetention")
        assert snapshot(project, "m_log") == before
        run_dbt(["run", "-s", "m_log", "--full-refresh"])  # the table as it is now
        assert rows(table_path(project, "m_log")) == plain_rows(src)
        assert len(rows(table_path(project, "m_log"))) == 10

    # Damaged checkpoints

    def _damaged(self, project, damage, *phrases: str) -> None:
        ckpt = checkpoint(project, "m_ckpt")
        write_deltalake(table_path(project, "src_ckpt"), bids([80, 90], 1.0), mode="append")
        damage(ckpt)
        before = snapshot(project, "m_ckpt")
        fails("m_ckpt", "SSR323", "damaged beyond use", *phrases, "--full-refresh -s m_ckpt")
        assert snapshot(project, "m_ckpt") == before
        run_dbt(["run", "-s", "m_ckpt", "--full-refresh"])
        assert rows(table_path(project, "m_ckpt")) == plain_rows(table_path(project, "src_ckpt"))

    def test_truncated_offset_file(self, project, built):
        def truncate(ckpt):
            path = os.path.join(ckpt, "offsets", str(last_batch(ckpt)))
            with open(path, "r+") as fh:
                fh.truncate(os.path.getsize(path) // 2)

        self._damaged(project, truncate, "truncated")

    def test_deleted_checkpoint_metadata(self, project, built):
        self._damaged(project, lambda ckpt: os.remove(os.path.join(ckpt, "metadata")), "metadata")

    def test_deleted_offset_file_of_a_committed_batch(self, project, built):
        def delete(ckpt):
            os.remove(os.path.join(ckpt, "offsets", str(last_batch(ckpt))))

        self._damaged(project, delete, "missing")

    def test_corrupted_state_file(self, project, built):
        ckpt, src = checkpoint(project, "m_add"), table_path(project, "src_add")
        write_deltalake(src, bids([110], price=1, bidder="z"), mode="append")
        for root, _, names in os.walk(os.path.join(ckpt, "state")):
            for name in names:
                if name.endswith((".delta", ".snapshot")):
                    with open(os.path.join(root, name), "r+b") as fh:
                        fh.seek(max(0, os.path.getsize(os.path.join(root, name)) // 2))
                        fh.write(b"\x00garbage\x00" * 8)
        before = snapshot(project, "m_add", everything=False)
        message = fails("m_add", "SSR324", "damaged beyond use", "--full-refresh -s m_add")
        why = message.split(": ", 2)[2]
        assert not why.lstrip().startswith("raise"), message
        assert snapshot(project, "m_add", everything=False) == before
        run_dbt(["run", "-s", "m_add", "--full-refresh"])
        assert rows(table_path(project, "m_add")) == closed_totals(src)

    # Places that cannot be written

    def test_read_only_table_directory(self, project, built):
        if not built["m_ro"]:
            pytest.skip("cannot mount a read-only tmpfs here (needs root and CAP_SYS_ADMIN)")
        path = table_path(project, "m_ro")
        fails("m_ro", "SSR325", "read-only file system", path)
        assert os.listdir(path) == []
        remount(path, "rw")  # the advice: make it writable
        run_dbt(["run", "-s", "m_ro"])
        assert rows(path) == plain_rows(table_path(project, "src_ro"))

    def test_full_disk(self, project, built):
        if not built["m_full"]:
            pytest.skip("cannot mount a size-limited tmpfs here (needs root and CAP_SYS_ADMIN)")
        path = table_path(project, "m_full")
        stat = os.statvfs(path)
        used_kb = (stat.f_blocks - stat.f_bfree) * stat.f_frsize // 1024
        remount(path, f"size={used_kb}k")  # no block free
        write_deltalake(table_path(project, "src_full"), bids([30, 31], 6.0), mode="append")
        before = snapshot(project, "m_full", everything=False)
        fails("m_full", "SSR326", "disk is full", "run `dbt run` again")
        assert snapshot(project, "m_full", everything=False) == before
        remount(path, "size=16m")  # the advice: free space, run again
        run_dbt(["run", "-s", "m_full"])
        assert rows(path) == plain_rows(table_path(project, "src_full"))


def last_batch(ckpt: str) -> int:
    return max(int(n) for n in os.listdir(os.path.join(ckpt, "commits")) if n.isdigit())


def hand_made_type_change(path: str, column: str, new_type: str) -> None:
    """Commit a new version of the Delta table at `path` whose schema gives `column` the type
    `new_type`, written by hand as a Delta log entry (delta-rs has no such operation)."""
    log = os.path.join(path, "_delta_log")
    version = DeltaTable(path).version()
    meta = None
    for v in range(version, -1, -1):
        with open(os.path.join(log, f"{v:020d}.json")) as fh:
            for line in fh:
                if '"metaData"' in line:
                    meta = json.loads(line)["metaData"]
                    break
        if meta:
            break
    assert meta is not None
    schema = json.loads(meta["schemaString"])
    for field in schema["fields"]:
        if field["name"] == column:
            field["type"] = new_type
    meta["schemaString"] = json.dumps(schema)
    commit = {"commitInfo": {"timestamp": 0, "operation": "CHANGE COLUMN"}}
    with open(os.path.join(log, f"{version + 1:020d}.json"), "w") as fh:
        fh.write(json.dumps(commit) + "\n" + json.dumps({"metaData": meta}) + "\n")
    shutil.rmtree(os.path.join(log, "_last_checkpoint"), ignore_errors=True)
