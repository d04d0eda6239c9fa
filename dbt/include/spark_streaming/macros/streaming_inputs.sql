{#-
  streaming_inputs(): what the dbt graph says of each relation the model reads, for
  runtime/inputs.py to classify as a stream or a table: [{relation, resource_type,
  materialized, read_as, unique_key, event_time, apply_changes}]. `read_as` ('stream' or 'table') is the
  input's own marking: a seed's or model's config `read_as`, or `meta: {read_as: ...}` (a
  source's). A source's `meta: {unique_key, event_time}` declares it a stream of versions (a
  temporal join's versioned side), as does a model's `apply_changes` of `scd_type: 2`, or an
  upsert_table's `unique_key` and `event_time` config.
-#}
{% macro streaming_inputs() %}
  {%- set inputs = [] -%}
  {%- for node_id in model.depends_on.nodes -%}
    {%- set node = graph.nodes.get(node_id) or graph.sources.get(node_id) -%}
    {%- if node -%}
      {%- set config = node.config or {} -%}
      {%- set meta = node.meta or config.get('meta') or {} -%}
      {%- set name = node.identifier if node.resource_type == 'source' else (node.alias or node.name) -%}
      {%- do inputs.append({
        'relation': node.schema ~ '.' ~ name,
        'resource_type': node.resource_type,
        'materialized': config.get('materialized'),
        'read_as': config.get('read_as') or meta.get('read_as'),
        'unique_key': meta.get('unique_key') if node.resource_type == 'source' else config.get('unique_key'),
        'event_time': meta.get('event_time') if node.resource_type == 'source' else config.get('event_time'),
        'apply_changes': config.get('apply_changes') if node.resource_type == 'model' else none,
      }) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(inputs) }}
{% endmacro %}
