"""Group windows (Flink's GROUP BY TUMBLE / HOP / SESSION with their auxiliary functions,
Calcite's alignment argument, FLOOR / CEIL (ts TO unit)) through `dbt run`: each model is
paired with the window TVF query it stands for, over a seeded random event stream, out of order
within the watermark delay, appended in three Delta versions with `dbt run` after each. After
every run each pair's tables hold the same rows, FLOOR / CEIL equal a Python aggregate, no row
is late, and snapshot_equivalence passes for every model."""

from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from dbt.tests.util import run_dbt

from .helpers import commits, equivalence_project, rows, table_path
from .test_window_tvfs import EPOCH, EV, SOURCES, append, appends

VIEW = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
UPSERT = "{{ config(materialized='upsert_table', watermark_delay='2 minutes') }}\n"
EARLY = (
    "{{ config(materialized='upsert_table', watermark_delay='2 minutes', emit={'early': true}) }}\n"
)
M5 = "INTERVAL '5' MINUTE"
HOP = "INTERVAL '2' MINUTE, INTERVAL '6' MINUTE"
GAP = "INTERVAL '1' MINUTE"
ALIGNED = f"{M5}, TIME '0:02'"  # windows start at 8:02, 8:07, ...
# name: (config, group-window query, the window TVF query it stands for); same columns.
PAIRS = {
    "aligned": (
        VIEW,
        f"SELECT k, TUMBLE_START(ts, {ALIGNED}) AS ws, TUMBLE_END(ts, {ALIGNED}) AS we, "
        f"TUMBLE_ROWTIME(ts, {ALIGNED}) AS rt, SUM(v) AS total, COUNT(*) AS n "
        f"FROM {EV} GROUP BY TUMBLE(ts, {ALIGNED}), k",
        "SELECT k, window_start AS ws, window_end AS we, window_time AS rt, SUM(v) AS total, "
        f"COUNT(*) AS n FROM TABLE(TUMBLE(TABLE {EV}, DESCRIPTOR(ts), {M5}, INTERVAL '2' MINUTE)) "
        "GROUP BY window_start, window_end, k",
    ),
    "hop": (
        VIEW,
        f"SELECT HOP_START(e.ts, {HOP}) AS ws, HOP_END(e.ts, {HOP}) AS we, MAX(e.v) AS top "
        f"FROM {EV} AS e GROUP BY HOP(e.ts, {HOP})",
        "SELECT window_start AS ws, window_end AS we, MAX(e.v) AS top "
        f"FROM TABLE(HOP(TABLE {EV}, DESCRIPTOR(ts), {HOP})) AS e "
        "GROUP BY window_start, window_end",
    ),
    "session": (
        VIEW,
        f"SELECT k, SESSION_START(ts, {GAP}) AS ss, SESSION_END(ts, {GAP}) AS se, "
        f"COUNT(*) AS n FROM {EV} GROUP BY SESSION(ts, {GAP}), k",
        "SELECT k, window_start AS ss, window_end AS se, COUNT(*) AS n "
        f"FROM TABLE(SESSION(TABLE {EV} PARTITION BY k, DESCRIPTOR(ts), {GAP})) "
        "GROUP BY window_start, window_end, k",
    ),
    "floor": (
        VIEW,
        "SELECT FLOOR(ts TO MINUTE) AS m, k, SUM(v) AS total, COUNT(*) AS n "
        f"FROM {EV} GROUP BY FLOOR(ts TO MINUTE), k",
        "SELECT window_start AS m, k, SUM(v) AS total, COUNT(*) AS n "
        f"FROM TABLE(TUMBLE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
        "GROUP BY window_start, window_end, k",
    ),
    "tumble_up": (  # keyed by (ws, k): TUMBLE_START alone identifies the window
        UPSERT,
        f"SELECT k, TUMBLE_START(ts, {M5}) AS ws, SUM(v) AS total FROM {EV} "
        f"GROUP BY TUMBLE(ts, {M5}), k",
        f"SELECT k, window_start AS ws, SUM(v) AS total FROM TABLE(TUMBLE(TABLE {EV}, "
        f"DESCRIPTOR(ts), {M5})) GROUP BY window_start, window_end, k",
    ),
    "ceil_up": (  # early results, refined until the window closes
        EARLY,
        "SELECT CEIL(ts TO MINUTE) AS m, k, SUM(v) AS total, COUNT(*) AS n "
        f"FROM {EV} GROUP BY CEIL(ts TO MINUTE), k",
        "SELECT window_end - INTERVAL '1' MICROSECOND AS m, k, SUM(v) AS total, COUNT(*) AS n "
        f"FROM TABLE(TUMBLE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '1' MINUTE, "
        "INTERVAL '1' MICROSECOND)) GROUP BY window_start, window_end, k",
    ),
}
MINUTE = timedelta(minutes=1)


