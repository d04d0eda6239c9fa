#!/usr/bin/env bash
# The test suite: ruff and mypy, unit tests (no Spark), functional tests through dbt (one
# SparkSession per pytest session; crash tests run dbt in subprocesses), and the scale-out
# tests (a Spark standalone cluster and an S3 server started on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# lint, format and types first (seconds): any finding fails the run
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# two test processes (pytest-xdist), a test class or module each at a time: a serial run kept the
# 2 cores ~60% idle (dbt subprocesses starting, waits for triggers and commits)
.venv/bin/python -m pytest tests -n "${TEST_WORKERS:-2}" --dist loadscope "$@"
