"""The README's table of streaming constructs is true: each row's example query compiles for
each materialization (`runs`) or is refused with the code the table gives, before any stream
starts. That a compiled query runs and gives the batch query's rows is the functional tests'
part (tests/functional); this keeps the user-facing table from drifting from the compiler."""

import re
from pathlib import Path

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, Versioned, compile_query

README = Path(__file__).parents[2] / "README.md"
SCHEMAS = {
    "a.bids": {"bidtime": "timestamp", "price": "double", "item": "string", "supplier": "string"},
    "a.asks": {"asktime": "timestamp", "price": "double", "item": "string"},
    "a.rates": {"rtime": "timestamp", "currency": "string", "rate": "double"},
}
TUMBLE = "TABLE(TUMBLE(TABLE a.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
ASKS = "TABLE(TUMBLE(TABLE a.asks, DESCRIPTOR(asktime), INTERVAL '10' MINUTES))"
WIN = "window_start, window_end"
AGG = f"SELECT {WIN}, item, SUM(price) AS s FROM {TUMBLE} GROUP BY {WIN}, item"
ASK_AGG = f"SELECT {WIN}, item, COUNT(*) AS n FROM {ASKS} GROUP BY {WIN}, item"
# the README row's first cell (without backquotes) -> an example of it
EXAMPLES = {
    "TUMBLE, HOP, CUMULATE rows": f"SELECT * FROM {TUMBLE}",
    "window aggregate (TUMBLE, HOP, CUMULATE, SESSION)": (
        f"SELECT {WIN}, SUM(price) AS s FROM TABLE(CUMULATE(TABLE a.bids, DESCRIPTOR(bidtime), "
        f"INTERVAL '2' MINUTES, INTERVAL '10' MINUTES)) GROUP BY {WIN}"
    ),
    "GROUPING SETS, ROLLUP, CUBE of a window aggregate": (
        f"SELECT {WIN}, item, supplier, SUM(price) AS s FROM {TUMBLE} "
        f"GROUP BY {WIN}, GROUPING SETS ((item), (supplier), ())"
    ),
    "group window (GROUP BY TUMBLE(ts, size), HOP, SESSION)": (
        "SELECT TUMBLE_START(bidtime, INTERVAL '1' HOUR) AS ws, item, SUM(price) AS s "
        "FROM a.bids GROUP BY TUMBLE(bidtime, INTERVAL '1' HOUR), item"
    ),
    "GROUP BY FLOOR(ts TO unit) / CEIL": (
        "SELECT FLOOR(bidtime TO HOUR) AS h, item, COUNT(*) AS n FROM a.bids "
        "GROUP BY FLOOR(bidtime TO HOUR), item"
    ),
    "window Top-N, window deduplication": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY price DESC) AS rn FROM {TUMBLE}) WHERE rn <= 3"
    ),
    "window Top-N over a window aggregate": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY s DESC) AS rn FROM ({AGG})) WHERE rn <= 3"
    ),
    "window join (TVF rows)": (
        f"SELECT L.window_start, L.window_end, L.item, L.price, R.price AS ask FROM {TUMBLE} AS L "
        f"JOIN {ASKS} AS R ON L.item = R.item AND L.window_start = R.window_start "
        "AND L.window_end = R.window_end"
    ),
    "window join of window aggregates": (
        f"SELECT L.window_start, L.window_end, L.item, L.s, R.n FROM ({AGG}) AS L "
        f"JOIN ({ASK_AGG}) AS R ON L.item = R.item AND L.window_start = R.window_start "
        "AND L.window_end = R.window_end"
    ),
    "interval join (INNER, LEFT / RIGHT / FULL OUTER)": (
        "SELECT b.item, b.price, s.price AS ask FROM a.bids AS b LEFT JOIN a.asks AS s "
        "ON b.item = s.item AND s.asktime BETWEEN b.bidtime AND b.bidtime + INTERVAL '1' HOUR"
    ),
    "window SEMI / ANTI join (IN, EXISTS, NOT EXISTS)": (
        f"SELECT * FROM {TUMBLE} AS L WHERE NOT EXISTS (SELECT * FROM {ASKS} AS R "
        "WHERE L.window_start = R.window_start AND L.window_end = R.window_end "
        "AND L.item = R.item)"
    ),
    "window ANTI join with NOT IN": (
        f"SELECT * FROM {TUMBLE} WHERE (window_start, window_end, item) NOT IN "
        f"(SELECT window_start, window_end, item FROM {ASKS})"
    ),
    "join of two streams without a time bound": (
        "SELECT b.item, b.price, s.price AS ask FROM a.bids AS b JOIN a.asks AS s "
        "ON b.item = s.item"
    ),
    "event-time temporal join (JOIN v FOR SYSTEM_TIME AS OF o.ts, INNER and LEFT)": (
        "SELECT b.item, r.rate FROM a.bids AS b LEFT JOIN a.rates FOR SYSTEM_TIME AS OF b.bidtime "
        "AS r ON b.item = r.currency",
        {"versioned": {"a.rates": Versioned(("currency",), "rtime", "meta")}},
    ),
    "temporal join with a table that is not versioned": (
        "SELECT b.item, r.price FROM a.bids AS b JOIN a.asks FOR SYSTEM_TIME AS OF b.bidtime "
        "AS r ON b.item = r.item"
    ),
    "OVER a named window, refined (OVER (w ROWS 2 PRECEDING), Calcite's OVER w (RANGE ...))": (
        "SELECT item, bidtime, SUM(price) OVER w (RANGE INTERVAL '10' MINUTE PRECEDING) AS s "
        "FROM a.bids WINDOW w AS (ORDER BY bidtime PARTITION BY item)"
    ),
    "a ranking without a bound (RANK() OVER (ORDER BY lastAction) over an aggregate)": (
        "SELECT item, RANK() OVER (ORDER BY last) AS r FROM "
        "(SELECT item, MAX(bidtime) AS last FROM a.bids GROUP BY item)"
    ),
    "OVER aggregation (RANGE / ROWS frames)": (
        "SELECT item, SUM(price) OVER (PARTITION BY item ORDER BY bidtime "
        "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM a.bids"
    ),
    "OVER any aggregate over a RANGE / ROWS frame (STDDEV, COUNT(DISTINCT), PERCENTILE, ...)": (
        "SELECT item, STDDEV(price) OVER w AS sd, COUNT(DISTINCT supplier) OVER w AS n, "
        "PERCENTILE(price, 0.9) OVER w AS p90 FROM a.bids "
        "WINDOW w AS (PARTITION BY item ORDER BY bidtime RANGE INTERVAL '10' MINUTE PRECEDING)"
    ),
    "OVER an aggregate without a running accumulator (PERCENTILE, COUNT(DISTINCT), COLLECT_LIST, "
    "...) over an UNBOUNDED frame": (
        "SELECT item, PERCENTILE(price, 0.5) OVER (PARTITION BY item ORDER BY bidtime) AS m "
        "FROM a.bids"
    ),
    "OVER ordered by a non-time column, or a FOLLOWING frame": (
        "SELECT item, SUM(price) OVER (PARTITION BY item ORDER BY price) AS s FROM a.bids"
    ),
    "aggregate without a window, SELECT DISTINCT": (
        "SELECT item, SUM(price) AS s FROM a.bids GROUP BY item"
    ),
    "deduplication (keep first / last per key)": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item ORDER BY bidtime) AS rn "
        "FROM a.bids) WHERE rn = 1"
    ),
    "Top-N without a window": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item ORDER BY price DESC) "
        "AS rn FROM a.bids) WHERE rn <= 3"
    ),
    "Top-N over a non-windowed aggregate": (
        "SELECT * FROM (SELECT item, s, ROW_NUMBER() OVER (ORDER BY s DESC) AS rn FROM "
        "(SELECT item, SUM(price) AS s FROM a.bids GROUP BY item)) WHERE rn <= 3"
    ),
    "UNION ALL of streams": (
        "SELECT item, price FROM a.bids UNION ALL SELECT item, price FROM a.asks"
    ),
    "now(), CURRENT_TIMESTAMP, PROCTIME()": (
        "SELECT item, price FROM a.bids WHERE bidtime > now() - INTERVAL 1 DAY"
    ),
    "VALUES as a source": "SELECT * FROM VALUES (1, 2) AS t(a, b)",
    "change feed applied by key (apply_changes, SCD type 1)": (
        "SELECT * FROM a.bids",
        {"unique_key": ["item"], "apply_changes": {"sequence_by": "bidtime"}},
    ),
    "change feed kept as history (apply_changes, SCD type 2)": (
        "SELECT * FROM a.bids",
        {"unique_key": ["item"], "apply_changes": {"sequence_by": "bidtime", "scd_type": 2}},
    ),
    "aggregate over an upsert_table or a read_change_feed source (rows updated and deleted)": (
        "SELECT item, MIN(price) AS low, COUNT(DISTINCT supplier) AS n, SUM(price) AS s "
        "FROM a.bids GROUP BY item",
        {"changelogs": {"a.bids": "a.bids_changelog"}},
    ),
}
ROW = re.compile(r"^\| (?P<construct>[^|]+?) \| (?P<view>[^|]+?) \| (?P<upsert>[^|]+?) \|$")


