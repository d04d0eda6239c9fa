{#- Seeds are written as Delta tables at <warehouse_path>/<schema>/<identifier> by delta-rs. -#}
{% materialization seed, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set agate_table = load_agate_table() -%}
  {%- do store_result('agate_table', response='OK', agate_table=agate_table) -%}

  {{ run_hooks(pre_hooks) }}
  {%- set response = adapter.load_seed(target_relation, agate_table, config.get('column_types', {})) -%}
  {%- do store_result('main', response=response) -%}
  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
