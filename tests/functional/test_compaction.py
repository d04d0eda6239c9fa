"""Auto-compaction (delta/compaction.py) through `dbt run`: a streaming_view's table and an
upsert_table's table and changelog, compacted as their small files add up, keep every row; a
downstream model reading the compacted table reads no row twice; the changelog and the change
data feed replay the table; snapshot_equivalence passes."""

import os
import random

import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.delta.log import snapshot_files

from .helpers import append_bids, equivalence_project, rows, table_path
from .test_change_data_feed import cdf_replay
from .test_upsert_table import changelog, replay

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: bids}]
"""
COMPACT = "auto_compact={'min_files': 3, 'target_file_size': '1m'}"
MODELS = {
    "per_10min": "{{ config(materialized='streaming_view', watermark_delay='1 minute', "
    + COMPACT
    + ") }}\nSELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS n "
    "FROM TABLE(TUMBLE(TABLE {{ source('raw', 'bids') }}, DESCRIPTOR(bidtime), "
    "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end",
    "downstream": "{{ config(materialized='streaming_view', auto_compact=false) }}\n"
    "SELECT * FROM {{ ref('per_10min') }}",
    "per_item": "{{ config(materialized='upsert_table', constant_domain=['item'], "
    + COMPACT
    + ") }}\nSELECT item, COUNT(*) AS n, SUM(price) AS total "
    "FROM {{ source('raw', 'bids') }} GROUP BY item",
    # new keys every batch: its partials (MERGEd) gain a file a batch
    "per_bidtime_ttl": "{{ config(materialized='upsert_table', state_ttl='1 day', "
    + COMPACT
    + ") }}\nSELECT bidtime, COUNT(*) AS n, SUM(price) AS total "
    "FROM {{ source('raw', 'bids') }} GROUP BY bidtime",
}


def in_reading_order(path: str) -> list[dict]:
    """The table's rows in the order a new stream reads its snapshot."""
    import pyarrow.parquet as pq

    return [r for f in snapshot_files(path, None) for r in pq.read_table(f.path).to_pylist()]


def operations(path: str) -> list[str]:
    return [h.get("operation") for h in DeltaTable(path).history()]


class TestAutoCompaction:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, MODELS)

    def test_compacted_tables_keep_every_row_and_replay(self, project):
        bids = table_path(project, "bids")
        table, down, keyed = (
            table_path(project, m) for m in ("per_10min", "downstream", "per_item")
        )
        read = []
        for n in range(8):
            minute = 10 * n
            append_bids(
                bids,
                [
                    (
                        f"2020-04-15 {8 + minute // 60:02d}:{minute % 60:02d}:00",
                        1.0 + n,
                        "AB"[n % 2],
                    ),
                    (f"2020-04-15 {8 + minute // 60:02d}:{minute % 60 + 5:02d}:00", 0.5, "C"),
                ],
            )
            run_dbt(["run"])
            # a compaction keeps the order a new stream reads the snapshot in: the rows read
            # before, then the batch's (its outputs take their first input's place)
            now = in_reading_order(table)
            assert now[: len(read)] == read, n
            read = now
            # compacted whenever 3 small files were there: never more than 2 + one batch's
            for path in (table, keyed, f"{keyed}/_dbt_streaming/changelog"):
                assert len(DeltaTable(path).file_uris()) <= 4, (n, path)
        # (the upsert_table's own files stay few: each batch rewrites those it touches)
        for path in (table, f"{keyed}/_dbt_streaming/changelog"):
            assert "OPTIMIZE" in operations(path), path
        assert "OPTIMIZE" not in operations(down)
        # 7 windows closed (the watermark is 1 minute behind the last bid), each once
        assert len(rows(table)) == 7 and rows(down) == rows(table)
        assert [r[3] for r in rows(table)] == [2] * 7
        assert replay(changelog(keyed)) == rows(keyed) == cdf_replay(keyed)
        assert rows(keyed) == [("A", 4, 1.0 + 3 + 5 + 7), ("B", 4, 2.0 + 4 + 6 + 8), ("C", 8, 4.0)]
        # a state_ttl model's partial aggregates (MERGEd every batch) are compacted too
        ttl = table_path(project, "per_bidtime_ttl")
        assert "OPTIMIZE" in operations(f"{ttl}/_dbt_streaming/partials")
        assert len(DeltaTable(f"{ttl}/_dbt_streaming/partials").file_uris()) <= 4
        assert rows(ttl) == sorted((b, 1, p) for b, p, _ in rows(bids))
        results = run_dbt(["test"])
        assert len(results) == 4 and all(r.status == "pass" for r in results)


