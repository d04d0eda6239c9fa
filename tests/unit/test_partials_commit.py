"""The state_ttl partials table (delta/partials.py), with delta-rs only: NULL keys match,
expired partials are deleted, and every batch records its app transaction, even one that
changes nothing (it is what says the batch is done)."""

import pyarrow as pa
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta.partials import PartialsCommitter


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
