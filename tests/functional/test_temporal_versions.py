"""An event-time temporal join with the versions of an upsert_table (apply_changes scd_type 2,
a TIMESTAMP sequence_by) through `dbt run`: a seeded random feed of change events (inserts,
updates, deletes, re-inserts, duplicates, out of order within the watermark delay and across
appends, DOUBLE values with NULLs) applied by the upstream model, and a stream of orders
joined with the version valid at each order's time, over four runs. After each run the LEFT
and INNER models hold exactly the orders at or below the watermark, each with the version of
the Python SCD2 history valid at its time; in the last run, changes far below the watermark
(a version inserted into the history, a delete) are late for the join: the orders keep the
versions they would have had without them, while the upstream applies them. snapshot_equivalence
passes after each run (the changelog replayed without the late changes)."""

import os
import random
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.faults import ENV as FAULT
from dbt.adapters.spark_streaming.faults import EXIT_CODE

from . import test_exactly_once as exactly_once
from .helpers import (
    commits,
    committed_once,
    equivalence_project,
    equivalence_tests,
    rows,
    table_path,
    write_crash_project,
)
from .test_apply_changes import history

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: orders}, {name: changes}]
"""
CUSTOMERS = (
    "{{ config(materialized='upsert_table', unique_key='id', apply_changes={'sequence_by': "
    "'seq', 'delete_when': \"op = 'd'\", 'except_columns': ['op'], 'scd_type': 2}) }}\n"
    "SELECT * FROM {{ source('raw', 'changes') }}"
)
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
JOIN = (
    "FROM {{ source('raw', 'orders') }} AS o {kind}JOIN {{ ref('customers') }} "
    "FOR SYSTEM_TIME AS OF o.ts AS c ON "
)
MODELS = {
    "customers": CUSTOMERS,
    "tv_left": CONFIG
    + "SELECT o.id, o.ts, o.cid, c.name, c.price, c.__start_at AS since "
    + JOIN.replace("{kind}", "LEFT ")
    + "o.cid = c.id",
    "tv_inner": CONFIG + "SELECT o.id AS oid, c.* " + JOIN.replace("{kind}", "") + "c.id = o.cid "
    "AND c.price > 0",
}
EPOCH = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
DELAY = timedelta(minutes=2)


def at(rng: random.Random, low: datetime, span_s: int) -> datetime:
    return low + timedelta(seconds=rng.randrange(span_s), microseconds=rng.randrange(10**6))


def round_of(rng: random.Random, i: int, ids) -> tuple[list, list]:
    """Orders (id, ts, cid, amount) and change events (id, seq, op, name, price) over the next
    10 minutes, reaching back to just after the watermark, shuffled; duplicates of some
    events; from the second round on, a delete of key 0 first, with an order after it."""
    back = DELAY - timedelta(seconds=1) if i else timedelta(0)
    low, span = EPOCH + timedelta(minutes=10 * i) - back, 600 + int(back.total_seconds())
    events = []
    for _ in range(30):
        op = rng.choices(["i", "u", "d"], [2, 5, 2])[0]
        price = rng.choice([None, rng.uniform(-10, 1e6), 10.0 ** rng.randrange(-9, 15)])
        name = rng.choice([None, "ann", "bob", "cy", "dé"])
        events.append((rng.randrange(6), at(rng, low, span), op, name, price))
    events += rng.sample(events, 3)  # exact duplicates
    orders = [
        (next(ids), at(rng, low, span), rng.choice([0, 1, 2, 3, 4, 5, 7, None]), rng.random())
        for _ in range(40)
    ]
    if i:  # key 0's version from the last round ends just after the watermark (a delete), and
        # an order falls after its end: only the end changes, after the watermark (not late)
        events = [e for e in events if e[0] != 0 or e[1] > low + timedelta(seconds=10)]
        events.append((0, low + timedelta(seconds=2), "d", None, None))
        orders.append((next(ids), low + timedelta(seconds=5), 0, 1.0))
    rng.shuffle(events)
    return orders, events


def write(path: str, columns: dict) -> None:
    write_deltalake(path, pa.table(columns), mode="append")


def append(project, orders: list, events: list) -> None:
    append_to({n: table_path(project, n) for n in ("orders", "changes")}, orders, events)


def append_to(paths: dict, orders: list, events: list) -> None:
    stamp = pa.timestamp("us", tz="UTC")
    write(
        paths["orders"],
        {
            "id": pa.array([o[0] for o in orders], pa.int64()),
            "ts": pa.array([o[1] for o in orders], stamp),
            "cid": pa.array([o[2] for o in orders], pa.int64()),
            "amount": pa.array([o[3] for o in orders], pa.float64()),
        },
    )
    write(
        paths["changes"],
        {
            "id": pa.array([e[0] for e in events], pa.int64()),
            "seq": pa.array([e[1] for e in events], stamp),
            "op": pa.array([e[2] for e in events], pa.string()),
            "name": pa.array([e[3] for e in events], pa.string()),
            "price": pa.array([e[4] for e in events], pa.float64()),
        },
    )


def expected(name: str, orders: list, versions: list, watermark: datetime) -> list[tuple]:
    """The model's rows: each order at or below the watermark with the version (id, seq, name,
    price, start, end) of its customer valid at its time."""
    out = []
    for oid, ts, cid, _ in orders:
        if ts > watermark:
            continue
        valid = [
            v
            for v in versions
            if v[0] == cid and v[4] <= ts and (v[5] is None or ts < v[5])  # [start, end)
        ]
        assert len(valid) <= 1
        v = valid[0] if valid else None
        if name == "tv_left":
            out.append((oid, ts, cid, *((v[2], v[3], v[4]) if v else (None, None, None))))
        elif v is not None and v[3] is not None and v[3] > 0:
            out.append((oid, *v[:5]))
    return sorted(out, key=lambda r: r[0])


def utc(row: tuple) -> tuple:
    return tuple(v.astimezone(timezone.utc) if isinstance(v, datetime) else v for v in row)


def late_events(versions: list, orders: list, watermark: datetime) -> list[tuple]:
    """Changes far below the watermark, each between the start of a closed version and an
    order it was joined with: a version inserted there (key one), a delete (key two)."""
    found: dict = {}
    for v in versions:
        for o in orders:
            if v[0] == o[2] and v[5] is not None and v[4] < o[1] < min(v[5], watermark - DELAY):
                found.setdefault(v[0], v[4] + (o[1] - v[4]) / 2)
    assert len(found) >= 2, found
    (one, x), (two, y) = list(found.items())[:2]
    return [(one, x, "u", "late", 7.0), (two, y, "d", None, None)]


class TestTemporalJoinOfScd2Versions:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, MODELS)

    def test_rows_join_the_version_valid_at_their_time(self, project):
        rng, ids = random.Random(351), iter(range(10**6))
        orders, events, late = [], [], []
        for i in range(4):
            new_orders, new_events = round_of(rng, i, ids)
            if i == 3:  # late for the join: the upstream applies them, the join drops them
                wm = commits(table_path(project, "tv_left"))[-1]["watermark_ms"]
                watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
                late = late_events(history(events), orders, watermark)
            append(project, new_orders, new_events + late)
            orders, events = orders + new_orders, events + new_events
            run_dbt(["run"])
            versions = history(events)
            upstream = sorted(map(utc, rows(table_path(project, "customers"))), key=str)
            assert upstream == sorted(map(utc, history(events + late)), key=str)
            for name in ("tv_left", "tv_inner"):
                wm = commits(table_path(project, name))[-1]["watermark_ms"]
                watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
                got = sorted(map(utc, rows(table_path(project, name))), key=lambda r: r[0])
                want = expected(name, orders, versions, watermark)
                assert len(want) > (5 if name == "tv_inner" else 20) * (i + 1) or i == 0, (
                    name,
                    len(want),
                )
                assert got == want, (name, i)
            assert [r.status for r in run_dbt(["test"])] == ["pass"] * 3
        # the late changes would have changed emitted rows of both keys: they were dropped
        path = table_path(project, "tv_left")
        watermark = datetime.fromtimestamp(commits(path)[-1]["watermark_ms"] / 1000, timezone.utc)
        got = sorted(map(utc, rows(path)), key=lambda r: r[0])
        with_late = expected("tv_left", orders, history(events + late), watermark)
        assert {r[2] for r in set(with_late) - set(got)} == {e[0] for e in late}

    def test_a_unit_test_takes_the_versions_as_the_upsert_tables_rows(self, project):
        """dbt's unit_tests: the given rows of the SCD2 model are its versions, each valid from
        __start_at to __end_at (or the next version's start)."""
        append(project, [], [])  # the sources (if this test runs alone)
        run_dbt(["run", "-s", "customers"])  # dbt reads the given rows' types from the table
        with open(os.path.join(project.project_root, "models", "unit.yml"), "w") as fh:
            fh.write(UNIT_TESTS)
        results = run_dbt(["test", "-s", "test_type:unit"], expect_pass=False)
        assert {r.node.name: r.status for r in results} == {
            "versions_right": "pass",
            "versions_wrong": "fail",
        }


VERSION = "{id: 0, seq: '%s', name: %s, price: 1.0, __start_at: '%s', __end_at: %s}"
UNIT_TESTS = """
unit_tests:
  - name: versions_%s
    model: tv_left
    given:
      - input: source('raw', 'orders')
        rows:
          - {id: 1, ts: '2024-03-01 09:00:05', cid: 0, amount: 1.0}
          - {id: 2, ts: '2024-03-01 09:00:20', cid: 0, amount: 1.0}
          - {id: 3, ts: '2024-03-01 09:00:40', cid: 0, amount: 1.0}
      - input: ref('customers')
        rows:
          - %s
          - %s
    expect:
      rows: %s
"""
GIVEN = (
    VERSION % ("2024-03-01 09:00:00", "a", "2024-03-01 09:00:00", "'2024-03-01 09:00:10'"),
    VERSION % ("2024-03-01 09:00:30", "b", "2024-03-01 09:00:30", "null"),
)
UNIT_TESTS = UNIT_TESTS % (
    "right",
    *GIVEN,
    "[{id: 1, name: a}, {id: 2, name: null}, {id: 3, name: b}]",  # 2: after a's end
) + UNIT_TESTS.split("unit_tests:")[1] % (
    "wrong",
    *GIVEN,
    "[{id: 1, name: a}, {id: 2, name: a}, {id: 3, name: b}]",
)


def crash_project(root) -> tuple[str, dict]:
    """A project under root/project (customers, tv_left) whose sources live under root/raw;
    the sources' paths."""
    project, raw = root / "project", root / "raw"
    write_crash_project(project, root / "w")
    (project / "models" / "sources.yml").write_text(
        "version: 2\nsources:\n  - name: raw\n    schema: raw\n    tables:\n"
        + "".join(f"      - {{name: {n}, meta: {{location: '{raw / n}'}}}}\n" for n in TABLES)
        + equivalence_tests(["tv_left"])
    )
    for name in ("customers", "tv_left"):
        (project / "models" / f"{name}.sql").write_text(MODELS[name])
    return str(project), {n: str(raw / n) for n in TABLES}


TABLES = ("orders", "changes")


def dbt(project: str, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT}
    env.update({FAULT: fault} if fault else {})
    return subprocess.run(
        [exactly_once.DBT, *args, "--project-dir", project, "--profiles-dir", project],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.full
@pytest.mark.parametrize("fault", ["after_delta_commit@2", "during_write@2"])
def test_a_crash_of_the_join_loses_and_duplicates_no_row(tmp_path, fault):
    """The join's `dbt run` (a subprocess) killed at a point of the second run's first
    micro-batch, then run again: the table equals the Python history's join and the batch
    query."""
    project, paths = crash_project(tmp_path)
    rng, ids = random.Random(352), iter(range(10**6))
    orders, events = [], []
    for i in range(2):
        new_orders, new_events = round_of(rng, i, ids)
        append_to(paths, new_orders, new_events)
        orders, events = orders + new_orders, events + new_events
        assert dbt(project, "run", "-s", "customers").returncode == 0
        if i:
            crashed = dbt(project, "run", "-s", "tv_left", fault=fault)
            assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:]
        ran = dbt(project, "run", "-s", "tv_left")
        assert ran.returncode == 0, ran.stdout[-3000:]
    out = str(tmp_path / "w" / "crash" / "tv_left")
    meta = committed_once(out)
    watermark = datetime.fromtimestamp(meta[-1]["watermark_ms"] / 1000, timezone.utc)
    got = sorted(map(utc, rows(out)), key=lambda r: r[0])
    assert got == expected("tv_left", orders, history(events), watermark)
    tested = dbt(project, "test")
    assert tested.returncode == 0, tested.stdout[-3000:]
