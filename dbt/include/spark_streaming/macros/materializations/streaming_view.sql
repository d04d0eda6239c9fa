{#-
  streaming_view: an append-only query maintained as a Delta table by a Spark Structured
  Streaming query (runtime/streaming.py). Each run processes the source versions added
  since the last one (available-now trigger) and appends the windows the watermark closed.
-#}
{% materialization streaming_view, adapter='spark_streaming' %}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}
  {%- set response = adapter.run_streaming_model(target_relation, sql, model.config, should_full_refresh(), 'streaming_view', streaming_inputs()) -%}
  {%- do store_result('main', response=response) -%}
  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
