"""Window joins through `dbt run`.

The first class runs the window join example of Flink's documentation (docs/dev/table/sql/
queries/window-join.md: LeftTable / RightTable, FULL JOIN on 5-minute TUMBLE windows; FLIP-145
describes window joins but has no example table) and pins Spark's rule for a streaming window
join (sql/oracle.py) with hand-computed rows. The second class joins seeded random streams,
out of order within the watermark delay, appended over several `dbt run`s: after every run
each table equals the same query run by Spark in batch over all rows so far, restricted to
the rows the stream has emitted (matched pairs at once; unmatched rows of an outer join when
their window closes), and snapshot_equivalence passes. The last classes join window aggregates
(FLIP-145's cumulative example): hand-made rows, random out-of-order orders over three runs
against the batch query on closed windows, with the window Top-N over the join as a CTE or a
subquery, and the example itself verbatim (CUMULATE 10 minutes / 1 hour, Top-3)."""

import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, equivalence_tests, table_path, ts

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: lt}, {name: rt}]
"""
LT, RT = "{{ source('raw', 'lt') }}", "{{ source('raw', 'rt') }}"
COLUMNS = {"row_time": "timestamp", "num": "bigint", "id": "string"}


def append(path: str, events: list[tuple]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "row_time": pa.array([e[0] for e in events], pa.timestamp("us", tz="UTC")),
                "num": pa.array([e[1] for e in events], pa.int64()),
                "id": pa.array([e[2] for e in events]),
            }
        ),
        mode="append",
    )


def batch_rows(schema: str, sql: str, views: dict) -> list[tuple]:
    """The model's query run by Spark in batch over the views `views` (source -> view)."""
    names = {LT: f"{schema}.lt", RT: f"{schema}.rt"}
    for jinja, name in names.items():
        sql = sql.replace(jinja, name)
    plan = compile_query(
        sql, schemas={n: COLUMNS for n in names.values()}, watermark_delay="1 minute"
    )
    table = get_spark().sql(plan.sql_for({names[k]: v for k, v in views.items()})).toArrow()
    return by_str(tuple(r.values()) for r in table.to_pylist())


def rows(path: str) -> list[tuple]:
    """All rows of the Delta table at `path` (NULLs and all), sorted by their text."""
    return by_str(tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def by_str(values) -> list:
    return sorted(values, key=str)


def bind_sources(project) -> dict:
    """Temp views of the two sources' current rows, for batch_rows."""
    views = {}
    for src, name in ((LT, "lt"), (RT, "rt")):
        view = f"window_join_{name}"
        get_spark().createDataFrame(
            DeltaTable(table_path(project, name)).to_pyarrow_table()
        ).createOrReplaceTempView(view)
        views[src] = view
    return views


# --- Flink's window join example, exactly.

CONFIG = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }}\n"
TUMBLE5 = "TABLE(TUMBLE(TABLE {t}, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
FLINK_FULL = f"""
SELECT L.num AS l_num, L.id AS l_id, R.num AS r_num, R.id AS r_id,
       COALESCE(L.window_start, R.window_start) AS window_start, COALESCE(L.window_end, \
R.window_end) AS window_end
FROM (SELECT * FROM {TUMBLE5.format(t=LT)}) L
FULL JOIN (SELECT * FROM {TUMBLE5.format(t=RT)}) R
ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end
"""
# The same window join with the TVFs directly in FROM / JOIN, LEFT, and a condition on the left
# input only: Spark emits a left row failing it at once (it can never match), with NULLs.
DIRECT_LEFT = f"""
SELECT L.num AS l_num, L.id AS l_id, R.num AS r_num, R.id AS r_id, L.window_start, L.window_end
FROM {TUMBLE5.format(t=LT)} AS L
LEFT JOIN {TUMBLE5.format(t=RT)} AS R
ON L.window_start = R.window_start AND L.num = R.num AND L.window_end = R.window_end \
AND L.id <> 'L1'
"""
# RIGHT, with a condition on the right input only: R4 fails it and is emitted at once.
DIRECT_RIGHT = f"""
SELECT L.num AS l_num, L.id AS l_id, R.num AS r_num, R.id AS r_id, R.window_start, R.window_end
FROM {TUMBLE5.format(t=LT)} AS L
RIGHT JOIN {TUMBLE5.format(t=RT)} AS R
ON L.window_start = R.window_start AND L.num = R.num AND L.window_end = R.window_end \
AND R.id <> 'R4'
"""
FLINK_LEFT = [("12:02", 1, "L1"), ("12:06", 2, "L2"), ("12:03", 3, "L3")]
FLINK_RIGHT = [("12:01", 2, "R2"), ("12:04", 3, "R3"), ("12:05", 4, "R4")]


