-- The upsert_table holds one row, updated in place, and its changelog says how: +I after the
-- first run; -U/+U after the second (bid I, late for the windowed models, counts here).
-- depends_on: {{ ref('bids_running_total') }}  (so that `dbt build` tests it after the model)
{% set phase2 = var('phase', 1) == 2 %}
SELECT 'table' AS what, bids, total FROM analytics.bids_running_total
WHERE NOT (bids = {{ 10 if phase2 else 6 }} AND total = {{ 42 if phase2 else 21 }})
UNION ALL
SELECT 'changelog', COUNT(*), NULL FROM analytics.bids_running_total_changelog
HAVING COUNT(*) <> {{ 3 if phase2 else 1 }}
   OR SUM(CASE WHEN _op = '+U' THEN bids END) IS DISTINCT FROM {{ 10 if phase2 else 'NULL' }}
