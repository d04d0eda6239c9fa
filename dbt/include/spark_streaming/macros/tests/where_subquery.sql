{#- A test's `where:` keeps the relation (rendered as the filtered subquery) so that tests
    such as snapshot_equivalence still know the table; see relation.py. -#}
{% macro spark_streaming__get_where_subquery(relation) -%}
  {%- set where = config.get('where', '') -%}
  {%- if where and relation is not string -%}
    {%- do return(relation.incorporate(where=where)) -%}
  {%- else -%}
    {%- do return(dbt.default__get_where_subquery(relation)) -%}
  {%- endif -%}
{%- endmacro %}
