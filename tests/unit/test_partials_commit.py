"""The state_ttl partials table (delta/partials.py), with delta-rs only: NULL keys match,
expired partials are deleted (apply_changes: only tombstones), and every batch records its app
transaction, even one that changes nothing (it is what says the batch is done); a re-ranked
batch's rows, one per key (runtime/partials.py)."""

import pyarrow as pa
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta.partials import PartialsCommitter
from dbt.adapters.spark_streaming.runtime.partials import _first_per_key
from dbt.adapters.spark_streaming.sql.state import TOMBSTONE


def partials(keys, counts, updated_ms):
    return pa.table(
        {
            "__k0": pa.array(keys, pa.string()),
            "__p0": pa.array(counts, pa.int64()),
            "__updated_ms": pa.array([updated_ms] * len(keys), pa.int64()),
        }
    )


def stored(c: PartialsCommitter) -> list[tuple]:
    rows = DeltaTable(c.path).to_pyarrow_table().to_pylist()
    return sorted(((r["__k0"], r["__p0"], r["__updated_ms"]) for r in rows), key=str)


def test_merge_expire_and_record_every_batch(tmp_path):
    c = PartialsCommitter(str(tmp_path), "app", ["__k0"])
    assert not c.committed(0)
    c.commit(partials(["a", None], [1, 2], 100), 0, cutoff_ms=0)
    assert stored(c) == [("a", 1, 100), (None, 2, 100)] and c.committed(0)
    c.commit(partials([], [], 150), 1, cutoff_ms=50)  # nothing to merge or expire: still recorded
    assert c.committed(1) and not c.committed(2)
    c.commit(partials([None], [5], 300), 2, cutoff_ms=200)  # NULL key updated, idle "a" expired
    assert stored(c) == [(None, 5, 300)] and c.committed(2)


def test_only_tombstones_expire(tmp_path):
    """apply_changes: a stored row with TOMBSTONE (a deleted key) expires; a live key's never."""
    c = PartialsCommitter(str(tmp_path), "app", ["__k0"])
    first = partials(["live", "gone"], [1, 2], 100)
    c.commit(first.append_column(TOMBSTONE, pa.array([False, True])), 0, cutoff_ms=0)
    later = partials(["new"], [3], 300).append_column(TOMBSTONE, pa.array([False]))
    c.commit(later, 1, cutoff_ms=200)  # both idle since 100: only the tombstone goes
    assert stored(c) == [("live", 1, 100), ("new", 3, 300)]


def test_marker_row_apart(tmp_path):
    """apply_changes: the marker row (TOMBSTONE NULL, runtime/partials.py) is matched only by a
    marker, never expires, and a new one replaces it, whatever its key."""
    c = PartialsCommitter(str(tmp_path), "app", ["__k0"])

    def rows(keys, counts, updated_ms, tombstones):
        return partials(keys, counts, updated_ms).append_column(
            TOMBSTONE, pa.array(tombstones, pa.bool_())
        )

    c.commit(rows([None, None], [1, 9], 100, [True, None]), 0, cutoff_ms=0)
    assert stored(c) == [(None, 1, 100), (None, 9, 100)]
    c.commit(rows(["a"], [2], 300, [False]), 1, cutoff_ms=200)  # the NULL key's tombstone goes
    assert stored(c) == [("a", 2, 300), (None, 9, 100)]
    c.commit(rows(["a"], [12], 400, [None]), 2, cutoff_ms=350)  # a new marker, of key "a"
    assert stored(c) == [("a", 12, 400), ("a", 2, 300)]


def test_first_per_key():
    """The batch's merged partials first, then the stored ones of other keys (NULL matches)."""
    rows = pa.table({"__k0": ["b", None, "b", "a", None], "__p0": [3, 7, 1, 2, 8]})
    assert _first_per_key(rows, ["__k0"]).to_pylist() == [
        {"__k0": "b", "__p0": 3},
        {"__k0": None, "__p0": 7},
        {"__k0": "a", "__p0": 2},
    ]


def test_key_columns():
    """The result columns that are stored key columns as they are: the restart check maps keys
    without a Spark job; any other shape maps none (the final step runs)."""
    from dbt.adapters.spark_streaming.sql.state import key_columns

    having = "SELECT __k0 AS u, __k1 AS D, __p0 AS cnt, (__p1 > 1) AS __keep FROM __dss_merged"
    assert key_columns(having) == {"u": "__k0", "d": "__k1"}
    assert key_columns("SELECT upper(__k0) AS u, __p0 AS n FROM __dss_merged") == {}
    assert key_columns("SELECT u FROM (SELECT __k0 AS u FROM __dss_merged) AS t") == {}