def readme_rows() -> dict[str, tuple[str, str]]:
    """The README table under '## Streaming SQL': construct -> (streaming_view, upsert_table)."""
    text = README.read_text().split("## Streaming SQL", 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if m and m["construct"] not in ("construct", "---"):
            found[m["construct"].replace("`", "")] = (m["view"], m["upsert"])
    return found


def outcome(example, materialization: str) -> str:
    """'runs' or the code that refuses `example` (its SQL, or its SQL and model configs)."""
    sql, config = example if isinstance(example, tuple) else (example, {})
    try:
        compile_query(
            sql,
            schemas=SCHEMAS,
            watermark_delay="1 minute",
            materialization=materialization,
            # apply_changes keeps its own state (and refuses state_ttl)
            state_ttl="1 day"
            if materialization == "upsert_table" and "apply_changes" not in config
            else None,
            **config,
        )
    except SqlError as e:
        return e.code
    return "runs"


def test_every_row_has_an_example():
    assert set(readme_rows()) == set(EXAMPLES)


@pytest.mark.parametrize("construct", sorted(EXAMPLES))
def test_the_table_says_what_the_compiler_does(construct):
    claimed = readme_rows()[construct]
    for materialization, cell in zip(("streaming_view", "upsert_table"), claimed, strict=True):
        expected = re.match(r"(runs|SS[VCR]\d{3})", cell.replace("`", ""))
        assert expected, f"{construct}: README cell {cell!r} starts with neither runs nor a code"
        assert outcome(EXAMPLES[construct], materialization) == expected[1], (
            construct,
            materialization,
        )
