{#-
  Multiset equality of a model and the rows of `expected` whose `phase` column is at most
  var('phase', 1). Returns every missing or unexpected row (with `_diff`), so it fails on any.
-#}
{% test rows_equal(model, expected) %}
{%- set cols = adapter.get_columns_in_relation(model) | map(attribute='name') | join(', ') -%}
WITH exp AS (SELECT {{ cols }} FROM {{ expected }} WHERE phase <= {{ var('phase', 1) }}),
     act AS (SELECT {{ cols }} FROM {{ model }})
SELECT 'missing' AS _diff, * FROM (SELECT * FROM exp EXCEPT ALL SELECT * FROM act)
UNION ALL
SELECT 'unexpected' AS _diff, * FROM (SELECT * FROM act EXCEPT ALL SELECT * FROM exp)
{% endtest %}
