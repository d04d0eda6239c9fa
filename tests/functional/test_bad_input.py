"""Bad input fails before any stream starts, with a coded message, and writes nothing: the
compile-time part of the bad-input corpus (malformed SQL, unknown relations, an unsupported
construct in each position, wrong config types and values). The run-time part (sources that
change under a model, damaged checkpoints, places that cannot be written) is
test_bad_input_runtime.py; `python -m tests.functional.bad_input_corpus` runs both and prints
the figure."""

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

BIDS = "{{ ref('bids') }}"
SV = "{{ config(materialized='streaming_view') }} "
SVW = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }} "
UP = "{{ config(materialized='upsert_table') }} "
UT = "{{ config(materialized='upsert_table', watermark_delay='1 minute') }} "
WAGG = (
    "SELECT window_start, window_end, item, COUNT(*) AS c FROM "
    + TVF
    + " GROUP BY window_start, window_end, item"
)
GOOD_PLAIN = SV + f"SELECT bidtime, item, price FROM {BIDS} WHERE price > 2"

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
    # a temporal join with a table that does not declare its versions
    "temporal_join": (
        "{{ config(materialized='streaming_view', dimensions=['bids']) }} "
        "SELECT o.bidtime, o.item, r.price FROM {{ ref('bids') }} AS o "
        "JOIN {{ ref('bids') }} FOR SYSTEM_TIME AS OF o.bidtime AS r ON o.item = r.item",
        "SSV162",
        "meta: {unique_key: <key column>, event_time: <time column>}",
    ),
    # Spark would ignore the AS OF and read the latest version (wrong rows): refused instead
    "time_travel": (
        "{{ config(materialized='streaming_view') }} "
        "SELECT item, price FROM {{ ref('bids') }} VERSION AS OF 1",
        "SSV160",
        "VERSION AS OF",
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
    # malformed SQL
    "two_statements": (SV + f"SELECT item FROM {BIDS}; SELECT item FROM {BIDS}", "SSV101", "2"),
    "not_a_query": (SV + f"DELETE FROM {BIDS} WHERE price > 1", "SSV101", "DELETE"),
    "tvf_zero_size": (
        SV
        + f"SELECT * FROM TABLE(TUMBLE(TABLE {BIDS}, DESCRIPTOR(bidtime), INTERVAL '0' MINUTES))",
        "SSV102",
        "positive",
    ),
    "tvf_unknown_named_argument": (
        SV + f"SELECT * FROM TABLE(TUMBLE(DATA => TABLE {BIDS}, TIMECOL => DESCRIPTOR(bidtime), "
        "SIZEE => INTERVAL '10' MINUTES))",
        "SSV102",
        "SIZEE",
    ),
    "tvf_two_descriptor_columns": (
        SV + f"SELECT * FROM TABLE(TUMBLE(TABLE {BIDS}, DESCRIPTOR(bidtime, price), "
        "INTERVAL '10' MINUTES))",
        "SSV102",
        "DESCRIPTOR",
    ),
    "hop_size_not_multiple_of_slide": (
        SV + f"SELECT * FROM TABLE(HOP(TABLE {BIDS}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES, "
        "INTERVAL '15' MINUTES))",
        "SSV102",
        "multiple",
    ),
    # unknown relations
    "unknown_relation": (
        SV + "SELECT * FROM {{ target.schema }}.no_such_table",
        "SSR302",
        "no_such_table",
    ),
    "unknown_tvf_input": (
        SVW + "SELECT * FROM TABLE(TUMBLE(TABLE {{ target.schema }}.no_such_table, "
        "DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))",
        "SSV104",
        "no_such_table",
    ),
    # an unsupported construct in each position
    "order_by_on_result": (
        SVW + f"SELECT item, price FROM {BIDS} ORDER BY price",
        "SSV108",
        "ORDER BY",
    ),
    "limit_on_result": (SV + f"SELECT item, price FROM {BIDS} LIMIT 5", "SSV108", "LIMIT"),
    "over_in_select": (
        SV + f"SELECT item, SUM(price) OVER (PARTITION BY item) AS s FROM {BIDS}",
        "SSV170",
        "OVER",
    ),
    "distinct_sum_in_aggregate": (
        SVW
        + "SELECT window_start, window_end, SUM(DISTINCT price) AS s FROM "
        + TVF
        + " GROUP BY window_start, window_end",
        "SSV108",
        "DISTINCT",
    ),
    "now_in_select": (
        SV + f"SELECT item, current_timestamp() AS t FROM {BIDS}",
        "SSV111",
        "CURRENT_TIMESTAMP",
    ),
    "current_date_in_where": (
        SV + f"SELECT item FROM {BIDS} WHERE bidtime > current_date",
        "SSV111",
        "CURRENT_DATE",
    ),
    "union_distinct": (
        SV + f"SELECT item FROM {BIDS} UNION SELECT item FROM {BIDS}",
        "SSV106",
        "UNION",
    ),
    "scalar_subquery_in_where": (
        SV + f"SELECT item FROM {BIDS} WHERE price > (SELECT AVG(price) FROM {BIDS})",
        "SSV106",
        "upsert_table",
    ),
    "group_by_one_window_bound": (
        SVW + "SELECT window_start, SUM(price) AS s FROM " + TVF + " GROUP BY window_start",
        "SSV107",
        "window_end",
    ),
    "session_group_by_other_keys": (
        SVW + f"SELECT window_start, window_end, item, COUNT(*) AS n FROM TABLE(SESSION(TABLE "
        f"{BIDS} PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) "
        "GROUP BY window_start, window_end",
        "SSV121",
        "PARTITION BY",
    ),
    "window_join_of_different_windows": (
        SVW
        + f"SELECT l.window_start, l.window_end, l.item FROM ({WAGG}) l JOIN ("
        + WAGG.replace("'10' MINUTES", "'20' MINUTES")
        + ") r ON l.window_start = r.window_start AND l.window_end = r.window_end "
        "AND l.item = r.item",
        "SSV122",
        "different windows",
    ),
    "window_join_on_one_bound": (
        SVW + f"SELECT l.window_start, l.item FROM ({WAGG}) l JOIN ({WAGG}) r "
        "ON l.window_start = r.window_start AND l.item = r.item",
        "SSV107",
        "window_end",
    ),
    "topn_over_unnamed_column": (
        SVW + "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        "ORDER BY s DESC) AS rn FROM (SELECT window_start, window_end, item, SUM(price) s, * FROM "
        + TVF
        + " GROUP BY window_start, window_end, item)) WHERE rn <= 3",
        "SSV109",
        "no name",
    ),
    "join_of_streams_without_window": (
        SV + f"SELECT a.item, b.price FROM {BIDS} a JOIN {BIDS} b ON a.item = b.item",
        "SSV150",
        "without a time bound",
    ),
    "tumble_start_of_another_window": (
        UT + f"SELECT TUMBLE_START(bidtime, INTERVAL '2' HOUR) AS ws, item, COUNT(*) n FROM {BIDS} "
        "GROUP BY TUMBLE(bidtime, INTERVAL '1' HOUR), item",
        "SSV113",
        "TUMBLE_START",
    ),
    # upsert_table shapes and bounded state
    "upsert_without_key": (UP + f"SELECT item, price FROM {BIDS}", "SSV130", "unique_key"),
    "rank_topn_without_key": (
        UT + "SELECT * FROM (SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY "
        "price DESC) AS rn FROM " + TVF + ") WHERE rn <= 3",
        "SSV130",
        "RANK",
    ),
    "unbounded_group_by": (
        UP + f"SELECT item, SUM(price) AS s FROM {BIDS} GROUP BY item",
        "SSV150",
        "state_ttl",
    ),
    # versions from an upsert_table whose query deletes keys (a delete has no time)
    "event_time_with_having": (
        UP.replace(
            "'upsert_table'", "'upsert_table', unique_key='item', event_time='t', state_ttl='1 day'"
        )
        + f"SELECT item, MAX(bidtime) AS t FROM {BIDS} GROUP BY item HAVING COUNT(*) > 1",
        "SSV166",
        "boolean column",
    ),
    "state_ttl_stddev": (
        UP.replace("'upsert_table'", "'upsert_table', state_ttl='1 day'")
        + f"SELECT item, STDDEV(price) AS s FROM {BIDS} GROUP BY item",
        "SSV151",
        "STDDEV",
    ),
    "apply_changes_aggregate": (
        UP.replace(
            "'upsert_table'",
            "'upsert_table', unique_key='item', apply_changes={'sequence_by': 'n'}",
        )
        + f"SELECT item, COUNT(*) AS n FROM {BIDS} GROUP BY item",
        "SSV181",
        "change rows",
    ),
    "apply_changes_track_history": (
        UP.replace(
            "'upsert_table'",
            "'upsert_table', unique_key='item', "
            "apply_changes={'sequence_by': 'bidtime', 'track_history_columns': ['price']}",
        )
        + f"SELECT * FROM {BIDS}",
        "SSV182",
        "track_history_columns",
    ),
    # wrong config values and types
    "apply_changes_unknown_column": (
        UP.replace(
            "'upsert_table'",
            "'upsert_table', unique_key='item', apply_changes={'sequence_by': 'version'}",
        )
        + f"SELECT * FROM {BIDS}",
        "SSV180",
        "bidtime",
    ),
    "apply_changes_qualified_delete_when": (
        UP.replace(
            "'upsert_table'",
            "'upsert_table', unique_key='item', "
            "apply_changes={'sequence_by': 'bidtime', 'delete_when': \"b.price < 0\"}",
        )
        + f"SELECT b.* FROM {BIDS} AS b",
        "SSV180",
        "qualifies the column b.price",
    ),
    "apply_changes_struct_sequence_scd2": (
        UP.replace(
            "'upsert_table'",
            "'upsert_table', unique_key='item', apply_changes={'sequence_by': 'v', 'scd_type': 2}",
        )
        + f"SELECT *, STRUCT(bidtime, price) AS v FROM {BIDS}",
        "SSV180",
        "scalar",
    ),
    "negative_delay": (
        "{{ config(materialized='streaming_view', watermark_delay='-1 minute') }} " + AGG,
        "SSV110",
        "-1 minute",
    ),
    "negative_state_ttl": (
        UP.replace("'upsert_table'", "'upsert_table', state_ttl='-3 days'")
        + f"SELECT item, SUM(price) AS s FROM {BIDS} GROUP BY item",
        "SSV152",
        "-3 days",
    ),
    "emit_early_not_window": (
        UP.replace("'upsert_table'", "'upsert_table', state_ttl='1 day', emit={'early': true}")
        + f"SELECT item, SUM(price) AS s FROM {BIDS} GROUP BY item",
        "SSV132",
        "emit",
    ),
    "max_files_zero": (
        SV.replace("'streaming_view'", "'streaming_view', max_files_per_trigger=0")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "max_files_per_trigger",
    ),
    "max_bytes_not_a_size": (
        SV.replace("'streaming_view'", "'streaming_view', max_bytes_per_trigger='lots'")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "512k",
    ),
    "starting_version_and_timestamp": (
        SV.replace(
            "'streaming_view'",
            "'streaming_view', starting_version=0, starting_timestamp='2020-01-01'",
        )
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "only one",
    ),
    "starting_version_beyond_latest": (
        SV.replace("'streaming_view'", "'streaming_view', starting_version=99")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "latest version",
    ),
    "starting_timestamp_not_a_date": (
        SV.replace("'streaming_view'", "'streaming_view', starting_timestamp='yesterday'")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "ISO",
    ),
    "continuous_false_with_interval": (
        SV.replace(
            "'streaming_view'",
            "'streaming_view', continuous=false, trigger={'processing_time': '10 seconds'}",
        )
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "continuous",
    ),
    "dimensions_not_read": (
        SV.replace("'streaming_view'", "'streaming_view', dimensions=['nope']")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "dimensions",
    ),
    "shuffle_partitions_zero": (
        SV.replace("'streaming_view'", "'streaming_view', shuffle_partitions=0")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "shuffle_partitions",
    ),
    "skip_change_commits_not_bool": (
        SV.replace("'streaming_view'", "'streaming_view', skip_change_commits='yes'")
        + f"SELECT item FROM {BIDS}",
        "SSC201",
        "true or false",
    ),
}


