"""Issue 21: inputs classified from the dbt graph, and a run's progress. A streaming model
joins a source (a stream) with a seed (a table, by the graph) without config `dimensions`;
with `max_files_per_trigger: 1` over a source of three versions it runs three micro-batches,
each logged, and run_results.json holds the run's figures."""


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
{{ config(materialized='streaming_view', max_files_per_trigger=1) }}
SELECT b.bidtime, b.price, d.label
FROM {{ source('raw', 'bids') }} b JOIN {{ ref('dim_item') }} d ON b.item = d.item
"""
PER_10MIN = """
{{ config(materialized='streaming_view', watermark_delay='1 minute', max_files_per_trigger=1) }}
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
