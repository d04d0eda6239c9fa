"""The upsert sink's copy-on-write MERGE (delta/upsert.py) on real Delta tables, with Spark but
without dbt: NULL and date keys, unchanged rows, HAVING deletes, repeated keys, a replayed
batch; which files a batch rewrites; and the candidate files' pruning by statistics. Each on
both paths: in the dbt process (small batches, delta/upsert_driver.py) and by Spark jobs."""

import datetime as dt
import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta.sink import create_table
from dbt.adapters.spark_streaming.delta.upsert import (
    UpsertCommitter,
    candidate_files,
    changelog_path,
    create_changelog,
)
from dbt.adapters.spark_streaming.runtime.session import get_spark

SCHEMA = pa.schema([("day", pa.date32()), ("k", pa.string()), ("n", pa.int64())])


def batch(rows, keep=None):
    t = pa.table(
        {
            "day": pa.array([r[0] for r in rows], pa.date32()),
            "k": pa.array([r[1] for r in rows]),
            "n": pa.array([r[2] for r in rows], pa.int64()),
        }
    )
    t = t.append_column("__keep", pa.array(keep, pa.bool_())) if keep is not None else t
    return get_spark().createDataFrame(t)


def table_rows(path):
    return sorted(
        (tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()), key=str
    )


def log_rows(path):
    return [
        (r["day"], r["k"], r["n"], r["_op"], r["_batch_id"])
        for r in DeltaTable(changelog_path(path)).to_pyarrow_table().to_pylist()
    ]


CDF = {"delta.enableChangeDataFeed": "true"}  # change data files with each commit (delta/cdf.py)
PATHS = {"driver": 100_000, "executors": 0}  # driver_rows that sends every batch down the path


@pytest.mark.parametrize("where", list(PATHS))
def test_changes_and_exactly_once(tmp_path, where):
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None}, CDF)
    create_changelog(path, SCHEMA)
    sink = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], "__keep", driver_rows=PATHS[where])
    d1, d2 = dt.date(2020, 1, 1), dt.date(2020, 1, 2)
    assert (
        sink.commit(
            batch([(d1, "a", 1), (d1, None, 2), (d2, "a", 3)], [True, True, False]),
            0,
            {"batch_id": 0},
        )
        == 2
    )
    assert table_rows(path) == sorted([(d1, "a", 1), (d1, None, 2)], key=str)
    # NULL key updated, "a" unchanged (no change logged), d2 now kept, (d1, "a") repeated: the
    # last wins
    n = sink.commit(
        batch([(d1, None, 5), (d2, "a", 4), (d1, "a", 7), (d1, "a", 1)], [True, True, True, True]),
        1,
        {"batch_id": 1},
    )
    assert n == 3
    assert sorted(log_rows(path), key=str) == sorted(
        [
            (d1, "a", 1, "+I", 0),
            (d1, None, 2, "+I", 0),
            (d1, None, 2, "-U", 1),
            (d1, None, 5, "+U", 1),
            (d2, "a", 4, "+I", 1),
        ],
        key=str,
    )
    # a key that stops satisfying HAVING is deleted
    assert sink.commit(batch([(d1, None, 6)], [False]), 2, {"batch_id": 2}) == 1
    assert table_rows(path) == sorted([(d1, "a", 1), (d2, "a", 4)], key=str)
    assert [r for r in log_rows(path) if r[-1] == 2] == [(d1, None, 5, "-D", 2)]
    # batch 2 is committed: a replay is recognised, and every commit is one table version
    assert sink.committed(2) and not sink.committed(3)
    assert DeltaTable(path).version() == 3
    assert sink.paths == [where] * 3
    # the change data feed holds the changelog's changes, batch b at table version b + 1
    feed = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all()).to_pylist()
    kinds = {"insert": "+I", "update_preimage": "-U", "update_postimage": "+U", "delete": "-D"}
    replayed = [
        (r["day"], r["k"], r["n"], kinds[r["_change_type"]], r["_commit_version"] - 1) for r in feed
    ]
    assert sorted(replayed, key=str) == sorted(log_rows(path), key=str)