def at(hm: str) -> datetime:
    return ts(f"2020-04-15 {hm}" + (":00" if hm.count(":") == 1 else ""))


def row(l_num, l_id, r_num, r_id, start):
    return (l_num, l_id, r_num, r_id, at(start), at(start) + timedelta(minutes=5))


# The example's result table, as Flink's documentation prints it.
FLINK_RESULT = sorted(
    [
        row(1, "L1", None, None, "12:00"),
        row(None, None, 2, "R2", "12:00"),
        row(3, "L3", 3, "R3", "12:00"),
        row(2, "L2", None, None, "12:05"),
        row(None, None, 4, "R4", "12:05"),
    ],
    key=str,
)


class TestFlinkWindowJoinExample:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "tests.yml": equivalence_tests(["flink_full", "direct_left", "direct_right"]),
            "flink_full.sql": CONFIG + FLINK_FULL,
            "direct_left.sql": CONFIG + DIRECT_LEFT,
            "direct_right.sql": CONFIG + DIRECT_RIGHT,
        }

    def test_example_rows_batch_and_stream(self, project):
        lt, rt = table_path(project, "lt"), table_path(project, "rt")
        append(lt, [(at(t), n, i) for t, n, i in FLINK_LEFT])
        append(rt, [(at(t), n, i) for t, n, i in FLINK_RIGHT])
        # Batch: exactly the documentation's table.
        assert (
            by_str(batch_rows(project.test_schema, FLINK_FULL, bind_sources(project)))
            == FLINK_RESULT
        )

        # Run 1: watermark min(12:06, 12:05) - 1 minute = 12:04; no window has closed. The
        # matched pair is emitted at once (Flink would wait for 12:05: same row, earlier);
        # L1 fails the left-only condition L.id <> 'L1', so it is emitted at once with NULLs.
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["watermark"] for r in results} == {
            n: "2020-04-15T12:04:00.000Z" for n in ("flink_full", "direct_left", "direct_right")
        }
        assert by_str(rows(table_path(project, "flink_full"))) == [row(3, "L3", 3, "R3", "12:00")]
        assert by_str(rows(table_path(project, "direct_left"))) == by_str(
            [row(1, "L1", None, None, "12:00"), row(3, "L3", 3, "R3", "12:00")]
        )
        assert by_str(rows(table_path(project, "direct_right"))) == by_str(
            [row(3, "L3", 3, "R3", "12:00"), row(None, None, 4, "R4", "12:05")]
        )
        run_dbt(["test"])

        # Run 2: rows with no partner move the watermark to min(12:11, 12:12) - 1 minute = 12:10,
        # which closes both windows: the stream table is now exactly the example's result.
        append(lt, [(at("12:11"), 10, "L10")])
        append(rt, [(at("12:12"), 11, "R11")])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["watermark"] for r in results}[
            "flink_full"
        ] == "2020-04-15T12:10:00.000Z"
        assert by_str(rows(table_path(project, "flink_full"))) == FLINK_RESULT
        assert by_str(rows(table_path(project, "direct_left"))) == by_str(
            [
                row(1, "L1", None, None, "12:00"),
                row(3, "L3", 3, "R3", "12:00"),
                row(2, "L2", None, None, "12:05"),
            ]
        )
        run_dbt(["test"])

        # A run that reads new rows from one input only does not move the watermark: Spark keeps
        # the per-input watermarks only while a query runs, and each `dbt run` restarts it, so an
        # input with no new rows counts as watermark 0 under the min policy (L20 stays open).
        append(lt, [(at("12:14"), 20, "L20")])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["watermark"] for r in results}[
            "flink_full"
        ] == "2020-04-15T12:10:00.000Z"
        assert by_str(rows(table_path(project, "flink_full"))) == FLINK_RESULT

        # Run 3, read at watermark 12:10: L2b (12:09, window end 12:10 <= 12:10) is dropped as
        # late; R10 (12:10:00, itself <= the watermark, but its window ends at 12:15) is kept
        # and joins L10 at once. Spark drops by window end, not by the row's own time.
        append(lt, [(at("12:09"), 2, "L2b")])
        append(rt, [(at("12:10"), 10, "R10")])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            "flink_full": 1,
            "direct_left": 1,
            "direct_right": 1,
        }
        assert by_str(rows(table_path(project, "direct_right"))) == by_str(
            [
                row(3, "L3", 3, "R3", "12:00"),
                row(None, None, 4, "R4", "12:05"),
                row(None, None, 2, "R2", "12:00"),
                row(10, "L10", 10, "R10", "12:10"),
            ]
        )
        assert by_str(rows(table_path(project, "flink_full"))) == by_str(
            FLINK_RESULT + [row(10, "L10", 10, "R10", "12:10")]
        )
        listed = run_dbt(["show", "--inline", "select * from {{ late_rows(ref('flink_full')) }}"])[
            0
        ].agate_table
        assert [
            (r["id"], r["window_end"].strftime("%H:%M"), r["batch_watermark"].strftime("%H:%M"))
            for r in listed
        ] == [("L2b", "12:10", "12:10")]
        run_dbt(["test"])


