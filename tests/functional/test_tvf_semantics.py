"""The rewrite means what Flink means: the rewritten SQL, run by Spark in batch, gives
exactly FLIP-145's example tables, and window assignment with offsets matches Flink's
definition on random timestamps."""

import datetime as dt
import random

import pytest

from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.sql import compile_query

SCHEMAS = {"bid": {"bidtime": "timestamp", "price": "double", "item": "string"}}
BIDS = [
    ("08:07", 2, "A"),
    ("08:11", 3, "B"),
    ("08:05", 4, "C"),
    ("08:09", 5, "D"),
    ("08:13", 1, "E"),
    ("08:17", 6, "F"),
]


def t(hhmm: str) -> dt.datetime:
    h, m = map(int, hhmm.split(":"))
    return dt.datetime(2020, 4, 15, h, m)


@pytest.fixture(scope="module")
def spark():
    spark = get_spark()
    spark.createDataFrame(
        [(t(b), float(p), i) for b, p, i in BIDS], "bidtime timestamp, price double, item string"
    ).createOrReplaceTempView("bid")
    return spark


def run(spark, sql: str, delay: str | None = None) -> list[tuple]:
    plan = compile_query(sql, schemas=SCHEMAS, watermark_delay=delay)
    return sorted(tuple(r) for r in spark.sql(plan.sql_for({"bid": "bid"})).collect())


def test_tumble_table(spark):
    got = run(
        spark, "SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
    )
    win = {"A": "08:00", "B": "08:10", "C": "08:00", "D": "08:00", "E": "08:10", "F": "08:10"}
    expected = sorted(
        (
            t(b),
            float(p),
            i,
            t(win[i]),
            t(win[i]) + dt.timedelta(minutes=10),
            t(win[i]) + dt.timedelta(minutes=10) - dt.timedelta(milliseconds=1),
        )
        for b, p, i in BIDS
    )
    assert got == expected


def test_tumble_aggregate(spark):
    got = run(
        spark,
        "SELECT window_start, window_end, SUM(price) "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), "
        "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end",
        delay="1 minute",
    )
    assert got == [(t("08:00"), t("08:10"), 11.0), (t("08:10"), t("08:20"), 10.0)]


def test_hop_table_and_aggregate(spark):
    rows = run(
        spark,
        "SELECT item, window_start, window_end FROM TABLE(HOP(TABLE bid, DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))",
    )
    assert len(rows) == 12  # FLIP-145: every bid in two 10-minute windows sliding by 5
    assert ("F", t("08:15"), t("08:25")) in rows and ("A", t("08:00"), t("08:10")) in rows
    got = run(
        spark,
        "SELECT window_start, window_end, SUM(price) "
        "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end",
        delay="1 minute",
    )
    assert got == [
        (t("08:00"), t("08:10"), 11.0),
        (t("08:05"), t("08:15"), 15.0),
        (t("08:10"), t("08:20"), 10.0),
        (t("08:15"), t("08:25"), 6.0),
    ]


@pytest.mark.parametrize(
    "size_min,offset",
    [
        (10, "INTERVAL '1' MINUTES"),
        (10, "INTERVAL '-3' MINUTES"),
        (60, "INTERVAL '15' MINUTE"),
        (7, None),
    ],
)
def test_tumble_offsets_match_flink_definition(spark, size_min, offset):
    """Flink: window_start = ts - ((ts - offset) mod size), on 200 random timestamps."""
    rng = random.Random(size_min)
    epoch = dt.datetime(2020, 1, 1)
    stamps = [
        epoch + dt.timedelta(seconds=rng.randrange(0, 3 * 86400), microseconds=rng.randrange(10**6))
        for _ in range(200)
    ]
    spark.createDataFrame([(s,) for s in stamps], "ts timestamp").createOrReplaceTempView("ev")
    args = f"TABLE ev, DESCRIPTOR(ts), INTERVAL '{size_min}' MINUTES" + (
        f", {offset}" if offset else ""
    )
    plan = compile_query(
        f"SELECT ts, window_start, window_end FROM TABLE(TUMBLE({args}))",
        schemas={"ev": {"ts": "timestamp"}},
        watermark_delay=None,
    )
    got = sorted(tuple(r) for r in spark.sql(plan.sql_for({"ev": "ev"})).collect())
    size = dt.timedelta(minutes=size_min)
    off = dt.timedelta(minutes=int(offset.split("'")[1])) if offset else dt.timedelta(0)
    expected = []
    for s in stamps:
        start = s - ((s - dt.datetime(1970, 1, 1) - off) % size)  # Flink aligns to the Unix epoch
        expected.append((s, start, start + size))
    assert got == sorted(expected)


