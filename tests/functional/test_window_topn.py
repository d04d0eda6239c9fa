"""Window Top-N and window deduplication (ROW_NUMBER() OVER (PARTITION BY window_start,
window_end ...) filtered by rownum) over TUMBLE, HOP and CUMULATE rows, through `dbt run`: a
seeded random event stream, out of order within the watermark delay, appended in several
Delta versions with `dbt run` after each. After every run each streaming_view table equals
the same query run by Spark in batch over all rows appended so far, restricted to the
windows the watermark has closed, and the snapshot_equivalence test passes."""
from datetime import timedelta

import pytest

from .test_window_tvfs import CONFIG, EV, SOURCES, check_runs

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
        tables = check_runs(project, MODELS, seed=11)
        # Top-N keeps at most N rows per group, and rownum counts from 1.
        assert {r[-1] for r in tables["tumble_top2"]} == {1, 2}
        assert {r[-1] for r in tables["cumulate_last"]} == {1}
