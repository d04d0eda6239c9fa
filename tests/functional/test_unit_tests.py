"""dbt unit tests (`unit_tests:`) of streaming models (runtime/unit.py): each model's query over
the given rows, in batch with the oracle's rewrite, against the expected rows. Every construct
has a right expectation, which passes, and one with a single value changed, which fails; the
windows are FLIP-145's examples (the reference's bids). A watermark in the test's meta shows
what a stream had emitted by then; inputs a unit test cannot evaluate are coded errors."""

import re

import pytest
from dbt.tests.util import run_dbt

from .test_streaming_view import BIDS_CSV

TVF = "TABLE({kind}(TABLE {{{{ ref('bids') }}}}, DESCRIPTOR(bidtime), {args}))"
STREAM = "{{ config(materialized='streaming_view', watermark_delay='1 minute') }}\n"
MODELS = {
    "tumble.sql": STREAM
    + "SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids FROM "
    + TVF.format(kind="TUMBLE", args="INTERVAL '10' MINUTES")
    + " GROUP BY window_start, window_end",
    "hop.sql": STREAM
    + "SELECT window_start, window_end, SUM(price) AS total FROM "
    + TVF.format(kind="HOP", args="INTERVAL '5' MINUTES, INTERVAL '10' MINUTES")
    + " GROUP BY window_start, window_end",
    "cumulate.sql": STREAM
    + "SELECT window_start, window_end, SUM(price) AS total FROM "
    + TVF.format(kind="CUMULATE", args="INTERVAL '2' MINUTES, INTERVAL '10' MINUTES")
    + " GROUP BY window_start, window_end",
    "sessions.sql": STREAM
    + "SELECT window_start, window_end, COUNT(*) AS bids, SUM(price) AS total FROM "
    + TVF.format(kind="SESSION", args="INTERVAL '3' MINUTES")
    + " GROUP BY window_start, window_end",
    "bids_asks.sql": STREAM
    + """SELECT B.item, B.bidtime, B.price AS bid, A.price AS ask, B.window_start, B.window_end
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) B
LEFT JOIN TABLE(TUMBLE(TABLE {{ ref('asks') }}, DESCRIPTOR(asktime), INTERVAL '10' MINUTES)) A
ON B.item = A.item AND B.window_start = A.window_start AND B.window_end = A.window_end""",
    "running.sql": STREAM
    + """SELECT item, bidtime, SUM(price) OVER (PARTITION BY item ORDER BY bidtime
  RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW) AS last_10min
FROM {{ ref('bids') }}""",
    "per_item.sql": "{{ config(materialized='upsert_table', state_ttl='30 days') }}\n"
    "SELECT item, COUNT(*) AS bids, SUM(price) AS total FROM {{ ref('bids') }} GROUP BY item",
    "latest_bid.sql": "{{ config(materialized='upsert_table', unique_key='item', "
    "apply_changes={'sequence_by': 'bidtime', 'delete_when': 'price < 0'}) }}\n"
    "SELECT * FROM {{ ref('bids') }}",
    "early.sql": "{{ config(materialized='upsert_table', watermark_delay='1 minute', "
    "emit={'early': true}) }}\n"
    "SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids FROM "
    + TVF.format(kind="TUMBLE", args="INTERVAL '10' MINUTES")
    + " GROUP BY window_start, window_end",
    "enriched.sql": "{{ config(materialized='streaming_view', dimensions=['asks']) }}\n"
    "SELECT b.item, b.price AS bid, a.price AS ask "
    "FROM {{ source('raw', 'bids') }} b JOIN {{ ref('asks') }} a ON b.item = a.item",
    "labels.sql": "{{ config(materialized='table') }}\nSELECT 'A' AS item, 'first' AS label",
    "labelled.sql": "{{ config(materialized='streaming_view') }}\n"  # labels: a table, by the graph
    "SELECT b.item, b.price, l.label "
    "FROM {{ source('raw', 'bids') }} b JOIN {{ ref('labels') }} l ON b.item = l.item",
    "sources.yml": "sources:\n  - name: raw\n    schema: '{{ target.schema }}'\n"
    "    tables: [{name: bids}, {name: rates, config: {meta: {unique_key: item, "
    "event_time: rtime}}}]\n",
    "converted.sql": STREAM + "SELECT b.item, b.bidtime, b.price * r.rate AS eur "
    "FROM {{ source('raw', 'bids') }} b LEFT JOIN {{ source('raw', 'rates') }} "
    "FOR SYSTEM_TIME AS OF b.bidtime AS r ON b.item = r.item",
    "doubled.sql": "{{ config(materialized='table') }}\n"
    "SELECT item, price * 2 AS price2 FROM {{ ref('bids') }}",
    "feed.sql": "{{ config(materialized='streaming_view', read_change_feed=true) }}\n"
    "SELECT * FROM {{ ref('bids') }}",
}

