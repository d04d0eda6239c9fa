"""What an upsert_table adds to running a streaming model (runtime/streaming.py): its
configs, its key columns, and the re-ranking of a Top-N's micro-batches. The MERGE and the
changelog are delta/upsert.py's; the query shapes sql/upsert.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..delta.source import FORMAT
from ..delta.storage import is_delta
from ..delta.upsert import DRIVER_ROWS
from ..errors import config_error
from ..layout import changelog_path
from .catalog import register_location

UPSERT_TABLE = "upsert_table"


class Changelogs(Mapping):
    """Upsert tables by name -> the name of their changelog (registered, so that it binds), for
    sql/retract.py; the tables a model joins as tables (config `dimensions`) are left out. With
    `change_feed` (config `read_change_feed`), every Delta table read as a stream maps to
    itself: read as its change feed, its rows carry `_op` as a changelog's do."""

    def __init__(self, catalog, dimensions=None, change_feed: bool = False):
        self.catalog, self.dimensions = catalog, {str(d).lower() for d in dimensions or []}
        self.change_feed = change_feed

    def __getitem__(self, name: str) -> str:
        schema, _, identifier = name.rpartition(".")
        if self.dimensions & {name, identifier}:
            raise KeyError(name)
        if self.change_feed:
            if not is_delta(self.catalog.location_of(name)):
                raise KeyError(name)
            return name
        path = changelog_path(self.catalog.location_of(name))
        if not is_delta(path):
            raise KeyError(name)
        register_location(schema or "default", f"{identifier}_changelog", path)
        return f"{schema}.{identifier}_changelog" if schema else f"{identifier}_changelog"

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


def unique_key(config: Mapping[str, Any]) -> list[str] | None:
    """Config `unique_key` as a list of column names (None if not set)."""
    key = config.get("unique_key")
    if key is None or key == []:
        return None
    keys = [key] if isinstance(key, str) else key
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) and k for k in keys):
        raise config_error("unique_key", key, "a column name or a list of column names")
    return list(keys)


def names_config(config: Mapping[str, Any], key: str) -> list[str]:
    """A config holding a name or a list of names (`constant_domain`, `dimensions`)."""
    value = config.get(key) or []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise config_error(key, value, "a name or a list of names")
    return [n.lower() for n in names]


def driver_merge_rows(config: Mapping[str, Any]) -> int:
    """Config `driver_merge_max_rows`: micro-batches of at most this many rows are MERGEd in the
    dbt process when their candidate files are small (delta/upsert.py); 0: always by Spark."""
    value = config.get("driver_merge_max_rows")
    if value is None:
        return DRIVER_ROWS
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise config_error(
            "driver_merge_max_rows", value, "a number of rows, >= 0 (0: always by Spark jobs)"
        )
    return value


def change_data_feed(config: Mapping[str, Any]) -> bool:
    """Config `change_data_feed` (default true): the upsert_table is created with Delta's
    Change Data Feed on, its changes written with each commit (delta/cdf.py)."""
    value = config.get("change_data_feed", True)
    if not isinstance(value, bool):
        raise config_error("change_data_feed", value, "true or false")
    return value


def emit_early(config: Mapping[str, Any], materialization: str) -> bool:
    """Config `emit`: True for {early: true} (upsert_table window aggregates), else final."""
    emit = config.get("emit")
    if emit is None or emit == "final":
        return False
    if (
        materialization == UPSERT_TABLE
        and isinstance(emit, Mapping)
        and set(emit) <= {"early", "update_every"}
        and isinstance(emit.get("early", False), bool)
    ):
        return emit.get("early", False)
    raise config_error(
        "emit", emit, "'final' or {early: true, update_every: '<interval>'} (upsert_table only)"
    )


def key_columns(plan, columns: list[str]) -> list[str]:
    """The upsert table's key columns, as named in the result ([] for a streaming_view)."""
    if plan.upsert is None:
        return []
    by_name = {c.lower(): c for c in columns}
    missing = [k for k in plan.upsert.unique_key if k.lower() not in by_name]
    if missing:
        raise config_error(
            "unique_key",
            list(plan.upsert.unique_key),
            "columns of the model's result: " + ", ".join(columns),
        )
    return [by_name[k.lower()] for k in plan.upsert.unique_key]


def ranked(plan, rows, name: str):
    """A Top-N's ranking query (sql/upsert.py rewrite_rank) over the DataFrame `rows` (in its
    own session: foreachBatch hands batches in a session of their own)."""
    view = f"__dss_rank_{name.replace('.', '_')}"
    rows.createOrReplaceTempView(view)
    return rows.sparkSession.sql(plan.rank_sql_for(view))


def rerank(plan, new_df, path: str, keys: list[str], name: str):
    """A Top-N's micro-batch: its new rows and the table's rows of the partition keys they
    touch, re-ranked; the key is (partition keys..., rank)."""
    partition = keys[:-1]
    current = new_df.sparkSession.read.format(FORMAT).load(path).select(*new_df.columns)
    touched = new_df.select(*partition).distinct()
    current = current.join(
        touched, [current[k].eqNullSafe(touched[k]) for k in partition], "left_semi"
    )
    return ranked(plan, new_df.unionByName(current), name)
