"""Window Top-N and window deduplication (ROW_NUMBER(), RANK() or DENSE_RANK() OVER (PARTITION
BY window_start, window_end ...) filtered by the rank) over TUMBLE, HOP and CUMULATE rows and
over window aggregates, through `dbt run`.

The first class runs the window Top-N example of Flink's documentation (docs/dev/table/sql/
queries/window-topn.md: the top 3 suppliers by SUM(price) per 10-minute window; FLIP-145
describes window Top-N but has no example table) and a RANK over the same bids, in batch and in
streaming, with a late row. The others append a seeded random event stream, out of order within
the watermark delay, in several Delta versions with `dbt run` after each: after every run each
streaming_view table equals the same query run by Spark in batch over all rows appended so far,
restricted to the windows the watermark has closed, and the snapshot_equivalence test passes;
at the end, the tables also equal Spark's own ROW_NUMBER / RANK / DENSE_RANK in batch."""

from datetime import timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, equivalence_project, rows, table_path, ts
from .test_window_tvfs import CONFIG, EV, SOURCES, check_runs

TUMBLE = f"TUMBLE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '5' MINUTES)"
HOP = f"HOP(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '4' MINUTES)"
CUMULATE = (
    f"CUMULATE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES, "
    "INTERVAL '-3' MINUTES)"
)
# Per model: the query and which of its rows the stream has emitted given the watermark (a
# window when its end <= the watermark; CUMULATE windows with their max window, at
# window_start + max size). Ties in the ORDER BY keys of ROW_NUMBER are broken by ts (unique) so
# that ROW_NUMBER is deterministic.
MODELS = {
    "tumble_top2": (
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k "
        f"ORDER BY v DESC, ts) AS rownum FROM TABLE({TUMBLE})) WHERE rownum <= 2",
        lambda r, wm: r[4] <= wm,
    ),
    "hop_first": (
        "SELECT ts, k, v, window_start, window_end, rn "
        "FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
        f"window_start, window_end, k ORDER BY ts ASC) AS rn FROM TABLE({HOP})) WHERE rn = 1",
        lambda r, wm: r[4] <= wm,
    ),
    "cumulate_last": (
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY ts DESC) AS rownum FROM TABLE({CUMULATE})) WHERE rownum < 2",
        lambda r, wm: r[4] <= wm,
    ),
}


class TestWindowTopN:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, {n: CONFIG + sql for n, (sql, _) in MODELS.items()})

    def test_stream_equals_batch_on_closed_windows(self, project):
        tables = check_runs(project, MODELS, seed=11)
        # Top-N keeps at most N rows per group, and rownum counts from 1.
        assert {r[-1] for r in tables["tumble_top2"]} == {1, 2}
        assert {r[-1] for r in tables["cumulate_last"]} == {1}


# --- Flink's window Top-N example, exactly.

