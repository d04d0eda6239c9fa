"""`--full-refresh` of a streaming_view with its warehouse on S3 (a moto server) and its
checkpoints under `checkpoint_root` (runtime/lifecycle.py swap_by_commit): the new table is
built aside and swapped in by one Delta commit, so the old rows serve until then. Killed once
the build is complete, and again right after the swap commit (before the checkpoint is
moved in), the next runs finish the refresh; new data after it is added once, and
snapshot_equivalence holds over the rebuilt history. dbt runs in subprocesses on local[2]."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming import layout
from dbt.adapters.spark_streaming.delta import storage
from dbt.adapters.spark_streaming.faults import EXIT_CODE

from .projects import rows, run, s3_keys
from .test_cluster import TUMBLE, batch_ids, events, expected, small_project

pytestmark = [pytest.mark.slow]


def _ok(step) -> str:
    done, _ = step
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def _killed(step, fault: str) -> None:
    done, _ = step
    assert done.returncode == EXIT_CODE, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"injected fault {fault}" in done.stderr


@pytest.mark.full  # the upsert_table's below swaps by the same commit, and more
def test_full_refresh_on_s3_swaps_in_by_one_commit(s3, tmp_path):
    keys = s3_keys(s3, tmp_path)
    warehouse, control = keys["warehouse_path"], keys["checkpoint_root"]
    sql = TUMBLE.format(extra="")
    project, source = small_project(tmp_path, "local[2]", "per_item", sql, **keys)
    (project / "models" / "tests.yml").write_text(
        "models:\n  - {name: per_item, data_tests: [snapshot_equivalence]}\n"
    )
    table = storage.join(warehouse, "analytics", "per_item")
    first, second, third = events(0), events(20), events(40)
    write_deltalake(source, first)
    _ok(run(project, ["dbt", "run"]))
    old, old_id = rows(table), DeltaTable(table).metadata().id
    assert old == expected(first)

    # 10-minute windows change the state: only --full-refresh may run the new query.
    (project / "models" / "per_item.sql").write_text(sql.replace("'5' MINUTES", "'10' MINUTES"))
    write_deltalake(source, second, mode="append")
    _killed(run(project, ["dbt", "run", "--full-refresh"], fault="refresh_built"), "refresh_built")
    assert rows(table) == old  # built aside: the old table serves
    built = layout.refresh_path(warehouse, "analytics.per_item")
    assert storage.is_delta(built)

    # The next run finishes the swap; killed right after its commit, the new rows are in.
    _killed(run(project, ["dbt", "run"], fault="refresh_swapping"), "refresh_swapping")
    assert rows(table) == expected(first, second, size=10)
    swap = json.loads(DeltaTable(table).history(1)[0]["dbt_spark_streaming"])
    assert swap["refresh"] and swap["rebuilt"]
    assert DeltaTable(table).metadata().id != old_id  # another table: downstream says SSR327

    # ...and the one after moves the checkpoint in, with nothing new to read.
    out = _ok(run(project, ["dbt", "run"]))
    assert "finished a full refresh that was built but not swapped in" in out
    assert not storage.exists(built)
    assert not storage.exists(layout.refresh_marker_path(control, "analytics.per_item"))
    assert rows(table) == expected(first, second, size=10)

    write_deltalake(source, third, mode="append")
    _ok(run(project, ["dbt", "run"]))
    assert rows(table) == expected(first, second, third, size=10)
    ids = batch_ids(table)
    assert ids[-1] > swap["batch_id"]
    assert "PASS=1" in _ok(run(project, ["dbt", "test"]))


COUNTS = (
    "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
    "SELECT item, COUNT(*) AS n, SUM(price) AS total FROM {{ source('feed', 'events') }} "
    "GROUP BY item"
)


def per_item(*tables) -> list[tuple]:
    """(item, n, total, top) of the events."""
    out: dict = {}
    for r in [r for t in tables for r in t.to_pylist()]:
        n, total, top = out.get(r["item"], (0, 0.0, None))
        out[r["item"]] = (n + 1, total + r["price"], max(top or r["price"], r["price"]))
    return sorted((item, *values) for item, values in out.items())


def replayed(table: str) -> list[tuple]:
    """The changelog applied in (_commit_version, deletes first) order."""
    log = DeltaTable(layout.changelog_path(table)).to_pyarrow_table().to_pylist()
    log.sort(key=lambda r: (r["_commit_version"], r["_op"] not in ("-U", "-D")))
    out: dict = {}
    for r in log:
        row = (r["item"], r["n"], r["total"], r["top"])
        if r["_op"] in ("-U", "-D"):
            assert out.pop(r["item"]) == row, r
        else:
            assert r["_op"] == "+U" or r["item"] not in out, r
            out[r["item"]] = row
    return sorted(out.values())


def test_upsert_table_full_refresh_on_s3_swaps_changelog_and_partials(s3, tmp_path):
    """An upsert_table with state_ttl partials: its partials, its changelog (squashed to the
    rebuilt rows, +I at the swap's version) and its table are swapped in; killed after the
    table's commit, the next run finishes; the next batches update all three, the changelog
    replays to the table, and snapshot_equivalence holds."""
    keys = s3_keys(s3, tmp_path)
    project, source = small_project(tmp_path, "local[2]", "counts", COUNTS, **keys)
    (project / "models" / "tests.yml").write_text(
        "models:\n  - {name: counts, data_tests: [snapshot_equivalence]}\n"
    )
    table = storage.join(keys["warehouse_path"], "analytics", "counts")
    first, second, third = events(0), events(20, 50), events(40, 30)
    write_deltalake(source, first)
    _ok(run(project, ["dbt", "run"]))
    assert [r[:3] for r in rows(table)] == [r[:3] for r in per_item(first)]

    new = COUNTS.replace("AS total", "AS total, MAX(price) AS top")  # another aggregate
    (project / "models" / "counts.sql").write_text(new)
    write_deltalake(source, second, mode="append")
    refresh = ["dbt", "run", "--full-refresh"]
    _killed(run(project, refresh, fault="refresh_swapping"), "refresh_swapping")
    assert rows(table) == per_item(first, second) == replayed(table)
    version = DeltaTable(table).version()
    log = DeltaTable(layout.changelog_path(table)).to_pyarrow_table().to_pylist()
    assert {(r["_op"], r["_commit_version"]) for r in log} == {("+I", version)}
    assert storage.is_delta(layout.partials_path(table))

    out = _ok(run(project, ["dbt", "run"]))
    assert "finished a full refresh that was built but not swapped in" in out
    write_deltalake(source, third, mode="append")
    _ok(run(project, ["dbt", "run"]))
    assert rows(table) == per_item(first, second, third) == replayed(table)
    assert "PASS=1" in _ok(run(project, ["dbt", "test"]))