# --- Random out-of-order streams: INNER, LEFT, FULL over TUMBLE, HOP, CUMULATE.

DELAY = timedelta(minutes=2)
JOIN_CONFIG = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
SIDE = "TABLE({tvf}(TABLE {t}, DESCRIPTOR(row_time), {sizes}))"
ON = "ON L.id = R.id AND L.window_start = R.window_start AND L.window_end = R.window_end"
SELECT = (
    "SELECT L.num AS l_num, R.num AS r_num, COALESCE(L.id, R.id) AS id, "
    "COALESCE(L.window_start, R.window_start) AS window_start, "
    "COALESCE(L.window_end, R.window_end) AS window_end"
)
# Per model: its query and, given a result row (l_num, r_num, id, window_start, window_end) and
# the watermark, whether the stream has emitted it: matched pairs at once; unmatched rows when
# the watermark reaches the window's end or, for a row failing a condition on its own side
# only, at once.
T2 = "INTERVAL '2' MINUTES"
H13 = "INTERVAL '1' MINUTES, INTERVAL '3' MINUTES"
C14 = "INTERVAL '1' MINUTES, INTERVAL '4' MINUTES"
JOIN_MODELS = {
    "inner_tumble": (
        f"{SELECT} FROM {SIDE.format(tvf='TUMBLE', t=LT, sizes=T2)} L "
        f"JOIN {SIDE.format(tvf='TUMBLE', t=RT, sizes=T2)} R {ON} AND L.num < R.num + 30",
        lambda r, wm: True,
    ),
    "left_hop": (
        f"{SELECT} FROM (SELECT id, num, window_start, window_end FROM "
        f"{SIDE.format(tvf='HOP', t=LT, sizes=H13)} WHERE num % 5 != 0) L "
        f"LEFT JOIN {SIDE.format(tvf='HOP', t=RT, sizes=H13)} R {ON} AND L.num > 20",
        lambda r, wm: r[1] is not None or r[4] <= wm or r[0] <= 20,
    ),
    "full_cumulate": (
        f"{SELECT} FROM (SELECT * FROM {SIDE.format(tvf='CUMULATE', t=LT, sizes=C14)}) L "
        f"FULL OUTER JOIN (SELECT * FROM {SIDE.format(tvf='CUMULATE', t=RT, sizes=C14)}) R "
        f"{ON} AND L.num <= R.num + 50",
        lambda r, wm: (r[0] is not None and r[1] is not None) or r[4] <= wm,
    ),
    # not joins, but two more forms the README's construct table says run: GROUPING SETS of a
    # window aggregate (each window's sets when it closes) and a UNION ALL of two streams
    "grouping_sets": (
        "SELECT window_start, window_end, id, COUNT(*) AS n, SUM(num) AS total "
        f"FROM {SIDE.format(tvf='TUMBLE', t=LT, sizes=T2)} "
        "GROUP BY window_start, window_end, GROUPING SETS ((id), ())",
        lambda r, wm: r[1] <= wm,
    ),
    "union_all": (
        f"SELECT row_time, num, id FROM {LT} UNION ALL SELECT row_time, num, id FROM {RT}",
        lambda r, wm: True,
    ),
}
EPOCH = datetime(2020, 4, 15, 8, 0, tzinfo=timezone.utc)


