"""delta/swap.py on local Delta tables: an upsert_table built aside replaces the target's table,
changelog and partials, each in one commit; the changelog squashed to +I rows at the table's
swap version, flagged where the rebuild restarted the key; idempotent by its token."""

import json

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta.history import META_KEY, commit_history
from dbt.adapters.spark_streaming.delta.swap import replace_with
from dbt.adapters.spark_streaming.layout import changelog_path, partials_path


def _write(path: str, rows: dict, meta: dict | None = None, mode: str = "append") -> None:
    props = CommitProperties(custom_metadata={META_KEY: json.dumps(meta)}) if meta else None
    write_deltalake(path, pa.table(rows), mode=mode, commit_properties=props)


def _log(items, ns, ops, batches, versions, restarted) -> dict:
    return {
        "item": items,
        "n": ns,
        "_op": ops,
        "_batch_id": batches,
        "_commit_version": versions,
        "_restarted": restarted,
    }


def _rows(path: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def test_upsert_table_swapped_in_by_commits(tmp_path):
    built, target = str(tmp_path / "built"), str(tmp_path / "target")
    # the rebuild: three batches; key b restarted (its state_ttl partials had expired)
    _write(built, {"item": ["a"], "n": [1]}, {"batch_id": 0, "fingerprint": "f"})
    _write(built, {"item": ["b"], "n": [1]}, {"batch_id": 1, "fingerprint": "f"})
    _write(built, {"item": ["a"], "n": [2]}, {"batch_id": 2, "fingerprint": "f"}, "overwrite")
    _write(built, {"item": ["b"], "n": [1]}, {"batch_id": 2, "fingerprint": "f"})
    _write(
        changelog_path(built),
        _log(
            ["a", "b", "a", "a"],
            [1, 1, 1, 2],
            ["+I", "+I", "-U", "+U"],
            [0, 1, 2, 2],
            [1, 2, 3, 3],
            [False, True, False, False],
        ),  # fmt: skip
    )
    _write(partials_path(built), {"item": ["a", "b"], "p": [2, 1]})
    # the old table: five versions, its changelog and partials
    for n in range(5):
        _write(target, {"item": ["z"], "n": [n]}, {"batch_id": n, "fingerprint": "old"})
    _write(changelog_path(target), _log(["z"], [0], ["+I"], [0], [0], [False]))
    _write(partials_path(target), {"item": ["z"], "p": [9]})

    replace_with(target, built, "tok", "app", ["item"])
    swap = DeltaTable(target).version()
    assert swap == 5
    assert _rows(target) == [("a", 2), ("b", 1)]
    assert _rows(changelog_path(target)) == [
        ("a", 2, "+I", 2, swap, False),
        ("b", 1, "+I", 2, swap, True),
    ]
    assert _rows(partials_path(target)) == [("a", 2), ("b", 1)]
    for path in (target, changelog_path(target), partials_path(target)):
        assert DeltaTable(path).transaction_version("app") == 2
    # the target's history reads as the rebuild's from the swap on
    assert [(c["batch_id"], c["table_version"]) for c in commit_history(target)] == [
        (0, swap),
        (1, swap),
        (2, swap),
        (2, swap),
    ]

    replace_with(target, built, "tok", "app", ["item"])  # a retry after a crash: no commit
    assert DeltaTable(target).version() == swap
    assert DeltaTable(changelog_path(target)).version() == 1
