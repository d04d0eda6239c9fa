{#- Relations are Delta tables under the warehouse path: dropping one deletes its data. -#}
{% macro spark_streaming__drop_relation(relation) -%}
  {% do adapter.drop_delta_relation(relation) %}
{%- endmacro %}

{% macro spark_streaming__drop_schema(relation) -%}
  {% do adapter.drop_delta_schema(relation) %}
{%- endmacro %}

{#- Renaming moves a table's directory, or re-creates a view under the new name. -#}
{% macro spark_streaming__rename_relation(from_relation, to_relation) -%}
  {% do adapter.rename_delta_relation(from_relation, to_relation) %}
{%- endmacro %}

{#- Listing relations and schemas reads the warehouse directories, without Spark
    (SparkStreamingAdapter.list_relations_without_caching, list_schemas, create_schema). -#}

{#- Grants: Spark's embedded catalog has no privileges to grant, so `grants` configs are
    accepted and ignored (logged). -#}
{% macro spark_streaming__apply_grants(relation, grant_config, should_revoke=True) %}
  {%- if grant_config -%}
    {%- do log("grants on " ~ relation ~ " ignored: the embedded Spark catalog has no privileges", info=false) -%}
  {%- endif -%}
{% endmacro %}

{#- persist_docs: descriptions stay in dbt's docs; the Delta tables do not carry them (yet). -#}
{% macro spark_streaming__persist_docs(relation, model, for_relation, for_columns) -%}
{%- endmacro %}

{#- `dbt source freshness` without a loaded_at_field: the time of each table's latest Delta
    commit. -#}
{% macro spark_streaming__get_relation_last_modified(information_schema, relations) -%}
  {%- set rows = adapter.delta_last_modified(relations) -%}
  {% call statement('last_modified', fetch_result=True) -%}
    {%- for row in rows %}
    select '{{ row[0] }}' as schema, '{{ row[1] }}' as identifier,
           {% if row[2] %}timestamp'{{ row[2] }}'{% else %}cast(null as timestamp){% endif %} as last_modified,
           current_timestamp() as snapshotted_at
    {% if not loop.last %}union all{% endif %}
    {%- else %}
    select '' as schema, '' as identifier, cast(null as timestamp) as last_modified,
           current_timestamp() as snapshotted_at where false
    {%- endfor %}
  {%- endcall %}
  {{ return(load_result('last_modified')) }}
{%- endmacro %}
