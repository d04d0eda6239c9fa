"""Top-N over an updating aggregate (upsert_table, sql/aggtopn.py) through `dbt run`: a user
leaves the top 2 of a page when another overtakes them, in the table and in the changelog
(keyed by page and rank: -U/+U at each rank that changes); the same without PARTITION BY
(the seed-001 shape: the key is the rank alone); and RANK / DENSE_RANK, whose ties share a
rank, keyed by the aggregate's groups, with hand rows and seeded random runs against a batch
computation here."""

import random
from collections import Counter

import pytest
from dbt.tests.util import run_dbt

from .helpers import equivalence_project, rows, table_path
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
FIRST = [  # the clicks of the first run of each test
    ("Mary", "2020-01-01 12:00:00", "./home"),
    ("Mary", "2020-01-01 12:00:01", "./home"),
    ("Liz", "2020-01-01 12:00:02", "./home"),
    ("Bob", "2020-01-01 12:00:03", "./home"),
    ("Bob", "2020-01-01 12:00:04", "./cart"),
]
LIZ_OVERTAKES = [("Liz", "2020-01-01 12:01:00", "./home"), ("Liz", "2020-01-01 12:01:01", "./home")]
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
        append_clicks(source, FIRST)
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
        append_clicks(source, LIZ_OVERTAKES)
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


RANKED = (
    "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
    "SELECT * FROM (SELECT url, user, cnt, "
    "RANK() OVER (PARTITION BY url ORDER BY cnt DESC) AS r "
    "FROM (SELECT url, user, COUNT(cTime) AS cnt FROM {{ source('raw', 'clicks') }} "
    "GROUP BY url, user)) WHERE r <= 2"
)
DENSE = (  # bounded by constant_domain: its partials never expire
    "{{ config(materialized='upsert_table', constant_domain=['user']) }}\n"
    "SELECT * FROM (SELECT user, n, DENSE_RANK() OVER (ORDER BY n DESC) AS r "
    "FROM (SELECT user, COUNT(cTime) AS n FROM {{ source('raw', 'clicks') }} GROUP BY user)) "
    "WHERE r < 3"
)


def ranks(counts: dict, dense: bool, n: int) -> dict:
    """key -> rank of each key ranked <= n by count, descending (RANK or DENSE_RANK)."""
    values = sorted(set(counts.values()), reverse=True)
    out = {}
    for key, c in counts.items():
        r = values.index(c) + 1 if dense else 1 + sum(1 for v in counts.values() if v > c)
        if r <= n:
            out[key] = r
    return out


class TestRankTopN:
    """RANK / DENSE_RANK keep their ties: a partition may hold more than N rows; the table is
    keyed by the aggregate's GROUP BY keys, and a group that leaves the top N is deleted."""

    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(CLICKS, {"ranked": RANKED, "dense": DENSE})

    def test_ties_share_a_rank_and_leavers_are_deleted(self, project):
        source, out = table_path(project, "clicks"), table_path(project, "ranked")
        dense = table_path(project, "dense")
        append_clicks(source, FIRST)
        run_dbt(["run"])
        # Liz and Bob tie at the 2nd place of ./home: three rows in its top 2
        assert rows(out) == [
            ("./cart", "Bob", 1, 1),
            ("./home", "Bob", 1, 2),
            ("./home", "Liz", 1, 2),
            ("./home", "Mary", 2, 1),
        ]
        assert rows(dense) == [("Bob", 2, 1), ("Liz", 1, 2), ("Mary", 2, 1)]
        first = changelog(out)
        # Liz overtakes Mary: Bob falls to 3rd and leaves (-D); Mary moves to 2nd
        append_clicks(source, LIZ_OVERTAKES)
        run_dbt(["run"])
        assert rows(out) == [
            ("./cart", "Bob", 1, 1),
            ("./home", "Liz", 3, 1),
            ("./home", "Mary", 2, 2),
        ]
        log = changelog(out)
        assert sorted(r[:5] for r in log[len(first) :]) == [
            ("./home", "Bob", 1, 2, "-D"),
            ("./home", "Liz", 1, 2, "-U"),
            ("./home", "Liz", 3, 1, "+U"),
            ("./home", "Mary", 2, 1, "-U"),
            ("./home", "Mary", 2, 2, "+U"),
        ]
        assert replay(log, (0, 1)) == sorted(rows(out), key=str)
        assert rows(dense) == [("Bob", 2, 2), ("Liz", 3, 1), ("Mary", 2, 2)]

        # seeded random clicks over three more runs: each table is the batch query's top N
        rng = random.Random(18)
        users, urls = ["Ann", "Bob", "Liz", "Mary", "Tom"], ["./home", "./cart"]
        clicks = [
            ("Mary", "./home"), ("Mary", "./home"), ("Liz", "./home"), ("Bob", "./home"),
            ("Bob", "./cart"), ("Liz", "./home"), ("Liz", "./home"),
        ]  # fmt: skip
        for run in range(3):
            new = [(rng.choice(users), rng.choice(urls)) for _ in range(12)]
            append_clicks(
                source,
                [(u, f"2020-01-0{run + 2} 12:00:{i:02d}", url) for i, (u, url) in enumerate(new)],
            )
            clicks += new
            run_dbt(["run"])
            per_url = Counter((url, u) for u, url in clicks)
            want = []
            for url in urls:
                counts = {u: c for (at, u), c in per_url.items() if at == url}
                want += [(url, u, counts[u], r) for u, r in ranks(counts, False, 2).items()]
            assert rows(out) == sorted(want), run
            per_user = Counter(u for u, _ in clicks)
            want = [(u, per_user[u], r) for u, r in ranks(per_user, True, 2).items()]
            assert rows(dense) == sorted(want), run
            assert replay(changelog(out), (0, 1)) == sorted(rows(out), key=str)
        assert [r.status for r in run_dbt(["test"])] == ["pass", "pass"]
