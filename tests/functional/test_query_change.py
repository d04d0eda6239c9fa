"""A changed model query over an existing table and checkpoint (issue 18): a change after the
stateful operator (its projection, HAVING) keeps the checkpoint and state, and Spark resumes
the new query from them, also when it renames or adds an output column (the table is
rewritten with the new columns); a change of the state (aggregates, watermark, grouping keys)
is refused before any stream starts, naming the change and `--full-refresh`."""

import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.faults import EXIT_CODE
from dbt.adapters.spark_streaming.layout import changelog_path

from .helpers import append_bids, rows, table_path, ts
from .test_lifecycle import dbt_subprocess

HEAD = "{{{{ config(materialized='streaming_view', watermark_delay='{delay}') }}}} "
TVF = "TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
MODEL = (
    "SELECT window_start, window_end, item, SUM(price) AS total FROM "
    + TVF
    + " GROUP BY window_start, window_end, item"
)
# the projection and a filter after the aggregation change; its keys and buffers do not
OUTPUT_CHANGED = MODEL.replace("item, SUM", "LOWER(item) AS item, SUM") + " HAVING SUM(price) > 3"


def _write(project, sql: str, delay: str = "1 minute") -> None:
    with open(os.path.join(project.project_root, "models", "totals.sql"), "w") as fh:
        fh.write(HEAD.format(delay=delay) + sql)


class TestQueryChange:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "bids.csv": "bidtime,price,item\n2020-04-15 08:01:00,2,A\n2020-04-15 08:02:00,3,A\n"
            "2020-04-15 08:03:00,4,B\n2020-04-15 08:21:00,3,B\n"
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "totals.sql": HEAD.format(delay="1 minute") + MODEL,
            "tests.yml": "models:\n  - {name: totals, data_tests: [snapshot_equivalence]}\n",
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "seeds": {
                "+column_types": {"bidtime": "timestamp", "price": "double", "item": "string"}
            }
        }

    def test_output_change_keeps_state_state_change_is_refused(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        out = table_path(project, "totals")
        w0 = (ts("2020-04-15 08:00:00"), ts("2020-04-15 08:10:00"))
        w2 = (ts("2020-04-15 08:20:00"), ts("2020-04-15 08:30:00"))
        assert rows(out) == [(*w0, "A", 5.0), (*w0, "B", 4.0)]  # 08:20 B 3 is in state

        # (a) projection and HAVING after the aggregation: the state goes on. Window 08:20's
        # B total is 3 (read by the first run, kept in state) + 2: 5 passes HAVING > 3; A's 1
        # does not.
        _write(project, OUTPUT_CHANGED)
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 08:25:00", 2, "B"), ("2020-04-15 08:26:00", 1, "A")],
        )
        append_bids(table_path(project, "bids"), [("2020-04-15 08:35:00", 1, "C")])
        _, log = run_dbt_and_capture(["run"])
        assert "class keeps_state (projection or filter after the stateful operator)" in log
        assert rows(out) == [(*w0, "A", 5.0), (*w0, "B", 4.0), (*w2, "b", 5.0)]
        # the table is each query's rows in turn: the first's up to the change (upper case, no
        # HAVING), the second's after it; snapshot_equivalence compares each with its own
        assert [r.status for r in run_dbt(["test"])] == ["pass"]

        # (b) changes of the state are refused before any stream starts, table untouched
        before = (DeltaTable(out).version(), rows(out))
        for sql, delay, named in (
            (OUTPUT_CHANGED.replace("SUM(price) AS", "MAX(price) AS"), "1 minute", "aggregates"),
            (OUTPUT_CHANGED, "2 minutes", "watermark"),
            (
                OUTPUT_CHANGED.replace("item HAVING", "item, price HAVING"),
                "1 minute",
                "grouping keys __w, item -> __w, item, price",
            ),
        ):
            _write(project, sql, delay)
            results, log = run_dbt_and_capture(["run"], expect_pass=False)
            message = results.results[0].message
            assert "[dbt-spark-streaming SSR301]" in message and named in message, message
            assert "--full-refresh -s totals" in message
            assert "class changes_state" in log
            assert (DeltaTable(out).version(), rows(out)) == before

        # the (a) query runs on from the same state: C's 1 at 08:35 (read before) + 9
        _write(project, OUTPUT_CHANGED)
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 08:36:00", 9, "C"), ("2020-04-15 08:45:00", 1, "D")],
        )
        run_dbt(["run"])
        w3 = (ts("2020-04-15 08:30:00"), ts("2020-04-15 08:40:00"))
        assert rows(out) == [*before[1], (*w3, "c", 10.0)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]

        # (c) a renamed output column keeps the state too: the table is rewritten with the new
        # name in one commit, at once (no new data), and the stream goes on (D's 1 at 08:45,
        # read before, + 5)
        _write(project, OUTPUT_CHANGED.replace("AS total", "AS amount"))
        _, log = run_dbt_and_capture(["run"])
        assert "class keeps_state" in log and "columns changed (total -> amount)" in log
        assert DeltaTable(out).schema().to_arrow().names[-1] == "amount"
        assert rows(out) == [*before[1], (*w3, "c", 10.0)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
        _, log = run_dbt_and_capture(["run"])  # the change is recorded: not renamed again
        assert "class keeps_state" not in log and "columns changed" not in log
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 08:46:00", 5, "D"), ("2020-04-15 08:55:00", 1, "E")],
        )
        run_dbt(["run"])
        w4 = (ts("2020-04-15 08:40:00"), ts("2020-04-15 08:50:00"))
        assert rows(out) == [*before[1], (*w3, "c", 10.0), (*w4, "d", 6.0)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]

        # (d) an added output column (a projection of a grouping key, placed before the
        # aggregate) keeps the state too: the table is rewritten with it, NULL in the rows
        # written before, and the new rows have it (E's 1 at 08:55, read before, + 4)
        renamed = OUTPUT_CHANGED.replace("AS total", "AS amount")
        _write(project, renamed.replace("AS item, SUM", "AS item, UPPER(item) AS big, SUM"))
        _, log = run_dbt_and_capture(["run"])
        assert "columns changed (+big)" in log
        assert DeltaTable(out).schema().to_arrow().names[3:] == ["big", "amount"]
        old = [(*w3, "c", 10.0), (*w4, "d", 6.0)]
        assert rows(out) == [(*r[:3], None, r[3]) for r in [*before[1], *old]]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 08:56:00", 4, "E"), ("2020-04-15 09:05:00", 1, "F")],
        )
        run_dbt(["run"])
        w5 = (ts("2020-04-15 08:50:00"), ts("2020-04-15 09:00:00"))
        assert rows(out)[-1] == (*w5, "e", "E", 5.0)
        assert [r.status for r in run_dbt(["test"])] == ["pass"]