FLINK_BIDS = """
          - {bidtime: "2020-04-15 08:05:00", price: 4, item: C}
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: D}
          - {bidtime: "2020-04-15 08:11:00", price: 3, item: B}
          - {bidtime: "2020-04-15 08:13:00", price: 1, item: E}
          - {bidtime: "2020-04-15 08:17:00", price: 6, item: F}"""


def window_rows(rows: list[tuple], extra: str = "") -> str:
    return "".join(
        f'\n        - {{window_start: "2020-04-15 {s}:00", window_end: "2020-04-15 {e}:00", '
        + ", ".join(f"{k}: {v}" for k, v in values.items())
        + "}"
        for s, e, values in rows
    )


def unit_test(name: str, model: str, expect: str, given: str = FLINK_BIDS, meta: str = "") -> str:
    return f"""
  - name: {name}
    model: {model}{meta}
    given:
      - input: ref('bids')
        rows:{given}
    expect:
      rows:{expect}"""


TUMBLE = [
    ("08:00", "08:10", {"total": 11, "bids": 3}),
    ("08:10", "08:20", {"total": 10, "bids": 3}),
]
HOP = [
    ("08:00", "08:10", {"total": 11}),
    ("08:05", "08:15", {"total": 15}),
    ("08:10", "08:20", {"total": 10}),
    ("08:15", "08:25", {"total": 6}),
]
CUMULATE = [
    ("08:00", "08:06", {"total": 4}),
    ("08:00", "08:08", {"total": 6}),
    ("08:00", "08:10", {"total": 11}),
    ("08:10", "08:12", {"total": 3}),
    ("08:10", "08:14", {"total": 4}),
    ("08:10", "08:16", {"total": 4}),
    ("08:10", "08:18", {"total": 10}),
    ("08:10", "08:20", {"total": 10}),
]
SESSIONS = [
    ("08:05", "08:16", {"bids": 5, "total": 15}),
    ("08:17", "08:20", {"bids": 1, "total": 6}),
]


def wrong(rows: list[tuple]) -> list[tuple]:
    """`rows` with the last row's first value off by one."""
    s, e, values = rows[-1]
    key = next(iter(values))
    return rows[:-1] + [(s, e, {**values, key: values[key] + 1})]


JOIN_BIDS = """
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:11:00", price: 3, item: B}
          - {bidtime: "2020-04-15 08:05:00", price: 4, item: C}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: D}"""
JOIN_EXPECT = """
        - {item: A, bidtime: "2020-04-15 08:07:00", bid: 2, ask: 3, window_start: "2020-04-15 08:00:00", window_end: "2020-04-15 08:10:00"}
        - {item: B, bidtime: "2020-04-15 08:11:00", bid: 3, ask: 2, window_start: "2020-04-15 08:10:00", window_end: "2020-04-15 08:20:00"}
        - {item: C, bidtime: "2020-04-15 08:05:00", bid: 4, ask: null, window_start: "2020-04-15 08:00:00", window_end: "2020-04-15 08:10:00"}
        - {item: D, bidtime: "2020-04-15 08:09:00", bid: 5, ask: 5, window_start: "2020-04-15 08:00:00", window_end: "2020-04-15 08:10:00"}"""  # noqa: E501


def join_test(name: str, expect: str) -> str:
    return f"""
  - name: {name}
    model: bids_asks
    given:
      - input: ref('bids')
        rows:{JOIN_BIDS}
      - input: ref('asks')
        format: csv
        rows: |
          asktime,price,item
          2020-04-15 08:02:00,3,A
          2020-04-15 08:12:00,2,B
          2020-04-15 08:04:00,5,D
    expect:
      rows:{expect}"""


