{#-
  snapshot: dbt's snapshot (timestamp and check strategies, hard_deletes, custom
  snapshot_table_column_names) on a Delta table. The first run writes dbt's initial
  snapshot query as the table; later runs MERGE dbt's staging rows through delta-rs
  (runtime/batch.py merge_snapshot) instead of Spark's MERGE INTO, which needs the JVM Delta
  connector. New source columns are added to the table first.
-#}
{% materialization snapshot, adapter='spark_streaming' %}
  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}
  {% set target_relation_exists, target_relation = get_or_create_relation(
          database=none, schema=model.schema, identifier=target_table, type='table') -%}
  {%- if not target_relation.is_table -%}
    {% do exceptions.relation_wrong_type(target_relation, 'table') %}
  {%- endif -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {% set strategy_macro = strategy_dispatch(strategy_name) %}
  {% set strategy = strategy_macro(model, "snapshotted_data", "source_data", model['config'], target_relation_exists) %}

  {% if not target_relation_exists %}
    {% set build_sql = build_snapshot_table(strategy, model['compiled_code']) %}
    {{ check_time_data_types(build_sql) }}
    {%- set response = adapter.write_delta_table(target_relation, build_sql, config.get('partition_by')) -%}
  {% else %}
    {% set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() %}
    {{ adapter.assert_valid_snapshot_target_given_strategy(target_relation, columns, strategy) }}
    {% set staging_sql = snapshot_staging_table(strategy, sql, target_relation) %}
    {{ check_time_data_types(staging_sql) }}
    {%- set response = adapter.merge_delta_snapshot(target_relation, staging_sql, columns,
                                                     config.get('dbt_valid_to_current')) -%}
  {% endif %}
  {%- do store_result('main', response=response) -%}
  {%- do apply_grants(target_relation, config.get('grants'), should_revoke=false) -%}

  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