COUNTS = (
    "{{ config(materialized='upsert_table', unique_key='item', constant_domain=['item']) }} "
    "SELECT item, COUNT(*) AS n, SUM(price) AS total FROM {{ ref('bids') }} GROUP BY item"
)


class UpsertBase:
    seeds = TestQueryChange.seeds
    project_config_update = TestQueryChange.project_config_update
    sql = COUNTS

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "counts.sql": self.sql,
            "tests.yml": "models:\n  - {name: counts, data_tests: [snapshot_equivalence]}\n",
        }

    def built_then_changed(self, project, sql: str) -> str:
        """Seed, run the model, change its SQL to `sql`; the path of its table."""
        run_dbt(["seed"])
        run_dbt(["run"])
        out = table_path(project, "counts")
        assert rows(out) == [("A", 2, 5.0), ("B", 2, 7.0)]
        with open(os.path.join(project.project_root, "models", "counts.sql"), "w") as fh:
            fh.write(sql)
        return out


class TestUpsertTableRename(UpsertBase):
    """An upsert_table's renamed output column: its table and changelog are rewritten with the
    new name, and the next batches update them with it."""

    def test_rename_rewrites_table_and_changelog(self, project):
        out = self.built_then_changed(project, self.sql.replace("AS n,", "AS bids,"))
        _, log = run_dbt_and_capture(["run"])
        assert "columns changed (n -> bids)" in log
        assert DeltaTable(out).to_pyarrow_table().column_names == ["item", "bids", "total"]
        assert rows(out) == [("A", 2, 5.0), ("B", 2, 7.0)]
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 09:00:00", 3, "A"), ("2020-04-15 09:01:00", 1, "C")],
        )
        run_dbt(["run"])
        assert rows(out) == [("A", 3, 8.0), ("B", 2, 7.0), ("C", 1, 1.0)]
        changes = DeltaTable(changelog_path(out)).to_pyarrow_table()
        assert changes.column_names[:3] == ["item", "bids", "total"]
        assert ("A", 3, 8.0) in [(r["item"], r["bids"], r["total"]) for r in changes.to_pylist()]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]


class TestStateTtlRename(TestUpsertTableRename):
    """The same rename of a state_ttl upsert_table: its partials (keyed and named by position,
    __k0/__p0) stay as they are."""

    sql = COUNTS.replace("constant_domain=['item']", "state_ttl='1 day'")


@pytest.mark.slow
class TestUpsertTableRenameCrash(UpsertBase):
    def test_killed_between_changelog_and_table(self, project):
        """The next run finishes the change: the changelog is not rewritten twice, the table
        gets the new columns."""
        out = self.built_then_changed(project, self.sql.replace("AS n,", "AS bids,"))
        proc = dbt_subprocess(project, "run", fault="columns_rewriting")
        assert proc.returncode == EXIT_CODE, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert DeltaTable(out).to_pyarrow_table().column_names == ["item", "n", "total"]
        changelog = DeltaTable(changelog_path(out))
        assert changelog.to_pyarrow_table().column_names[:3] == ["item", "bids", "total"]
        version = changelog.version()
        _, log = run_dbt_and_capture(["run"])
        assert "columns changed (n -> bids)" in log
        assert DeltaTable(changelog_path(out)).version() == version  # not rewritten again
        assert DeltaTable(out).to_pyarrow_table().column_names == ["item", "bids", "total"]
        assert rows(out) == [("A", 2, 5.0), ("B", 2, 7.0)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]


class TestUpsertTableProjection(UpsertBase):
    def test_a_key_not_written_since_keeps_the_old_row(self, project):
        """A projection change keeps the state: a key written since holds the new query's row,
        a key not written since the old query's, and snapshot_equivalence expects just that
        (the changelog says which keys the new query wrote)."""
        out = self.built_then_changed(
            project, self.sql.replace("SUM(price) AS total", "SUM(price) * 2 AS total")
        )
        _, log = run_dbt_and_capture(["run"])
        assert "class keeps_state" in log
        append_bids(
            table_path(project, "bids"),
            [("2020-04-15 09:00:00", 3, "A"), ("2020-04-15 09:01:00", 1, "C")],
        )
        run_dbt(["run"])
        assert rows(out) == [("A", 3, 16.0), ("B", 2, 7.0), ("C", 1, 2.0)]
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