CUMULATE = (
    "TABLE(CUMULATE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES))"
)
MS = dt.timedelta(milliseconds=1)


def test_cumulate_aggregate(spark):
    """FLIP-145's CUMULATE table (step 2 minutes, max size 10 minutes)."""
    got = run(
        spark,
        f"SELECT window_start, window_end, SUM(price) FROM {CUMULATE} "
        "GROUP BY window_start, window_end",
        delay="1 minute",
    )
    assert got == [
        (t("08:00"), t("08:06"), 4.0),
        (t("08:00"), t("08:08"), 6.0),
        (t("08:00"), t("08:10"), 11.0),
        (t("08:10"), t("08:12"), 3.0),
        (t("08:10"), t("08:14"), 4.0),
        (t("08:10"), t("08:16"), 4.0),
        (t("08:10"), t("08:18"), 10.0),
        (t("08:10"), t("08:20"), 10.0),
    ]


def test_cumulate_table(spark):
    """The CUMULATE TVF rows: every bid once per cumulative window holding it, with window_time."""
    got = run(spark, f"SELECT * FROM {CUMULATE}")
    ends = {
        "A": ["08:08", "08:10"],
        "B": ["08:12", "08:14", "08:16", "08:18", "08:20"],
        "C": ["08:06", "08:08", "08:10"],
        "D": ["08:10"],
        "E": ["08:14", "08:16", "08:18", "08:20"],
        "F": ["08:18", "08:20"],
    }
    expected = sorted(
        (t(b), float(p), i, t("08:00" if b < "08:10" else "08:10"), t(e), t(e) - MS)
        for b, p, i in BIDS
        for e in ends[i]
    )
    assert len(expected) == 17 and got == expected


