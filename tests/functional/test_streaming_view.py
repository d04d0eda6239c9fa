"""End to end through `dbt seed` / `dbt run` / `dbt test`: the FLIP-145 TUMBLE example,
incremental runs, commit metadata, and relations used by name."""

import json
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from .helpers import append_bids, commits, rows, table_path, ts

BIDS_CSV = """bidtime,price,item
2020-04-15 08:07:00,2,A
2020-04-15 08:11:00,3,B
2020-04-15 08:05:00,4,C
2020-04-15 08:09:00,5,D
2020-04-15 08:13:00,1,E
2020-04-15 08:17:00,6,F
"""

PER_10MIN = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""

TVF_ROWS = """
{{ config(materialized='streaming_view') }}
SELECT * FROM TABLE(TUMBLE(DATA => TABLE {{ ref('bids') }}, TIMECOL => DESCRIPTOR(bidtime),
                          SIZE => INTERVAL '10' MINUTES))
"""

# A singular test that names the relation as plain schema.identifier
SINGULAR = "SELECT * FROM {{ target.schema }}.bids_per_10min WHERE total <= 0"


def w(start: str, end: str):
    return ts(f"2020-04-15 {start}"), ts(f"2020-04-15 {end}")


class TestTumbleStreamingView:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"bids.csv": BIDS_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"bids_per_10min.sql": PER_10MIN, "bids_tumble_rows.sql": TVF_ROWS}

    @pytest.fixture(scope="class")
    def tests(self):
        return {"positive_totals.sql": SINGULAR}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }

    def test_flip145_incremental_runs(self, project):
        schema = project.test_schema
        source = f"{schema}.bids"
        run_dbt(["seed"])
        results = run_dbt(["run"])
        agg, raw = table_path(project, "bids_per_10min"), table_path(project, "bids_tumble_rows")

        # Watermark 08:17 - 1 min = 08:16 closes only the 08:00 window (FLIP-145: $11).
        assert rows(agg) == [(*w("08:00", "08:10"), 11.0, 3)]
        assert [f.name for f in DeltaTable(agg).schema().fields] == [
            "window_start",
            "window_end",
            "total",
            "bids",
        ]
        # The TVF rows: exactly FLIP-145's TUMBLE table, with window_time = window_end - 1 ms.
        assert rows(raw) == sorted(
            [
                (
                    ts(f"2020-04-15 08:{m}"),
                    p,
                    i,
                    *w(*win),
                    w(*win)[1].replace(minute=w(*win)[1].minute - 1, second=59, microsecond=999000),
                )
                for m, p, i, win in [
                    ("07", 2.0, "A", ("08:00", "08:10")),
                    ("11", 3.0, "B", ("08:10", "08:20")),
                    ("05", 4.0, "C", ("08:00", "08:10")),
                    ("09", 5.0, "D", ("08:00", "08:10")),
                    ("13", 1.0, "E", ("08:10", "08:20")),
                    ("17", 6.0, "F", ("08:10", "08:20")),
                ]
            ]
        )

        response = {r.node.name: r.adapter_response for r in results.results}["bids_per_10min"]
        assert response["rows_read"] == 6 and response["versions_read"] == {source: [0, 0]}
        assert response["rows_written"] == 1 and response["late_rows"] == 0

        # Every commit records source versions, watermark, batch id and fingerprint.
        meta = commits(agg)
        assert [m["batch_id"] for m in meta] == [None, 0, 1]  # creation, data batch, no-data batch
        assert meta[-1]["sources"] == {source: 0}
        assert meta[-1]["watermark"] == "2020-04-15 08:16:00.000"
        assert len({m["fingerprint"] for m in meta}) == 1 and len(meta[-1]["fingerprint"]) == 64

        # Second scenario: one more source version with a late bid (08:06 < watermark 08:16).
        bids = table_path(project, "bids")
        append_bids(
            bids,
            [
                ("2020-04-15 08:21:00", 7, "G"),
                ("2020-04-15 08:24:00", 2, "H"),
                ("2020-04-15 08:06:00", 9, "I"),
                ("2020-04-15 08:33:00", 3, "J"),
            ],
        )
        results, log = run_dbt_and_capture(["run"])
        response = {r.node.name: r.adapter_response for r in results.results}["bids_per_10min"]
        assert response["rows_read"] == 4 and response["versions_read"] == {source: [1, 1]}
        assert response["late_rows"] == 1 and response["rows_written"] == 2
        assert f"read 4 rows ({source} v1..v1)" in log and "1 late rows dropped" in log
        assert rows(agg) == [
            (*w("08:00", "08:10"), 11.0, 3),
            (*w("08:10", "08:20"), 10.0, 3),
            (*w("08:20", "08:30"), 9.0, 2),
        ]
        assert commits(agg)[-1]["sources"] == {source: 1}
        assert commits(agg)[-1]["watermark"] == "2020-04-15 08:32:00.000"
        assert len(rows(raw)) == 10  # a projection has no state: nothing is late for it

        # No new data: nothing is committed, and the log says so.
        version = DeltaTable(agg).version()
        results, log = run_dbt_and_capture(["run"])
        assert DeltaTable(agg).version() == version
        assert f"no new data ({source} at v1); nothing committed" in log

        # dbt test resolves ref() and plain schema.identifier names to the Delta tables.
        run_dbt(["test"])
        # dbt show reads the streaming table by name.
        _, log = run_dbt_and_capture(
            [
                "show",
                "--inline",
                "select total from {{ ref('bids_per_10min') }} order by window_start",
            ]
        )
        assert "11" in log and "10" in log and "9" in log

    def test_docs_generate_lists_delta_relations(self, project):
        run_dbt(["docs", "generate"])
        with open(os.path.join(project.project_root, "target", "catalog.json")) as fh:
            catalog = json.load(fh)
        nodes = {k.split(".")[-1]: v for k, v in catalog["nodes"].items()}
        assert list(nodes["bids_per_10min"]["columns"]) == [
            "window_start",
            "window_end",
            "total",
            "bids",
        ]
        assert nodes["bids_per_10min"]["columns"]["total"]["type"] == "double"
        assert set(nodes["bids"]["columns"]) == {"bidtime", "price", "item"}


