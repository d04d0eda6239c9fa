{#-
  Table maintenance of streaming models (runtime/maintenance.py, docs/operations.md):
    dbt run-operation optimize                                   compact every streaming model's tables
    dbt run-operation optimize --args '{model: name}'            one model's
    dbt run-operation vacuum                                     delete the files removed from them
    dbt run-operation vacuum --args '{model: name, retention_hours: 24, dry_run: true}'
-#}
{% macro _streaming_models(model=none) %}
  {%- set out = [] -%}
  {%- for node in graph.nodes.values() if node.resource_type == 'model'
        and node.config.materialized in ('streaming_view', 'upsert_table')
        and (model is none or node.name == model) -%}
    {%- do out.append({'name': node.schema ~ '.' ~ node.alias, 'config': node.config}) -%}
  {%- endfor -%}
  {%- if model is not none and not out -%}
    {{ exceptions.raise_compiler_error("no streaming_view or upsert_table model named '" ~ model ~ "'") }}
  {%- endif -%}
  {{ return(out) }}
{% endmacro %}

{% macro optimize(model=none) %}
  {%- for line in adapter.optimize_models(_streaming_models(model)) -%}
    {{ log(line, info=True) }}
  {%- endfor -%}
{% endmacro %}

{% macro vacuum(model=none, retention_hours=none, dry_run=false) %}
  {%- for line in adapter.vacuum_models(_streaming_models(model), retention_hours, dry_run) -%}
    {{ log(line, info=True) }}
  {%- endfor -%}
{% endmacro %}
