"""Where dbt-spark-streaming keeps its files on disk: the one place that spells the layout.

Per table (a Delta table at ``<table>``, usually ``<warehouse>/<schema>/<identifier>``)::

    <table>/_delta_log/                      what makes the directory a Delta table
    <table>/_dbt_streaming/checkpoint/       Spark's checkpoint of the model's query
    <table>/_dbt_streaming/changelog/        an upsert_table's changelog (a Delta table)
    <table>/_dbt_streaming/partials/         a state_ttl model's partial aggregates (a Delta table)
    <table>/_dbt_streaming/queries/<fingerprint>.json   the model's query, as it was run
    <table>/_dbt_streaming/history/<first>-<last>.json  our metadata of its commits, kept
                                             beyond the Delta log's retention (delta/history.py)
    <table>/_dbt_streaming/compacted/<version>.json  where a compaction put the rows of the
                                             files it replaced (delta/origins.py)
    <table>/_dbt_streaming/vacuumed          when the table was last vacuumed
    <table>/_dbt_streaming/staging/          an incremental MERGE's new rows, while it runs
    <table>/_dbt_view.sql                    a `view` model's SQL (where a table would be)

Per warehouse, in its *control root*: the warehouse itself, or the profile's `checkpoint_root`
when one is set (hidden from the catalog: names starting with '.' or '_' are not schemas)::

    <control>/.dbt_streaming/locks/<schema>.<identifier>.lock    a model's run lock
    <control>/.dbt_streaming/runners/<schema>.<identifier>/      a continuous model, as run
    <control>/.dbt_streaming/pipelines/<pipeline>/               the runner that hosts it
    <warehouse>/.dbt_streaming/refresh/<schema>.<identifier>/    a full refresh being built
    <control>/.dbt_streaming/refresh/<schema>.<identifier>.checkpoint/  its checkpoint, and
    <control>/.dbt_streaming/refresh/<schema>.<identifier>.swap  its swap token, when the
                                                  checkpoint is not beside the table
    <warehouse>/.dbt_streaming/trash/                            tables a full refresh replaced

With a `checkpoint_root` (required when the warehouse is object storage, where Spark cannot
write its checkpoints here), a model's checkpoint is not beside its table but at

    <checkpoint_root>/.dbt_streaming/checkpoints/<schema>.<identifier>/

and a full refresh builds the new table aside all the same but swaps it in by Delta commits
(object storage cannot rename a directory; runtime/lifecycle.py).

Existing tables and checkpoints depend on these paths: changing one strands them. The functions
only name paths; none creates or reads anything. Standard library only, so that every part
of the package (delta/ included) can ask it. A table path may be an object-store URI
(delta/storage.py: joined with '/' as os.path.join does here); the control root is a local or
shared directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TABLE_DIR = "_dbt_streaming"  # inside a table: what the adapter keeps beside the Delta data
WAREHOUSE_DIR = ".dbt_streaming"  # inside the warehouse: locks, runners, refreshes, trash
VIEW_FILE = "_dbt_view.sql"


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


def staging_path(table: str) -> str:
    """Where an incremental MERGE stages its new rows (Parquet files, deleted after it)."""
    return os.path.join(table, TABLE_DIR, "staging")


def queries_path(table: str) -> str:
    """Where the queries that built the table at `table` are recorded."""
    return os.path.join(table, TABLE_DIR, "queries")


def query_path(table: str, fingerprint: str) -> str:
    """The definition of the query with `fingerprint` that built the table at `table`."""
    return os.path.join(queries_path(table), f"{fingerprint}.json")


def history_path(table: str) -> str:
    """Where our metadata of the commits to the table at `table` is kept (delta/history.py)."""
    return os.path.join(table, TABLE_DIR, "history")


def compacted_path(table: str) -> str:
    """Where the compactions of the table at `table` record the files they replaced
    (delta/origins.py)."""
    return os.path.join(table, TABLE_DIR, "compacted")


def vacuumed_path(table: str) -> str:
    """When the model's tables were last vacuumed (runtime/maintenance.py)."""
    return os.path.join(table, TABLE_DIR, "vacuumed")


def view_path(location: str) -> str:
    """The stored SQL of a `view` model whose relation is at `location`."""
    return os.path.join(location, VIEW_FILE)


# The warehouse's own files; `name` is a model's `schema.identifier`.


def warehouse_path(root: str, kind: str) -> str:
    """``<root>/.dbt_streaming/<kind>``: 'locks', 'runners', 'checkpoints' (of the control
    root), 'refresh' or 'trash' (of a local warehouse)."""
    return os.path.join(root, WAREHOUSE_DIR, kind)


def external_checkpoint_path(checkpoint_root: str, name: str) -> str:
    """Spark's checkpoint of model `name` when the profile sets a `checkpoint_root` (named in
    lower case, as the model's table is)."""
    return os.path.join(warehouse_path(checkpoint_root, "checkpoints"), name.lower())


def lock_path(warehouse: str, name: str) -> str:
    return os.path.join(warehouse_path(warehouse, "locks"), f"{name}.lock")


def runners_path(warehouse: str) -> str:
    return warehouse_path(warehouse, "runners")


def runner_path(warehouse: str, name: str) -> str:
    """The directory of continuous model `name` in its runner (spec.json, status.json, stop)."""
    return os.path.join(runners_path(warehouse), name)


def pipeline_path(control: str, pipeline: str) -> str:
    """The directory of runner (pipeline) `pipeline`, the process that hosts continuous models'
    queries (spec.json, status.json, runner.log, lock, inbox/)."""
    return os.path.join(warehouse_path(control, "pipelines"), pipeline)


def refresh_path(warehouse: str, name: str) -> str:
    """Where a full refresh of model `name` builds its new table and checkpoint."""
    return os.path.join(warehouse_path(warehouse, "refresh"), name)


def refresh_checkpoint_path(control: str, name: str) -> str:
    """With a `checkpoint_root`: where a full refresh of model `name` keeps its new table's
    checkpoint while the table is built at `refresh_path`."""
    return os.path.join(warehouse_path(control, "refresh"), f"{name}.checkpoint")


def refresh_marker_path(control: str, name: str) -> str:
    """With a `checkpoint_root`: present from when a full refresh of model `name` is built
    until it is swapped in (its token: delta/swap.py)."""
    return os.path.join(warehouse_path(control, "refresh"), f"{name}.swap")


@dataclass(frozen=True)
class Refresh:
    """The places of a full refresh of one model (runtime/lifecycle.py), named once per run."""

    build: str  # where its new table is built (refresh_path)
    checkpoint: str  # with a checkpoint_root: the new table's checkpoint while it is built
    marker: str  # with a checkpoint_root: present from built until swapped in
    trash: str  # where the old table goes (with a unique tag appended), without a checkpoint_root


def refresh(warehouse: str, control: str, name: str) -> Refresh:
    """The places of a full refresh of model `name`."""
    return Refresh(
        refresh_path(warehouse, name),
        refresh_checkpoint_path(control, name),
        refresh_marker_path(control, name),
        os.path.join(warehouse_path(warehouse, "trash"), name),
    )
