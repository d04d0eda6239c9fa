{#-
  unit: a dbt unit test (`unit_tests:`). dbt's own (dbt-adapters, materializations/tests/unit.sql)
  but for where the actual rows' SQL and its column types come from: adapter.unit_test_query
  (runtime/unit.py) evaluates a streaming model's query, window TVFs and all, in batch over the
  given rows, with the rewrite snapshot_equivalence uses; a batch model's SQL runs as it is.
  The expected rows and the comparison are dbt's (get_expected_sql, get_unit_test_sql).
-#}
{%- materialization unit, adapter='spark_streaming' -%}
  {%- set sql_header = config.get('sql_header') if flags.REQUIRE_SQL_HEADER_IN_TEST_CONFIGS else none -%}
  {%- set expected_rows = config.get('expected_rows') -%}
  {%- set expected_sql = config.get('expected_sql') -%}
  {%- set actual = adapter.unit_test_query(sql, model) -%}
  {%- set column_name_to_data_types = {} -%}
  {%- set column_name_to_quoted = {} -%}
  {%- for name, data_type in actual['columns'] -%}
    {%- do column_name_to_data_types.update({name | lower: data_type}) -%}
    {%- do column_name_to_quoted.update({name | lower: adapter.quote(name)}) -%}
  {%- endfor -%}
  {%- set tested_expected_column_names = expected_rows[0].keys() if (expected_rows | length) > 0 else (actual['columns'] | map('first') | list) -%}
  {%- set expected_column_names_quoted = [] -%}
  {%- for column_name in tested_expected_column_names -%}
    {%- do expected_column_names_quoted.append(column_name_to_quoted[column_name | lower]) -%}
  {%- endfor -%}
  {%- if not expected_sql -%}
    {%- set expected_sql = get_expected_sql(expected_rows, column_name_to_data_types, column_name_to_quoted) -%}
  {%- endif -%}
  {%- set unit_test_sql = get_unit_test_sql(actual['sql'], expected_sql, expected_column_names_quoted) -%}
  {% call statement('main', fetch_result=True) -%}
    {% if sql_header %}{{ sql_header }}{% endif %}
    {{ unit_test_sql }}
  {%- endcall %}
  {{ return({'relations': []}) }}
{%- endmaterialization -%}
