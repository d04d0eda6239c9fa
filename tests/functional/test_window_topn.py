"""Window Top-N and window deduplication (ROW_NUMBER() OVER (PARTITION BY window_start,
window_end ...) filtered by rownum) over TUMBLE, HOP and CUMULATE rows, through `dbt run`: a
seeded random event stream, out of order within the watermark delay, appended in several
Delta versions with `dbt run` after each. After every run each streaming_view table equals
the same query run by Spark in batch over all rows appended so far, restricted to the
windows the watermark has closed, and the snapshot_equivalence test passes."""
from datetime import datetime, timedelta, timezone

import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.runtime.session import get_spark

from .helpers import commits, rows, table_path
from .test_window_tvfs import CONFIG, EV, SOURCES, append, appends, batch_rows

TUMBLE = f"TUMBLE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '5' MINUTES)"
HOP = f"HOP(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '4' MINUTES)"
CUMULATE = f"CUMULATE(TABLE {EV}, DESCRIPTOR(ts), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES, INTERVAL '-3' MINUTES)"
# Per model: the query and which of its rows the stream has emitted given the watermark (a
# window when its end <= the watermark; CUMULATE windows with their max window, at
# window_start + max size). Ties in the ORDER BY keys are broken by ts (unique) so that
# ROW_NUMBER is deterministic.
MODELS = {
    "tumble_top2": (
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k "
        f"ORDER BY v DESC, ts) AS rownum FROM TABLE({TUMBLE})) WHERE rownum <= 2",
        lambda r, wm: r[4] <= wm),
    "hop_first": (
        f"SELECT ts, k, v, window_start, window_end, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
        f"window_start, window_end, k ORDER BY ts ASC) AS rn FROM TABLE({HOP})) WHERE rn = 1",
        lambda r, wm: r[4] <= wm),
    "cumulate_last": (
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
        f"ORDER BY ts DESC) AS rownum FROM TABLE({CUMULATE})) WHERE rownum < 2",
        lambda r, wm: r[3] + timedelta(minutes=10) <= wm),
}


class TestWindowTopN:
    @pytest.fixture(scope="class")
    def models(self):
        tests = "models:\n" + "".join(f"  - {{name: {name}, data_tests: [snapshot_equivalence]}}\n" for name in MODELS)
        return {"sources.yml": SOURCES, "tests.yml": tests,
                **{f"{name}.sql": CONFIG + sql for name, (sql, _) in MODELS.items()}}

    def test_stream_equals_batch_on_closed_windows(self, project):
        source, schema = table_path(project, "ev"), project.test_schema
        emitted = {name: [] for name in MODELS}
        for events in appends(seed=11):
            append(source, events)
            results = run_dbt(["run"])
            get_spark().createDataFrame(DeltaTable(source).to_pyarrow_table()).createOrReplaceTempView("window_tvfs_ev")
            assert {r.node.name: r.adapter_response["late_rows"] for r in results} == {n: 0 for n in MODELS}
            for name, (sql, closed) in MODELS.items():
                path = table_path(project, name)
                watermark = datetime.fromtimestamp(commits(path)[-1]["watermark_ms"] / 1000, timezone.utc)
                everything = batch_rows(schema, sql)
                expected = [r for r in everything if closed(r, watermark)]
                assert rows(path) == expected, name
                emitted[name].append((len(expected), len(everything)))
            assert len(run_dbt(["test"])) == len(MODELS)
        assert all(0 < a[0] < b[0] < c[0] for a, b, c in emitted.values()), emitted
        assert all(n[-1][0] < n[-1][1] for n in emitted.values()), emitted
        # Top-N keeps at most N rows per group, and rownum counts from 1.
        top2 = rows(table_path(project, "tumble_top2"))
        assert {r[-1] for r in top2} == {1, 2}
        assert {r[-1] for r in rows(table_path(project, "cumulate_last"))} == {1}
