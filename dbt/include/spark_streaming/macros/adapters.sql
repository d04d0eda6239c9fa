{#- Relations are Delta tables under the warehouse path: dropping one deletes its data. -#}
{% macro spark_streaming__drop_relation(relation) -%}
  {% do adapter.drop_delta_relation(relation) %}
{%- endmacro %}

{% macro spark_streaming__drop_schema(relation) -%}
  {% do adapter.drop_delta_schema(relation) %}
{%- endmacro %}
