"""The random SIGKILL harness (kill.py) with a small count: 2 process groups killed (`dbt run`
and the continuous model's runner) at seeded random moments; every run after a kill succeeds,
and every table equals the batch query over its input after every round. The full count is a
command: `python -m tests.reliability.kill --kills 50` (README)."""

import pytest

from .kill import run_rounds

pytestmark = pytest.mark.slow


def test_random_kills_lose_and_duplicate_nothing(tmp_path):
    fig = run_rounds(tmp_path, kills=2, seed=7)
    print(fig.line())  # shown with -s, or -rP
    assert fig.kills >= 2 and fig.rows_checked > 0
    assert fig.failed_runs == [], fig.failed_runs
    assert (fig.lost, fig.duplicated, fig.wrong) == (0, 0, 0), fig.line()