def random_appends(seed: int, versions: int = 3, per_version: int = 30) -> list[list[tuple]]:
    """Random (row_time, num, id) events; each version covers the next ~8 minutes, shuffled, and
    may reach back to just after the previous versions' max time - DELAY, so events are out of
    order but never late (the join's watermark, the lower of the two inputs', is lower still)."""
    rng = random.Random(seed)
    out, high = [], EPOCH
    for i in range(versions):
        low = high - DELAY + timedelta(seconds=1) if i else EPOCH
        span = int((EPOCH + timedelta(minutes=8 * (i + 1)) - low).total_seconds())
        events = [
            (
                low + timedelta(seconds=rng.randrange(span), milliseconds=rng.randrange(1000)),
                rng.randrange(1, 100),
                rng.choice("abc"),
            )
            for _ in range(per_version)
        ]
        high = max(high, *(e[0] for e in events))
        out.append(events)
    return out


class TestRandomWindowJoins:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "tests.yml": equivalence_tests(JOIN_MODELS),
            **{f"{name}.sql": JOIN_CONFIG + sql for name, (sql, _) in JOIN_MODELS.items()},
        }

    def test_stream_equals_batch_on_emitted_rows(self, project):
        lt, rt = table_path(project, "lt"), table_path(project, "rt")
        sizes = {name: [] for name in JOIN_MODELS}
        for left, right in zip(random_appends(3), random_appends(4), strict=True):
            append(lt, left)
            append(rt, right)
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                n: 0 for n in JOIN_MODELS
            }
            views = bind_sources(project)
            for name, (sql, emitted) in JOIN_MODELS.items():
                path = table_path(project, name)
                watermark = datetime.fromtimestamp(
                    commits(path)[-1]["watermark_ms"] / 1000, timezone.utc
                )
                everything = batch_rows(project.test_schema, sql, views)
                expected = [r for r in everything if emitted(r, watermark)]
                assert by_str(rows(path)) == by_str(expected), name
                sizes[name].append((len(expected), len(everything)))
            assert len(run_dbt(["test"])) == len(JOIN_MODELS)
        # Every model emitted rows in every run; the outer joins still hold unmatched rows of
        # open windows, and emitted some unmatched rows of closed ones.
        assert all(0 < a[0] < b[0] < c[0] for a, b, c in sizes.values()), sizes
        assert all(sizes[n][-1][0] < sizes[n][-1][1] for n in ("left_hop", "full_cumulate")), sizes
        for name in ("left_hop", "full_cumulate"):
            assert any(None in r[:2] for r in rows(table_path(project, name))), name


# --- Window joins of window aggregates (FLIP-145's cumulative example, without its Top-N).

ORDER_SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: orders}]
"""
ORDERS = "{{ source('raw', 'orders') }}"
ORDER_COLUMNS = {
    "pay_time": "timestamp",
    "item_id": "string",
    "seller_id": "string",
    "price": "bigint",
    "user_id": "string",
}


def append_orders(path: str, events: list[tuple]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "pay_time": pa.array([e[0] for e in events], pa.timestamp("us", tz="UTC")),
                "item_id": pa.array([e[1] for e in events], pa.string()),
                "seller_id": pa.array([e[2] for e in events], pa.string()),
                "price": pa.array([e[3] for e in events], pa.int64()),
                "user_id": pa.array([e[4] for e in events], pa.string()),
            }
        ),
        mode="append",
    )


def order_batch_rows(project, sql: str, delay: str) -> list[tuple]:
    """The model's query run by Spark in batch over all rows of the orders source."""
    name = f"{project.test_schema}.orders"
    plan = compile_query(
        sql.replace(ORDERS, name), schemas={name: ORDER_COLUMNS}, watermark_delay=delay
    )
    get_spark().createDataFrame(
        DeltaTable(table_path(project, "orders")).to_pyarrow_table()
    ).createOrReplaceTempView("window_join_orders")
    table = get_spark().sql(plan.sql_for({name: "window_join_orders"})).toArrow()
    return by_str(tuple(r.values()) for r in table.to_pylist())


