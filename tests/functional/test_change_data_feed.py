"""Delta Change Data Feed through `dbt run`: an upsert_table carries its changes as Delta CDF
(deltalake's `load_cdf` from version 0 replays to the table through inserts, updates and
deletes; the MERGE by Spark jobs is checked the same way in test_upsert_commit.py); a CDC-style
source read as a change feed (`read_change_feed`) feeds an aggregate with retractions."""

import random
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from .helpers import equivalence_project, rows, table_path
from .test_window_tvfs import append

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""
# HAVING: a key's 3rd event deletes its row, its 2nd updates it.
AGG = (
    "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM {{ source('raw', 'ev') }} "
    "GROUP BY k HAVING COUNT(*) <= 2"
)
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def events(spec: str, start: int) -> list[tuple]:
    """(ts, k, v) events, one per character of `spec` (the key), v = position + start."""
    return [(T0 + timedelta(seconds=start + i), k, start + i) for i, k in enumerate(spec)]


def cdf_replay(path: str, key: int = 1) -> list[tuple]:
    """The table rebuilt from its change data feed (load_cdf from version 0): per commit,
    update_preimage/delete remove their row, insert/update_postimage add theirs."""
    changes = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all())
    assert {"_change_type", "_commit_version", "_commit_timestamp"} <= set(changes.column_names)
    names = [c for c in changes.column_names if not c.startswith("_")]
    first = {"update_preimage": 0, "delete": 0, "insert": 1, "update_postimage": 1}
    ordered = sorted(
        changes.to_pylist(), key=lambda r: (r["_commit_version"], first[r["_change_type"]])
    )
    table: dict = {}
    for r in ordered:
        values = tuple(r[c] for c in names)
        kind = r["_change_type"]
        if kind in ("update_preimage", "delete"):
            assert table.pop(values[:key]) == values, f"{kind} of a row not in the table: {r}"
        else:
            assert values[:key] not in table, f"{kind} of a key in the table: {r}"
            table[values[:key]] = values
    return sorted(table.values())


class TestUpsertTableChangeDataFeed:
    @pytest.fixture(scope="class")
    def models(self):
        config = "materialized='upsert_table', constant_domain=['k']"
        return {
            "sources.yml": SOURCES,
            "agg.sql": f"{{{{ config({config}) }}}}\n{AGG}",
        }

    def test_load_cdf_replays_the_table(self, project):
        source = table_path(project, "ev")
        runs = ["abc", "abbcd"]  # inserts; then updates of a and c, a delete of b, an insert of d
        start = 0
        for spec in runs:
            append(source, events(spec, start))
            start += len(spec)
            run_dbt(["run"])
        path = table_path(project, "agg")
        table = DeltaTable(path)
        assert table.metadata().configuration["delta.enableChangeDataFeed"] == "true"
        assert table.protocol().min_writer_version >= 4
        assert rows(path) == [("a", 2, 0 + 3), ("c", 2, 2 + 6), ("d", 1, 7)]
        assert cdf_replay(path) == rows(path)
        kinds = pa.table(table.load_cdf(starting_version=0).read_all())
        kinds = set(kinds.column("_change_type").cast(pa.string()).to_pylist())
        assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}


