"""Bad input fails before any stream starts, with a coded message, and writes nothing."""

import os

import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from .helpers import append_bids, rows, table_path, ts

TVF = "TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
AGG = (
    "SELECT window_start, window_end, SUM(price) AS total FROM "
    + TVF
    + " GROUP BY window_start, window_end"
)

BAD_MODELS = {
    # name: (model sql, error code, a phrase the message must contain)
    "syntax_error": (
        "{{ config(materialized='streaming_view') }} SELECT FROM TABLE(TUMBLE(TABLE",
        "SSV101",
        "parse",
    ),
    "tvf_missing_size": (
        "{{ config(materialized='streaming_view') }} SELECT * FROM "
        "TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime)))",
        "SSV102",
        "TUMBLE",
    ),
    "unknown_time_column": (
        "{{ config(materialized='streaming_view') }} SELECT * FROM "
        "TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bid_time), INTERVAL '10' MINUTES))",
        "SSV103",
        "bidtime",
    ),
    "not_a_time_column": (
        "{{ config(materialized='streaming_view') }} SELECT * FROM "
        "TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(price), INTERVAL '10' MINUTES))",
        "SSV103",
        "double",
    ),
    "no_watermark_delay": (
        "{{ config(materialized='streaming_view') }} " + AGG,
        "SSV105",
        "watermark_delay",
    ),
    "updating_query": (
        "{{ config(materialized='streaming_view', watermark_delay='1 minute') }} "
        "SELECT item, SUM(price) AS total FROM {{ ref('bids') }} GROUP BY item",
        "SSV106",
        "upsert_table",
    ),
    "bad_trigger": (
        "{{ config(materialized='streaming_view', watermark_delay='1 minute', "
        "trigger='sometimes') }} " + AGG,
        "SSC201",
        "available_now",
    ),
    "bad_delay": (
        "{{ config(materialized='streaming_view', watermark_delay='soon') }} " + AGG,
        "SSV110",
        "soon",
    ),
    # Spark would ignore the AS OF and join every version (wrong rows): refused instead
    "temporal_join": (
        "{{ config(materialized='streaming_view', dimensions=['bids']) }} "
        "SELECT o.bidtime, o.item, r.price FROM {{ ref('bids') }} AS o "
        "JOIN {{ ref('bids') }} FOR SYSTEM_TIME AS OF o.bidtime AS r ON o.item = r.item",
        "SSV160",
        "FOR SYSTEM_TIME AS OF",
    ),
    # rows that would depend on when each batch ran: refused
    "wall_clock": (
        "{{ config(materialized='streaming_view') }} "
        "SELECT item, price FROM {{ ref('bids') }} WHERE bidtime > now() - INTERVAL 1 DAY",
        "SSV111",
        "event-time column",
    ),
    # Spark's WRITE_STREAM_NOT_ALLOWED used to leak through
    "values_source": (
        "{{ config(materialized='streaming_view') }} SELECT * FROM VALUES (1, 'a') AS v(id, name)",
        "SSV112",
        "VALUES",
    ),
    # a group window is rewritten to a window TVF, whose input is one table
    "group_window_over_join": (
        "{{ config(materialized='upsert_table', watermark_delay='1 minute') }} "
        "SELECT a.item, COUNT(*) AS n FROM {{ ref('bids') }} a JOIN {{ ref('bids') }} b "
        "ON a.item = b.item GROUP BY TUMBLE(a.bidtime, INTERVAL '1' HOUR), a.item",
        "SSV113",
        "one table",
    ),
}


class TestBadInput:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "bids.csv": "bidtime,price,item\n2020-04-15 08:07:00,2,A\n2020-04-15 08:21:00,3,B\n"
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": sql for name, (sql, _, _) in BAD_MODELS.items()}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }

    @pytest.mark.parametrize("name", sorted(BAD_MODELS))
    def test_fails_with_code_and_writes_nothing(self, project, name):
        _, code, phrase = BAD_MODELS[name]
        run_dbt(["seed"])
        results = run_dbt(["run", "-s", name], expect_pass=False)
        message = results.results[0].message
        assert f"[dbt-spark-streaming {code}]" in message, message
        assert phrase in message, message
        assert not os.path.exists(table_path(project, name))


GOOD = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }} " + AGG
CHANGED = GOOD.replace("SUM(price)", "MAX(price)")


class TestChangedQueryAndSources:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "bids.csv": "bidtime,price,item\n2020-04-15 08:07:00,2,A\n2020-04-15 08:21:00,3,B\n"
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {"totals.sql": GOOD}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }

    def test_changed_query_refused_until_full_refresh(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        out = table_path(project, "totals")
        before = (DeltaTable(out).version(), rows(out))
        assert before[1] == [(ts("2020-04-15 08:00:00"), ts("2020-04-15 08:10:00"), 2.0)]

        # Formatting and comments do not change the query.
        with open(os.path.join(project.project_root, "models", "totals.sql"), "w") as fh:
            fh.write("-- same query, new layout\n" + GOOD.replace(" FROM ", "\n  FROM "))
        run_dbt(["run"])

        with open(os.path.join(project.project_root, "models", "totals.sql"), "w") as fh:
            fh.write(CHANGED)
        results = run_dbt(["run"], expect_pass=False)
        assert "[dbt-spark-streaming SSR301]" in results.results[0].message
        assert "--full-refresh" in results.results[0].message
        assert (DeltaTable(out).version(), rows(out)) == before  # untouched

        append_bids(table_path(project, "bids"), [("2020-04-15 08:05:00", 7, "C")])
        run_dbt(["run", "--full-refresh"])
        assert rows(out) == [(ts("2020-04-15 08:00:00"), ts("2020-04-15 08:10:00"), 7.0)]

    def test_source_overwrite_is_refused_before_the_stream_starts(self, project):
        out = table_path(project, "totals")
        before = (DeltaTable(out).version(), rows(out))
        bids = table_path(project, "bids")
        write_deltalake(bids, DeltaTable(bids).to_pyarrow_table(), mode="overwrite")
        results = run_dbt(["run"], expect_pass=False)
        assert "[dbt-spark-streaming SSD401]" in results.results[0].message
        assert (DeltaTable(out).version(), rows(out)) == before
