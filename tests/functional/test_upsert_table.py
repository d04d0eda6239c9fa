"""upsert_table through `dbt run`: the click example of Flink's Streaming Concepts (table and
changelog exactly), then seeded random inserts over several runs for each updating shape. After
every run the table equals the query run by Spark in batch over all input so far, replaying the
changelog reproduces the table, and snapshot_equivalence passes."""

import random
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, equivalence_project, rows, table_path, ts
from .test_window_tvfs import append, appends

CLICKS = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: clicks}, {name: ev}]
"""


def changelog(path: str) -> list[tuple]:
    """The changelog's rows in commit order (deletes before upserts within a commit), without
    the `_restarted` flag of state_ttl models."""
    table = DeltaTable(f"{path}/_dbt_streaming/changelog").to_pyarrow_table()
    table = table.drop_columns([c for c in table.column_names if c == "_restarted"]).to_pylist()
    return sorted(
        (tuple(r.values()) for r in table), key=lambda r: (r[-1], r[-3] not in ("-U", "-D"), str(r))
    )


def replay(log: list[tuple], key=1) -> list[tuple]:
    """Apply a changelog (rows: columns..., _op, _batch_id, _commit_version) by its first
    `key` columns (or the column positions `key`): +I/+U upsert, -U/-D delete."""
    table: dict = {}
    for row in log:
        values, op = row[:-3], row[-3]
        k = values[:key] if isinstance(key, int) else tuple(values[i] for i in key)
        if op in ("-U", "-D"):
            assert table.pop(k) == values, f"{op} of a row the table does not hold: {row}"
        else:
            assert op == "+U" or k not in table, f"+I of a key already there: {row}"
            table[k] = values
    return sorted(table.values(), key=str)


def append_clicks(path: str, clicks: list[tuple[str, str, str]]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "user": pa.array([c[0] for c in clicks]),
                "cTime": pa.array([ts(c[1]) for c in clicks], pa.timestamp("us", tz="UTC")),
                "url": pa.array([c[2] for c in clicks]),
            }
        ),
        mode="append",
    )


class TestClicksExample:
    """Flink's Streaming Concepts, "Continuous Non-Windowed Query": one click per Delta version,
    `dbt run` after each."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": CLICKS,
            "tests.yml": (
                "models:\n  - {name: clicks_per_user, data_tests: [snapshot_equivalence]}\n"
            ),
            "clicks_per_user.sql": "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
            "SELECT user, COUNT(url) AS cnt FROM {{ source('raw', 'clicks') }} GROUP BY user",
        }

    def test_result_and_changelog(self, project):
        source, out = table_path(project, "clicks"), table_path(project, "clicks_per_user")
        clicks = [
            ("Mary", "2020-01-01 12:00:00", "./home"),
            ("Bob", "2020-01-01 12:00:00", "./cart"),
            ("Mary", "2020-01-01 12:00:05", "./prod?id=1"),
            ("Liz", "2020-01-01 12:01:00", "./home"),
        ]
        tables = []
        for click in clicks:
            append_clicks(source, [click])
            results = run_dbt(["run"])
            assert results[0].adapter_response["rows_written"] >= 1
            tables.append(rows(out))
        assert tables == [
            [("Mary", 1)],
            [("Bob", 1), ("Mary", 1)],
            [("Bob", 1), ("Mary", 2)],
            [("Bob", 1), ("Liz", 1), ("Mary", 2)],
        ]
        log = changelog(out)
        assert [(r[0], r[1], r[2]) for r in log] == [
            ("Mary", 1, "+I"),
            ("Bob", 1, "+I"),
            ("Mary", 1, "-U"),
            ("Mary", 2, "+U"),
            ("Liz", 1, "+I"),
        ]
        # _commit_version is the table version the change is in; _batch_id the Spark batch
        versions = [c["table_version"] for c in commits(out) if c["batch_id"] is not None]
        assert [r[-1] for r in log] == [
            versions[0],
            versions[1],
            versions[2],
            versions[2],
            versions[3],
        ]
        assert replay(log) == rows(out)
        assert run_dbt(["test"])[0].status == "pass"
        # the changelog is a relation of its own, and its upsert-stream view drops the -U rows
        upserts = (
            get_spark()
            .sql(
                f"SELECT user, cnt, _op FROM {project.test_schema}.clicks_per_user_changelog "
                "WHERE _op IN ('+I', '+U', '-D')"
            )
            .collect()
        )
        assert sorted(map(tuple, upserts)) == [
            ("Bob", 1, "+I"),
            ("Liz", 1, "+I"),
            ("Mary", 1, "+I"),
            ("Mary", 2, "+U"),
        ]
        # nothing new: nothing committed, nothing changed
        run_dbt(["run"])
        assert changelog(out) == log
        # tampering with the table (a value changed outside the stream) fails the test
        DeltaTable(out).update(updates={"cnt": "5"}, predicate="\"user\" = 'Mary'")
        results, shown = run_dbt_and_capture(["test"], expect_pass=False)
        assert results[0].failures == 2 and "1 missing, 1 unexpected" in shown
        assert "changed outside the stream" in shown and "(watermark none)" in shown
        DeltaTable(out).update(updates={"cnt": "2"}, predicate="\"user\" = 'Mary'")
        assert run_dbt(["test"])[0].status == "pass"
        # --full-refresh rebuilds the table and its changelog together, from the whole history
        run_dbt(["run", "--full-refresh"])
        assert rows(out) == [("Bob", 1), ("Liz", 1), ("Mary", 2)]
        assert sorted((r[0], r[1], r[2]) for r in changelog(out)) == [
            ("Bob", 1, "+I"),
            ("Liz", 1, "+I"),
            ("Mary", 2, "+I"),
        ]
        assert run_dbt(["test"])[0].status == "pass"


