"""Bounded state through `dbt run`: a non-window aggregate is refused without a bound
(SSV150, before anything is written), runs with `state_ttl` (partials in Delta, no Spark
state), and a key idle longer than the TTL starts afresh: observed on the data, marked in
the changelog, and left out of snapshot_equivalence."""

import os
import time

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from .helpers import rows, table_path
from .test_upsert_table import CLICKS, append_clicks, changelog, replay

SQL = (
    "SELECT user, COUNT(url) AS cnt, MAX(cTime) AS last_click "
    "FROM {{ source('raw', 'clicks') }} GROUP BY user"
)


def partials(path: str) -> list[tuple]:
    table = DeltaTable(os.path.join(path, "_dbt_streaming", "partials")).to_pyarrow_table()
    return sorted((r["__k0"], r["__p0"]) for r in table.to_pylist())


class TestStateTtl:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": CLICKS,
            "tests.yml": "models:\n  - {name: per_user, data_tests: [snapshot_equivalence]}\n",
            "per_user.sql": "{{ config(materialized='upsert_table') }}\n" + SQL,
        }

    def test_refused_then_idle_keys_expire(self, project):
        source, out = table_path(project, "clicks"), table_path(project, "per_user")
        append_clicks(
            source,
            [
                ("Mary", "2020-01-01 12:00:00", "./home"),
                ("Mary", "2020-01-01 12:00:05", "./a"),
                ("Bob", "2020-01-01 12:00:01", "./cart"),
            ],
        )
        # No bound on the users: refused before anything runs.
        _, out_text = run_dbt_and_capture(["run"], expect_pass=False)
        assert "SSV150" in out_text and "GROUP BY user" in out_text and "state_ttl" in out_text
        assert not os.path.exists(out)

        model = os.path.join(project.project_root, "models", "per_user.sql")
        with open(model, "w") as fh:
            fh.write("{{ config(materialized='upsert_table', state_ttl='30 seconds') }}\n" + SQL)
        results = run_dbt(["run"])
        assert results[0].adapter_response["state_rows"] == 0  # no Spark state: partials in Delta
        assert [r[:2] for r in rows(out)] == [("Bob", 1), ("Mary", 2)]
        assert partials(out) == [("Bob", 1), ("Mary", 2)]

        # Mary clicks again within the TTL: her count goes on.
        append_clicks(source, [("Mary", "2020-01-01 12:01:00", "./b")])
        run_dbt(["run"])
        assert [r[:2] for r in rows(out)] == [("Bob", 1), ("Mary", 3)]
        assert run_dbt(["test"])[0].status == "pass"

        # Idle longer than the TTL: Mary's partials expired, so her next click starts afresh
        # (Flink's idle state retention); Bob's expired partials are deleted though his row
        # stays; Liz is new.
        updated = max(
            DeltaTable(os.path.join(out, "_dbt_streaming", "partials"))
            .to_pyarrow_table()
            .column("__updated_ms")
            .to_pylist()
        )
        time.sleep(max(0.0, updated / 1000 + 31 - time.time()))
        append_clicks(
            source,
            [("Mary", "2020-01-01 12:02:00", "./c"), ("Liz", "2020-01-01 12:02:01", "./home")],
        )
        run_dbt(["run"])
        assert [r[:2] for r in rows(out)] == [("Bob", 1), ("Liz", 1), ("Mary", 1)]
        assert partials(out) == [("Liz", 1), ("Mary", 1)]
        log = (
            DeltaTable(os.path.join(out, "_dbt_streaming", "changelog"))
            .to_pyarrow_table()
            .to_pylist()
        )
        marked = sorted((r["user"], r["cnt"], r["_op"]) for r in log if r["_restarted"])
        assert marked == [("Mary", 1, "+U"), ("Mary", 3, "-U")]
        assert replay(changelog(out)) == sorted(rows(out), key=str)
        # The batch query counts Mary's 4 clicks; the restarted key is left out, the rest is equal.
        _, shown = run_dbt_and_capture(["test"])
        assert "1 keys left out: restarted after state_ttl" in shown and "equal" in shown

        # Bob's expired partials were deleted by the last batch, which did not touch him: his
        # next click starts afresh all the same, and is marked although his row (the same click
        # time again) does not change.
        append_clicks(source, [("Bob", "2020-01-01 12:00:01", "./cart")])
        run_dbt(["run"])
        assert [r[:2] for r in rows(out)] == [("Bob", 1), ("Liz", 1), ("Mary", 1)]
        log = (
            DeltaTable(os.path.join(out, "_dbt_streaming", "changelog"))
            .to_pyarrow_table()
            .to_pylist()
        )
        marked = sorted((r["user"], r["cnt"], r["_op"]) for r in log if r["_restarted"])
        assert marked == [("Bob", 1, "+U"), ("Bob", 1, "-U"), ("Mary", 1, "+U"), ("Mary", 3, "-U")]
        assert replay(changelog(out)) == sorted(rows(out), key=str)
        _, shown = run_dbt_and_capture(["test"])
        assert "2 keys left out: restarted after state_ttl" in shown and "equal" in shown
