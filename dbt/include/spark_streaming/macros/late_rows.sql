{#-
  late_rows(relation): the input rows a streaming model's stream dropped as late, each with
  the window it was dropped from (window_start, window_end) and the watermark of the
  micro-batch that read it (batch_watermark). For example:

    dbt show --inline "select * from {{ late_rows(ref('bids_per_10min')) }}"
-#}
{% macro late_rows(relation) -%}
  {%- if execute -%}{%- do register_source_locations() -%}{{ adapter.late_rows_view(relation) }}{%- else -%}{{ relation }}{%- endif -%}
{%- endmacro %}