MAINTAINED = {
    "bid_rows": "{{ config(materialized='streaming_view', "
    + COMPACT
    # tombstones expire at once; no checkpoint (which would drop them) in this test's versions
    + ", tblproperties={'delta.deletedFileRetentionDuration': 'interval 0 seconds', "
    "'delta.checkpointInterval': 100}) }}\n"
    "SELECT bidtime, price, item FROM {{ source('raw', 'bids') }}",
    "per_window": "{{ config(materialized='streaming_view', watermark_delay='1 minute', "
    "auto_compact=false) }}\nSELECT window_start, window_end, item, SUM(price) AS total, "
    "COUNT(*) AS n FROM TABLE(TUMBLE(TABLE {{ ref('bid_rows') }}, DESCRIPTOR(bidtime), "
    "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, item",
}


def on_storage(path: str) -> set[str]:
    return {n for n in os.listdir(path) if n.endswith(".parquet")}


def live(path: str) -> set[str]:
    return {os.path.basename(u) for u in DeltaTable(path).file_uris()}


class TestVacuumAndOptimize:
    """A model's run vacuums its tables (at most hourly; retention 0 here) but the
    files a lagging downstream stream has still to read; the downstream's snapshot_equivalence
    still passes (its oracle reads the vacuumed files' rows where the compaction put them);
    `run-operation vacuum` does the same on demand; `run-operation optimize` compacts on
    demand, keeping the reading order."""

    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, MAINTAINED)

    def test_vacuum_keeps_what_a_lagging_reader_needs(self, project):
        bids, table = table_path(project, "bids"), table_path(project, "bid_rows")
        rng = random.Random(11)

        def append(n):
            append_bids(
                bids,
                [
                    (f"2020-04-15 {8 + n // 6:02d}:{n % 6 * 10 + m:02d}:{s:02d}", p, i)
                    for m, s, p, i in (
                        (rng.randrange(10), rng.randrange(60), rng.uniform(-1e6, 1e6), "AB"[k % 2])
                        for k in range(3)
                    )
                ],
            )

        for n in range(6):
            append(n)
            run_dbt(["run"])
        assert "OPTIMIZE" in operations(table)
        for n in range(6, 12):  # per_window lags: bid_rows compacts files it has not read
            append(n)
            run_dbt(["run", "-s", "bid_rows"])
        removed = on_storage(table) - live(table)
        os.remove(os.path.join(table, "_dbt_streaming", "vacuumed"))  # vacuumed an hour ago
        append(12)
        run_dbt(["run", "-s", "bid_rows"])
        kept = on_storage(table) - live(table)
        assert removed - kept and kept & removed  # deleted some, kept what per_window needs
        run_dbt(["run"])  # per_window reads bid_rows' versions it had not read
        assert len(rows(table)) == 39
        results = run_dbt(["test"])
        assert len(results) == 2 and all(r.status == "pass" for r in results)

        # everyone caught up: everything removed can go, the tests still pass
        run_dbt(["run-operation", "vacuum", "--args", "{retention_hours: 0}"])
        assert on_storage(table) == live(table)
        append(13)
        run_dbt(["run"])
        assert len(live(table)) == 2  # the compacted file, then the new batch's
        order = in_reading_order(table)
        run_dbt(["run-operation", "optimize", "--args", "{model: bid_rows}"])
        assert len(live(table)) == 1 and in_reading_order(table) == order
        assert len(on_storage(table)) > 1  # optimize deletes nothing
        results = run_dbt(["test"])
        assert len(results) == 2 and all(r.status == "pass" for r in results)
