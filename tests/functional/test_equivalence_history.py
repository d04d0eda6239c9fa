"""snapshot_equivalence over a table whose Delta log lost its first commits (removed after
`delta.logRetentionDuration` as the table was checkpointed): our metadata of them is kept beside
the table (delta/history.py), so the oracle knows what the first micro-batches read and dropped
as late (it used to guess, and failed a right table). Where that is gone too, it is SST506."""

import json
import os
import shutil
import time

import pytest
from dbt.tests.util import run_dbt
from deltalake import DeltaTable

from dbt.adapters.spark_streaming.layout import history_path

from .helpers import append_bids, equivalence_tests, rows, table_path
from .test_lifecycle import Base

MODEL = """
{{ config(materialized='streaming_view', watermark_delay='1 minute',
          tblproperties=var('props', {})) }}
SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
"""


class TestHistoryGone(Base):
    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": MODEL, "tests.yml": equivalence_tests(["per_10min"])}

    def test_a_table_whose_first_commits_expired_is_tested_over_its_whole_history(self, project):
        out, bids = table_path(project, "per_10min"), table_path(project, "bids")
        run_dbt(["seed"])
        run_dbt(["run"])
        short = {
            "delta.checkpointInterval": "2",
            "delta.logRetentionDuration": "interval 5 seconds",
        }
        props = ["--vars", json.dumps({"props": short})]  # config tblproperties, from now on
        for n, minute in enumerate([20, 27, 34, 41]):
            # each with a bid for the closed 08:00 window, which the stream drops as late
            append_bids(bids, [(f"2020-04-15 08:{minute}:00", 1.0 + n, "X")])
            append_bids(bids, [("2020-04-15 08:01:00", 100.0, "LATE")])
            run_dbt(["run", *props])
            assert DeltaTable(out).metadata().configuration == short
            if n == 1:
                assert [r.status for r in run_dbt(["test"])] == ["pass"]  # the whole history
                time.sleep(6)  # the commits so far expire; the next checkpoints remove them
        assert not os.path.exists(os.path.join(out, "_delta_log", f"{0:020d}.json"))
        assert (2.0 + 4.0 + 5.0) in [r[2] for r in rows(out)]  # 08:00, no late bid in it
        assert [r.status for r in run_dbt(["test"])] == ["pass"]
        # what no log nor our metadata knows any more: the first batches' input is a guess
        shutil.rmtree(history_path(out))
        (result,) = run_dbt(["test"], expect_pass=False)
        assert result.status == "error" and "SST506" in result.message, result.message
        assert "logRetentionDuration" in result.message

    def test_a_property_delta_does_not_know_fails_before_the_run(self, project):
        out = table_path(project, "per_10min")
        version = DeltaTable(out).version()
        for props in ({"delta.nope": "1"}, {"delta.logRetentionDuration": "sixty days"}):
            (result,) = run_dbt(["run", "--vars", json.dumps({"props": props})], expect_pass=False)
            assert "SSC201" in result.message and "tblproperties" in result.message
        assert DeltaTable(out).version() == version
