{#-
  register_source_locations(): record the `meta: {location: ...}` of every source of the
  project. Rendering `source()` records it (relation.py); a command that renders no
  `source()` (a `dbt test` of a streaming model, whose check compiles the model's query
  again) calls this first.
-#}
{% macro register_source_locations() %}
  {%- for node in graph.sources.values() if (node.meta or {}).get('location') -%}
    {%- do adapter.register_source_location(node.schema, node.identifier, node.meta.location) -%}
  {%- endfor -%}
{% endmacro %}