EV = "{{ source('raw', 'ev') }}"
TUMBLE = f"TABLE(TUMBLE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '5' MINUTES))"
WINDOWED = (
    f"SELECT window_start, window_end, k, SUM(v) AS total, COUNT(*) AS n FROM {TUMBLE} "
    "GROUP BY window_start, window_end, k"
)
# Per model: config, SQL, and its key: the number of leading columns, or their positions. The
# batch oracle is Spark running the SQL as written (window TVFs: the compiled query).
AGG_HAVING = (
    f"SELECT k, COUNT(*) AS n, SUM(v) AS total, MIN(v) AS lo, MAX(v) AS hi, AVG(v) AS mean, "
    f"COUNT(DISTINCT v % 7) AS d FROM {EV} GROUP BY k HAVING COUNT(*) BETWEEN 2 AND 12"
)
# Non-window aggregates keep their state in Spark (constant_domain) or as partials in Delta
# (state_ttl).
MODELS = {
    "agg_having": ("materialized='upsert_table', state_ttl='1 day'", AGG_HAVING, 1),
    "agg_having_spark": (  # MERGEd by Spark jobs (the others, small, in the dbt process)
        "materialized='upsert_table', constant_domain=['k'], driver_merge_max_rows=0",
        AGG_HAVING,
        1,
    ),
    "latest": (
        "materialized='upsert_table', constant_domain=['k']",
        "SELECT k, ts, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) "
        "AS rn "
        f"FROM {EV}) WHERE rn = 1",
        1,
    ),
    "first_big": (
        "materialized='upsert_table', state_ttl='1 day'",
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rownum "
        f"FROM {EV} WHERE v > 50) WHERE rownum = 1",
        1,
    ),
    "top3": (
        "materialized='upsert_table'",
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, ts) AS rn "
        f"FROM {EV}) "
        "WHERE rn <= 3",
        (1, 3),
    ),
    "top2_totals": (  # Top-N over an updating aggregate (sql/aggtopn.py)
        "materialized='upsert_table', state_ttl='1 day'",
        "SELECT * FROM (SELECT k, b, total, "
        "ROW_NUMBER() OVER (PARTITION BY k ORDER BY total DESC, b) AS rn "
        f"FROM (SELECT k, v % 3 AS b, SUM(v) AS total FROM {EV} GROUP BY k, v % 3)) WHERE rn <= 2",
        (0, 3),
    ),
    "early_windows": (
        "materialized='upsert_table', watermark_delay='2 minutes', emit={'early': true}",
        WINDOWED,
        3,
    ),
    "final_windows": ("materialized='upsert_table', watermark_delay='2 minutes'", WINDOWED, 3),
}


def batch_rows(schema: str, name: str, watermark: datetime) -> list[tuple]:
    """The model's query in batch over the view `upsert_ev` (all source rows): Spark runs the SQL
    as written, except window TVFs, which run compiled (final windows: those closed)."""
    config, sql, _ = MODELS[name]
    sql = sql.replace(EV, "upsert_ev")
    if "TUMBLE" in sql:
        plan = compile_query(
            sql,
            schemas={"upsert_ev": {"ts": "timestamp", "k": "string", "v": "bigint"}},
            watermark_delay="2 minutes",
        )
        sql = plan.sql_for({})
        if "early" not in config:
            sql = (
                f"SELECT * FROM ({sql}) "
                f"WHERE window_end <= TIMESTAMP '{watermark:%Y-%m-%d %H:%M:%S.%f}'"
            )
    table = get_spark().sql(sql).toArrow()
    return sorted(tuple(r.values()) for r in table.to_pylist())


