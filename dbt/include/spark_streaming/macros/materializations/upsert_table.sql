{#-
  upsert_table: an updating query (GROUP BY without a window, early window results,
  deduplication keeping the first or latest row) maintained as a Delta table keyed by
  `unique_key` (given, or inferred from the GROUP BY / PARTITION BY keys). Each run processes
  the source versions added since the last one (available-now trigger), MERGEs the changed
  keys into the table and appends every change to its changelog, `<identifier>_changelog`.
-#}
{% materialization upsert_table, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}
  {%- set response = adapter.run_streaming_model(target_relation, sql, model.config, should_full_refresh(), 'upsert_table', streaming_inputs()) -%}
  {%- do store_result('main', response=response) -%}
  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
