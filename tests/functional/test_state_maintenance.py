"""The state of a model that `dbt run` refreshes stays quick to load (runtime/streaming.py,
UNLOAD_ON_COMMIT). Each refresh is a new query that loads its state stores from the checkpoint:
the last snapshot and the delta files after it. Spark writes snapshots in a maintenance thread
that first runs a minute after a store is loaded, so never in a query that stops once caught
up; before the fix every refresh added a delta file, none was ever folded into a snapshot and
none removed.

An upsert_table aggregate with Spark's state is refreshed over seeded random versions, with
minDeltasForSnapshot lowered to 2 and minBatchesToRetain to 3 for the test: the checkpoint
then holds snapshots, no partition's chain of deltas after its last snapshot outgrows it, the
oldest files are removed, the table holds the batch query's rows (computed here with
pyarrow), and snapshot_equivalence passes after refreshes that loaded their state from a
snapshot."""

import glob
import os
import random
import re

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from dbt.adapters.spark_streaming.layout import checkpoint_path

from .helpers import equivalence_project, rows, table_path

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""
MODELS = {
    "per_key": "{{ config(materialized='upsert_table', constant_domain=['k']) }}\n"
    "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM {{ source('raw', 'ev') }} GROUP BY k\n"
}
LOWERED = {  # for the test: a snapshot after 2 deltas; files of the last 3 versions kept
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    "spark.sql.streaming.minBatchesToRetain": "3",
}


def version(rng: random.Random, n: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([f"k{rng.randrange(40)}" for _ in range(n)]),
            "v": pa.array([rng.randrange(1000) for _ in range(n)], pa.int64()),
        }
    )


def state_files(checkpoint: str) -> dict[str, dict[str, list[int]]]:
    """Per state store partition directory: the versions of its delta and snapshot files."""
    out: dict[str, dict[str, list[int]]] = {}
    for path in glob.glob(os.path.join(checkpoint, "state", "*", "*", "*")):
        m = re.fullmatch(r"(\d+)\.(delta|snapshot)", os.path.basename(path))
        if m:
            kinds = out.setdefault(os.path.dirname(path), {"delta": [], "snapshot": []})
            kinds[m.group(2)].append(int(m.group(1)))
    return out


class TestRefreshesWriteStateSnapshots:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, MODELS)

    def test_state_is_snapshotted_between_refreshes(self, project):
        rng = random.Random(5)
        source, out = table_path(project, "ev"), table_path(project, "per_key")
        write_deltalake(source, version(rng, 300))
        run_dbt(["run"])
        spark = SparkSession.builder.getOrCreate()  # the adapter's session, started by the run
        for key, value in LOWERED.items():
            spark.conf.set(key, value)
        try:
            for _ in range(7):
                write_deltalake(source, version(rng, 200), mode="append")
                run_dbt(["run"])
        finally:
            for key in LOWERED:
                spark.conf.unset(key)

        files = state_files(checkpoint_path(out))
        assert files and all(f["snapshot"] for f in files.values()), files
        for f in files.values():  # a load replays at most the deltas after the last snapshot
            assert max(f["delta"]) - max(f["snapshot"]) <= 3, f
            assert min(f["delta"]) > 1, f  # and the old files are removed

        expected = (
            DeltaTable(source)
            .to_pyarrow_table()
            .group_by("k")
            .aggregate([("v", "count"), ("v", "sum")])
        )
        assert rows(out) == sorted(
            zip(*(expected.column(c).to_pylist() for c in ("k", "v_count", "v_sum")), strict=True)
        )
        assert len(run_dbt(["test"])) == 1