@pytest.mark.parametrize(
    "step_s,size_min,offset",
    [
        (120, 10, "INTERVAL '1' MINUTES"),
        (60, 10, "-INTERVAL '3' MINUTE"),
        (90, 60, "INTERVAL '15' MINUTE"),
        (7, 7, None),
        (3600, 1440, "INTERVAL '-2' HOURS"),
    ],
)
def test_cumulate_offsets_match_flink_definition(spark, step_s, size_min, offset):
    """Flink: max window start S = ts - ((ts - offset) mod size); windows [S, S + k * step)
    with end > ts."""
    rng = random.Random(step_s * size_min)
    epoch = dt.datetime(2020, 1, 1)
    stamps = [
        epoch + dt.timedelta(seconds=rng.randrange(0, 3 * 86400), microseconds=rng.randrange(10**6))
        for _ in range(100)
    ]
    spark.createDataFrame([(s,) for s in stamps], "ts timestamp").createOrReplaceTempView("ev")
    args = (
        f"TABLE ev, DESCRIPTOR(ts), INTERVAL '{step_s}' SECONDS, INTERVAL '{size_min}' MINUTES"
        + (f", {offset}" if offset else "")
    )
    plan = compile_query(
        f"SELECT ts, window_start, window_end FROM TABLE(CUMULATE({args}))",
        schemas={"ev": {"ts": "timestamp"}},
        watermark_delay=None,
    )
    got = sorted(tuple(r) for r in spark.sql(plan.sql_for({"ev": "ev"})).collect())
    size, step = dt.timedelta(minutes=size_min), dt.timedelta(seconds=step_s)
    off = dt.timedelta(0)
    if offset:
        n, unit = int(offset.split("'")[1]), offset.split("'")[2].strip().rstrip("S").lower()
        off = dt.timedelta(**{unit + "s": n}) * (-1 if offset.startswith("-") else 1)
    expected = []
    for s in stamps:
        start = s - ((s - dt.datetime(1970, 1, 1) - off) % size)
        expected += [
            (s, start, start + k * step) for k in range(1, size // step + 1) if start + k * step > s
        ]
    assert got == sorted(expected)


# Flink's SESSION documentation example (Flink 1.19+): its own Bid rows, gap 5 minutes.
SESSION_BIDS = [
    ("08:07", 4, "A"),
    ("08:06", 2, "A"),
    ("08:09", 5, "B"),
    ("08:08", 3, "A"),
    ("08:17", 1, "B"),
]


@pytest.fixture()
def session_bids(spark):
    spark.createDataFrame(
        [(t(b), float(p), i, i == "A" and p > 2) for b, p, i in SESSION_BIDS],
        "bidtime timestamp, price double, item string, big boolean",
    ).createOrReplaceTempView("bid2")
    return {"bid2": {"bidtime": "timestamp", "price": "double", "item": "string", "big": "boolean"}}


def run2(spark, schemas, sql, delay="1 minute"):
    plan = compile_query(sql, schemas=schemas, watermark_delay=delay)
    return sorted(tuple(r) for r in spark.sql(plan.sql_for({"bid2": "bid2"})).collect())


def test_session_aggregate_partitioned(spark, session_bids):
    got = run2(
        spark,
        session_bids,
        "SELECT window_start, window_end, item, SUM(price) AS total_price FROM TABLE("
        "SESSION(TABLE bid2 PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) "
        "GROUP BY item, window_start, window_end",
    )
    assert got == [
        (t("08:06"), t("08:13"), "A", 9.0),
        (t("08:09"), t("08:14"), "B", 5.0),
        (t("08:17"), t("08:22"), "B", 1.0),
    ]


def test_session_aggregate_unpartitioned(spark, session_bids):
    got = run2(
        spark,
        session_bids,
        "SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE("
        "SESSION(DATA => TABLE bid2, TIMECOL => DESCRIPTOR(bidtime), GAP => INTERVAL '5' MINUTES)) "
        "GROUP BY window_start, window_end",
    )
    assert got == [(t("08:06"), t("08:14"), 14.0), (t("08:17"), t("08:22"), 1.0)]


def test_session_aggregate_two_keys(spark, session_bids):
    """Hand-computed: A splits into big (08:07 $4, 08:08 $3) and small (08:06 $2) sessions."""
    got = run2(
        spark,
        session_bids,
        "SELECT item, big, window_start, window_end, window_time, COUNT(*) AS n, "
        "SUM(price) AS s FROM TABLE(SESSION(TABLE bid2 PARTITION BY (item, big), "
        "DESCRIPTOR(bidtime), "
        "INTERVAL '90' SECOND)) GROUP BY window_start, window_end, window_time, big, item",
    )
    assert got == [
        (
            "A",
            False,
            t("08:06"),
            t("08:07") + dt.timedelta(seconds=30),
            t("08:07") + dt.timedelta(seconds=30) - MS,
            1,
            2.0,
        ),
        (
            "A",
            True,
            t("08:07"),
            t("08:09") + dt.timedelta(seconds=30),
            t("08:09") + dt.timedelta(seconds=30) - MS,
            2,
            7.0,
        ),
        (
            "B",
            False,
            t("08:09"),
            t("08:10") + dt.timedelta(seconds=30),
            t("08:10") + dt.timedelta(seconds=30) - MS,
            1,
            5.0,
        ),
        (
            "B",
            False,
            t("08:17"),
            t("08:18") + dt.timedelta(seconds=30),
            t("08:18") + dt.timedelta(seconds=30) - MS,
            1,
            1.0,
        ),
    ]


def test_session_aggregate_flip145_bids_hand_computed(spark):
    """FLIP-145 Bid rows, gap 3 minutes: 08:05 ... 08:13 chain into one session ending 08:16."""
    got = run(
        spark,
        "SELECT window_start, window_end, SUM(price), COUNT(*) FROM TABLE(SESSION(TABLE bid, "
        "DESCRIPTOR(bidtime), INTERVAL '3' MINUTES)) GROUP BY window_start, window_end",
        delay="1 minute",
    )
    assert got == [(t("08:05"), t("08:16"), 15.0, 5), (t("08:17"), t("08:20"), 6.0, 1)]


@pytest.mark.parametrize(
    "partition,ends",
    [("PARTITION BY item", {"A": "08:13", "B": None}), ("", {"A": "08:14", "B": None})],
)
def test_session_table(spark, session_bids, partition, ends):
    """The SESSION TVF rows (Flink's example): every row with the bounds of its merged session."""
    got = run2(
        spark,
        session_bids,
        f"SELECT bidtime, price, item, window_start, window_end, window_time FROM TABLE("
        f"SESSION(TABLE bid2 {partition}, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))",
    )

    def bounds(b, i):
        if b == "08:17":
            return t("08:17"), t("08:22")
        if i == "B" and partition:
            return t("08:09"), t("08:14")
        return t("08:06"), t(ends["A"])

    expected = sorted(
        (t(b), float(p), i, *bounds(b, i), bounds(b, i)[1] - MS) for b, p, i in SESSION_BIDS
    )
    assert got == expected


# Window Top-N and deduplication (FLIP-145 "Window TopN"; FLIP-145 has no result table for
# them, so these are hand-computed from its Bid rows and windows).
def topn_sql(tvf: str, order: str, where: str, partition: str = "window_start, window_end") -> str:
    return (
        "SELECT item, window_start, window_end, rownum "
        "FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
        f"{partition} ORDER BY {order}) AS rownum FROM TABLE({tvf})) WHERE {where}"
    )


TUMBLE10 = "TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)"
HOP5_10 = "HOP(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)"


@pytest.mark.parametrize(
    "tvf,order,where,expected",
    [
        (
            TUMBLE10,
            "price DESC",
            "rownum <= 2",  # top 2 by price
            [
                ("D", "08:00", "08:10", 1),
                ("C", "08:00", "08:10", 2),
                ("F", "08:10", "08:20", 1),
                ("B", "08:10", "08:20", 2),
            ],
        ),
        (
            TUMBLE10,
            "bidtime ASC",
            "rownum = 1",  # deduplication, first row
            [("C", "08:00", "08:10", 1), ("B", "08:10", "08:20", 1)],
        ),
        (
            TUMBLE10,
            "bidtime DESC",
            "rownum < 2",  # deduplication, last row
            [("D", "08:00", "08:10", 1), ("F", "08:10", "08:20", 1)],
        ),
        (
            HOP5_10,
            "price DESC",
            "rownum BETWEEN 1 AND 1",
            [
                ("D", "08:00", "08:10", 1),
                ("D", "08:05", "08:15", 1),
                ("F", "08:10", "08:20", 1),
                ("F", "08:15", "08:25", 1),
            ],
        ),
        (
            HOP5_10,
            "price",
            "rownum <= 10",  # N above the window's row count: all rows, ranked
            [
                ("A", "08:00", "08:10", 1),
                ("C", "08:00", "08:10", 2),
                ("D", "08:00", "08:10", 3),
                ("E", "08:05", "08:15", 1),
                ("A", "08:05", "08:15", 2),
                ("B", "08:05", "08:15", 3),
                ("C", "08:05", "08:15", 4),
                ("D", "08:05", "08:15", 5),
                ("E", "08:10", "08:20", 1),
                ("B", "08:10", "08:20", 2),
                ("F", "08:10", "08:20", 3),
                ("F", "08:15", "08:25", 1),
            ],
        ),
        (
            CUMULATE.removeprefix("TABLE(")[:-1],
            "price DESC",
            "rownum <= 1",  # FLIP-145's CUMULATE windows
            [
                ("C", "08:00", "08:06", 1),
                ("C", "08:00", "08:08", 1),
                ("D", "08:00", "08:10", 1),
                ("B", "08:10", "08:12", 1),
                ("B", "08:10", "08:14", 1),
                ("B", "08:10", "08:16", 1),
                ("F", "08:10", "08:18", 1),
                ("F", "08:10", "08:20", 1),
            ],
        ),
    ],
)
def test_window_topn_flip145_bids_hand_computed(spark, tvf, order, where, expected):
    got = run(spark, topn_sql(tvf, order, where), delay="1 minute")
    assert got == sorted((i, t(s), t(e), n) for i, s, e, n in expected)


@pytest.mark.parametrize(
    "tvf",
    [
        "TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' MINUTES, INTERVAL '-3' MINUTES)",
        "HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '4' MINUTES, INTERVAL '12' MINUTES)",
        "CUMULATE(TABLE ev, DESCRIPTOR(ts), INTERVAL '3' MINUTES, INTERVAL '15' MINUTES)",
    ],
)
def test_window_topn_matches_spark_row_number(spark, tvf):
    """The rewrite ranks like Spark's own ROW_NUMBER over the TVF rows (batch), with NULLs in
    the order keys, several keys, explicit NULLS FIRST / LAST and partition keys; order keys
    end with the unique ts so that ROW_NUMBER is deterministic."""
    rng = random.Random(len(tvf))
    epoch = dt.datetime(2020, 1, 1)
    events = [
        (
            epoch + dt.timedelta(seconds=rng.randrange(3 * 3600), microseconds=i),
            rng.choice("ab"),
            rng.choice([None, 1, 2, 3]),
            rng.choice([None, "x", "y"]),
        )
        for i in range(300)
    ]
    spark.createDataFrame(
        events, "ts timestamp, k string, v int, s string"
    ).createOrReplaceTempView("ev")
    schemas = {"ev": {"ts": "timestamp", "k": "string", "v": "int", "s": "string"}}
    rows_sql = compile_query(
        f"SELECT * FROM TABLE({tvf})", schemas=schemas, watermark_delay=None
    ).sql_for({"ev": "ev"})
    for order, partition, n in [
        ("v DESC, s, ts", "k", 3),
        ("v NULLS LAST, s DESC NULLS FIRST, ts DESC", "k, s", 2),
        ("ts", "", 1),
        ("ts DESC", "k", 1),
    ]:
        over = (
            f"PARTITION BY window_start, window_end{', ' + partition if partition else ''} "
            f"ORDER BY {order}"
        )
        model = (
            f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER ({over}) AS rownum FROM TABLE({tvf})) "
            f"WHERE rownum <= {n}"
        )
        plan = compile_query(model, schemas=schemas, watermark_delay="1 minute")
        got = sorted(tuple(r) for r in spark.sql(plan.sql_for({"ev": "ev"})).collect())
        expected = sorted(
            tuple(r)
            for r in spark.sql(
                f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER ({over}) AS rownum FROM ({rows_sql})) "
                f"WHERE rownum <= {n}"
            ).collect()
        )
        assert got == expected and len(got) > 0, (order, partition)


