"""Admission control of the Delta streaming source through dbt: `max_files_per_trigger` splits
the initial snapshot and a single large version into several micro-batches (each its own
commit, watermark and position), the table is what one big batch gives where no row turns
late, the oracle reproduces each batch's exact files (snapshot_equivalence), and
`starting_version` skips the earlier history."""

import json
import os
import random
import time
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from .helpers import commits, rows, table_path, ts

SCHEMA = pa.schema(
    [("bidtime", pa.timestamp("us", tz="UTC")), ("price", pa.float64()), ("item", pa.string())]
)
BASE = ts("2020-01-01 08:00:00")
FILES = 20

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: appends}, {name: big}, {name: ordered}]
"""


def agg(source: str, limit: str = "") -> str:
    return (
        "{{ config(materialized='streaming_view', watermark_delay='1 minute'" + limit + ") }}\n"
        "SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS n\n"
        f"FROM TABLE(TUMBLE(TABLE {{{{ source('raw', '{source}') }}}}, DESCRIPTOR(bidtime), "
        "INTERVAL '10' MINUTES))\nGROUP BY window_start, window_end, item\n"
    )


def projection(source: str, config: str = "") -> str:
    return (
        "{{ config(materialized='streaming_view'" + config + ") }}\n"
        f"SELECT bidtime, price, item FROM {{{{ source('raw', '{source}') }}}}\n"
    )


SPLIT = ", max_files_per_trigger=5"
TOTALS = """
{{ config(materialized='upsert_table', constant_domain='item', max_files_per_trigger=5) }}
SELECT item, SUM(price) AS total, COUNT(*) AS n FROM {{ source('raw', 'big') }} GROUP BY item
"""


def slot_bids(rng: random.Random, slot: int) -> pa.Table:
    """Three bids in the 10-minute window `slot` after 08:00, the last at minute 8 or 9 (so the
    next slot's bids move the watermark past this window's end)."""
    start = BASE + timedelta(minutes=10 * slot)
    at = [start + timedelta(minutes=m, seconds=rng.randrange(60)) for m in (0, 4, 8)]
    return pa.table(
        {
            "bidtime": pa.array(at, SCHEMA.field("bidtime").type),
            "price": pa.array([float(rng.randrange(1, 100)) for _ in at]),
            "item": pa.array([rng.choice("AB") for _ in at]),
        }
    )


def append_version(path: str, tables: list[pa.Table], prefix: str) -> None:
    """One Delta version adding one file per table, named so that path order = log order."""
    actions = []
    for i, table in enumerate(tables):
        name = f"{prefix}-{i:02d}.parquet"
        pq.write_table(table.cast(SCHEMA), os.path.join(path, name))
        actions.append(
            AddAction(
                name,
                os.path.getsize(os.path.join(path, name)),
                {},
                int(time.time() * 1000),
                True,
                json.dumps({"numRecords": table.num_rows}),
            )
        )
    DeltaTable(path).create_write_transaction(actions, mode="append", schema=SCHEMA)


def by_name(results) -> dict:
    return {r.node.name: r.adapter_response for r in results}


def data_commits(path: str) -> list[dict]:
    """Commits of batches that read something (a no-data batch repeats the last position)."""
    out, last = [], None
    for c in commits(path):
        if c.get("batch_id") is not None and c.get("positions") != last:
            out.append(c)
            last = c.get("positions")
    return out


def closed_windows(path: str, slots: range) -> list[tuple]:
    starts = {BASE + timedelta(minutes=10 * s) for s in slots}
    return [r for r in rows(path) if r[0] in starts]


class TestSplitBatches:
    @pytest.fixture(scope="class")
    def models(self):
        names = ["snap_split", "snap_whole", "rows_split", "rows_whole", "big_split", "big_whole"]
        names += ["from_v10", "from_v10_agg", "totals_split", "ordered_split"]
        return {
            "sources.yml": SOURCES,
            "snap_split.sql": agg("appends", SPLIT),
            "snap_whole.sql": agg("appends"),
            "rows_split.sql": projection("appends", SPLIT),
            "rows_whole.sql": projection("appends"),
            "big_split.sql": agg("big", SPLIT),
            "big_whole.sql": agg("big"),
            "from_v10.sql": projection("appends", ", starting_version=10, max_files_per_trigger=3"),
            "from_v10_agg.sql": agg("appends", ", starting_version=10, max_files_per_trigger=3"),
            "totals_split.sql": TOTALS,
            "ordered_split.sql": agg("ordered", SPLIT),
            "tests.yml": json.dumps(
                {"models": [{"name": n, "data_tests": ["snapshot_equivalence"]} for n in names]}
            ),
        }

    def test_split_snapshot_split_version_and_starting_version(self, project):
        rng = random.Random(7)
        appends, big = table_path(project, "appends"), table_path(project, "big")
        a_label, b_label = f"{project.test_schema}.appends", f"{project.test_schema}.big"
        # `appends`: 20 versions of one file each, the windows in random order
        slots = list(range(FILES))
        rng.shuffle(slots)
        tables = [slot_bids(rng, s) for s in slots]
        for table in tables:
            write_deltalake(appends, table, mode="append")
        # `ordered`: 20 versions of one file each, the windows in time order (the files' random
        # names are not: the snapshot is read in the order they were written, as Delta's)
        ordered = table_path(project, "ordered")
        for s in range(FILES):
            write_deltalake(ordered, slot_bids(rng, s), mode="append")
        # `big`: version 0 holds window 0; version 1 holds windows 1..20 in 20 files, in order
        write_deltalake(big, slot_bids(rng, 0), mode="append")

        first = by_name(run_dbt(["run"]))
        # The snapshot of 20 files, 5 per batch: 4 micro-batches (plus, for an aggregate, the
        # no-data batch that closes windows), one big batch without a limit.
        assert first["rows_split"]["batches"] == 4 and first["rows_whole"]["batches"] == 1
        assert [
            c["positions"][a_label] for c in data_commits(table_path(project, "rows_split"))
        ] == [
            {"version": 19, "index": i, "snapshot": True, "order": "time"} for i in (4, 9, 14)
        ] + [{"version": 19}]
        assert len(data_commits(table_path(project, "snap_split"))) == 4
        assert first["snap_whole"]["batches"] <= 2
        assert rows(table_path(project, "rows_split")) == rows(table_path(project, "rows_whole"))
        assert len(rows(table_path(project, "rows_split"))) == 3 * FILES
        # Written out of time order, the windows come out of order: split batches drop late rows
        # that one big batch keeps. The oracle must see the same split (snapshot_equivalence).
        assert first["snap_split"]["late_rows"] > 0 and first["snap_whole"]["late_rows"] == 0
        assert first["snap_split"]["versions_read"] == {a_label: [0, 19]}
        # Written in time order, split batches drop nothing and close windows 0..18 as they go
        assert first["ordered_split"]["late_rows"] == 0
        assert len(data_commits(table_path(project, "ordered_split"))) == 4
        assert sum(r[-1] for r in rows(table_path(project, "ordered_split"))) == 3 * (FILES - 1)

        # starting_version 10: only versions 10..19, 3 files per batch (4 batches)
        assert first["from_v10"]["batches"] == 4
        assert rows(table_path(project, "from_v10")) == sorted(
            tuple(r.values()) for t in tables[10:] for r in t.to_pylist()
        )
        assert first["from_v10"]["versions_read"] == {a_label: [10, 19]}

        # One version of 20 files, in time order: 4 batches whose watermarks close windows as
        # they go; nothing is late, so the table is the one big batch's.
        append_version(big, [slot_bids(rng, s) for s in range(1, FILES + 1)], "v1")
        second = by_name(run_dbt(["run", "-s", "big_split", "big_whole", "totals_split"]))
        split, whole = table_path(project, "big_split"), table_path(project, "big_whole")
        assert second["big_split"]["late_rows"] == 0
        positions = [c["positions"][b_label] for c in data_commits(split)]
        assert positions == [{"version": 0}] + [
            {"version": 1, "index": i, "snapshot": False} for i in (4, 9, 14)
        ] + [{"version": 1}]
        watermarks = [c["watermark_ms"] for c in data_commits(split)]
        assert watermarks == sorted(watermarks) and len(set(watermarks[1:])) == 4
        assert rows(split) == rows(whole)
        assert closed_windows(split, range(FILES)) == rows(split)  # windows 0..19 closed
        assert len({r[0] for r in rows(split)}) == FILES

        # The next version in reverse time order: the first batch reads the latest windows
        # (slots 40..36). Spark drops a batch's late rows against the previous batch's watermark
        # (IncrementalExecution.eventTimeWatermarkForLateEvents), so the second batch (35..31)
        # still counts and the last two (30..21: 30 bids) are late in the split run; the one big
        # batch keeps them all.
        append_version(big, [slot_bids(rng, 40 - i) for i in range(FILES)], "v2")
        third = by_name(run_dbt(["run", "-s", "big_split", "big_whole", "totals_split"]))
        assert third["big_split"]["late_rows"] == 30 and third["big_whole"]["late_rows"] == 0
        late = range(210, 310)  # minutes after 08:00 of the windows of slots 21..30
        assert rows(split) == [
            r for r in rows(whole) if (r[0] - BASE).total_seconds() // 60 not in late
        ]

        # An upsert_table over the split versions: the totals of every bid
        everything = (
            DeltaTable(big)
            .to_pyarrow_table()
            .group_by("item")
            .aggregate([("price", "sum"), ("price", "count")])
        )
        assert rows(table_path(project, "totals_split")) == sorted(
            tuple(r.values())
            for r in everything.select(["item", "price_sum", "price_count"]).to_pylist()
        )
        assert third["totals_split"]["batches"] >= 4

        # Each table equals its query run in batch over the files each micro-batch read.
        results = run_dbt(["test"])
        assert len(results) == 10 and all(r.status == "pass" for r in results)


class TestOldCheckpointContinues:
    """A table built before positions were recorded (its offsets are `{"table", "version"}`,
    its commits have `sources` only; simulated by leaving the new keys out of the commits)
    continues with split batches, and the oracle reads its old and new commits alike. (Also
    checked once by hand with a checkpoint written by the code before this change.)"""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "old.sql": agg("big", SPLIT),
            "tests.yml": json.dumps(
                {"models": [{"name": "old", "data_tests": ["snapshot_equivalence"]}]}
            ),
        }

    def test_old_offsets_and_commits(self, project, monkeypatch):
        from dbt.adapters.spark_streaming.runtime import sink

        rng = random.Random(3)
        big, label = table_path(project, "big"), f"{project.test_schema}.big"
        for s in (0, 2, 1):
            write_deltalake(big, slot_bids(rng, s), mode="append")
        read = sink._read_offsets
        monkeypatch.setattr(sink, "_read_offsets", lambda *a: (*read(*a)[:3], {}))
        run_dbt(["run"])
        monkeypatch.undo()
        table = table_path(project, "old")
        offsets = os.path.join(table, "_dbt_streaming", "checkpoint", "offsets")
        with open(os.path.join(offsets, "0")) as fh:
            assert json.loads(fh.read().splitlines()[2]) == {"table": label, "version": 2}
        assert all("positions" not in c for c in commits(table))

        append_version(big, [slot_bids(rng, 40 - i) for i in range(FILES)], "v3")
        result = by_name(run_dbt(["run"]))["old"]
        assert [c["positions"][label] for c in data_commits(table)[-4:]] == [
            {"version": 3, "index": i, "snapshot": False} for i in (4, 9, 14)
        ] + [{"version": 3}]
        assert result["versions_read"] == {label: [3, 3]} and result["late_rows"] == 30
        run_dbt(["test"])
