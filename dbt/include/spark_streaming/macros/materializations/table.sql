{#-
  table: the model's SELECT, computed by Spark, written as the Delta table
  <warehouse_path>/<schema>/<identifier> by delta-rs (runtime/batch.py). An existing table is
  replaced by one overwrite commit (readers see the old or the new rows, never none); a view
  of the same name is dropped first. Configs: partition_by (Delta partition columns).
-#}
{% materialization table, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = adapter.get_relation(database=database, schema=schema, identifier=this.identifier) -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {%- if existing_relation is not none and not existing_relation.is_table -%}
    {%- do adapter.drop_relation(existing_relation) -%}
  {%- endif -%}
  {%- set response = adapter.write_delta_table(target_relation, compiled_code, config.get('partition_by')) -%}
  {%- do store_result('main', response=response) -%}
  {%- do apply_grants(target_relation, config.get('grants'), should_revoke=false) -%}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
