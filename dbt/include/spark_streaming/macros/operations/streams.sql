{#-
  Continuous models (runtime/continuous/runner.py):
    dbt run-operation stream_status                          every streaming model's state
    dbt run-operation stream_status --args '{format: json}'  the same as one line of JSON
    dbt run-operation stream_stop --args '{model: name}'     stop one model's runner
    dbt run-operation stream_stop                            stop every runner
-#}
{% macro stream_status(format='table') %}
  {%- set status = adapter.stream_status() -%}
  {%- if format == 'json' -%}
    {{ print(status['json']) }}
  {%- else -%}
    {{ log(status['text'], info=True) }}
  {%- endif -%}
  {{ return(status['rows']) }}
{% endmacro %}

{% macro stream_stop(model=none) %}
  {%- set stopped = adapter.stream_stop(model) -%}
  {%- for name, state in stopped -%}
    {{ log(name ~ ': ' ~ state, info=True) }}
  {%- endfor -%}
  {%- if not stopped -%}{{ log('no runner is running', info=True) }}{%- endif -%}
  {{ return(stopped) }}
{% endmacro %}
