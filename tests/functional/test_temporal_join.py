"""Event-time temporal joins (sql/temporaljoin.py, runtime/temporaljoin.py) through `dbt run`:
a seeded random stream of orders joined with a source of currency rate versions (declared by
`meta: {unique_key, event_time}`), both appended out of order within the watermark delay in
three rounds, with NULL and NaN rates, NULL currencies and amounts, currencies without
versions, and a late row on each side in the later rounds. After each run the LEFT and INNER
models hold exactly the orders at or below the watermark, each with the version valid at its
time (computed here in Python), the late rows are counted, and snapshot_equivalence passes.
The same joins with the versions an upsert_table upserts (event_time config): see
TestTemporalJoinWithUpsertedVersions."""

import math
import os
import random
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.faults import EXIT_CODE
from dbt.adapters.spark_streaming.runtime.continuous import runner

from . import test_continuous as continuous
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

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: orders
      - name: rates
        config:
          meta: {unique_key: currency, event_time: rtime}
"""
CONFIG = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
ORDERS = "{{ source('raw', 'orders') }}"
RATES = "{{ source('raw', 'rates') }}"
MODELS = {
    "tj_left": "SELECT o.id, o.ts, o.currency, amount, r.rate, o.amount * r.rate AS converted, "
    f"rtime AS rate_time FROM {ORDERS} AS o LEFT JOIN {RATES} FOR SYSTEM_TIME AS OF o.ts AS r "
    "ON o.currency = r.currency AND r.rate > 0 WHERE o.id % 7 <> 3",
    "tj_inner": f"SELECT o.*, rate FROM {ORDERS} o JOIN {RATES} FOR SYSTEM_TIME AS OF o.ts AS r "
    "ON r.currency = o.currency",
}
CHANGED = MODELS["tj_left"].replace("r.rate > 0", "r.rate > 1").replace("% 7 <> 3", "% 5 <> 2")
EPOCH = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
DELAY = timedelta(minutes=2)


def rounds(seed: int, count: int = 3) -> list[tuple[list, list]]:
    """Per round (orders, rates): orders (id, ts, currency, amount) and rates (currency, rtime,
    rate) over the next 10 minutes, reaching back to just after the watermark, shuffled; from
    the second round on, each side has one row far below the watermark (late)."""
    rng = random.Random(seed)
    out, ids, used = [], iter(range(10**6)), set()
    for i in range(count):
        back = DELAY - timedelta(seconds=1) if i else timedelta(0)  # to just after the watermark
        low, span = EPOCH + timedelta(minutes=10 * i) - back, 600 + int(back.total_seconds())
        orders = [
            (
                next(ids),
                low + timedelta(seconds=rng.randrange(span), microseconds=rng.randrange(10**6)),
                rng.choice(["EUR", "GBP", "JPY", "CHF", None]),
                rng.choice([None, rng.uniform(-1e3, 1e9), 10.0 ** rng.randrange(-5, 15)]),
            )
            for _ in range(40)
        ]
        rates = []
        while len(rates) < 12:
            at = low + timedelta(seconds=rng.randrange(span))
            currency = rng.choice(["EUR", "GBP", "JPY"])
            if (currency, at) in used:  # one version per key and time (ties: docs)
                continue
            used.add((currency, at))
            rate = rng.choice([None, math.nan, -1.0, rng.uniform(0.001, 200.0)])
            rates.append((currency, at, rate))
        if i:
            late = EPOCH + timedelta(minutes=10 * i - 9)
            orders.append((next(ids), late, "EUR", 1.0))
            rates.append(("EUR", late, 99.0))
        rng.shuffle(orders)
        rng.shuffle(rates)
        out.append((orders, rates))
    return out


def changelog_path(table: str) -> str:
    return os.path.join(table, "_dbt_streaming", "changelog")


def write(path: str, columns: dict) -> None:
    write_deltalake(path, pa.table(columns), mode="append")


def append(project, orders: list, rates: list) -> None:
    append_to({n: table_path(project, n) for n in ("orders", "rates")}, orders, rates)


def append_to(paths: dict, orders: list, rates: list) -> None:
    write_orders(paths["orders"], orders)
    write_rates(paths["rates"], rates)


def write_orders(path: str, orders: list) -> None:
    write(
        path,
        {
            "id": pa.array([o[0] for o in orders], pa.int64()),
            "ts": pa.array([o[1] for o in orders], pa.timestamp("us", tz="UTC")),
            "currency": pa.array([o[2] for o in orders], pa.string()),
            "amount": pa.array([o[3] for o in orders], pa.float64()),
        },
    )


def write_rates(path: str, rates: list) -> None:
    write(
        path,
        {
            "currency": pa.array([r[0] for r in rates], pa.string()),
            "rtime": pa.array([r[1] for r in rates], pa.timestamp("us", tz="UTC")),
            "rate": pa.array([r[2] for r in rates], pa.float64()),
        },
    )


def valid(rates: list, currency, at: datetime):
    """The version of `currency` valid at `at`: the latest at or before it (of those at one
    time, the last listed)."""
    mine = [r for r in rates if currency is not None and r[0] == currency and r[1] <= at]
    return max(reversed(mine), key=lambda r: r[1], default=None)


def utc(row: tuple) -> tuple:
    return tuple(v.astimezone(timezone.utc) if isinstance(v, datetime) else v for v in row)


def expected(
    name: str, orders: list, rates: list, watermark: datetime, since=None, changed=False
) -> list[tuple]:
    """The model's rows at `watermark` (only those after `since`; `changed`: tj_left's query as
    CHANGED gives them)."""
    out = []
    for oid, ts, currency, amount in orders:
        if ts > watermark or (since is not None and ts <= since):
            continue
        version = valid(rates, currency, ts)
        if name == "tj_inner":
            if version is not None:
                out.append((oid, ts, currency, amount, version[2]))
            continue
        if oid % (5 if changed else 7) == (2 if changed else 3):
            continue
        # ON r.rate > 0 (or 1), where Spark orders NaN above every number
        low = 1 if changed else 0
        if (
            version is None
            or version[2] is None
            or not (version[2] > low or math.isnan(version[2]))
        ):
            version = (None, None, None)
        rate = version[2]
        converted = None if amount is None or rate is None else amount * rate
        out.append((oid, ts, currency, amount, rate, converted, version[1]))
    return sorted(out, key=lambda r: r[0])


def assert_joined(project, name: str, orders: list, versions: list, least: int) -> datetime:
    """Model `name` holds exactly `expected` (more than `least` rows) at its last watermark,
    which is returned."""
    wm = commits(table_path(project, name))[-1]["watermark_ms"]
    watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
    got = sorted(map(utc, rows(table_path(project, name))), key=lambda r: r[0])
    want = expected(name, orders, versions, watermark)
    assert len(got) == len(want) > least, (name, len(got), len(want))
    for a, b in zip(got, want, strict=True):
        assert repr(a) == repr(b), (name, a, b)  # repr: NaN equals NaN
    return watermark


class TestTemporalJoin:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, {n: CONFIG + sql for n, sql in MODELS.items()})

    def test_rows_join_the_version_valid_at_their_time(self, project):
        orders, rates = [], []
        for i, (new_orders, new_rates) in enumerate(rounds(seed=35)):
            append(project, new_orders, new_rates)
            late = EPOCH + timedelta(minutes=10 * i - 9)
            orders += [o for o in new_orders if not (i and o[1] == late)]
            rates += [r for r in new_rates if not (i and r[1] == late)]
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                n: 2 if i else 0 for n in MODELS
            }
            for name in MODELS:
                assert_joined(project, name, orders, rates, least=10 * (i + 1))
        listed = run_dbt(["show", "--inline", "select * from {{ late_rows(ref('tj_inner')) }}"])
        late = sorted(  # each side's late rows, with their own columns
            (r["ts"] or r["rtime"]).strftime("%H:%M") for r in listed[0].agate_table
        )
        assert late == ["09:01", "09:01", "09:11", "09:11"], late
        assert len(run_dbt(["test"])) == len(MODELS)

        # tj_left's WHERE and ON change: its state (the rows and versions held) goes on, and
        # the rows after the change follow the new query
        path = table_path(project, "tj_left")
        before = rows(path)
        since = datetime.fromtimestamp(commits(path)[-1]["watermark_ms"] / 1000, timezone.utc)
        with open(os.path.join(project.project_root, "models", "tj_left.sql"), "w") as fh:
            fh.write(CONFIG + CHANGED)
        new_orders, new_rates = rounds(seed=35, count=4)[3]
        late = EPOCH + timedelta(minutes=21)
        append(project, new_orders, new_rates)
        orders += [o for o in new_orders if o[1] != late]
        rates += [r for r in new_rates if r[1] != late]
        _, log = run_dbt_and_capture(["run", "-s", "tj_left"])
        assert "class keeps_state (projection, filter or ON of a temporal join)" in log
        watermark = datetime.fromtimestamp(commits(path)[-1]["watermark_ms"] / 1000, timezone.utc)
        after = expected("tj_left", orders, rates, watermark, since=since, changed=True)
        assert len(after) > 10
        got = sorted(map(utc, rows(path)), key=lambda r: r[0])
        assert repr(got) == repr(sorted(map(utc, before + after), key=lambda r: r[0]))
        assert [r.status for r in run_dbt(["test", "-s", "tj_left"])] == ["pass"]


LATEST = (
    "{{ config(materialized='upsert_table', unique_key='currency', event_time='rtime', "
    "constant_domain=['currency'], max_files_per_trigger=1) }}\n"
    "SELECT currency, rtime, rate FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY currency "
    f"ORDER BY rtime DESC) AS rn FROM {RATES}) WHERE rn = 1"
)
FILES = 4  # each round's rates are appended in this many files: a micro-batch each upstream


def latest_versions(files: list[list], held: dict) -> list[tuple]:
    """The rows the keep-latest model upserts over `files` (one micro-batch each), in commit
    order: per file and currency its greatest row, if greater than the one `held` (updated)."""
    out = []
    for rates in files:
        for currency in sorted({r[0] for r in rates}):
            top = max((r for r in rates if r[0] == currency), key=lambda r: (r[1], r[2]))
            if currency not in held or (top[1], top[2]) > (held[currency][1], held[currency][2]):
                held[currency] = top
                out.append(top)
    return out


class TestTemporalJoinWithUpsertedVersions:
    """The versioned side is an upsert_table with unique_key and event_time in its config, a
    keep-latest deduplication of the rates (Flink's versioned view): each row it upserts is a
    version from its rtime. Its changelog's +I/+U rows are the Python model's versions; the
    joins hold exactly the orders with the version valid at their times, two versions at one
    time in one micro-batch of the join take the last committed, a new currency's first version
    far below the join's watermark is late (dropped and counted), and snapshot_equivalence
    passes."""

    @pytest.fixture(scope="class")
    def models(self):
        sources = SOURCES.replace("meta: {unique_key: currency, event_time: rtime}", "{}")
        joins = {
            n: CONFIG + sql.replace(RATES, "{{ ref('rates_latest') }}") for n, sql in MODELS.items()
        }
        return equivalence_project(sources, {"rates_latest": LATEST, **joins})

    def test_the_rows_it_upserts_are_versions_from_their_event_time(self, project):
        orders, upserted, versions, held, watermark = [], [], [], {}, None
        tie = EPOCH + timedelta(seconds=599, microseconds=500000)  # after every rate of round 0
        path = table_path(project, "rates_latest")
        for i, (new_orders, new_rates) in enumerate(rounds(seed=38)):
            files = [new_rates[k::FILES] for k in range(FILES)]
            if i == 0:  # EUR's greatest row in two files at one time: the second is valid
                files[1].append(("EUR", tie, 1.5))
                files[2].append(("EUR", tie, 2.5))
            if i == 2:  # a currency's first version far below the watermark: late for the join
                files[0].append(("CHF", EPOCH + timedelta(minutes=5), 7.0))
            write_orders(table_path(project, "orders"), new_orders)
            for rates in files:
                write_rates(table_path(project, "rates"), rates)
            new = latest_versions(files, held)
            late = [v for v in new if watermark is not None and v[1] <= watermark]
            assert len(late) == (i == 2), late
            upserted += new
            versions += [v for v in new if v not in late]
            late_order = EPOCH + timedelta(minutes=10 * i - 9)
            orders += [o for o in new_orders if not (i and o[1] == late_order)]
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                "rates_latest": 0,
                "tj_left": int(i > 0) + len(late),
                "tj_inner": int(i > 0) + len(late),
            }
            changelog = DeltaTable(changelog_path(path)).to_pyarrow_table().to_pylist()
            changelog.sort(key=lambda r: (r["_commit_version"], r["currency"]))
            logged = [(r["currency"], r["rtime"], r["rate"]) for r in changelog if r["_op"] != "-U"]
            assert repr(list(map(utc, logged))) == repr(list(map(utc, upserted)))
            for name in MODELS:
                watermark = assert_joined(project, name, orders, versions, least=8 * (i + 1))
        rates = [r[-1] for r in rows(table_path(project, "tj_inner"))]
        assert 2.5 in rates and 1.5 not in rates  # orders after the tie took the later commit's
        listed = run_dbt(["show", "--inline", "select * from {{ late_rows(ref('tj_left')) }}"])
        late = sorted(
            (r["currency"], (r["ts"] or r["rtime"]).strftime("%H:%M"))
            for r in listed[0].agate_table
        )
        assert late == [("CHF", "09:05"), ("EUR", "09:01"), ("EUR", "09:11")], late
        assert [r.status for r in run_dbt(["test"])] == ["pass"] * 3

    def test_a_unit_test_takes_the_given_rows_as_versions(self, project):
        """dbt's unit_tests: the given rows of the upsert_table are its versions, each valid
        from its event_time to the next version's."""
        append(project, [], [])  # the sources (if this test runs alone)
        run_dbt(["run", "-s", "rates_latest"])  # dbt reads the given rows' types from the table
        with open(os.path.join(project.project_root, "models", "unit.yml"), "w") as fh:
            fh.write(LATEST_UNIT_TESTS % ("right", "2.0"))  # (GBP has no version: INNER)
            fh.write(LATEST_UNIT_TESTS.split("unit_tests:")[1] % ("wrong", "3.0"))
        results = run_dbt(["test", "-s", "test_type:unit"], expect_pass=False)
        assert {r.node.name: r.status for r in results} == {
            "versions_right": "pass",
            "versions_wrong": "fail",
        }


LATEST_UNIT_TESTS = """
unit_tests:
  - name: versions_%s
    model: tj_inner
    given:
      - input: source('raw', 'orders')
        rows:
          - {id: 1, ts: '2024-03-01 09:00:05', currency: EUR, amount: 1.0}
          - {id: 2, ts: '2024-03-01 09:00:20', currency: EUR, amount: 1.0}
          - {id: 3, ts: '2024-03-01 09:00:40', currency: EUR, amount: 1.0}
          - {id: 4, ts: '2024-03-01 09:00:40', currency: GBP, amount: 1.0}
      - input: ref('rates_latest')
        rows:
          - {currency: EUR, rtime: '2024-03-01 09:00:00', rate: 2.0}
          - {currency: EUR, rtime: '2024-03-01 09:00:30', rate: 3.0}
    expect:
      rows: [{id: 1, rate: 2.0}, {id: 2, rate: %s}, {id: 3, rate: 3.0}]
"""


class TestTemporalJoinContinuous(continuous.Base):
    """The LEFT model run continuously (a runner, 2-second triggers): each round's orders come
    out once the watermark passes them, with the versions valid at their times."""

    @pytest.fixture(scope="class")
    def models(self):
        trigger = CONFIG.replace(") }}", ", trigger={'processing_time': '2 seconds'}) }}")
        return equivalence_project(SOURCES, {"tj_left": trigger + MODELS["tj_left"]})

    def test_rows_come_out_as_the_watermark_passes(self, project):
        path, orders, rates = table_path(project, "tj_left"), [], []
        for i, (new_orders, new_rates) in enumerate(rounds(seed=36, count=2)):
            new_orders = [o for o in new_orders if o[1] >= EPOCH + timedelta(minutes=10 * i - 2)]
            new_rates = [r for r in new_rates if r[1] >= EPOCH + timedelta(minutes=10 * i - 2)]
            append(project, new_orders, new_rates)
            orders, rates = orders + new_orders, rates + new_rates
            if not i:
                run_dbt(["run"])  # starts the runner
            newest = min(max(o[1] for o in orders), max(r[1] for r in rates))
            watermark = newest.replace(microsecond=newest.microsecond // 1000 * 1000) - DELAY
            want = expected("tj_left", orders, rates, watermark)
            continuous.wait_for(lambda: len(rows(path)) == len(want), timeout=120)  # noqa: B023
            got = sorted(map(utc, rows(path)), key=lambda r: r[0])
            assert repr(got) == repr(want)
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
        run_dbt(["run-operation", "stream_stop"])
        warehouse = project.adapter.config.credentials.warehouse_path
        assert runner.status(warehouse, f"{project.test_schema}.tj_left")["state"] == "stopped"


def crash_project(root) -> str:
    """A project (one model, tj_left) under root/project whose sources live under root/raw."""
    project = root / "project"
    write_crash_project(project, root / "w")
    (project / "models" / "sources.yml").write_text(
        "version: 2\nsources:\n  - name: raw\n    schema: raw\n    tables:\n"
        f"      - {{name: orders, meta: {{location: '{root / 'raw' / 'orders'}'}}}}\n"
        f"      - {{name: rates, meta: {{location: '{root / 'raw' / 'rates'}', "
        "unique_key: currency, event_time: rtime}}\n" + equivalence_tests(["tj_left"])
    )
    (project / "models" / "tj_left.sql").write_text(CONFIG + MODELS["tj_left"])
    return str(project)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        "after_delta_commit@2",
        pytest.param("during_write@2", marks=pytest.mark.full),
        pytest.param("before_write@2", marks=pytest.mark.full),
    ],
)
def test_a_crash_loses_and_duplicates_no_joined_row(tmp_path, fault):
    """`dbt run` (a subprocess) killed at a point of the second run's first micro-batch, then
    run again: the table equals the Python oracle and the batch query (the rerun replays the
    batch over the operator's state, and its next batch emits the rows the replay held)."""
    project = crash_project(tmp_path)
    sources = {n: str(tmp_path / "raw" / n) for n in ("orders", "rates")}
    orders, rates = [], []
    for i, (new_orders, new_rates) in enumerate(rounds(seed=37, count=2)):
        append_to(sources, new_orders, new_rates)
        late = EPOCH + timedelta(minutes=10 * i - 9)
        orders += [o for o in new_orders if not (i and o[1] == late)]
        rates += [r for r in new_rates if not (i and r[1] == late)]
        if i == 1:
            crashed = exactly_once.dbt_run(project, fault)
            assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
        ran = exactly_once.dbt_run(project)
        assert ran.returncode == 0, ran.stdout[-3000:]
    out = str(tmp_path / "w" / "crash" / "tj_left")
    meta = committed_once(out)
    watermark = datetime.fromtimestamp(meta[-1]["watermark_ms"] / 1000, timezone.utc)
    got = sorted(map(utc, rows(out)), key=lambda r: r[0])
    assert repr(got) == repr(expected("tj_left", orders, rates, watermark))
    tested = subprocess.run(
        [exactly_once.DBT, "test", "--project-dir", project, "--profiles-dir", project],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tested.returncode == 0, tested.stdout[-3000:]
