"""Issue 21: inputs classified from the dbt graph, a run's progress, status and catalog. A
streaming model joins a source (a stream) with a seed (a table, by the graph) without config
`dimensions`; with `max_files_per_trigger: 1` over a source of three versions read from
version 0 it runs three micro-batches, each logged, and run_results.json holds the run's
figures; `stream_status` gives JSON and `docs generate` the catalog stats of the models."""

import json
import os
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from .helpers import append_bids, rows, table_path, ts

DIM_ITEM = "item,label\nA,apple\nB,banana\n"
SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: bids}]
"""
ENRICHED = """
{{ config(materialized='streaming_view', max_files_per_trigger=1,
          starting_version=0) }}
SELECT b.bidtime, b.price, d.label
FROM {{ source('raw', 'bids') }} b JOIN {{ ref('dim_item') }} d ON b.item = d.item
"""
PER_10MIN = """
{{ config(materialized='streaming_view', watermark_delay='1 minute', max_files_per_trigger=1,
          starting_version=0) }}
SELECT window_start, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE {{ source('raw', 'bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""
VERSIONS = [
    [("2020-04-15 08:01:00", 1, "A"), ("2020-04-15 08:02:00", 2, "B")],
    [("2020-04-15 08:11:00", 3, "A")],
    [("2020-04-15 08:21:00", 4, "C"), ("2020-04-15 08:22:00", 5, "B")],
]


class TestGraphInputs:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"dim_item.csv": DIM_ITEM}

    @pytest.fixture(scope="class")
    def models(self):
        return {"sources.yml": SOURCES, "enriched.sql": ENRICHED, "per_10min.sql": PER_10MIN}

    def test_seed_join_without_dimensions(self, project):
        run_dbt(["seed"])
        for version in VERSIONS:
            append_bids(table_path(project, "bids"), version)
        _, out = run_dbt_and_capture(["run"])
        schema = project.test_schema
        assert rows(table_path(project, "enriched")) == [
            (ts("2020-04-15 08:01:00"), 1.0, "apple"),
            (ts("2020-04-15 08:02:00"), 2.0, "banana"),
            (ts("2020-04-15 08:11:00"), 3.0, "apple"),
            (ts("2020-04-15 08:22:00"), 5.0, "banana"),
        ]
        assert f"{schema}.enriched: reads streams: {schema}.bids (source); tables: " in out
        assert f"{schema}.dim_item (seed)" in out

        # One line per micro-batch: the read limit (1 file) makes 3 batches known ahead.
        # (starting_version 0: the versions in order, not the snapshot's files in path order.)
        lines = {
            m: re.findall(rf"{schema}\.{m}: batch (\d+) of about (\d+): (\d+) input rows", out)
            for m in ("enriched", "per_10min")
        }
        assert lines["enriched"] == [("1", "3", "2"), ("2", "3", "1"), ("3", "3", "2")]
        # the aggregate may add a batch without data, closing the window its watermark passed
        assert lines["per_10min"][:3] == lines["enriched"]
        assert sum(int(r) for _, _, r in lines["per_10min"]) == 5

        # run_results.json: the totals of each run.
        with open(os.path.join(project.project_root, "target", "run_results.json")) as fh:
            results = {r["unique_id"]: r["adapter_response"] for r in json.load(fh)["results"]}
        enriched, agg = results["model.test.enriched"], results["model.test.per_10min"]
        assert (enriched["rows_read"], enriched["rows_written"], enriched["batches"]) == (5, 4, 3)
        assert enriched["versions_behind"] == {f"{schema}.bids": 0}
        assert enriched.get("watermark") is None and enriched.get("event_time_lag_s") is None
        assert (agg["rows_read"], agg["rows_written"]) == (5, 2)
        assert agg["watermark"] == "2020-04-15T08:21:00.000Z"
        assert agg["event_time_lag_s"] == 60.0  # newest bid 08:22, watermark 08:21
        assert agg["state_rows"] == 1 and agg["state_bytes"] > 0  # the open 08:20 window
        assert rows(table_path(project, "per_10min")) == [
            (ts("2020-04-15 08:00:00"), 3.0),
            (ts("2020-04-15 08:10:00"), 3.0),
        ]

    def test_status_json_and_docs_catalog(self, project):
        """After the run above: `stream_status` as JSON, and the catalog's stats of the model."""
        schema = project.test_schema
        _, out = run_dbt_and_capture(["run-operation", "stream_status", "--args", "{format: json}"])
        line = next(x for x in out.splitlines() if '[{"' in x)
        status = {r["model"]: r for r in json.loads(line[line.index("[") :])}
        agg = status[f"{schema}.per_10min"]
        assert agg["state"] == "on dbt run" and agg["watermark"].startswith("2020-04-15 08:21:00")
        assert agg["lag_versions"] == {f"{schema}.bids": 0}

        run_dbt(["docs", "generate"])
        with open(os.path.join(project.project_root, "target", "catalog.json")) as fh:
            nodes = json.load(fh)["nodes"]
        stats = {k: v["value"] for k, v in nodes["model.test.per_10min"]["stats"].items()}
        assert stats["query_kind"] == "streaming_view: append, TUMBLE 600s on bidtime"
        assert stats["watermark"].startswith("2020-04-15 08:21:00")
        assert stats["trigger"] == "available_now (each dbt run)"
        assert stats["state_bound"] == "watermark (delay 1 minute)"
        assert stats["source_versions"] == f"{schema}.bids v2"
        enriched = nodes["model.test.enriched"]["stats"]
        assert enriched["query_kind"]["value"] == "streaming_view: append"  # joins a dimension
        assert enriched["state_bound"]["value"] == "none"
        assert "query_kind" not in nodes["seed.test.dim_item"]["stats"]