class TestUpsertShapes:
    @pytest.fixture(scope="class")
    def models(self):
        models = {n: f"{{{{ config({c}) }}}}\n{sql}" for n, (c, sql, _) in MODELS.items()}
        return equivalence_project(CLICKS, models)

    def test_table_equals_batch_and_changelog_replays_it(self, project):
        source = table_path(project, "ev")
        ops = {name: set() for name in MODELS}
        # random events over 8 keys, 4 versions of ~6 minutes, out of order but never late
        for events in appends(seed=5, versions=4, keys="abcdefgh", minutes=6):
            append(source, events)
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                n: 0 for n in MODELS
            }
            get_spark().createDataFrame(
                DeltaTable(source).to_pyarrow_table()
            ).createOrReplaceTempView("upsert_ev")
            for name, (_, _, keys) in MODELS.items():
                path = table_path(project, name)
                watermark = datetime.fromtimestamp(
                    commits(path)[-1]["watermark_ms"] / 1000, timezone.utc
                )
                assert rows(path) == batch_rows(project.test_schema, name, watermark), name
                log = changelog(path)
                assert replay(log, keys) == sorted(rows(path), key=str), name
                ops[name] |= {r[-3] for r in log}
            assert len(run_dbt(["test"])) == len(MODELS)
        # every kind of change happened where the shape makes it possible
        assert ops["agg_having"] == ops["agg_having_spark"] == {"+I", "-U", "+U", "-D"}
        assert ops["latest"] == ops["early_windows"] == ops["top3"] == {"+I", "-U", "+U"}
        assert ops["top2_totals"] == {"+I", "-U", "+U"}  # a row leaving the top 2: -U/+U
        assert ops["final_windows"] == {"+I"}