OVER_BIDS = """
          - {bidtime: "2020-04-15 08:00:00", price: 1, item: X}
          - {bidtime: "2020-04-15 08:12:00", price: 4, item: X}
          - {bidtime: "2020-04-15 08:05:00", price: 2, item: X}
          - {bidtime: "2020-04-15 08:03:00", price: 10, item: Y}"""
OVER_EXPECT = """
        - {item: X, bidtime: "2020-04-15 08:00:00", last_10min: 1}
        - {item: X, bidtime: "2020-04-15 08:05:00", last_10min: 3}
        - {item: X, bidtime: "2020-04-15 08:12:00", last_10min: 6}
        - {item: Y, bidtime: "2020-04-15 08:03:00", last_10min: 10}"""
UPSERT_BIDS = """
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:19:00", price: 7, item: A}
          - {bidtime: "2020-04-15 08:11:00", price: 3, item: B}"""
UPSERT_EXPECT = """
        - {item: A, bids: 2, total: 9}
        - {item: B, bids: 1, total: 3}"""
CHANGES = (
    UPSERT_BIDS
    + """
          - {bidtime: "2020-04-15 08:15:00", price: -1, item: B}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: B}"""
)
CHANGES_EXPECT = '\n        - {bidtime: "2020-04-15 08:19:00", price: 7, item: A}'
WATERMARK = "\n    config:\n      meta: {watermark: '%s'}"

UNIT_TESTS = (
    "unit_tests:"
    + "".join(
        [
            unit_test("tumble_right", "tumble", window_rows(TUMBLE)),
            unit_test("tumble_wrong", "tumble", window_rows(wrong(TUMBLE))),
            unit_test("hop_right", "hop", window_rows(HOP)),
            unit_test("hop_wrong", "hop", window_rows(wrong(HOP))),
            unit_test("cumulate_right", "cumulate", window_rows(CUMULATE)),
            unit_test("cumulate_wrong", "cumulate", window_rows(CUMULATE[1:])),  # a window missing
            unit_test("sessions_right", "sessions", window_rows(SESSIONS)),
            unit_test("sessions_wrong", "sessions", window_rows(wrong(SESSIONS))),
            join_test("join_right", JOIN_EXPECT),
            join_test("join_wrong", JOIN_EXPECT.replace("bid: 4, ask: null", "bid: 4, ask: 4")),
            unit_test("over_right", "running", OVER_EXPECT, OVER_BIDS),
            unit_test(
                "over_wrong",
                "running",
                OVER_EXPECT.replace("last_10min: 6", "last_10min: 7"),
                OVER_BIDS,
            ),
            unit_test("upsert_right", "per_item", UPSERT_EXPECT, UPSERT_BIDS),
            unit_test(
                "upsert_wrong",
                "per_item",
                UPSERT_EXPECT.replace("total: 9", "total: 7"),
                UPSERT_BIDS,
            ),
            # apply_changes: per item the latest bid; B's latest is a delete (price < 0)
            unit_test("changes_right", "latest_bid", CHANGES_EXPECT, CHANGES),
            unit_test("changes_wrong", "latest_bid", CHANGES_EXPECT.replace("7", "2"), CHANGES),
            # what a stream had emitted once its watermark reached 08:10: the first window only
            unit_test(
                "watermark_right",
                "tumble",
                window_rows(TUMBLE[:1]),
                meta=WATERMARK % "2020-04-15 08:10:00",
            ),
            unit_test(
                "watermark_wrong",
                "tumble",
                window_rows(TUMBLE),
                meta=WATERMARK % "2020-04-15 08:10:00",
            ),
            unit_test(
                "batch_model",
                "doubled",
                "\n        - {item: A, price2: 4}",
                '\n          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}',
            ),
            unit_test(
                "change_feed", "feed", "\n        - {item: A}", "\n          - {price: 2, item: A}"
            ),
            unit_test("bad_watermark", "tumble", window_rows(TUMBLE), meta=WATERMARK % "at eight"),
        ]
    )
)
UNIT_TESTS += """
  - name: early_right
    model: early
    config:
      meta: {watermark: '2020-04-15 08:10:00'}
    given:
      - input: ref('bids')
        rows:%s
    expect:
      rows:%s
  - name: dimension_right
    model: enriched
    given:
      - input: source('raw', 'bids')
        rows:
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: D}
      - input: ref('asks')
        rows:
          - {asktime: "2020-04-15 08:02:00", price: 3, item: A}
    expect:
      rows: [{item: A, bid: 2, ask: 3}]
  - name: temporal_right
    model: converted
    given:
      - input: source('raw', 'bids')
        rows:
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:11:00", price: 3, item: A}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: D}
      - input: source('raw', 'rates')
        rows:
          - {rtime: "2020-04-15 08:00:00", rate: 10, item: A}
          - {rtime: "2020-04-15 08:10:00", rate: 100, item: A}
    expect:
      rows:%s
  - name: temporal_wrong
    model: converted
    given:
      - input: source('raw', 'bids')
        rows:
          - {bidtime: "2020-04-15 08:11:00", price: 3, item: A}
      - input: source('raw', 'rates')
        rows:
          - {rtime: "2020-04-15 08:00:00", rate: 10, item: A}
          - {rtime: "2020-04-15 08:10:00", rate: 100, item: A}
    expect:
      rows: [{item: A, bidtime: "2020-04-15 08:11:00", eur: 30}]
  - name: graph_dimension_right
    model: labelled
    given:
      - input: source('raw', 'bids')
        rows:
          - {bidtime: "2020-04-15 08:07:00", price: 2, item: A}
          - {bidtime: "2020-04-15 08:09:00", price: 5, item: D}
      - input: ref('labels')
        format: sql
        rows: select 'A' as item, 'first' as label
    expect:
      rows: [{item: A, price: 2, label: first}]
""" % (
    FLINK_BIDS,
    window_rows(TUMBLE),  # early: the open window too, with what it holds
    # each bid at the rate valid at its time; D has none (LEFT: NULL)
    """
        - {item: A, bidtime: "2020-04-15 08:07:00", eur: 20}
        - {item: A, bidtime: "2020-04-15 08:11:00", eur: 300}
        - {item: D, bidtime: "2020-04-15 08:09:00", eur: null}""",
)
UNIT_TESTS += """
  - name: missing_time
    model: tumble
    given:
      - input: ref('bids')
        format: sql
        rows: select 2.0 as price, 'A' as item
    expect:
      rows: [{total: 2}]
  - name: missing_price
    model: tumble
    given:
      - input: ref('bids')
        format: sql
        rows: select timestamp'2020-04-15 08:07:00' as bidtime, 'A' as item
    expect:
      rows: [{total: 2}]
"""