class TestBadInput:
    """One project, seeded once; one `dbt run` of every bad model, each failing before any
    stream starts (one dbt invocation: ~2 s less per case than one each). Then a good model of
    the same project runs and gives its rows."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "bids.csv": "bidtime,price,item\n2020-04-15 08:07:00,2,A\n2020-04-15 08:21:00,3,B\n"
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "good_plain.sql": GOOD_PLAIN,
            **{f"{name}.sql": sql for name, (sql, _, _) in BAD_MODELS.items()},
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }

    @pytest.fixture(scope="class")
    def failed(self, project) -> dict:
        """The bad models' messages by name, from one `dbt run` of them all (each fails on its
        own, before any stream starts), and the seed's Delta version before it."""
        run_dbt(["seed"])
        version = DeltaTable(table_path(project, "bids")).version()
        results = run_dbt(["run", "-s", *sorted(BAD_MODELS)], expect_pass=False)
        return {r.node.name: r.message for r in results.results}, version

    @pytest.mark.parametrize("name", sorted(BAD_MODELS))
    def test_fails_with_code_and_writes_nothing(self, project, failed, name):
        _, code, phrase = BAD_MODELS[name]
        messages, seeded = failed
        message = messages[name]
        assert f"[dbt-spark-streaming {code}]" in message, message
        assert phrase in message, message
        # no table, no checkpoint (it lives in the table's directory), no lock left behind,
        # the source untouched
        assert not os.path.exists(table_path(project, name))
        locks = os.path.join(
            project.adapter.config.credentials.warehouse_path, ".dbt_streaming", "locks"
        )
        # no lock held (a `<lock>.guard` file, the flock that serialises taking a lock, stays)
        assert (
            not os.path.isdir(locks)
            or [f for f in os.listdir(locks) if not f.endswith(".guard")] == []
        )
        assert DeltaTable(table_path(project, "bids")).version() == seeded

    def test_next_good_run_gives_its_rows(self, project, failed):
        run_dbt(["run", "-s", "good_plain"])
        assert rows(table_path(project, "good_plain")) == [(ts("2020-04-15 08:21:00"), "B", 3.0)]


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