CDC_SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: accounts}]
"""
# the oracle: the aggregate over the source's current snapshot, run by Spark in batch
BY_REGION = "SELECT region, COUNT(*) AS n, SUM(balance) AS total FROM {src} GROUP BY region"


def accounts(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "region": pa.array([r[1] for r in rows]),
            "balance": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


class TestReadChangeFeed:
    """A CDC-style source (updates, deletes, a MERGE, CDF on) read as a change feed feeds an
    aggregate with retractions: after each run the table is the aggregate over the source's
    current rows."""

    @pytest.fixture(scope="class")
    def models(self):
        config = "materialized='upsert_table', constant_domain=['region'], read_change_feed=true"
        sql = BY_REGION.format(src="{{ source('raw', 'accounts') }}")
        changes = (
            "{{ config(materialized='streaming_view', read_change_feed=true) }}\n"
            "SELECT id, region, balance, _op FROM {{ source('raw', 'accounts') }}"
        )
        return equivalence_project(
            CDC_SOURCES, {"by_region": f"{{{{ config({config}) }}}}\n{sql}", "changes": changes}
        )

    def test_aggregate_over_the_change_feed(self, project):
        from deltalake import write_deltalake

        from dbt.adapters.spark_streaming.runtime.session import get_spark

        source, out = table_path(project, "accounts"), table_path(project, "by_region")
        write_deltalake(
            source,
            accounts([(1, "eu", 10), (2, "eu", 20), (3, "us", 5)]),
            configuration={"delta.enableChangeDataFeed": "true"},
        )

        def oracle() -> list[tuple]:
            spark = get_spark()
            spark.createDataFrame(DeltaTable(source).to_pyarrow_table()).createOrReplaceTempView(
                "__cdf_accounts"
            )
            return sorted(map(tuple, spark.sql(BY_REGION.format(src="__cdf_accounts")).collect()))

        run_dbt(["run"])  # the initial snapshot, as inserts
        assert rows(out) == oracle() == [("eu", 2, 30), ("us", 1, 5)]
        assert all(r.status == "pass" for r in run_dbt(["test"]))
        table = DeltaTable(source)
        table.update(updates={"balance": "balance + 1", "region": "'us'"}, predicate="id = 2")
        table.delete("id = 3")
        write_deltalake(source, accounts([(4, "ap", 7)]), mode="append")
        run_dbt(["run"])  # an update moving a row between groups, a delete, an insert
        assert rows(out) == oracle() == [("ap", 1, 7), ("eu", 1, 10), ("us", 1, 21)]
        assert rows(table_path(project, "changes")) == sorted(
            [(1, "eu", 10, "+I"), (2, "eu", 20, "+I"), (3, "us", 5, "+I")]
            + [(2, "eu", 20, "-U"), (2, "us", 21, "+U"), (3, "us", 5, "-D"), (4, "ap", 7, "+I")]
        )
        assert all(r.status == "pass" for r in run_dbt(["test"]))
        DeltaTable(source).merge(
            accounts([(1, "eu", 11), (5, "eu", 1)]),
            "s.id = t.id",
            source_alias="s",
            target_alias="t",
        ).when_matched_update_all().when_not_matched_insert_all().execute()
        DeltaTable(source).delete("id = 4")  # the "ap" group empties: its row is deleted
        run_dbt(["run"])
        assert rows(out) == oracle() == [("eu", 2, 12), ("us", 1, 21)]
        assert all(r.status == "pass" for r in run_dbt(["test"]))
        # vacuumed past what the models read: the batch query cannot read those changes again
        DeltaTable(source).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False
        )
        _, shown = run_dbt_and_capture(["test"], expect_pass=False)
        assert "SST510" in shown and "VACUUM" in shown


class ChangingAccounts:
    """A seeded random CDC-style table (CDF on): per round, new accounts appended, a MERGE of
    new values for some and of new accounts, an UPDATE moving some between regions, a DELETE of
    some. DOUBLE balances with NULLs and magnitudes from 0.25 to 1e12; NULL regions."""

    REGIONS = ["eu", "us", "ap", None]

    def __init__(self, path: str, seed: int):
        self.path, self.rng, self.next_id = path, random.Random(seed), 0

    def _balance(self):
        if self.rng.random() < 0.15:
            return None
        # quarters: every sum of them is exact (below 2**51), whatever the order its terms
        # are added and retracted in, so the comparisons are exact
        return round(self.rng.uniform(-1, 1) * 10 ** self.rng.randint(0, 12) * 4) / 4

    def _new(self, n: int) -> list[tuple]:
        rows = [
            (self.next_id + i, self.rng.choice(self.REGIONS), self._balance()) for i in range(n)
        ]
        self.next_id += n
        return rows

    def _ids(self, k: int) -> str:
        ids = DeltaTable(self.path).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
        return ", ".join(map(str, self.rng.sample(ids, min(k, len(ids)))))

    def round(self) -> None:
        from deltalake import write_deltalake

        if self.next_id == 0:
            write_deltalake(self.path, accounts(self._new(30)), configuration={CDF: "true"})
            return
        write_deltalake(self.path, accounts(self._new(5)), mode="append")
        ids = [int(i) for i in self._ids(6).split(", ")]
        changed = [(i, self.rng.choice(self.REGIONS), self._balance()) for i in ids]
        DeltaTable(self.path).merge(
            accounts(changed + self._new(3)), "s.id = t.id", source_alias="s", target_alias="t"
        ).when_matched_update_all().when_not_matched_insert_all().execute()
        DeltaTable(self.path).update(
            updates={"region": f"'{self.rng.choice(self.REGIONS[:3])}'", "balance": "balance * -2"},
            predicate=f"id IN ({self._ids(4)})",
        )
        DeltaTable(self.path).delete(f"id IN ({self._ids(4)})")


CDF = "delta.enableChangeDataFeed"


def tuples(path: str) -> list[tuple]:
    """The table's rows in no order (NULL regions do not sort)."""
    return [tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]