def aggregates_join(tvf: str, sizes: str, kind: str = "LEFT") -> str:
    """FLIP-145's example's view: per item and per seller window aggregates, window-joined."""
    side = f"TABLE({tvf}(TABLE {ORDERS}, DESCRIPTOR(pay_time), {sizes}))"
    seller, start, end = "a.seller_id", "a.window_start", "a.window_end"
    if kind == "FULL":
        seller, start, end = (
            f"COALESCE(a.{c}, b.{c}) AS {c}" for c in ("seller_id", "window_start", "window_end")
        )
    return f"""
SELECT a.item_id, {seller}, {start}, {end}, a.sales, a.item_buyer_cnt, b.slr_buyer_cnt
FROM (SELECT item_id, seller_id, window_start, window_end, SUM(price) AS sales, \
COUNT(DISTINCT user_id) AS item_buyer_cnt
      FROM {side} GROUP BY item_id, seller_id, window_start, window_end) a
{kind} JOIN (SELECT seller_id, window_start, window_end, COUNT(DISTINCT user_id) AS slr_buyer_cnt
      FROM {side} GROUP BY seller_id, window_start, window_end) b
ON a.seller_id = b.seller_id AND a.window_start = b.window_start AND a.window_end = b.window_end
"""


AGG_JOIN = aggregates_join("TUMBLE", "INTERVAL '10' MINUTES")


def top_n(view: str, n: int, cte: bool) -> str:
    """FLIP-145's window Top-N over the window join ``view``, as a CTE (as the example's
    temporary view) or a subquery."""
    ranked = (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY sales DESC, item_id, seller_id) AS rownum FROM {{}}) WHERE rownum <= {n}"
    )
    return (
        f"WITH trd_itm_ord_mm AS ({view})\n" + ranked.format("trd_itm_ord_mm")
        if cte
        else ranked.format(f"({view}) AS t")
    )


AGG_JOIN_TOP2 = top_n(AGG_JOIN, 2, cte=True)


def order_row(item, seller, start, sales, item_buyers, seller_buyers):
    return (
        item,
        seller,
        at(start),
        at(start) + timedelta(minutes=10),
        sales,
        item_buyers,
        seller_buyers,
    )


