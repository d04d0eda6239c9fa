"""Continuous mode: the runners, long-lived processes that host continuous models' streaming
queries, beside the one-shot path of a `dbt run` (runtime/streaming.py runs a model's query in
either).

- pipeline.py: what `dbt run` does to hand a model to its runner (by default one per warehouse)
  and start the runner; the runner's files;
- host.py: the runner process, many models' queries in one SparkSession;
- runner.py: a model in a runner: its spec, status and stop request, and what dbt reads of them
  (`stream_status`, `stream_stop`).
"""
