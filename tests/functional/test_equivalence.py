"""The snapshot_equivalence test and the late-row listing, through `dbt run` / `dbt test` /
`dbt show`. The first class pins Spark's late-row rule (sql/oracle.py) with hand-computed
rows, then tampers with a table in every way the test must catch."""

import json
import os
import re

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, write_deltalake

from .helpers import rows, table_path, ts

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""

TUMBLE = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, SUM(v) AS total, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ source('raw', 'ev') }}, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""

HOP = """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, SUM(v) AS total, COUNT(*) AS n
FROM TABLE(HOP(TABLE {{ source('raw', 'ev') }}, DESCRIPTOR(ts), INTERVAL '5' MINUTES, \
INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""

TESTS = """
models:
  - name: tumble_agg
    data_tests: [snapshot_equivalence]
  - name: hop_agg
    data_tests: [snapshot_equivalence]
"""

# Three appends; the rows marked late are read by a batch whose watermark is already at or
# past the end of their window (08:29 for the second append, 08:39 for the third).
APPENDS = [
    [("08:00", 1), ("08:29", 2), ("08:30", 3)],
    [("08:25", 10), ("08:15", 100), ("08:19:59", 1000), ("08:20", 10000), ("08:40", 5)],
    [("08:30", 20), ("08:29:59", 200), ("08:31", 2000)],
]


def t(hms: str):
    return ts(f"2020-01-01 {hms}" + (":00" if hms.count(":") == 1 else ""))


def append(path: str, events: list[tuple[str, int]]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "ts": pa.array([t(e[0]) for e in events], pa.timestamp("us", tz="UTC")),
                "v": pa.array([e[1] for e in events], pa.int64()),
            }
        ),
        mode="append",
    )


def late_counts(results) -> dict[str, int]:
    return {r.node.name: r.adapter_response["late_rows"] for r in results}


class TestLateRowRuleAndTampering:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "tumble_agg.sql": TUMBLE,
            "hop_agg.sql": HOP,
            "tests.yml": TESTS,
        }

    def test_rule_listing_and_tampering(self, project):
        source = table_path(project, "ev")
        late = []
        for events in APPENDS:
            append(source, events)
            late.append(late_counts(run_dbt(["run"])))
            run_dbt(["test"])  # equivalence holds after every run
        # Spark drops a row from a window whose end <= the watermark of the batch reading it
        # (not by the row's own time: 08:25 read at watermark 08:29 still counts).
        assert rows(table_path(project, "tumble_agg")) == [
            (t("08:00"), t("08:10"), 1, 1),
            (t("08:20"), t("08:30"), 10012, 3),
        ]
        assert rows(table_path(project, "hop_agg")) == [
            (t("07:55"), t("08:05"), 1, 1),
            (t("08:00"), t("08:10"), 1, 1),
            (t("08:20"), t("08:30"), 10012, 3),
            (t("08:25"), t("08:35"), 15, 3),
        ]
        # Exact late counts per run, in (row, window) pairs; Spark's own metric counts rows
        # after partial aggregation (it reports 1 for the two late rows of the second run).
        assert late == [
            {"tumble_agg": 0, "hop_agg": 0},
            {"tumble_agg": 2, "hop_agg": 5},
            {"tumble_agg": 1, "hop_agg": 4},
        ]

        listed = run_dbt(
            [
                "show",
                "--inline",
                "select * from {{ late_rows(ref('tumble_agg')) }}",
                "--limit",
                "100",
            ]
        )[0].agate_table
        assert sorted(
            (r["v"], r["window_end"].strftime("%H:%M"), r["batch_watermark"].strftime("%H:%M"))
            for r in listed
        ) == [(100, "08:20", "08:29"), (200, "08:30", "08:39"), (1000, "08:20", "08:29")]

        path = table_path(project, "tumble_agg")
        good = DeltaTable(path).version()
        tamperings = {
            "row deleted": (lambda dt: dt.delete("total = 1"), 1, 0),
            "value changed": (lambda dt: dt.update({"total": "99"}, predicate="total = 1"), 1, 1),
            "row duplicated": (
                lambda dt: write_deltalake(path, dt.to_pyarrow_table().slice(0, 1), mode="append"),
                0,
                1,
            ),
            "late row included": (
                lambda dt: dt.update({"total": "10212", "n": "4"}, predicate="total = 10012"),
                1,
                1,
            ),
            "late window included": (
                lambda dt: write_deltalake(
                    path,
                    pa.table(
                        {
                            "window_start": pa.array([t("08:10")], pa.timestamp("us", tz="UTC")),
                            "window_end": pa.array([t("08:20")], pa.timestamp("us", tz="UTC")),
                            "total": pa.array([1100], pa.int64()),
                            "n": pa.array([2], pa.int64()),
                        }
                    ),
                    mode="append",
                ),
                0,
                1,
            ),
        }
        for what, (tamper, missing, unexpected) in tamperings.items():
            tamper(DeltaTable(path))
            results, out = run_dbt_and_capture(["test", "-s", "tumble_agg"], expect_pass=False)
            assert results[0].failures == missing + unexpected, what
            assert f"{missing} missing, {unexpected} unexpected" in out, what
            assert "changed outside the stream" in out, what
            if missing:
                assert re.search(r"missing: \(2020-01-01 08:\d\d:00", out), what
            tampered = DeltaTable(path).version()
            DeltaTable(path).restore(good)
            run_dbt(["test", "-s", "tumble_agg"])  # the restored table passes again
        # at_version checks an older version: the last tampered one fails, the good one passes.
        # `where` filters both sides: a deleted row outside the filter is not compared.
        DeltaTable(path).delete("total = 1")
        for test, ok in (
            ({"arguments": {"at_version": tampered}}, False),
            ({"arguments": {"at_version": good}}, True),
            ({"config": {"where": "total > 1"}}, True),
            ({"config": {"where": "total < 1000"}}, False),
        ):
            with open(os.path.join(project.project_root, "models", "tests.yml"), "w") as fh:
                json.dump(
                    {
                        "models": [
                            {"name": "tumble_agg", "data_tests": [{"snapshot_equivalence": test}]}
                        ]
                    },
                    fh,
                )
            run_dbt(["test", "-s", "tumble_agg"], expect_pass=ok)


# --- Randomized: every supported query shape stays snapshot-equivalent over random appends.

SHAPES = {
    "tumble_keys": """
{{ config(materialized='streaming_view', watermark_delay='2 minutes') }}
SELECT window_start, window_end, k, SUM(v) AS total, MIN(v) AS lo, MAX(ts) AS last_ts, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ source('raw', 'ev') }}, DESCRIPTOR(ts), INTERVAL '5' MINUTES, \
INTERVAL '-2' MINUTES))
WHERE v % 7 != 0
GROUP BY window_start, window_end, k HAVING COUNT(*) > 1
""",
    "hop_float": """
{{ config(materialized='streaming_view', watermark_delay='90 seconds') }}
SELECT window_start, window_end, window_time, AVG(price) AS avg_price, SUM(price) AS total,
       COUNT(DISTINCT k) AS keys
