"""Delta Change Data Feed through `dbt run`: an upsert_table carries its changes as Delta CDF
(deltalake's `load_cdf` from version 0 replays to the table through inserts, updates and
deletes, on both MERGE paths)."""

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable

from .helpers import rows, table_path
from .test_window_tvfs import append

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""
# HAVING: a key's 3rd event deletes its row, its 2nd updates it.
AGG = (
    "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM {{ source('raw', 'ev') }} "
    "GROUP BY k HAVING COUNT(*) <= 2"
)
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def events(spec: str, start: int) -> list[tuple]:
    """(ts, k, v) events, one per character of `spec` (the key), v = position + start."""
    return [(T0 + timedelta(seconds=start + i), k, start + i) for i, k in enumerate(spec)]


def cdf_replay(path: str, key: int = 1) -> list[tuple]:
    """The table rebuilt from its change data feed (load_cdf from version 0): per commit,
    update_preimage/delete remove their row, insert/update_postimage add theirs."""
    changes = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all())
    assert {"_change_type", "_commit_version", "_commit_timestamp"} <= set(changes.column_names)
    names = [c for c in changes.column_names if not c.startswith("_")]
    first = {"update_preimage": 0, "delete": 0, "insert": 1, "update_postimage": 1}
    ordered = sorted(
        changes.to_pylist(), key=lambda r: (r["_commit_version"], first[r["_change_type"]])
    )
    table: dict = {}
    for r in ordered:
        values = tuple(r[c] for c in names)
        kind = r["_change_type"]
        if kind in ("update_preimage", "delete"):
            assert table.pop(values[:key]) == values, f"{kind} of a row not in the table: {r}"
        else:
            assert values[:key] not in table, f"{kind} of a key in the table: {r}"
            table[values[:key]] = values
    return sorted(table.values())


class TestUpsertTableChangeDataFeed:
    @pytest.fixture(scope="class")
    def models(self):
        config = "materialized='upsert_table', constant_domain=['k']"
        return {
            "sources.yml": SOURCES,
            "agg_driver.sql": f"{{{{ config({config}) }}}}\n{AGG}",  # MERGEd in the dbt process
            "agg_spark.sql": f"{{{{ config({config}, driver_merge_max_rows=0) }}}}\n{AGG}",
        }

    def test_load_cdf_replays_the_table(self, project):
        source = table_path(project, "ev")
        runs = ["abc", "abbcd"]  # inserts; then updates of a and c, a delete of b, an insert of d
        start = 0
        for spec in runs:
            append(source, events(spec, start))
            start += len(spec)
            run_dbt(["run"])
        for name in ("agg_driver", "agg_spark"):
            path = table_path(project, name)
            table = DeltaTable(path)
            assert table.metadata().configuration["delta.enableChangeDataFeed"] == "true"
            assert table.protocol().min_writer_version >= 4
            assert rows(path) == [("a", 2, 0 + 3), ("c", 2, 2 + 6), ("d", 1, 7)], name
            assert cdf_replay(path) == rows(path), name
            kinds = pa.table(table.load_cdf(starting_version=0).read_all())
            kinds = set(kinds.column("_change_type").cast(pa.string()).to_pylist())
            assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}, name
