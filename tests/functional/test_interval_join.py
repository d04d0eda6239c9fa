"""Interval joins through `dbt run` (Calcite's "shipped within 1 hour": orders joined with the
shipments that follow them within an hour), inner and LEFT / RIGHT / FULL OUTER, in the spellings
users paste (BETWEEN, `>= / <=`, `s.ts - INTERVAL ...`), and window SEMI / ANTI joins (FLIP-145:
IN / NOT EXISTS over two window TVFs) of the same streams. One project, one class.

The first test runs hand-made orders and shipments over two appends and checks every table
against hand-computed rows, pinning Spark's rule (sql/oracle.py): matched pairs at once, late rows
dropped, an unmatched row emitted once the watermark passes its time bound (left: order time +
1 hour, Spark's state threshold W - 1 hour - 1 ms; right: W - 1 ms), or at once when it fails a
condition on its own side. The second appends seeded random orders and shipments, out of order
within the watermark delay, over two more runs: each table equals the same query run by Spark in
batch over all rows so far, restricted to the rows the stream has emitted. snapshot_equivalence
passes after the last run of each test.
"""

import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

from .helpers import commits, equivalence_tests, table_path

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: orders}, {name: shipments}]
"""
ORDERS, SHIPS = "{{ source('raw', 'orders') }}", "{{ source('raw', 'shipments') }}"
COLUMNS = {
    "orders": {"ts": "timestamp", "id": "bigint", "amount": "bigint"},
    "shipments": {"ts": "timestamp", "orderid": "bigint"},
}
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='10 minutes') }}\n"
SELECT = "SELECT o.ts AS order_ts, o.id, o.amount, s.orderid, s.ts AS ship_ts"
HOUR = timedelta(hours=1)
MS = timedelta(milliseconds=1)
# Per model: its query, and whether the stream has emitted a result row (order_ts, id, amount,
# orderid, ship_ts) by watermark W.
MODELS = {
    # Calcite's example; o.* expanded by the rewrite.
    "shipped": (
        f"SELECT o.*, s.orderid, s.ts AS ship_ts FROM {ORDERS} o JOIN {SHIPS} s "
        "ON o.id = s.orderid AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR",
        lambda r, w: True,
    ),
    # Orders and their shipments within the hour, or with NULLs; `>= / <=` and `-` spelled.
    "orders_left": (
        f"{SELECT} FROM {ORDERS} AS o LEFT OUTER JOIN {SHIPS} AS s "
        "ON o.id = s.orderid AND s.ts >= o.ts AND o.ts >= s.ts - INTERVAL '60' MINUTES",
        lambda r, w: r[4] is not None or r[0] <= w - HOUR - MS,
    ),
    # Shipments and the order placed within the hour before them, or NULLs.
    "ships_right": (
        f"{SELECT} FROM {ORDERS} o RIGHT JOIN {SHIPS} s "
        "ON s.orderid = o.id AND o.ts BETWEEN s.ts - INTERVAL '1' HOUR AND s.ts",
        lambda r, w: r[0] is not None or r[4] <= w - MS,
    ),
    # Both; an order of amount <= 10 never matches (a condition on its own side): at once.
    "both_full": (
        f"{SELECT} FROM {ORDERS} o FULL JOIN {SHIPS} s "
        "ON o.id = s.orderid AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR AND o.amount > 10",
        lambda r, w: (
            (r[0] is not None and r[4] is not None)
            or (r[0] is not None and (r[2] <= 10 or r[0] <= w - HOUR - MS))
            or (r[4] is not None and r[4] <= w - MS)
        ),
    ),
}
# Window SEMI / ANTI joins (FLIP-145) over 10-minute windows of the same streams: orders with a
# shipment in their window (at once), orders without one (when the window closes). Rows:
# (id, amount, window_start, window_end).
TUMBLE10 = "TABLE(TUMBLE(TABLE {t}, DESCRIPTOR(ts), INTERVAL '10' MINUTES))"
WINDOW_MODELS = {
    "shipped_in_window": (
        f"SELECT id, amount, window_start, window_end FROM {TUMBLE10.format(t=ORDERS)} "
        "WHERE (window_start, window_end, id) IN (SELECT window_start, window_end, orderid "
        f"FROM {TUMBLE10.format(t=SHIPS)})",
        lambda r, w: True,
    ),
    "unshipped_in_window": (
        f"SELECT o.id, o.amount, o.window_start, o.window_end FROM {TUMBLE10.format(t=ORDERS)} o "
        f"WHERE NOT EXISTS (SELECT * FROM {TUMBLE10.format(t=SHIPS)} s WHERE s.orderid = o.id "
        "AND s.window_start = o.window_start AND s.window_end = o.window_end)",
        lambda r, w: r[3] <= w,
    ),
}
ALL_MODELS = {**MODELS, **WINDOW_MODELS}


def append(project, orders: list[tuple], ships: list[tuple]) -> None:
    """Append orders (time, id, amount) and shipments (time, orderid) as one version each; a
    time may be 'HH:MM' (2020-01-01)."""
    orders, ships = (
        [(at(e[0]) if isinstance(e[0], str) else e[0], *e[1:]) for e in events]
        for events in (orders, ships)
    )
    for name, events, cols in (
        ("orders", orders, ("id", "amount")),
        ("shipments", ships, ("orderid",)),
    ):
        data = {"ts": pa.array([e[0] for e in events], pa.timestamp("us", tz="UTC"))}
        for i, col in enumerate(cols, 1):
            data[col] = pa.array([e[i] for e in events], pa.int64())
        write_deltalake(table_path(project, name), pa.table(data), mode="append")


def at(hm: str) -> datetime:
    h, m = hm.split(":")
    return datetime(2020, 1, 1, int(h), int(m), tzinfo=timezone.utc)


def rows(path: str) -> list[tuple]:
    return sorted(
        (tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()), key=str
    )


def batch_rows(project, sql: str, late: tuple = ((), ())) -> list[tuple]:
    """The model's query run by Spark in batch over all rows of both sources but the late ones,
    ``late`` = (order ids, shipment orderids)."""
    schema = project.test_schema
    names = {ORDERS: f"{schema}.orders", SHIPS: f"{schema}.shipments"}
    for jinja, name in names.items():
        sql = sql.replace(jinja, name)
    views = {}
    for name in ("orders", "shipments"):
        views[f"{schema}.{name}"] = f"interval_join_{name}"
        data = DeltaTable(table_path(project, name)).to_pyarrow_table()
        key, dropped = ("id", late[0]) if name == "orders" else ("orderid", late[1])
        data = data.filter(pc.invert(pc.is_in(data[key], pa.array(list(dropped), pa.int64()))))
        get_spark().createDataFrame(data).createOrReplaceTempView(views[f"{schema}.{name}"])
    plan = compile_query(
        sql,
        schemas={f"{schema}.{n}": c for n, c in COLUMNS.items()},
        watermark_delay="10 minutes",
    )
    table = get_spark().sql(plan.sql_for(views)).toArrow()
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=str)


def watermark(project, name: str) -> datetime:
    return datetime.fromtimestamp(
        commits(table_path(project, name))[-1]["watermark_ms"] / 1000, timezone.utc
    )


def r(order: tuple | None, ship: tuple | None) -> tuple:
    """A result row from an order (time, id, amount) and a shipment (time, orderid)."""
    o = (at(order[0]), order[1], order[2]) if order else (None, None, None)
    s = (ship[1], at(ship[0])) if ship else (None, None)
    return o + s


O1, O2, O3, O4, O6 = (
    ("10:00", 1, 50),
    ("10:30", 2, 20),
    ("11:00", 3, 5),
    ("10:40", 4, 30),
    (
        "09:45",
        6,
        15,
    ),
)
S1, S2, S3, S5 = ("10:20", 1), ("10:35", 2), ("11:59", 3), ("10:45", 5)
O7, O8 = ("10:50", 7, 40), ("12:30", 8, 60)
S7, S4, S8 = ("10:55", 7), ("10:49", 4), ("12:40", 8)


# The hand-made rows the streams dropped as late (order ids, shipment orderids): O7 and S4 by
# their own time in the interval joins; S4 by its window's end in the window joins.
LATE_INTERVAL, LATE_WINDOW = ({7}, {4}), ((), {4})


def w(order: tuple, start: str) -> tuple:
    """A window SEMI / ANTI result row: the order's id and amount, its 10-minute window."""
    return (order[1], order[2], at(start), at(start) + timedelta(minutes=10))


