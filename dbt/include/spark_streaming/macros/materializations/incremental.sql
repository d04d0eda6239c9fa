{#-
  incremental: the first run (or --full-refresh, or a view in the way) builds the Delta table
  as `table` does; later runs add the SELECT's rows (`is_incremental()` is true) through
  delta-rs (runtime/batch.py):
    incremental_strategy  'append' (default) | 'merge' (default with unique_key) | 'insert_overwrite'
    unique_key            column(s) the merge matches on
    on_schema_change      'ignore' (default) | 'fail' | 'append_new_columns' | 'sync_all_columns'
    merge_update_columns / merge_exclude_columns, incremental_predicates (DataFusion SQL over
    DBT_INTERNAL_SOURCE / DBT_INTERNAL_DEST), partition_by.
-#}
{% materialization incremental, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = adapter.get_relation(database=database, schema=schema, identifier=this.identifier) -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {%- if existing_relation is not none and not existing_relation.is_table -%}
    {%- do adapter.drop_relation(existing_relation) -%}
    {%- set existing_relation = none -%}
  {%- endif -%}
  {%- if existing_relation is none or should_full_refresh() -%}
    {%- set response = adapter.write_delta_table(target_relation, compiled_code, config.get('partition_by')) -%}
  {%- else -%}
    {%- set response = adapter.run_delta_incremental(target_relation, compiled_code, model.config) -%}
  {%- endif -%}
  {%- do store_result('main', response=response) -%}
  {%- do apply_grants(target_relation, config.get('grants'), should_revoke=false) -%}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
