#!/usr/bin/env bash
# Create .venv with the adapter (editable) and its test dependencies. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v java >/dev/null || { echo "Java 17 is required by Spark (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# compat mode puts the checkout on sys.path, which dbt's pkgutil namespaces (dbt.include.*) need
.venv/bin/pip install --quiet -e '.[test]' --config-settings editable_mode=compat