FROM TABLE(HOP(TABLE {{ source('raw', 'ev') }}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, \
INTERVAL '6' MINUTES))
GROUP BY window_start, window_end
""",
    "cumulate_keys": """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT window_start, window_end, k, SUM(v) AS total, COUNT(*) AS n
FROM TABLE(CUMULATE(TABLE {{ source('raw', 'ev') }}, DESCRIPTOR(ts), INTERVAL '1' MINUTES, \
INTERVAL '4' MINUTES))
GROUP BY window_start, window_end, k
""",
    "tvf_rows": """
{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
SELECT k, v, window_start, window_end FROM TABLE(TUMBLE(TABLE {{ source('raw', 'ev') }}, \
DESCRIPTOR(ts),
INTERVAL '3' MINUTES)) WHERE v > 10
""",
    "filtered": """
{{ config(materialized='streaming_view') }}
SELECT ts, k, v * 2 AS v2 FROM {{ source('raw', 'ev') }} WHERE k != 'c'
""",
}

SHAPE_TESTS = {
    "models": [
        {
            "name": name,
            "data_tests": ["snapshot_equivalence"],  # hop_float's doubles: the default tolerance
        }
        for name in SHAPES
    ]
}


def random_appends(seed: int, appends: int = 4) -> list[list[tuple]]:
    """Events about 20 s apart in time, shuffled within +-90 s, a few arriving 5-15 minutes
    late, split into `appends` random chunks."""
    import random
    from datetime import timedelta

    rng = random.Random(seed)
    start, events = t("09:00"), []
    for i in range(rng.randrange(150, 250)):
        at = start + timedelta(seconds=20 * i + rng.uniform(-90, 90))
        if rng.random() < 0.05:
            at -= timedelta(minutes=rng.uniform(5, 15))
        events.append(
            (
                at.replace(microsecond=rng.randrange(0, 10**6, 1000)),
                rng.choice("abc"),
                rng.randrange(0, 100),
                round(rng.uniform(0, 10), 3),
            )
        )
    cuts = sorted(rng.sample(range(1, len(events)), appends - 1))
    return [events[a:b] for a, b in zip([0] + cuts, cuts + [len(events)], strict=True)]


@pytest.mark.parametrize("seed", [11, pytest.param(29, marks=pytest.mark.full)])
class TestRandomStreamsStayEquivalent:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "tests.yml": json.dumps(SHAPE_TESTS),
            **{f"{name}.sql": sql for name, sql in SHAPES.items()},
        }

    def test_equivalent_after_every_run(self, project, seed):
        source, late = table_path(project, "ev"), 0
        for chunk in random_appends(seed):
            write_deltalake(
                source,
                pa.table(
                    {
                        "ts": pa.array([e[0] for e in chunk], pa.timestamp("us", tz="UTC")),
                        "k": pa.array([e[1] for e in chunk]),
                        "v": pa.array([e[2] for e in chunk], pa.int64()),
                        "price": pa.array([e[3] for e in chunk], pa.float64()),
                    }
                ),
                mode="append",
            )
            results = run_dbt(["run"])
            late += sum(late_counts(results).values())
            assert len(run_dbt(["test"])) == len(SHAPES)
        assert late > 0  # the generator's late events were really dropped, and accounted for
        assert len(rows(table_path(project, "tumble_keys"))) > 5
