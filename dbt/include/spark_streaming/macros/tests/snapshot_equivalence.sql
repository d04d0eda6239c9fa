{#-
  snapshot_equivalence: the model's Delta table equals its query run in batch over exactly
  the source versions its stream consumed, with the rows the stream dropped as late left out
  and only windows the watermark closed (runtime/equivalence.py). Fails with one row per
  missing or unexpected row (column _diff), and logs counts and a sample.

    data_tests:
      - snapshot_equivalence                      # as of the table's last commit
      - snapshot_equivalence: {at_version: 3}     # as of an older version of the table
      - snapshot_equivalence: {float_tolerance: 1e-6}   # float/double columns: relative
                                                      # (default 1e-9; 0: exact), and
      - snapshot_equivalence: {float_abs_tolerance: 1e-9}   # the floor near zero (1e-12)
-#}
{% test snapshot_equivalence(model, at_version=none, float_tolerance=none, float_abs_tolerance=none) %}
  {%- if execute -%}
    {%- do register_source_locations() -%}
    {%- set result = adapter.snapshot_equivalence(model, at_version, float_tolerance, float_abs_tolerance) -%}
    {#- shown when it fails, or when state_ttl restarted keys were left out of the comparison -#}
    {%- do log(result.summary, info=(not result.passed or result.restarted_keys > 0)) -%}
    select * from {{ result.view }}
  {%- else -%}
    select 1 as _diff where false
  {%- endif -%}
{% endtest %}