UPSERT_MODEL = """
{{ config(materialized='upsert_table', CONFIG) }}
SELECT item, COUNT(*) AS n, ROUND(SUM(price), 2) AS total, MAX(ts) AS last_ts
FROM {{ source('feed', 'events') }} GROUP BY item HAVING COUNT(*) < 300 OR item = 'a'
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,config",
    [
        pytest.param("during_write@1", "state_ttl='1 day'", marks=pytest.mark.full),
        ("after_delta_commit@1", "state_ttl='1 day'"),
        pytest.param(  # the sink's side of it: test_upsert_commit.py, both paths
            "after_delta_commit@1",
            "constant_domain=['item'], driver_merge_max_rows=0",
            marks=pytest.mark.full,
        ),
    ],
)
def test_crash_then_rerun(tmp_path, fault, config):
    """`dbt run` killed at each point of an upsert batch (during_write: the changelog committed,
    the table not; after_delta_commit: the table committed, a state_ttl model's partials not),
    then run again after one more append: the table equals the batch query over all input,
    each change is logged once, and the changelog replays to the table."""
    from dbt.adapters.spark_streaming.faults import EXIT_CODE

    from .test_exactly_once import dbt_run, events, write_project

    write_project(tmp_path, UPSERT_MODEL.replace("CONFIG", config))
    project, source = str(tmp_path / "project"), str(tmp_path / "feed" / "events")
    out = str(tmp_path / "warehouse" / "crash" / "per_item")
    write_deltalake(source, events(1, 0))
    assert dbt_run(project).returncode == 0
    write_deltalake(source, events(2, 20), mode="append")
    crashed = dbt_run(project, fault)
    assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
    write_deltalake(source, events(3, 40), mode="append")
    rerun = dbt_run(project)
    assert rerun.returncode == 0, rerun.stdout[-3000:]

    batch_ids = [m["batch_id"] for m in commits(out) if m["batch_id"] is not None]
    assert batch_ids == [0, 1, 2]
    df = DeltaTable(source).to_pandas()
    g = (
        df.groupby("item")
        .agg(n=("price", "size"), total=("price", "sum"), last_ts=("ts", "max"))
        .reset_index()
    )
    g = g[(g["n"] < 300) | (g["item"] == "a")]
    expected = sorted(
        (r.item, r.n, round(r.total, 2), r.last_ts.to_pydatetime()) for r in g.itertuples()
    )
    actual = rows(out)
    assert [(r[0], r[1], r[3]) for r in actual] == [(e[0], e[1], e[3]) for e in expected]
    assert all(abs(a[2] - e[2]) < 1e-6 for a, e in zip(actual, expected, strict=True))
    log = changelog(out)
    assert len({(r[0], r[-3], r[-2]) for r in log}) == len(log), "a change was logged twice"
    assert {r[-2] for r in log} == {0, 1, 2}
    assert replay(log) == sorted(actual, key=str)
    # events(...) gives ~133 rows per item and version: b and c passed 300 and were deleted
    assert [r[0] for r in actual] == ["a"] and {r[-3] for r in log} == {"+I", "-U", "+U", "-D"}


EXTREMA = (
    "SELECT cnt, MIN(user) AS first_user, MAX(user), MAX(last_click) AS latest, "
    "COUNT(DISTINCT user) AS users FROM {per_user} GROUP BY cnt"
)


class TestPipelineOfUpsertTables:
    """Flink's "Relational Queries on Data Streams", a pipeline of dynamic tables: clicks -> clicks
    per user (upsert_table) -> users per click count (an upsert_table over it, from its changelog
    with retractions applied). Random clicks over several runs; after each, the downstream table
    equals its SQL run in batch over the upstream table, and the changelogs replay."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": CLICKS,
            "tests.yml": "models:\n"
            + "".join(
                f"  - {{name: {n}, data_tests: [snapshot_equivalence]}}\n"
                for n in ("per_user", "per_count", "extrema")
            ),
            "per_user.sql": (
                "{{ config(materialized='upsert_table', state_ttl='1 day') }}\n"
                "SELECT user, COUNT(url) AS cnt, "
                "MAX(cTime) AS last_click FROM {{ source('raw', 'clicks') }} GROUP BY user"
            ),
            "per_count.sql": (
                "{{ config(materialized='upsert_table', constant_domain=['cnt']) }}\n"
                "SELECT cnt, COUNT(*) AS users, "
                "SUM(cnt) AS clicks, AVG(cnt) AS mean FROM {{ ref('per_user') }} WHERE cnt < 6 "
                "GROUP BY cnt HAVING COUNT(*) >= 1"
            ),
            # MIN, MAX and COUNT(DISTINCT) under retraction: a count per value, in Delta
            "extrema.sql": (
                "{{ config(materialized='upsert_table', constant_domain=['cnt']) }}\n"
                + EXTREMA.format(per_user="{{ ref('per_user') }}")
            ),
            "bad_view.sql": (
                "{{ config(materialized='streaming_view') }}\n"
                "SELECT user FROM {{ ref('per_user') }}"
            ),
        }

    def test_downstream_follows_upstream_changes(self, project):
        source, schema = table_path(project, "clicks"), project.test_schema
        rng = random.Random(3)
        ops = set()
        for run in range(4):
            append_clicks(
                source,
                [
                    (
                        rng.choice("ABCDEF"),
                        f"2020-01-01 12:0{run}:{rng.randrange(60):02d}",
                        f"./{i}",
                    )
                    for i in range(rng.randrange(3, 8))
                ],
            )
            results, shown = run_dbt_and_capture(["run"], expect_pass=False)
            status = {r.node.name: r.status for r in results}
            assert status["per_user"] == status["per_count"] == "success"
            assert (
                status["bad_view"] == "error"
                and "SSV140" in shown
                and f"{schema}.per_user" in shown
            )
            expected = (
                get_spark()
                .sql(
                    "SELECT cnt, COUNT(*) AS users, SUM(cnt) AS clicks, AVG(cnt) AS mean "
                    f"FROM {schema}.per_user "
                    "WHERE cnt < 6 GROUP BY cnt"
                )
                .toArrow()
                .to_pylist()
            )
            path = table_path(project, "per_count")
            assert rows(path) == sorted(tuple(r.values()) for r in expected)
            log = changelog(path)
            assert replay(log) == sorted(rows(path), key=str)
            ops |= {r[-3] for r in log}
            batch = get_spark().sql(EXTREMA.format(per_user=f"{schema}.per_user"))
            assert rows(table_path(project, "extrema")) == sorted(
                tuple(r.values()) for r in batch.toArrow().to_pylist()
            )
            assert DeltaTable(table_path(project, "extrema")).schema().to_arrow().names == (
                batch.columns
            )
            tested = run_dbt(["test", "-s", "per_user", "per_count", "extrema"])
            assert [r.status for r in tested] == ["pass"] * 3
        assert ops == {"+I", "-U", "+U", "-D"}  # counts move between buckets; emptied buckets go
