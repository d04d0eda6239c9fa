#!/usr/bin/env bash
# The test suite: unit tests of sql/ (no Spark) and functional tests through dbt (one
# SparkSession per pytest session; crash tests run dbt in subprocesses).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest tests "$@"