class TestWindowAggregatesJoin:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": ORDER_SOURCES,
            "tests.yml": equivalence_tests(["agg_join", "agg_join_top2"]),
            "agg_join.sql": CONFIG + AGG_JOIN,
            "agg_join_top2.sql": CONFIG + AGG_JOIN_TOP2,
        }

    def test_rows_when_windows_close(self, project):
        orders = table_path(project, "orders")
        append_orders(
            orders,
            [
                (at("08:01"), "i1", "s1", 10, "u1"),
                (at("08:02"), "i2", "s1", 5, "u2"),
                (at("08:03"), "i1", "s1", 2, "u2"),
                (at("08:04"), "i3", None, 7, "u3"),
                (at("08:12"), "i1", "s1", 1, "u1"),
            ],
        )
        first = [
            order_row("i1", "s1", "08:00", 12, 2, 2),
            order_row("i2", "s1", "08:00", 5, 1, 2),
            order_row("i3", None, "08:00", 7, 1, None),
        ]
        # Run 1, watermark 08:11: the 08:00 window closes in both aggregates and they join in
        # the same micro-batch; i3's NULL seller matches nothing and is emitted with NULLs.
        results = run_dbt(["run"])
        assert [r.adapter_response["watermark"] for r in results] == [
            "2020-04-15T08:11:00.000Z"
        ] * 2
        assert rows(table_path(project, "agg_join")) == by_str(first)
        # The Top-2 by sales of the joined rows (FLIP-145's Top-N over the join, as a CTE),
        # emitted in the same micro-batch.
        assert rows(table_path(project, "agg_join_top2")) == by_str(
            [first[0] + (1,), first[2] + (2,)]
        )
        run_dbt(["test"])
        # Run 2: 08:05 is late (its window ended at 08:10 <= 08:11) for both aggregates; 08:25
        # closes the 08:10 window.
        append_orders(
            orders, [(at("08:05"), "i2", "s1", 100, "u9"), (at("08:25"), "i2", "s2", 3, "u1")]
        )
        results = run_dbt(["run"])
        assert [r.adapter_response["late_rows"] for r in results] == [2, 2]
        assert rows(table_path(project, "agg_join")) == by_str(
            first + [order_row("i1", "s1", "08:10", 1, 1, 1)]
        )
        assert rows(table_path(project, "agg_join_top2")) == by_str(
            [first[0] + (1,), first[2] + (2,), order_row("i1", "s1", "08:10", 1, 1, 1) + (1,)]
        )
        run_dbt(["test"])


# Per model: its query and the end of the window of a result row.
AGG_JOIN_MODELS = {
    "inner_tumble_aggs": (aggregates_join("TUMBLE", T2, "INNER"), lambda r: r[3]),
    "left_cumulate_aggs": (aggregates_join("CUMULATE", C14), lambda r: r[3]),
    "full_hop_aggs": (aggregates_join("HOP", H13, "FULL"), lambda r: r[3]),
    # FLIP-145's example whole: the Top-3 over the LEFT join of CUMULATE aggregates, as a CTE;
    # and a Top-2 over an INNER join of TUMBLE aggregates, as a subquery.
    "top3_cumulate_cte": (
        top_n(aggregates_join("CUMULATE", C14), 3, cte=True),
        lambda r: r[3],
    ),
    "top2_tumble_subquery": (
        top_n(aggregates_join("TUMBLE", T2, "INNER"), 2, cte=False),
        lambda r: r[3],
    ),
}


def random_orders(seed: int) -> list[list[tuple]]:
    """random_appends' times, out of order but never late, as orders of 4 items by 2 sellers
    (or none) and 5 buyers."""
    rng = random.Random(seed)
    return [
        [
            (
                t,
                f"i{rng.randrange(4)}",
                rng.choice(["s1", "s2", "s2", None]),
                num,
                f"u{rng.randrange(5)}",
            )
            for t, num, _ in events
        ]
        for events in random_appends(seed, per_version=40)
    ]


class TestRandomWindowAggregatesJoins:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": ORDER_SOURCES,
            "tests.yml": equivalence_tests(AGG_JOIN_MODELS),
            **{f"{name}.sql": JOIN_CONFIG + sql for name, (sql, _) in AGG_JOIN_MODELS.items()},
        }

    def test_stream_equals_batch_on_closed_windows(self, project):
        orders = table_path(project, "orders")
        sizes = {name: [] for name in AGG_JOIN_MODELS}
        for events in random_orders(11):
            append_orders(orders, events)
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                n: 0 for n in AGG_JOIN_MODELS
            }
            for name, (sql, window_end) in AGG_JOIN_MODELS.items():
                path = table_path(project, name)
                watermark = datetime.fromtimestamp(
                    commits(path)[-1]["watermark_ms"] / 1000, timezone.utc
                )
                everything = order_batch_rows(project, sql, "2 minutes")
                expected = [r for r in everything if window_end(r) <= watermark]
                assert rows(path) == by_str(expected), name
                sizes[name].append((len(expected), len(everything)))
            assert len(run_dbt(["test"])) == len(AGG_JOIN_MODELS)
        # Every run closed windows, and the last left some open; outer joins kept NULL sellers.
        assert all(0 < a[0] < b[0] < c[0] < c[1] for a, b, c in sizes.values()), sizes
        for name in ("left_cumulate_aggs", "full_hop_aggs"):
            assert any(r[-1] is None for r in rows(table_path(project, name))), name