def files(path):
    return set(pa.table(DeltaTable(path).get_add_actions()).column("path").to_pylist())


@pytest.mark.parametrize("where", list(PATHS))
def test_only_files_with_changed_keys_are_rewritten(tmp_path, where):
    """Batch 1 writes two files (one per Spark task); batch 2 changes a key of one of them:
    that file is replaced (removed, its other rows rewritten), the other stays."""
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None})
    create_changelog(path, SCHEMA)
    sink = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], None, driver_rows=0)
    d1, d2 = dt.date(2020, 1, 1), dt.date(2020, 6, 1)
    rows = [(d1, "a", 1), (d1, "b", 2), (d2, "a", 3), (d2, "b", 4)]
    sink.commit(batch(rows).repartition(2, "day"), 0, {"batch_id": 0})
    before = files(path)
    assert len(before) == 2 and table_rows(path) == sorted(rows, key=str)
    sink.driver_rows = PATHS[where]
    assert sink.commit(batch([(d2, "b", 40), (d2, "a", 3)]), 1, {"batch_id": 1}) == 2
    assert sink.paths == ["executors", where]
    after = files(path)
    assert len(before & after) == 1  # the file of d1 is untouched
    assert table_rows(path) == sorted(
        [(d1, "a", 1), (d1, "b", 2), (d2, "a", 3), (d2, "b", 40)], key=str
    )


def test_candidate_files_are_pruned_by_statistics(tmp_path):
    """A batch of keys in June reads no file of January; a NULL key reads only the files that
    have NULLs in that column."""
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None})
    create_changelog(path, SCHEMA)
    sink = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], None)
    jan, jun = dt.date(2020, 1, 1), dt.date(2020, 6, 1)
    sink.commit(batch([(jan, "a", 1), (jan, None, 2)]), 0, {"batch_id": 0})
    sink.commit(batch([(jun, "x", 3)]), 1, {"batch_id": 1})
    table = DeltaTable(path)
    jan_files = {p for p in files(path) if p.startswith("part-00000-")}
    jun_files = {p for p in files(path) if p.startswith("part-00001-")}
    assert jan_files and jun_files and len(files(path)) == len(jan_files) + len(jun_files)

    def bounds(lo, hi, nulls_k=0):
        return pa.table(
            {
                "rows": [1],
                "min_day": pa.array([lo], pa.date32()),
                "max_day": pa.array([hi], pa.date32()),
                "nulls_day": [0],
                "min_k": pa.array(["a"]),
                "max_k": pa.array(["z"]),
                "nulls_k": [nulls_k],
            }
        )

    assert set(candidate_files(table, bounds(jun, jun), ["day", "k"])) == jun_files
    assert set(candidate_files(table, bounds(jan, jun), ["day", "k"])) == jan_files | jun_files
    assert candidate_files(table, bounds(dt.date(2021, 1, 1), dt.date(2021, 2, 1)), ["day"]) == []
    # k in [a, z] matches both; only jan's file has a NULL k
    null_only = bounds(jan, jun, 1).set_column(4, "min_k", pa.array([None], pa.string()))
    null_only = null_only.set_column(5, "max_k", pa.array([None], pa.string()))
    (with_null,) = [
        r["path"]
        for r in pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
        if r["null_count.k"]
    ]
    assert candidate_files(table, null_only, ["k"]) == [with_null]