@pytest.mark.parametrize(
    "tvf",
    [
        "TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' MINUTES, INTERVAL '-3' MINUTES)",
        "HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '4' MINUTES, INTERVAL '12' MINUTES)",
        "CUMULATE(TABLE ev, DESCRIPTOR(ts), INTERVAL '3' MINUTES, INTERVAL '15' MINUTES)",
    ],
)
def test_window_rank_and_topn_over_aggregate_match_spark(spark, tvf):
    """RANK / DENSE_RANK (ties share a rank: no tie-breaker here) over TVF rows, and all three
    ranking functions over a window aggregate of the TVF, rank like Spark's own functions."""
    rng = random.Random(len(tvf) + 1)
    epoch = dt.datetime(2020, 1, 1)
    events = [
        (
            epoch + dt.timedelta(seconds=rng.randrange(3 * 3600), microseconds=i),
            rng.choice("abcde"),
            rng.choice([None, 1, 2, 3]),
            rng.choice([None, "x", "y"]),
        )
        for i in range(300)
    ]
    spark.createDataFrame(
        events, "ts timestamp, k string, v int, s string"
    ).createOrReplaceTempView("ev")
    schemas = {"ev": {"ts": "timestamp", "k": "string", "v": "int", "s": "string"}}
    rows_sql = compile_query(
        f"SELECT * FROM TABLE({tvf})", schemas=schemas, watermark_delay=None
    ).sql_for({"ev": "ev"})
    agg = (
        "SELECT window_start, window_end, k, SUM(v) AS total, COUNT(s) AS n FROM {} "
        "GROUP BY window_start, window_end, k"
    )
    cases = [(f, "v DESC", "k", n, "{}") for f in ("RANK", "DENSE_RANK") for n in (1, 2)]
    cases += [(f, "v NULLS LAST, s DESC", "", 3, "{}") for f in ("RANK", "DENSE_RANK")]
    cases += [
        ("ROW_NUMBER", "total DESC, k", "", 2, f"({agg})"),
        ("RANK", "n DESC", "", 2, f"({agg})"),
        ("DENSE_RANK", "total NULLS FIRST", "", 2, f"({agg})"),
    ]
    for function, order, partition, n, source in cases:
        over = (
            f"PARTITION BY window_start, window_end{', ' + partition if partition else ''} "
            f"ORDER BY {order}"
        )
        model = (
            f"SELECT * FROM (SELECT *, {function}() OVER ({over}) AS rownum FROM {source}) "
            f"WHERE rownum <= {n}"
        )
        plan = compile_query(
            model.format(f"TABLE({tvf})"), schemas=schemas, watermark_delay="1 minute"
        )
        got = sorted(map(tuple, spark.sql(plan.sql_for({"ev": "ev"})).collect()), key=repr)
        expected = sorted(map(tuple, spark.sql(model.format(f"({rows_sql})")).collect()), key=repr)
        assert got == expected and len(got) > 0, (function, order, source)
        if function != "ROW_NUMBER" and source == "{}":
            assert len(got) > n * len({r[4:6] + (r[1] if partition else None,) for r in got}), (
                "no ties seen"
            )


