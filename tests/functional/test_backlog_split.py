"""A new stream's backlog split between a batch query and the stream (runtime/backlog.py): each
TUMBLE, HOP and CUMULATE aggregate runs twice over the same seeded random source, split and
with `split_backlog: false`. Versions after the first bring rows later than the watermark
(to windows the split gave to the batch query, and to others) and on-time rows; every version
has rows without an event time. After every run the two tables hold the same rows and count
the same rows read and late rows (the split's stream does not read the rows of the windows the
batch query aggregates; the run counts them), and snapshot_equivalence
passes on both. A query whose filter Spark moves below its WATERMARK clause does not split (its
latest event, filtered out, would have put the split above its watermark). A run killed after
the split is recorded, before its query starts, is rerun after a new version: the first batch
still reads the version the split was made for, the second reads nothing, and the new
version's rows of the windows the split closed are late; killed again after batch 1's Delta
commit, the next run replays batch 1 and reads on."""

import json
import os
import random
import re
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import write_deltalake

from dbt.adapters.spark_streaming.faults import EXIT_CODE
from dbt.adapters.spark_streaming.runtime.backlog import FILE

from .helpers import commits, equivalence_project, rows, table_path
from .test_exactly_once import DBT, dbt_run, events, write_project

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: ev}]
"""
EV = "{{ source('raw', 'ev') }}"
TVFS = {
    "tumble": "TUMBLE(TABLE {ev}, DESCRIPTOR(ts), INTERVAL '5' MINUTES)",
    "hop": "HOP(TABLE {ev}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '6' MINUTES)",
    "cumulate": "CUMULATE(TABLE {ev}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '8' MINUTES)",
}
# a filter on the time column stays above the WATERMARK clause: these split (sql/backlog.py)
QUERY = (
    "SELECT window_start, window_end, k, SUM(v) AS total, COUNT(*) AS n "
    "FROM TABLE({tvf}) WHERE v > 5 OR ts IS NULL GROUP BY window_start, window_end, k"
)
# Spark moves `v > 5` below it and sets the watermark from the rows that pass: no split
FILTERED = QUERY.replace(" OR ts IS NULL", "")


def config(split: bool) -> str:
    extra = "" if split else ", split_backlog=false"
    return f"{{{{ config(materialized='streaming_view', watermark_delay='1 minute'{extra}) }}}}\n"


MODELS = {
    f"{kind}_{'split' if split else 'whole'}": config(split) + QUERY.format(tvf=tvf.format(ev=EV))
    for kind, tvf in TVFS.items()
    for split in (True, False)
}
MODELS["filtered"] = config(True) + FILTERED.format(tvf=TVFS["tumble"].format(ev=EV))
EPOCH = datetime(2021, 3, 1, 10, 0, tzinfo=timezone.utc)


def version(rng: random.Random, first_minute: int, minutes: int, n: int, old: int) -> pa.Table:
    """n events over `minutes` minutes from `first_minute`, in random order, and `old` events
    anywhere before them (late, or in windows still open)."""

    def at(low: int, high: int) -> datetime:
        return EPOCH + timedelta(seconds=rng.uniform(low * 60, high * 60))

    times = [at(first_minute, first_minute + minutes) for _ in range(n)]
    times += [at(0, first_minute) for _ in range(old)] + [None, None]  # no window
    rng.shuffle(times)
    return pa.table(
        {
            "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
            "k": pa.array([rng.choice("xyz") for _ in times]),
            "v": pa.array([rng.randrange(100) for _ in times], pa.int64()),
        }
    )


class TestSplitEqualsWhole:
    @pytest.fixture(scope="class")
    def models(self):
        return equivalence_project(SOURCES, MODELS)

    def test_split_and_whole_tables_are_equal(self, project):
        rng = random.Random(11)
        source = table_path(project, "ev")
        late_total = {name: 0 for name in MODELS}
        for i, (first, minutes, n, old) in enumerate([(0, 60, 600, 0), (60, 10, 150, 60)]):
            events = version(rng, first, minutes, n, old)
            if i == 0:  # the latest event is one `filtered` drops: 2 minutes after the others
                late = {"ts": [EPOCH + timedelta(minutes=62)], "k": ["x"], "v": [0]}
                events = pa.concat_tables([events, pa.table(late, schema=events.schema)])
            write_deltalake(source, events, mode="append")
            if i == 1:  # a third version read by the same run
                write_deltalake(source, version(rng, 70, 10, 150, 60), mode="append")
            done, out = run_dbt_and_capture(["run"])
            results = {r.node.name: r.adapter_response for r in done}
            for kind in TVFS:
                split, whole = (table_path(project, f"{kind}_{s}") for s in ("split", "whole"))
                assert rows(split) == rows(whole) != [], (kind, i)
                for figure in ("late_rows", "rows_read"):  # the split's stream reads fewer
                    assert results[f"{kind}_split"][figure] == results[f"{kind}_whole"][figure]
                # and its batches' log lines count the rows the run read, as the summary
                batch_rows = re.findall(rf"\.{kind}_split: batch \d+[^:]*: (\d+) input rows", out)
                assert sum(map(int, batch_rows)) == results[f"{kind}_split"]["rows_read"], kind
                checkpoint = os.path.join(split, "_dbt_streaming", "checkpoint")
                assert os.path.isfile(os.path.join(checkpoint, FILE)), kind
                assert not os.path.exists(
                    os.path.join(whole, "_dbt_streaming", "checkpoint", FILE)
                ), kind
                if i == 0:  # the split gave most windows to the batch query
                    with open(os.path.join(checkpoint, FILE)) as fh:
                        closed_us = json.load(fh)["closed_us"]
                    ends = [r[1] for r in rows(split)]
                    assert closed_us > (EPOCH + timedelta(minutes=50)).timestamp() * 1e6
                    assert sum(e.timestamp() * 1e6 <= closed_us for e in ends) > len(ends) / 2
            # the filtered query did not split (its snapshot_equivalence test below fails if
            # it emits a window its watermark has not closed)
            filtered = table_path(project, "filtered")
            assert not os.path.exists(os.path.join(filtered, "_dbt_streaming", "checkpoint", FILE))
            for name in MODELS:
                late_total[name] += results[name]["late_rows"]
            assert len(run_dbt(["test"])) == len(MODELS)
        assert all(late > 0 for late in late_total.values()), late_total


def test_a_run_killed_after_the_split_reads_its_version_first(tmp_path):
    write_project(tmp_path)
    project = tmp_path / "project"
    source = str(tmp_path / "feed" / "events")
    (project / "models" / "tests.yml").write_text(
        "version: 2\nmodels:\n  - {name: per_item, data_tests: [snapshot_equivalence]}\n"
    )
    write_deltalake(source, events(1, 0))
    killed = dbt_run(str(project), "backlog_split")
    assert killed.returncode == EXIT_CODE, killed.stdout[-3000:] + killed.stderr[-2000:]
    out = tmp_path / "warehouse" / "crash" / "per_item"
    assert not os.path.exists(out / "_delta_log")

    # later rows, some of them for the windows the split gave to the batch query
    later = pa.concat_tables([events(2, 20, 200), events(3, 0, 100)])
    write_deltalake(source, later, mode="append")
    # killed again once batch 1 (the batch query's windows) is in Delta, not in Spark's log
    killed = dbt_run(str(project), "after_delta_commit@1")
    assert killed.returncode == EXIT_CODE, killed.stdout[-3000:] + killed.stderr[-2000:]
    assert "aggregated in batch" in killed.stdout
    rerun = dbt_run(str(project))  # replays batch 1, then reads the new version
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    meta = [m for m in commits(str(out)) if m["batch_id"] is not None]
    # batch 0 read the version of the split, batch 1 nothing (it closed batch 0's windows)
    assert [(m["batch_id"], m["sources"]["feed.events"]) for m in meta] == [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 1),
    ]
    with open(os.path.join(project, "target", "run_results.json")) as fh:
        (result,) = json.load(fh)["results"]
    assert result["adapter_response"]["late_rows"] > 0
    test = subprocess.run(
        [DBT, "test", "--project-dir", str(project), "--profiles-dir", str(project)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert test.returncode == 0 and "PASS=1" in test.stdout, test.stdout[-3000:]