def test_thresholds_choose_the_path(tmp_path):
    """A batch above driver_rows, or whose candidate files hold more than driver_bytes, goes to
    the executors; an Arrow batch (state_ttl's) is MERGEd in place when small. Float values:
    NaN is equal to NaN (no change logged), as Spark's <=> says."""
    schema = pa.schema([("k", pa.string()), ("x", pa.float64())])
    path = str(tmp_path / "t")
    create_table(path, schema, {"batch_id": None})
    create_changelog(path, schema)
    sink = UpsertCommitter(path, "app", schema, ["k"], None, driver_rows=2)
    spark = get_spark()
    rows = pa.table({"k": ["a", "b", "c"], "x": [float("nan"), 1.0, None]})
    assert sink.commit(spark.createDataFrame(rows), 0, {}) == 3  # 3 rows > 2
    assert sink.commit(spark.createDataFrame(rows.slice(0, 2)), 1, {}) == 0  # NaN = NaN
    sink.driver_bytes = 0  # the candidate file is larger
    assert sink.commit(spark.createDataFrame(rows.slice(1, 2)), 2, {}) == 0
    sink.driver_bytes = 1 << 20
    changed = pa.table({"k": ["a", "c"], "x": [2.0, float("nan")]})
    assert sink.commit(changed, 3, {}) == 4  # an Arrow batch, on the driver
    sink.driver_rows = 1  # an Arrow batch above driver_rows goes to the executors
    assert sink.commit(pa.table({"k": ["b", "d"], "x": [1.0, 5.0]}), 4, {}) == 1
    assert sink.paths == ["executors", "driver", "executors", "driver", "executors"]
    got = sorted((r["k"], r["x"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist())
    assert got[:2] == [("a", 2.0), ("b", 1.0)] and got[2][0] == "c" and got[2][1] != got[2][1]
    assert got[3] == ("d", 5.0)
    ops = sorted(
        (r["k"], r["_op"]) for r in DeltaTable(changelog_path(path)).to_pyarrow_table().to_pylist()
    )
    assert ops == sorted(
        [("a", "+I"), ("b", "+I"), ("c", "+I"), ("a", "-U"), ("a", "+U"), ("c", "-U"), ("c", "+U")]
        + [("d", "+I")]
    )


class Crash(Exception):
    pass


@pytest.mark.parametrize("where", list(PATHS))
def test_replay_after_a_crash_mid_write(tmp_path, monkeypatch, where):
    """A crash after the changelog's commit and the table's files are written (during_write):
    the replay by a new committer logs nothing twice, commits the table, and deletes the
    files the crashed attempt wrote."""
    from dbt.adapters.spark_streaming.delta import upsert

    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None}, CDF)
    create_changelog(path, SCHEMA)
    d1 = dt.date(2020, 1, 1)
    sink = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], None, driver_rows=PATHS[where])
    sink.commit(batch([(d1, "a", 1), (d1, "b", 2)]), 0, {})
    before = files(path)

    def crash(point, batch_id):
        if point == "during_write":
            raise Crash()

    monkeypatch.setattr(upsert, "fault_point", crash)
    with pytest.raises(Crash):
        sink.commit(batch([(d1, "a", 10), (d1, "c", 3)]), 1, {})
    monkeypatch.undo()
    on_disk = {p.name for p in (tmp_path / "t").glob("*.parquet")}
    assert len(on_disk) > len(files(path)) and not sink.committed(1)
    again = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], None, driver_rows=PATHS[where])
    assert again.commit(batch([(d1, "a", 10), (d1, "c", 3)]), 1, {}) == 3
    assert again.paths == [where]
    assert table_rows(path) == [(d1, "a", 10), (d1, "b", 2), (d1, "c", 3)]
    assert sorted(r[2:4] for r in log_rows(path) if r[-1] == 1) == [
        (1, "-U"),
        (3, "+I"),
        (10, "+U"),
    ]
    # batch 1's files on disk are those of its commit (batch 0's removed file stays until VACUUM)
    assert {p.name for p in (tmp_path / "t").glob("part-00001-*")} == files(path) - before
    # ...and its change data files those of its cdc actions
    feed = pa.table(DeltaTable(path).load_cdf(starting_version=2).read_all()).to_pylist()
    assert sorted((r["n"], r["_change_type"]) for r in feed) == [
        (1, "update_preimage"),
        (3, "insert"),
        (10, "update_postimage"),
    ]
    log = (tmp_path / "t" / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    cdc = {json.loads(a)["cdc"]["path"] for a in log if '"cdc"' in a}
    assert {f"_change_data/{p.name}" for p in (tmp_path / "t" / "_change_data").iterdir()} == cdc