def test_count_distinct_equals_sparks(spark):
    """COUNT(DISTINCT x), rewritten to SIZE(COLLECT_SET(x)), counts what Spark's own does,
    NULLs included (ignored) and groups of only NULLs (0)."""
    rng = random.Random(5)
    epoch = dt.datetime(2020, 1, 1)
    data = [
        (epoch + dt.timedelta(seconds=rng.randrange(3600)), rng.choice(["a", "b", "c", None]))
        for _ in range(300)
    ] + [(epoch + dt.timedelta(hours=2), None)]
    spark.createDataFrame(data, "ts timestamp, k string").createOrReplaceTempView("cd")
    plan = compile_query(
        "SELECT window_start, COUNT(DISTINCT k) AS n FROM TABLE(TUMBLE(TABLE cd, DESCRIPTOR(ts), "
        "INTERVAL '5' MINUTES)) GROUP BY window_start, window_end",
        schemas={"cd": {"ts": "timestamp", "k": "string"}},
        watermark_delay="1 minute",
    )
    got = sorted(tuple(r) for r in spark.sql(plan.sql_for({"cd": "cd"})).collect())
    expected = sorted(
        tuple(r)
        for r in spark.sql(
            "SELECT window(ts, '5 minutes').start, COUNT(DISTINCT k) FROM cd "
            "GROUP BY window(ts, '5 minutes')"
        ).collect()
    )
    assert got == expected and (epoch + dt.timedelta(hours=2), 0) in got