SOURCES_YML = """
version: 2
sources:
  - name: feed
    schema: "{{ target.schema }}"
    tables:
      - name: events
        meta: {location: "%s"}
"""

FEED_MODEL = """
{{ config(materialized='streaming_view', watermark_delay='0 seconds') }}
SELECT window_start, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ source('feed', 'events') }}, DESCRIPTOR(bidtime), INTERVAL '1' HOUR))
GROUP BY window_start, window_end
"""


class TestSourceWithExplicitLocation:
    """A source table with `meta: {location: ...}` is read from that path, by name."""

    @pytest.fixture(scope="class")
    def location(self, tmp_path_factory):
        path = str(tmp_path_factory.mktemp("elsewhere") / "events")
        append_bids(
            path,
            [
                ("2020-04-15 08:07:00", 1, "A"),
                ("2020-04-15 09:30:00", 1, "B"),
                ("2020-04-15 08:59:59", 1, "C"),
                ("2020-04-15 11:00:00", 1, "D"),
            ],
        )
        return path

    @pytest.fixture(scope="class")
    def models(self, location):
        return {"sources.yml": SOURCES_YML % location, "events_per_hour.sql": FEED_MODEL}

    def test_reads_source_location(self, project, location):
        run_dbt(["run"])
        out = table_path(project, "events_per_hour")
        assert rows(out) == [(ts("2020-04-15 08:00:00"), 2), (ts("2020-04-15 09:00:00"), 1)]
        assert commits(out)[-1]["sources"] == {f"{project.test_schema}.events": 0}
        assert not os.path.exists(
            table_path(project, "events")
        )  # nothing copied into the warehouse
