"""OVER aggregations on event time (sql/over.py, runtime/over.py) through `dbt run`: a seeded
random event stream, out of order within the watermark delay, appended in two Delta versions
(the second with one late event) with `dbt run` after each. After every run each model holds
one row per on-time event at or below the watermark, with its frame's aggregates computed here
in Python, and the late event is counted; snapshot_equivalence passes at the end. The frames
apply SUM, COUNT, MAX and AVG; over RANGE and ROWS also STDDEV_POP, COUNT(DISTINCT),
PERCENTILE and COUNT_IF, over ROWS UNBOUNDED STDDEV_SAMP and COUNT_IF. FLIP-11's example runs
beside them, its rows written out by hand."""

import math
import random
import struct
from datetime import datetime, timedelta, timezone
from statistics import median, pstdev, stdev

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt
from deltalake import write_deltalake

from .helpers import commits, equivalence_project, rows, table_path
from .test_window_tvfs import EV, append, appends

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}, {name: orders}]
"""

CONFIG = "{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}\n"
R3 = "RANGE BETWEEN INTERVAL '3' MINUTE PRECEDING AND CURRENT ROW"
# name: (SQL, partitioned, frame kind, bound)
MODELS = {
    "over_range": (
        f"SELECT k, ts, v, SUM(v) OVER (PARTITION BY k ORDER BY ts {R3}) AS s, "
        f"COUNT(*) OVER (PARTITION BY k ORDER BY ts {R3}) AS n FROM {EV}",
        True,
        "range",
        timedelta(minutes=3),
    ),
    "over_rows": (
        "SELECT k, ts, v, SUM(v) OVER w AS s, MAX(v) OVER w AS n "
        f"FROM {EV} WINDOW w AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND "
        "CURRENT ROW)",
        True,
        "rows",
        2,
    ),
    "over_calcite": (  # over_rows in Calcite's syntax: a named window refined, ORDER BY first
        "SELECT k, ts, v, SUM(v) OVER w (ROWS 2 PRECEDING) AS s, "
        f"MAX(v) OVER w (ROWS 2 PRECEDING) AS n FROM {EV} WINDOW w AS (ORDER BY ts PARTITION BY k)",
        True,
        "rows",
        2,
    ),
    "over_spread": (  # any aggregate over a bounded frame: Spark's own, in each micro-batch
        f"SELECT k, ts, v, STDDEV_POP(v) OVER w AS s, COUNT(DISTINCT v % 5) OVER w AS n "
        f"FROM {EV} WINDOW w AS (PARTITION BY k ORDER BY ts {R3})",
        True,
        "range",
        timedelta(minutes=3),
    ),
    "over_median": (
        "SELECT k, ts, v, PERCENTILE(v, 0.5) OVER w AS s, COUNT_IF(v > 50) OVER w AS n "
        f"FROM {EV} WINDOW w AS (PARTITION BY k ORDER BY ts ROWS 2 PRECEDING)",
        True,
        "rows",
        2,
    ),
    "over_running": (  # running accumulators of an unbounded frame beyond SUM/COUNT/.../AVG
        "SELECT k, ts, v, STDDEV_SAMP(v) OVER w AS s, COUNT_IF(v > 50) OVER w AS n "
        f"FROM {EV} WINDOW w AS (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING)",
        True,
        "rows",
        None,
    ),
    "over_all": (  # unpartitioned, RANGE UNBOUNDED (the default frame of ORDER BY; the
        # unit tests pin ROWS UNBOUNDED's plan, which differs only in taking peers one by one)
        f"SELECT k, ts, v, COUNT(v) OVER (ORDER BY ts) AS s, AVG(v) OVER (ORDER BY ts) AS n "
        f"FROM {EV}",
        False,
        "range",
        None,
    ),
}


# FLIP-11's row window over a 10 minute RANGE, rows written out by hand (watermark delay 2
# minutes; the 10:30 row sets the watermark to 10:28 and is not emitted). 10:05 has two peers,
# both in each other's frame; the frame of 10:15 starts at 10:05 inclusive.
FLIP11 = (
    "SELECT k AS product, ts AS rowtime, v AS units, SUM(v) OVER w AS s, COUNT(*) OVER w AS n "
    "FROM {{ source('raw', 'orders') }} "
    "WINDOW w AS (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND "
    "CURRENT ROW)"
)
ORDERS = [("10:15", "A", 6), ("10:05", "A", 3), ("10:00", "A", 1), ("10:30", "B", 7),
          ("10:09", "B", 4), ("10:12", "A", 5), ("10:05", "A", 2)]  # fmt: skip
FLIP11_ROWS = [("A", "10:00", 1, 1, 1), ("A", "10:05", 2, 6, 3), ("A", "10:05", 3, 6, 3),
               ("A", "10:12", 5, 10, 3), ("A", "10:15", 6, 16, 4),
               ("B", "10:09", 4, 4, 1)]  # fmt: skip


# name: the model's two aggregates (s, n) of its frame's values, computed here
AGGREGATES = {
    "over_range": lambda vs: (sum(vs), len(vs)),
    "over_rows": lambda vs: (sum(vs), max(vs)),
    "over_calcite": lambda vs: (sum(vs), max(vs)),
    "over_spread": lambda vs: (pstdev(vs), len({x % 5 for x in vs})),
    "over_median": lambda vs: (median(vs), sum(x > 50 for x in vs)),
    "over_running": lambda vs: (stdev(vs) if len(vs) > 1 else None, sum(x > 50 for x in vs)),
    "over_all": lambda vs: (len(vs), sum(vs) / len(vs)),
}


def close(a, b) -> bool:
    return a == b if a is None or b is None else abs(a - b) < 1e-9


def at(hhmm: str) -> datetime:
    h, m = hhmm.split(":")
    return datetime(2020, 4, 15, int(h), int(m), tzinfo=timezone.utc)


def expected(name: str, events: list[tuple], watermark: datetime) -> list[tuple]:
    """(k, ts, v, s, n) of each event at or below the watermark, its frame computed here."""
    _, partitioned, kind, bound = MODELS[name]
    out = []
    for t, k, v in events:
        if t > watermark:
            continue
        peers = sorted(e for e in events if (e[1] == k or not partitioned) and e[0] <= t)
        if kind == "range" and bound is not None:
            frame = [e for e in peers if e[0] >= t - bound]
        elif kind == "rows" and bound is not None:
            frame = peers[-(bound + 1) :]
        else:
            frame = peers
        values = [e[2] for e in frame]
        s, n = AGGREGATES[name](values)
        out.append((k, t, v, s, n))
    return sorted(out)


class TestOverAggregations:
    @pytest.fixture(scope="class")
    def models(self):
        models = {n: CONFIG + sql for n, (sql, *_) in MODELS.items()}
        return equivalence_project(SOURCES, models | {"flip11": CONFIG + FLIP11})

    def test_over_aggregations_equal_their_frames(self, project):
        source, seen = table_path(project, "ev"), []
        versions = appends(seed=16, versions=2, per_version=30, keys="ab", minutes=8)
        late = (versions[0][0][0] - timedelta(minutes=5), "a", 1000)
        versions[1].append(late)
        append(table_path(project, "orders"), [(at(t), k, v) for t, k, v in ORDERS])
        for i, events in enumerate(versions):
            append(source, events)
            seen += [e for e in events if e is not late]
            results = run_dbt(["run"])
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {
                **{n: i for n in MODELS},
                "flip11": 0,
            }
            flip11 = [(a, b, c, d, e) for a, b, c, d, e in rows(table_path(project, "flip11"))]
            assert flip11 == [(p, at(t), u, s, n) for p, t, u, s, n in FLIP11_ROWS]
            for name in MODELS:
                wm = commits(table_path(project, name))[-1]["watermark_ms"]
                watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
                got = rows(table_path(project, name))
                want = expected(name, seen, watermark)
                assert len(got) == len(want) > 0, name
                for a, b in zip(got, want, strict=True):
                    assert a[:3] == b[:3], (name, a, b)
                    assert close(a[3], b[3]) and close(a[4], b[4]), (name, a, b)
        assert len(run_dbt(["test"])) == len(MODELS) + 1


EXACT_SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: wide}]
"""
WIDE = "{{ source('raw', 'wide') }}"
EXACT = {  # values the operator carries (framed) and accumulates (running), checked exactly
    "over_exact_framed": "SELECT k, ts, big, d, f, SUM(big) OVER w AS s, MAX(d) OVER w AS hi "
    f"FROM {WIDE} WINDOW w AS (PARTITION BY k ORDER BY ts ROWS 1 PRECEDING)",
    "over_exact_running": "SELECT k, ts, big, d, f, SUM(big) OVER w AS s, "
    "MAX(d) OVER w AS hi, MIN(d) OVER w AS lo, COUNT(d) OVER w AS n, SUM(f) OVER w AS sf "
    f"FROM {WIDE} WINDOW w AS (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING)",
}


