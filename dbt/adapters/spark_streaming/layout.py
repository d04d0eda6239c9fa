"""Where dbt-spark-streaming keeps its files on disk: the one place that spells the layout.

Per table (a Delta table at ``<table>``, usually ``<warehouse>/<schema>/<identifier>``)::

    <table>/_delta_log/                      what makes the directory a Delta table
    <table>/_dbt_streaming/checkpoint/       Spark's checkpoint of the model's query
    <table>/_dbt_streaming/changelog/        an upsert_table's changelog (a Delta table)
    <table>/_dbt_streaming/partials/         a state_ttl model's partial aggregates (a Delta table)
    <table>/_dbt_streaming/queries/<fingerprint>.json   the model's query, as it was run
    <table>/_dbt_view.sql                    a `view` model's SQL (where a table would be)

Per warehouse (hidden from the catalog: names starting with '.' or '_' are not schemas)::

    <warehouse>/.dbt_streaming/locks/<schema>.<identifier>.lock    a model's run lock
    <warehouse>/.dbt_streaming/runners/<schema>.<identifier>/      a continuous model's runner
    <warehouse>/.dbt_streaming/refresh/<schema>.<identifier>/      a full refresh being built
    <warehouse>/.dbt_streaming/trash/                              tables a full refresh replaced

Existing tables and checkpoints depend on these paths: changing one strands them. The functions
only name paths; none creates or reads anything. Standard library only, so that every part
of the package (delta/ included) can ask it.
"""

from __future__ import annotations

import os

TABLE_DIR = "_dbt_streaming"  # inside a table: what the adapter keeps beside the Delta data
WAREHOUSE_DIR = ".dbt_streaming"  # inside the warehouse: locks, runners, refreshes, trash
VIEW_FILE = "_dbt_view.sql"


def is_delta(path: str) -> bool:
    """Whether a Delta table is at `path`."""
    return os.path.isdir(os.path.join(path, "_delta_log"))


# Beside a table's data.


def checkpoint_path(table: str) -> str:
    """Spark's checkpoint of the query that maintains the table at `table`."""
    return os.path.join(table, TABLE_DIR, "checkpoint")


def changelog_path(table: str) -> str:
    """The changelog (a Delta table) of the upsert_table at `table`."""
    return os.path.join(table, TABLE_DIR, "changelog")


def partials_path(table: str) -> str:
    """The partial aggregates (a Delta table) of the state_ttl model at `table`."""
    return os.path.join(table, TABLE_DIR, "partials")


def query_path(table: str, fingerprint: str) -> str:
    """The definition of the query with `fingerprint` that built the table at `table`."""
    return os.path.join(table, TABLE_DIR, "queries", f"{fingerprint}.json")


def view_path(location: str) -> str:
    """The stored SQL of a `view` model whose relation is at `location`."""
    return os.path.join(location, VIEW_FILE)


# The warehouse's own files; `name` is a model's `schema.identifier`.


def warehouse_path(warehouse: str, kind: str) -> str:
    """``<warehouse>/.dbt_streaming/<kind>``: 'locks', 'runners', 'refresh' or 'trash'."""
    return os.path.join(warehouse, WAREHOUSE_DIR, kind)


def lock_path(warehouse: str, name: str) -> str:
    return os.path.join(warehouse_path(warehouse, "locks"), f"{name}.lock")


def runners_path(warehouse: str) -> str:
    return warehouse_path(warehouse, "runners")


def runner_path(warehouse: str, name: str) -> str:
    """The directory of model `name`'s runner (spec.json, status.json, stop, runner.log)."""
    return os.path.join(runners_path(warehouse), name)


def refresh_path(warehouse: str, name: str) -> str:
    """Where a full refresh of model `name` builds its new table and checkpoint."""
    return os.path.join(warehouse_path(warehouse, "refresh"), name)


def trash_path(warehouse: str, name: str, tag: str) -> str:
    """Where a full refresh moves model `name`'s old table (`tag` makes it unique)."""
    return os.path.join(warehouse_path(warehouse, "trash"), f"{name}-{tag}")