# --- FLIP-145's cumulative example verbatim (sizes as in the task: 10-minute steps of a 1-hour
# window), over orders whose items each belong to one seller (so item_id breaks sales ties).

FLIP145_EXAMPLE = f"""
WITH trd_itm_ord_mm AS (
  SELECT a.item_id, a.seller_id, a.window_start, a.window_end, a.sales, a.item_buyer_cnt, \
b.slr_buyer_cnt
  FROM (SELECT item_id, seller_id, window_start, window_end, SUM(price) AS sales, \
COUNT(DISTINCT user_id) AS item_buyer_cnt
        FROM TABLE(CUMULATE(TABLE {ORDERS}, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES, \
INTERVAL '1' HOUR))
        GROUP BY item_id, seller_id, window_start, window_end) a
  LEFT JOIN (SELECT seller_id, window_start, window_end, COUNT(DISTINCT user_id) AS slr_buyer_cnt
        FROM TABLE(CUMULATE(TABLE {ORDERS}, DESCRIPTOR(pay_time), INTERVAL '10' MINUTES, \
INTERVAL '1' HOUR))
        GROUP BY seller_id, window_start, window_end) b
  ON a.seller_id = b.seller_id AND a.window_start = b.window_start AND a.window_end = b.window_end
)
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
ORDER BY sales DESC, item_id) AS rownum
               FROM trd_itm_ord_mm) WHERE rownum <= 3
"""
SELLERS = {"i0": "s1", "i1": "s1", "i2": "s2", "i3": "s2", "i4": "s3", "i5": None}


def hourly_orders(seed: int, versions: int = 3, per_version: int = 60) -> list[list[tuple]]:
    """Orders over the next ~70 minutes per version, shuffled, reaching back to just after the
    previous versions' max time - 2 minutes (out of order, never late)."""
    rng = random.Random(seed)
    out, high = [], EPOCH
    for i in range(versions):
        low = high - DELAY + timedelta(seconds=1) if i else EPOCH
        span = int((EPOCH + timedelta(minutes=70 * (i + 1)) - low).total_seconds())
        events = []
        for _ in range(per_version):
            item = f"i{rng.randrange(6)}"
            events.append(
                (
                    low + timedelta(seconds=rng.randrange(span)),
                    item,
                    SELLERS[item],
                    rng.randrange(1, 100),
                    f"u{rng.randrange(8)}",
                )
            )
        high = max(high, *(e[0] for e in events))
        out.append(events)
    return out


class TestFlip145CumulativeExample:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": ORDER_SOURCES,
            "tests.yml": equivalence_tests(["item_top3_cumulate_10min"]),
            "item_top3_cumulate_10min.sql": JOIN_CONFIG + FLIP145_EXAMPLE,
        }

    def test_stream_equals_batch_on_closed_windows(self, project):
        orders, path = (
            table_path(project, "orders"),
            table_path(project, "item_top3_cumulate_10min"),
        )
        emitted, early = [], []
        for events in hourly_orders(5):
            append_orders(orders, events)
            results = run_dbt(["run"])
            assert results[0].adapter_response["late_rows"] == 0
            watermark = datetime.fromtimestamp(
                commits(path)[-1]["watermark_ms"] / 1000, timezone.utc
            )
            everything = order_batch_rows(project, FLIP145_EXAMPLE, "2 minutes")
            # Each cumulative window is emitted when the watermark passes its own end.
            expected = [r for r in everything if r[3] <= watermark]
            assert rows(path) == by_str(expected)
            assert len(run_dbt(["test"])) == 1
            emitted.append(len(expected))
            early.append(sum(r[2] + timedelta(hours=1) > watermark for r in expected))
        # Top-3 rows of the closed 10-minute steps (watermarks ~9:08, ~10:18, ~11:28), and those
        # of steps of the hour still open: 10:10 in run 2, 11:10 and 11:20 in run 3.
        assert (emitted, early) == ([18, 39, 60], [0, 3, 6]), (emitted, early)
        assert {r[-1] for r in rows(path)} == {1, 2, 3}
