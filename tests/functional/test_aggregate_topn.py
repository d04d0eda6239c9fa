"""Top-N over an updating aggregate (upsert_table, sql/aggtopn.py) through `dbt run`: a user
leaves the top 2 of a page when another overtakes them, in the table and in the changelog
(keyed by page and rank: -U/+U at each rank that changes); the same without PARTITION BY
(the seed-001 shape: the key is the rank alone)."""

import pytest
from dbt.tests.util import run_dbt

from .helpers import rows, table_path
from .test_upsert_table import CLICKS, append_clicks, changelog, replay

SQL = (
    "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
    "SELECT * FROM (SELECT url, user, cnt, "
    "ROW_NUMBER() OVER (PARTITION BY url ORDER BY cnt DESC) AS rn "
    "FROM (SELECT url, user, COUNT(cTime) AS cnt FROM {{ source('raw', 'clicks') }} "
    "GROUP BY url, user)) WHERE rn <= 2"
)
GLOBAL = (
    "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
    "SELECT * FROM (SELECT user, n, ROW_NUMBER() OVER (ORDER BY n DESC) AS rn "
    "FROM (SELECT user, COUNT(cTime) AS n FROM {{ source('raw', 'clicks') }} GROUP BY user)) "
    "WHERE rn <= 2"
)
TESTS = """
models:
  - {name: top_users, data_tests: [snapshot_equivalence]}
  - {name: top_overall, data_tests: [snapshot_equivalence]}
"""


class TestAggregateTopN:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": CLICKS,
            "tests.yml": TESTS,
            "top_users.sql": SQL,
            "top_overall.sql": GLOBAL,
        }

    def test_a_row_leaves_the_top_n(self, project):
        source, out = table_path(project, "clicks"), table_path(project, "top_users")
        overall = table_path(project, "top_overall")
        append_clicks(
            source,
            [
                ("Mary", "2020-01-01 12:00:00", "./home"),
                ("Mary", "2020-01-01 12:00:01", "./home"),
                ("Liz", "2020-01-01 12:00:02", "./home"),
                ("Bob", "2020-01-01 12:00:03", "./home"),
                ("Bob", "2020-01-01 12:00:04", "./cart"),
            ],
        )
        run_dbt(["run"])
        # ties (Bob and Liz: 1) are broken by the other columns, ascending: Bob first
        assert rows(out) == [
            ("./cart", "Bob", 1, 1),
            ("./home", "Bob", 1, 2),
            ("./home", "Mary", 2, 1),
        ]
        assert rows(overall) == [("Bob", 2, 1), ("Mary", 2, 2)]  # 2 clicks each; Liz 1
        first, first_overall = changelog(out), changelog(overall)
        assert sorted(r[:5] for r in first) == [
            ("./cart", "Bob", 1, 1, "+I"),
            ("./home", "Bob", 1, 2, "+I"),
            ("./home", "Mary", 2, 1, "+I"),
        ]
        # Liz overtakes Mary; Bob leaves the top 2 of ./home; ./cart is untouched
        append_clicks(
            source,
            [
                ("Liz", "2020-01-01 12:01:00", "./home"),
                ("Liz", "2020-01-01 12:01:01", "./home"),
            ],
        )
        run_dbt(["run"])
        assert rows(out) == [
            ("./cart", "Bob", 1, 1),
            ("./home", "Liz", 3, 1),
            ("./home", "Mary", 2, 2),
        ]
        log = changelog(out)
        assert sorted(r[:5] for r in log[len(first) :]) == [
            ("./home", "Bob", 1, 2, "-U"),
            ("./home", "Liz", 3, 1, "+U"),
            ("./home", "Mary", 2, 1, "-U"),
            ("./home", "Mary", 2, 2, "+U"),
        ]
        assert replay(log, (0, 3)) == sorted(rows(out), key=str)
        # overall: Liz (3) first, Bob second, Mary leaves
        assert rows(overall) == [("Bob", 2, 2), ("Liz", 3, 1)]
        log = changelog(overall)
        assert sorted(r[:4] for r in log[len(first_overall) :]) == [
            ("Bob", 2, 1, "-U"),
            ("Bob", 2, 2, "+U"),
            ("Liz", 3, 1, "+U"),
            ("Mary", 2, 2, "-U"),
        ]
        assert replay(log, (2,)) == sorted(rows(overall), key=str)
        assert [r.status for r in run_dbt(["test"])] == ["pass", "pass"]