def wide_events(seed: int, count: int) -> list[tuple]:
    """(k, ts, big, d, f): BIGINTs beyond 2**53 beside NULLs, doubles with NaN, infinities,
    -0.0 and NULL, FLOATs (as the doubles they are); distinct times per key, in time order (a
    caller shuffles each append)."""
    rng = random.Random(seed)
    bigs = [None, 2**53 + 1, -(2**53) - 3, 2**56 - 1]
    doubles = [None, math.nan, math.inf, -math.inf, -0.0, 1e300, 2.5e-300]
    return [
        (
            rng.choice("abc"),
            at("10:00") + timedelta(seconds=i * 7, microseconds=rng.randrange(10**6)),
            rng.choice(bigs + [rng.randrange(-(2**55), 2**55)]),
            rng.choice(doubles + [rng.uniform(-1e6, 1e6)]),
            rng.choice([None, float32(0.1), float32(rng.uniform(-1e3, 1e3))]),
        )
        for i in range(count)
    ]


def float32(x: float) -> float:
    """The double a FLOAT holds for ``x``."""
    return struct.unpack("f", struct.pack("f", x))[0]


def write_wide(path: str, events: list[tuple]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "k": pa.array([e[0] for e in events]),
                "ts": pa.array([e[1] for e in events], pa.timestamp("us", tz="UTC")),
                "big": pa.array([e[2] for e in events], pa.int64()),
                "d": pa.array([e[3] for e in events], pa.float64()),
                "f": pa.array([e[4] for e in events], pa.float32()),
            }
        ),
        mode="append",
    )


