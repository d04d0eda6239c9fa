"""The upsert sink's change derivation and commits (delta/upsert.py) on real Delta tables,
without Spark: NULL and date keys, unchanged rows, HAVING deletes, repeated keys, and a
replayed batch."""

import datetime as dt

import pyarrow as pa
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta.sink import create_table
from dbt.adapters.spark_streaming.delta.upsert import (
    UpsertCommitter,
    changelog_path,
    create_changelog,
)

SCHEMA = pa.schema([("day", pa.date32()), ("k", pa.string()), ("n", pa.int64())])


def batch(rows, keep=None):
    t = pa.table(
        {
            "day": pa.array([r[0] for r in rows], pa.date32()),
            "k": pa.array([r[1] for r in rows]),
            "n": pa.array([r[2] for r in rows], pa.int64()),
        }
    )
    return t.append_column("__keep", pa.array(keep, pa.bool_())) if keep is not None else t


def table_rows(path):
    return sorted(
        (tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()), key=str
    )


def log_rows(path):
    return [
        (r["day"], r["k"], r["n"], r["_op"], r["_batch_id"])
        for r in DeltaTable(changelog_path(path)).to_pyarrow_table().to_pylist()
    ]


def test_changes_and_exactly_once(tmp_path):
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None})
    create_changelog(path, SCHEMA)
    sink = UpsertCommitter(path, "app", SCHEMA, ["day", "k"], "__keep")
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