class TestUnitTests:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "bids.csv": BIDS_CSV,
            "asks.csv": "asktime,price,item\n2020-04-15 08:02:00,3,A\n",
            "rates.csv": "rtime,rate,item\n2020-04-15 08:00:00,10,A\n",  # (source raw.rates)
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {**MODELS, "unit_tests.yml": UNIT_TESTS}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        types = {"price": "double", "item": "string"}
        return {
            "seeds": {
                "bids": {"+column_types": {"bidtime": "timestamp", **types}},
                "asks": {"+column_types": {"asktime": "timestamp", **types}},
                "rates": {"+column_types": {"rtime": "timestamp", "rate": "double"}},
            }
        }

    def test_right_pass_wrong_fail_bad_input_is_a_coded_error(self, project):
        run_dbt(["seed"])
        results = run_dbt(["test", "--select", "test_type:unit"], expect_pass=False)
        status = {r.node.name: r.status for r in results}
        message = {r.node.name: r.message or "" for r in results}
        assert len(status) == 28, status
        for name, got in status.items():
            if name.endswith("_right") or name == "batch_model":
                assert got == "pass", (name, message[name])
            elif name.endswith("_wrong"):
                assert got == "fail", (name, message[name])
        for name, code in (
            ("change_feed", "SST507"),
            ("bad_watermark", "SST508"),
            ("missing_time", "SSV103"),  # the compiler's own check, as in a dbt run
            ("missing_price", "SST509"),
        ):
            assert status[name] == "error" and code in message[name], (name, message[name])
        # a failing one shows dbt's diff: the expected value -> the actual one
        plain = {n: re.sub(r"\x1b\[[0-9;]*m", "", m) for n, m in message.items()}
        assert "11→10" in plain["tumble_wrong"], plain["tumble_wrong"]
        assert "7→6" in plain["over_wrong"], plain["over_wrong"]