def by_str(values) -> list:
    return sorted(values, key=str)


class TestIntervalJoins:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "tests.yml": equivalence_tests(ALL_MODELS),
            **{f"{name}.sql": CONFIG + sql for name, (sql, _) in ALL_MODELS.items()},
        }

    def test_hand_made_rows(self, project):
        # Run 1: watermark min(11:00, 11:59) - 10 minutes = 10:50. Left rows leave the state at
        # <= 09:49:59.999 (O6 is emitted unmatched), right rows at <= 10:49:59.999 (S5).
        append(project, [O1, O2, O3, O4, O6], [S1, S2, S3, S5])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["watermark"] for r in results} == {
            n: "2020-01-01T10:50:00.000Z" for n in ALL_MODELS
        }
        pairs = [r(O1, S1), r(O2, S2), r(O3, S3)]
        assert rows(table_path(project, "shipped")) == by_str(pairs)
        assert rows(table_path(project, "orders_left")) == by_str(pairs + [r(O6, None)])
        assert rows(table_path(project, "ships_right")) == by_str(pairs + [r(None, S5)])
        # O3 (amount 5) fails o.amount > 10: emitted at once; S3 waits for its bound.
        assert rows(table_path(project, "both_full")) == by_str(
            [r(O1, S1), r(O2, S2), r(O3, None), r(None, S5), r(O6, None)]
        )
        # Windows: only O2 and S2 share one ([10:30, 10:40)), emitted at once; O1, O4 and O6
        # have none in windows the watermark closed (ends <= 10:50); O3's is open.
        assert rows(table_path(project, "shipped_in_window")) == [w(O2, "10:30")]
        assert rows(table_path(project, "unshipped_in_window")) == by_str(
            [w(O1, "10:00"), w(O4, "10:40"), w(O6, "09:40")]
        )

        # Run 2 (read at watermark 10:50): O7 (10:50) and S4 (10:49) are late and dropped by
        # the interval joins, so S7 and O4 never match. The window joins drop by window end:
        # S4's window ends at 10:50 (late), O7's at 11:00 (kept: it shares it with S7).
        # Watermark 12:20: left rows <= 11:19:59.999 and right rows <= 12:19:59.999 leave the
        # interval joins' state; windows ending <= 12:20 close.
        append(project, [O7, O8], [S7, S4, S8])
        results = run_dbt(["run"])
        assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
            **{n: 2 for n in MODELS},
            **{n: 1 for n in WINDOW_MODELS},
        }
        assert watermark(project, "shipped") == at("12:20")
        pairs.append(r(O8, S8))
        assert rows(table_path(project, "shipped")) == by_str(pairs)
        assert rows(table_path(project, "orders_left")) == by_str(
            pairs + [r(O6, None), r(O4, None)]
        )
        assert rows(table_path(project, "ships_right")) == by_str(
            pairs + [r(None, S5), r(None, S7)]
        )
        assert rows(table_path(project, "both_full")) == by_str(
            [r(O1, S1), r(O2, S2), r(O8, S8), r(O3, None), r(None, S5), r(O6, None)]
            + [r(O4, None), r(None, S3), r(None, S7)]
        )
        assert rows(table_path(project, "shipped_in_window")) == by_str(
            [w(O2, "10:30"), w(O7, "10:50")]
        )
        assert rows(table_path(project, "unshipped_in_window")) == by_str(
            [w(O1, "10:00"), w(O4, "10:40"), w(O6, "09:40"), w(O3, "11:00")]
        )
        listed = run_dbt(["show", "--inline", "select * from {{ late_rows(ref('shipped')) }}"])[
            0
        ].agate_table
        assert sorted(
            (row["batch_watermark"].strftime("%H:%M"), row["ts"].strftime("%H:%M"))
            for row in listed
        ) == [("10:50", "10:49"), ("10:50", "10:50")]
        assert len(run_dbt(["test"])) == len(ALL_MODELS)

    def test_random_rows_equal_batch_query(self, project):
        rng = random.Random(17)
        start, next_id, high = at("13:00"), 100, at("13:00")
        for version in range(2):
            low = high - timedelta(minutes=10) + timedelta(seconds=1) if version else start
            orders, ships = [], []
            for _ in range(40):
                when = low + timedelta(
                    seconds=rng.randrange(90 * 60), milliseconds=rng.randrange(1000)
                )
                orders.append((when, next_id, rng.randrange(1, 40)))
                for _ in range(rng.choice((0, 1, 1, 2))):  # some twice, some never
                    shipped = when + timedelta(seconds=rng.randrange(-600, 80 * 60))
                    if shipped > low:
                        ships.append((shipped, next_id))
                next_id += 1
            ships += [(low + timedelta(seconds=rng.randrange(90 * 60)), -1) for _ in range(5)]
            rng.shuffle(orders)
            rng.shuffle(ships)
            high = max(high, *(e[0] for e in orders + ships))
            append(project, orders, ships)
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                n: 0 for n in ALL_MODELS
            }
            for name, (sql, emitted) in ALL_MODELS.items():
                wm = watermark(project, name)
                late = LATE_INTERVAL if name in MODELS else LATE_WINDOW
                expected = [row for row in batch_rows(project, sql, late) if emitted(row, wm)]
                assert rows(table_path(project, name)) == by_str(expected), name
            if version:  # snapshot_equivalence once per test: each run costs seconds per model
                assert len(run_dbt(["test"])) == len(ALL_MODELS)
        # The outer joins emitted unmatched rows of both kinds, the window joins rows, in these
        # runs.
        assert any(
            row[4] is None and row[1] >= 100 for row in rows(table_path(project, "orders_left"))
        )
        assert any(
            row[0] is None and row[3] == -1 for row in rows(table_path(project, "ships_right"))
        )