def per_region(rows: list[tuple]) -> dict:
    """The oracle: per region (NULL too), COUNT(*), COUNT(balance), SUM(balance), MIN(balance),
    MAX(balance), COUNT(DISTINCT balance), the sum of the positive balances and the largest
    negative one."""
    groups: dict = {}
    for _, region, balance in rows:
        groups.setdefault(region, []).append(balance)
    out = {}
    for region, balances in groups.items():
        present = [b for b in balances if b is not None]
        total = sum(present) if present else None
        low, high = (min(present), max(present)) if present else (None, None)
        credit = [b for b in present if b > 0]
        debt = [b for b in present if b < 0]
        out[region] = (
            len(balances),
            len(present),
            total,
            low,
            high,
            len(set(present)),
            sum(credit) if credit else None,
            max(debt) if debt else None,
        )
    return out


class TestRandomChangeFeed:
    """Four rounds of random changes, a `dbt run` after each: the retracting aggregate equals
    the aggregate over the source's current rows, the streaming_view's change rows replay to
    those rows (additions less removals, as multisets), and snapshot_equivalence passes for
    both."""

    @pytest.fixture(scope="class")
    def models(self):
        agg = (
            "SELECT region, COUNT(*) AS n, COUNT(balance) AS nb, SUM(balance) AS total, "
            "MIN(balance) AS low, MAX(balance), COUNT(DISTINCT balance) AS distinct_balances, "
            "SUM(balance) FILTER (WHERE balance > 0) AS credit, "
            "MAX(DISTINCT balance) FILTER (WHERE balance < 0) AS smallest_debt "
            "FROM {{ source('raw', 'accounts') }} GROUP BY region"
        )
        config = "materialized='upsert_table', constant_domain=['region'], read_change_feed=true"
        return equivalence_project(
            CDC_SOURCES,
            {
                "agg": f"{{{{ config({config}) }}}}\n{agg}",
                "feed": "{{ config(materialized='streaming_view', read_change_feed=true) }}\n"
                "SELECT * FROM {{ source('raw', 'accounts') }}",
            },
        )

    def test_random_rounds(self, project):
        source = table_path(project, "accounts")
        changing = ChangingAccounts(source, seed=11)
        previous, retracted = {}, False
        for _ in range(4):
            changing.round()
            run_dbt(["run"])
            current = tuples(source)
            expected = per_region(current)
            got = {r[0]: r[1:] for r in tuples(table_path(project, "agg"))}
            assert set(got) == set(expected)
            assert got == expected  # exact: sums of quarters (ChangingAccounts._balance)
            columns = DeltaTable(table_path(project, "agg")).schema().to_arrow().names
            assert "max(balance)" in columns  # named as Spark names it in batch
            # a MIN that rose or a MAX that fell: its value was retracted, the next one taken
            retracted |= any(
                None not in (v[3], previous[r][3])
                and (v[3] > previous[r][3] or v[4] < previous[r][4])
                for r, v in expected.items()
                if r in previous
            )
            previous = expected
            changes = tuples(table_path(project, "feed"))
            added = Counter(r[:3] for r in changes if r[3] in ("+I", "+U"))
            removed = Counter(r[:3] for r in changes if r[3] in ("-U", "-D"))
            assert not removed - added, "a change removed a row never added"
            assert added - removed == Counter(current)
            assert all(r.status == "pass" for r in run_dbt(["test"]))
        assert retracted
