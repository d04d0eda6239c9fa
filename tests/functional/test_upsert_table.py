"""upsert_table through `dbt run`: the seed 001 click example (table and changelog exactly),
then seeded random inserts over several runs for each updating shape. After every run the
table equals the query run by Spark in batch over all input so far, replaying the changelog
reproduces the table, and snapshot_equivalence passes."""
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, rows, table_path, ts

CLICKS = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: clicks}, {name: ev}]
"""


def changelog(path: str) -> list[tuple]:
    """The changelog's rows in commit order (deletes before upserts within a commit)."""
    table = DeltaTable(f"{path}/_dbt_streaming/changelog").to_pyarrow_table().to_pylist()
    return sorted((tuple(r.values()) for r in table), key=lambda r: (r[-1], r[-3] not in ("-U", "-D"), str(r)))


def replay(log: list[tuple], key: int = 1) -> list[tuple]:
    """Apply a changelog (rows: columns..., _op, _batch_id, _commit_version) by its first
    `key` columns: +I/+U upsert, -U/-D delete."""
    table: dict = {}
    for row in log:
        values, op = row[:-3], row[-3]
        k = values[:key]
        if op in ("-U", "-D"):
            assert table.pop(k) == values, f"{op} of a row the table does not hold: {row}"
        else:
            assert op == "+U" or k not in table, f"+I of a key already there: {row}"
            table[k] = values
    return sorted(table.values(), key=str)


def append_clicks(path: str, clicks: list[tuple[str, str, str]]) -> None:
    write_deltalake(path, pa.table({
        "user": pa.array([c[0] for c in clicks]),
        "cTime": pa.array([ts(c[1]) for c in clicks], pa.timestamp("us", tz="UTC")),
        "url": pa.array([c[2] for c in clicks]),
    }), mode="append")


class TestClicksExample:
    """Seed 001, "Continuous Non-Windowed Query": one click per Delta version, `dbt run` after each."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": CLICKS,
            "tests.yml": "models:\n  - {name: clicks_per_user, data_tests: [snapshot_equivalence]}\n",
            "clicks_per_user.sql": "{{ config(materialized='upsert_table') }}\n"
                                   "SELECT user, COUNT(url) AS cnt FROM {{ source('raw', 'clicks') }} GROUP BY user",
        }

    def test_result_and_changelog(self, project):
        source, out = table_path(project, "clicks"), table_path(project, "clicks_per_user")
        clicks = [("Mary", "2020-01-01 12:00:00", "./home"), ("Bob", "2020-01-01 12:00:00", "./cart"),
                  ("Mary", "2020-01-01 12:00:05", "./prod?id=1"), ("Liz", "2020-01-01 12:01:00", "./home")]
        tables = []
        for click in clicks:
            append_clicks(source, [click])
            results = run_dbt(["run"])
            assert results[0].adapter_response["rows_written"] >= 1
            tables.append(rows(out))
        assert tables == [[("Mary", 1)], [("Bob", 1), ("Mary", 1)], [("Bob", 1), ("Mary", 2)],
                          [("Bob", 1), ("Liz", 1), ("Mary", 2)]]
        log = changelog(out)
        assert [(r[0], r[1], r[2]) for r in log] == [
            ("Mary", 1, "+I"), ("Bob", 1, "+I"), ("Mary", 1, "-U"), ("Mary", 2, "+U"), ("Liz", 1, "+I")]
        # _commit_version is the table version the change is in; _batch_id the Spark batch
        versions = [c["table_version"] for c in commits(out) if c["batch_id"] is not None]
        assert [r[-1] for r in log] == [versions[0], versions[1], versions[2], versions[2], versions[3]]
        assert replay(log) == rows(out)
        assert run_dbt(["test"])[0].status == "pass"
        # the changelog is a relation of its own, and its upsert-stream view drops the -U rows
        upserts = get_spark().sql(f"SELECT user, cnt, _op FROM {project.test_schema}.clicks_per_user_changelog "
                                  "WHERE _op IN ('+I', '+U', '-D')").collect()
        assert sorted(map(tuple, upserts)) == [("Bob", 1, "+I"), ("Liz", 1, "+I"), ("Mary", 1, "+I"), ("Mary", 2, "+U")]
        # nothing new: nothing committed, nothing changed
        run_dbt(["run"])
        assert changelog(out) == log
