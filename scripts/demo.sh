#!/usr/bin/env bash
# The demo: FLIP-145 bids -> a TUMBLE streaming_view, run twice with an append in between.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
cd integration_tests
rm -rf warehouse target
dbt seed --profiles-dir .
dbt run --profiles-dir .               # first run: all of `bids`; closes the 08:00 window
dbt test --profiles-dir .              # exact FLIP-145 rows
python scripts/append_bids.py          # second scenario: one more Delta version, one late bid (and one ask)
dbt run --profiles-dir .               # reads only the new version; closes 08:10 and 08:20
dbt test --profiles-dir . --vars '{phase: 2}'
# the upsert_table changelog: +I after the first run, -U/+U after the second
dbt show --profiles-dir . --inline "select * from analytics.bids_running_total_changelog order by _commit_version, _op desc"
# the bid the stream dropped as late, with its window and the watermark that dropped it
dbt show --profiles-dir . --inline "select * from {{ late_rows(ref('bids_per_10min')) }}"