def spark_max(values: list) -> object:
    """Spark's MAX of doubles: NULLs ignored, NaN above every number."""
    present = [v for v in values if v is not None]
    if any(math.isnan(v) for v in present):
        return math.nan
    return max(present, default=None)


def spark_min(values: list) -> object:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return min(present, default=math.nan if any(v is not None for v in values) else None)


def exact_expected(name: str, events: list[tuple], watermark: datetime) -> list[tuple]:
    out = []
    for key in "abc":
        mine = sorted((e for e in events if e[0] == key), key=lambda e: e[1])
        for i, (k, t, big, d, f) in enumerate(mine):
            if t > watermark:
                continue
            frame = mine[max(0, i - 1) : i + 1] if name == "over_exact_framed" else mine[: i + 1]
            bigs = [e[2] for e in frame if e[2] is not None]
            hi = spark_max([e[3] for e in frame])
            row = (k, t, big, d, f, sum(bigs) if bigs else None, hi)
            if name == "over_exact_running":
                ds, fs = [e[3] for e in frame], [e[4] for e in frame if e[4] is not None]
                total = None
                for v in fs:  # Spark's SUM of FLOATs: each widened to DOUBLE, in time order
                    total = v if total is None else total + v
                row += (spark_min(ds), sum(v is not None for v in ds), total)
            out.append(row)
    return sorted(out, key=lambda r: (r[0], r[1]))


class TestOverValuesExact:
    """A BIGINT beyond 2**53 next to a NULL came out of the operator rounded, and a NaN as NULL
    (pandas turns such columns into float64): each value now crosses it unchanged
    (runtime/exact.py). Two runs over seeded events, compared exactly with Python."""

    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(EXACT_SOURCES, {n: CONFIG + sql for n, sql in EXACT.items()})

    def test_bigints_and_nans_cross_the_operator_unchanged(self, project):
        source, seen = table_path(project, "wide"), []
        events = wide_events(seed=29, count=60)
        for part in (events[:30], events[30:]):  # the second after the first's watermark
            random.Random(3).shuffle(part)
            write_wide(source, part)
            seen += part
            run_dbt(["run"])
            for name in EXACT:
                wm = commits(table_path(project, name))[-1]["watermark_ms"]
                watermark = datetime.fromtimestamp(wm / 1000, timezone.utc)
                got = sorted(rows(table_path(project, name)), key=lambda r: (r[0], r[1]))
                want = exact_expected(name, seen, watermark)
                assert len(got) == len(want) > 10, name
                for a, b in zip(got, want, strict=True):
                    assert a[:2] == b[:2] and repr(a[2:]) == repr(b[2:]), (name, a, b)  # NaN
        assert any(r[2] is not None and abs(r[2]) > 2**53 for r in got)
        assert any(isinstance(r[3], float) and math.isnan(r[3]) for r in got)
        assert len(run_dbt(["test"])) == len(EXACT)
