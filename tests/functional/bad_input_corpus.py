"""Run the bad-input corpus and print its figure: cases, passing, share.

    .venv/bin/python -m tests.functional.bad_input_corpus [pytest options]

The corpus is every test of tests/functional/test_bad_input*.py: each feeds dbt one bad input
(model SQL, config, a source changed under a model, a damaged checkpoint, a place that cannot
be written) and checks the coded error, that nothing was written or changed, and that the
advice works when followed. A case skipped (a tmpfs cannot be mounted here) is counted apart.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["test_bad_input.py", "test_bad_input_runtime.py"]


class Tally:
    """A pytest plugin that counts the outcome of each case (its call, or a failed setup)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or report.outcome != "passed":
            if report.nodeid not in self.outcomes or report.outcome != "passed":
                self.outcomes[report.nodeid] = report.outcome


def main(args: list[str]) -> int:
    tally = Tally()
    code = pytest.main([os.path.join(HERE, f) for f in FILES] + ["-q", *args], plugins=[tally])
    values = list(tally.outcomes.values())
    passed, skipped = values.count("passed"), values.count("skipped")
    ran = len(values) - skipped
    share = 100.0 * passed / ran if ran else 0.0
    print(
        f"bad-input corpus: {len(values)} cases, {passed} passing of {ran} run ({share:.0f}%)"
        + (f", {skipped} skipped" if skipped else "")
    )
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
