{#-
  view: a Spark view, usable by later models and tests in this run, whose SQL is also kept in
  the warehouse (<warehouse_path>/<schema>/<identifier>/_dbt_view.sql) so that later dbt
  invocations, new processes, see it too (runtime/views.py). A table of the same name is
  dropped first.
-#}
{% materialization view, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set existing_relation = adapter.get_relation(database=database, schema=schema, identifier=this.identifier) -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {%- if existing_relation is not none and not existing_relation.is_view -%}
    {%- do adapter.drop_relation(existing_relation) -%}
  {%- endif -%}
  {%- set response = adapter.create_delta_view(target_relation, compiled_code) -%}
  {%- do store_result('main', response=response) -%}
  {%- do apply_grants(target_relation, config.get('grants'), should_revoke=false) -%}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