def versions() -> list[list[tuple]]:
    """The random versions of test_window_tvfs, plus per version events exactly on a minute (no
    later than the version's latest: none is late), which CEIL keeps in the minute ending there."""
    out = []
    for events in appends(seed=11):
        latest = max(e[0] for e in events)
        on_minute = [
            (t, k, v)
            for t, k, v in (
                (e[0].replace(second=0, microsecond=0) + MINUTE, e[1], e[2]) for e in events[:8]
            )
            if t <= latest
        ]
        out.append(events + on_minute)
    return out


def by_minute(events: list[tuple], ceil: bool) -> list[tuple]:
    """(minute, k, SUM(v), COUNT(*)) of FLOOR / CEIL(ts TO MINUTE), computed in Python."""
    groups: dict = defaultdict(lambda: [0, 0])
    for t, k, v in events:
        m = t.replace(second=0, microsecond=0)
        if ceil and m != t:
            m += MINUTE
        groups[(m, k)][0] += v
        groups[(m, k)][1] += 1
    return sorted((m, k, s, n) for (m, k), (s, n) in groups.items())


class TestGroupWindows:
    @pytest.fixture(scope="class")
    def models(self):
        models = {}
        for name, (config, group_window, tvf) in PAIRS.items():
            models[f"gw_{name}"] = config + group_window
            models[f"tvf_{name}"] = config + tvf
        return equivalence_project(SOURCES, models)

    def test_group_windows_equal_their_window_tvf_queries(self, project):
        source, seen, sizes = table_path(project, "ev"), [], []
        for events in versions():
            append(source, events)
            seen += events
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                f"{kind}_{name}": 0 for name in PAIRS for kind in ("gw", "tvf")
            }
            for name in PAIRS:
                got = rows(table_path(project, f"gw_{name}"))
                assert got == rows(table_path(project, f"tvf_{name}")), name
                assert got, name
            sizes.append(len(rows(table_path(project, "gw_aligned"))))
            # FLOOR: the closed minutes only; CEIL with early results: every minute so far
            floor = rows(table_path(project, "gw_floor"))
            wm = commits(table_path(project, "gw_floor"))[-1]["watermark_ms"]
            watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
            closed = [r for r in by_minute(seen, ceil=False) if r[0] + MINUTE <= watermark]
            assert [(m, k, s, n) for m, k, s, n in floor] == closed
            ceil = [(r[0], r[1], r[2], r[3]) for r in rows(table_path(project, "gw_ceil_up"))]
            assert ceil == by_minute(seen, ceil=True)
            assert len(run_dbt(["test"])) == 2 * len(PAIRS)
        assert sizes[0] < sizes[1] < sizes[2], sizes
        assert any(t.second == 0 and t.microsecond == 0 for t, _, _ in seen)


TTL = "{{ config(materialized='upsert_table', state_ttl='7 days') }}\n"
CALENDAR = {  # not fixed-length units: an aggregate without a window (DATE_TRUNC), partials
    "floor_month": "SELECT FLOOR(ts TO MONTH) AS m, k, SUM(v) AS total, COUNT(*) AS n "
    f"FROM {EV} GROUP BY FLOOR(ts TO MONTH), k",
    "ceil_month": "SELECT CEIL(ts TO MONTH) AS m, k, SUM(v) AS total, COUNT(*) AS n "
    f"FROM {EV} GROUP BY CEIL(ts TO MONTH), k",
}


class TestFloorCeilOfCalendarUnits:
    """Spark cannot parse FLOOR(ts TO MONTH): it used to fail as SSR303 with an empty reason."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"sources.yml": SOURCES, **{f"{n}.sql": TTL + sql for n, sql in CALENDAR.items()}}

    def test_calendar_units_aggregate_without_a_window(self, project):
        first = EPOCH.replace(day=30, hour=23)  # 2020-04-30 23:00: across a month's end
        events = [(first + timedelta(minutes=7 * i), "ab"[i % 2], i) for i in range(20)]
        events.append((datetime(2020, 5, 1, tzinfo=timezone.utc), "a", 100))  # on the month
        append(table_path(project, "ev"), events)
        run_dbt(["run"])
        months = {}
        for t, k, v in events:
            floor = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            ceil = floor if floor == t else (floor + timedelta(days=32)).replace(day=1)
            for name, m in (("floor_month", floor), ("ceil_month", ceil)):
                s, n = months.get((name, m, k), (0, 0))
                months[(name, m, k)] = (s + v, n + 1)
        for name in CALENDAR:
            expected = sorted((m, k, s, n) for (x, m, k), (s, n) in months.items() if x == name)
            assert len(expected) == 4
            assert [r[:4] for r in rows(table_path(project, name))] == expected, name