BID = "{{ source('raw', 'bid') }}"
BID_SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: bid}]
"""
BID_CONFIG = (
    "{{ config(materialized='streaming_view', watermark_delay='1 second') }}\n"  # as Flink's Bid
)
FLINK_TOP3 = f"""
SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) \
as rownum
    FROM (
      SELECT window_start, window_end, supplier_id, SUM(price) as price, COUNT(*) as cnt
      FROM TABLE(
        TUMBLE(TABLE {BID}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
      GROUP BY window_start, window_end, supplier_id
    )
  ) WHERE rownum <= 3
"""
# The documentation's second example (Top-N over the TVF's rows) by RANK: A and C tie at 4.00
# and share rank 2, where ROW_NUMBER would pick one of them at random for rank 3.
RANK_TOP3 = f"""
SELECT bidtime, price, item, supplier_id, window_start, window_end, rownum
  FROM (
    SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM TABLE(
               TUMBLE(TABLE {BID}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  ) WHERE rownum <= 3
"""
FLINK_BIDS = [
    ("08:05", "4.00", "A", "supplier1"),
    ("08:06", "4.00", "C", "supplier2"),
    ("08:07", "2.00", "G", "supplier1"),
    ("08:08", "2.00", "B", "supplier3"),
    ("08:09", "5.00", "D", "supplier4"),
    ("08:11", "2.00", "B", "supplier3"),
    ("08:13", "1.00", "E", "supplier1"),
    ("08:15", "3.00", "H", "supplier2"),
    ("08:17", "6.00", "F", "supplier5"),
]


def arrow_rows(sql: str) -> list[tuple]:
    """Rows of a batch query, sorted (through Arrow: timestamps come back in UTC, as delta-rs
    reads them)."""
    return sorted(tuple(r.values()) for r in get_spark().sql(sql).toArrow().to_pylist())


def at(hm: str):
    return ts(f"2020-04-15 {hm}:00")


def window(start: str):
    return at(start), at(start) + timedelta(minutes=10)


# The example's result table, as Flink's documentation prints it.
FLINK_TOP3_RESULT = sorted(
    [
        (*window("08:00"), "supplier1", Decimal("6.00"), 2, 1),
        (*window("08:00"), "supplier4", Decimal("5.00"), 1, 2),
        (*window("08:00"), "supplier2", Decimal("4.00"), 1, 3),
        (*window("08:10"), "supplier5", Decimal("6.00"), 1, 1),
        (*window("08:10"), "supplier2", Decimal("3.00"), 1, 2),
        (*window("08:10"), "supplier3", Decimal("2.00"), 1, 3),
    ]
)
RANK_TOP3_RESULT = sorted(
    [
        (at("08:09"), Decimal("5.00"), "D", "supplier4", *window("08:00"), 1),
        (at("08:05"), Decimal("4.00"), "A", "supplier1", *window("08:00"), 2),
        (at("08:06"), Decimal("4.00"), "C", "supplier2", *window("08:00"), 2),
        (at("08:17"), Decimal("6.00"), "F", "supplier5", *window("08:10"), 1),
        (at("08:15"), Decimal("3.00"), "H", "supplier2", *window("08:10"), 2),
        (at("08:11"), Decimal("2.00"), "B", "supplier3", *window("08:10"), 3),
    ]
)


def append_bids(path: str, bids: list[tuple]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "bidtime": pa.array([at(b[0]) for b in bids], pa.timestamp("us", tz="UTC")),
                "price": pa.array([Decimal(b[1]) for b in bids], pa.decimal128(10, 2)),
                "item": pa.array([b[2] for b in bids]),
                "supplier_id": pa.array([b[3] for b in bids]),
            }
        ),
        mode="append",
    )


class TestFlinkWindowTopNExample:
    @pytest.fixture(scope="class")
    def models(self):
        tests = "models:\n" + "".join(
            f"  - {{name: {n}, data_tests: [snapshot_equivalence]}}\n"
            for n in ("flink_top3", "rank_top3")
        )
        return {
            "sources.yml": BID_SOURCES,
            "tests.yml": tests,
            "flink_top3.sql": BID_CONFIG + FLINK_TOP3,
            "rank_top3.sql": BID_CONFIG + RANK_TOP3,
        }

    def test_example_rows_batch_and_stream(self, project):
        source = table_path(project, "bid")
        append_bids(source, FLINK_BIDS)
        # Batch: exactly the documentation's table.
        name = f"{project.test_schema}.bid"
        get_spark().createDataFrame(DeltaTable(source).to_pyarrow_table()).createOrReplaceTempView(
            "topn_bid"
        )
        for sql, expected in ((FLINK_TOP3, FLINK_TOP3_RESULT), (RANK_TOP3, RANK_TOP3_RESULT)):
            plan = compile_query(
                sql.replace(BID, name),
                watermark_delay="1 second",
                schemas={
                    name: {
                        "bidtime": "timestamp",
                        "price": "decimal(10,2)",
                        "item": "string",
                        "supplier_id": "string",
                    }
                },
            )
            assert arrow_rows(plan.sql_for({name: "topn_bid"})) == expected

        # Run 1: the watermark is 08:17 - 1 second: the first window is closed, the second is not.
        results = run_dbt(["run"])
        assert {
            r.node.name: (r.adapter_response["watermark"], r.adapter_response["late_rows"])
            for r in results
        } == {n: ("2020-04-15T08:16:59.000Z", 0) for n in ("flink_top3", "rank_top3")}
        top3, rank3 = table_path(project, "flink_top3"), table_path(project, "rank_top3")
        assert rows(top3) == FLINK_TOP3_RESULT[:3] and rows(rank3) == RANK_TOP3_RESULT[:3]
        # State: the open window's 4 suppliers (the Top-N's state is empty between batches) and
        # the open window's rows (one group) for the RANK.
        assert {r.node.name: r.adapter_response["state_rows"] for r in results} == {
            "flink_top3": 4,
            "rank_top3": 1,
        }
        run_dbt(["test"])

        # Run 2: a bid at 08:21 moves the watermark past 08:20 and closes the second window (the
        # bid's own window stays open): the tables are now exactly the results above.
        append_bids(source, [("08:21", "1.00", "X", "supplier9")])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["state_rows"] for r in results} == {
            "flink_top3": 1,
            "rank_top3": 1,
        }
        assert rows(top3) == FLINK_TOP3_RESULT and rows(rank3) == RANK_TOP3_RESULT
        run_dbt(["test"])

        # Run 3: a bid for the closed first window is late (it would have been the top
        # supplier): dropped and counted; snapshot_equivalence drops it too.
        append_bids(source, [("08:09", "100.00", "Y", "supplier9")])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            "flink_top3": 1,
            "rank_top3": 1,
        }
        assert rows(top3) == FLINK_TOP3_RESULT and rows(rank3) == RANK_TOP3_RESULT
        assert commits(top3)[-1]["watermark_ms"] == at("08:20").timestamp() * 1000 + 59_000
        run_dbt(["test"])


# --- Top-N over window aggregates, and RANK / DENSE_RANK, on random data.

AGG = (
    "SELECT window_start, window_end, k, SUM(v) AS total, COUNT(*) AS n FROM TABLE({}) "
    "GROUP BY window_start, window_end, k"
)
RANKED = {
    "tumble_agg_top2": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY window_start, window_end ORDER BY total DESC, k) "
        f"AS rownum FROM ({AGG.format(TUMBLE)})) WHERE rownum <= 2",
        lambda r, wm: r[1] <= wm,
    ),
    "hop_agg_rank": (
        "SELECT * FROM (SELECT *, RANK() OVER "
        "(PARTITION BY window_start, window_end ORDER BY n DESC) "
        f"AS rownum FROM ({AGG.format(HOP)})) WHERE rownum <= 2",
        lambda r, wm: r[1] <= wm,
    ),
    "cumulate_agg_dense": (
        "SELECT window_start, window_end, k, n, rownum "
        "FROM (SELECT *, DENSE_RANK() OVER (PARTITION BY "
        f"window_start, window_end ORDER BY n) AS rownum FROM ({AGG.format(CUMULATE)})) "
        "WHERE rownum <= 1",
        lambda r, wm: r[1] <= wm,
    ),
    "tumble_rank": (
        "SELECT * FROM (SELECT *, RANK() OVER "
        "(PARTITION BY window_start, window_end, k ORDER BY v % 10 DESC) "
        f"AS rownum FROM TABLE({TUMBLE})) WHERE rownum <= 2",
        lambda r, wm: r[4] <= wm,
    ),
    "hop_dense_rank": (
        "SELECT * FROM (SELECT *, DENSE_RANK() OVER "
        "(PARTITION BY window_start, window_end ORDER BY v % 5) "
        f"AS rownum FROM TABLE({HOP})) WHERE rownum BETWEEN 1 AND 2",
        lambda r, wm: r[4] <= wm,
    ),
}


def native(schema: str, sql: str) -> str:
    """The model's query for Spark in batch over the view `window_tvfs_ev`, with Spark's own
    ranking functions: each TVF becomes the (stateless, Flink-checked) rewrite of its rows."""
    name = f"{schema}.ev"
    for tvf in (TUMBLE, HOP, CUMULATE):
        rows_sql = compile_query(
            f"SELECT * FROM TABLE({tvf})".replace(EV, name),
            watermark_delay="2 minutes",
            schemas={name: {"ts": "timestamp", "k": "string", "v": "bigint"}},
        )
        sql = sql.replace(f"TABLE({tvf})", f"({rows_sql.sql_for({name: 'window_tvfs_ev'})})")
    return sql


class TestWindowTopNOverAggregatesAndRanks:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, {n: CONFIG + sql for n, (sql, _) in RANKED.items()})

    def test_stream_equals_batch_on_closed_windows(self, project):
        tables = check_runs(project, RANKED, seed=5)
        # Spark's own ROW_NUMBER / RANK / DENSE_RANK in batch agree on the closed windows.
        for name, (sql, closed) in RANKED.items():
            watermark_ms = commits(table_path(project, name))[-1]["watermark_ms"]
            wm = ts("1970-01-01 00:00:00") + timedelta(milliseconds=watermark_ms)
            expected = arrow_rows(native(project.test_schema, sql))
            assert tables[name] == [r for r in expected if closed(r, wm)], name
        # Ties share a rank: some groups keep more than N rows, and ranks skip after ties.
        assert (
            max(
                sum(1 for s in tables["tumble_rank"] if s[3:5] == r[3:5] and s[1] == r[1])
                for r in tables["tumble_rank"]
            )
            > 2
        )
        assert {r[-1] for r in tables["hop_dense_rank"]} == {1, 2}
        assert {r[-1] for r in tables["tumble_agg_top2"]} == {1, 2}
