"""Relation management on the warehouse, so dbt's relation cache agrees with the disk:
listing (rebinding a schema from its directory), rename, and last-modified times from Delta
commit timestamps (`dbt source freshness` without a `loaded_at_field`)."""

from __future__ import annotations

import datetime as dt
import shutil

from ..delta import storage
from ..delta.storage import is_delta
from .catalog import Catalog
from .views import create_view, drop_view, view_file


def sync_schema(catalog: Catalog, schema: str) -> None:
    """Rebind the schema's tables from disk: Delta tables written since (by another process)
    are bound, tables whose directory is gone are unbound, and their columns are refreshed."""
    sdir = storage.join(catalog.warehouse, schema.lower())
    names = set(catalog.tables(schema))
    names |= {i for i in storage.list_dirs(sdir) if is_delta(storage.join(sdir, i))}
    for identifier in sorted(names):
        catalog.bind(schema, identifier)


def list_relations(catalog: Catalog, schema: str) -> list[tuple[str, str, str]]:
    """(identifier, 'table' | 'view', information) of the schema's relations, from the
    warehouse without Spark (dbt's relation cache); `information` is what dbt-spark reads
    from `show table extended` (type, provider; columns come from `describe` when asked)."""
    out = []
    for identifier, kind in catalog.relations(schema):
        provider = f"delta__{schema.lower()}__{identifier}" if kind == "table" else "view"
        info = f"Database: {schema}\nTable: {identifier}\nType: "
        info += f"MANAGED\nProvider: {provider}\n" if kind == "table" else "VIEW\n"
        out.append((identifier, kind, info))
    return out


def columns(catalog: Catalog, schema: str, identifier: str) -> list[tuple[str, str]]:
    """(name, Spark type) of the relation's columns: a Delta table's from its log, without
    Spark; a view's from Spark; [] when there is no such relation."""
    from pyspark.errors import AnalysisException

    from ..delta import types

    path = catalog.location(schema, identifier)
    if is_delta(path):
        return types.table_columns(path)
    if not storage.exists(view_file(catalog, schema, identifier)) and not catalog.started:
        return []
    try:
        df = catalog.sql(f"SELECT * FROM `{schema}`.`{identifier}` LIMIT 0")
    except AnalysisException:
        return []
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def drop(catalog: Catalog, schema: str, identifier: str) -> None:
    """Drop the relation: unbind it and delete its Delta table (with its checkpoint, wherever the
    profile keeps checkpoints), or drop its view and stored SQL."""
    path = catalog.location(schema, identifier)
    catalog.unbind(schema, identifier)
    drop_view(catalog.session, catalog, schema, identifier)
    if catalog.checkpoint_root:  # first: a checkpoint without its table would resume into none
        shutil.rmtree(catalog.checkpoint(f"{schema}.{identifier}", path), True)
    storage.remove_tree(path)


def drop_schema(catalog: Catalog, schema: str) -> None:
    """Drop every table of the schema, the schema, and its warehouse directory."""
    sdir = storage.join(catalog.warehouse, schema.lower())
    on_disk = [i for i in storage.list_dirs(sdir) if is_delta(storage.join(sdir, i))]
    for identifier in sorted(set(catalog.tables(schema)) | set(on_disk)):
        drop(catalog, schema, identifier)
    catalog.drop_schema(schema)
    storage.remove_tree(storage.join(catalog.warehouse, schema.lower()))


def rename(
    spark, catalog: Catalog, schema: str, identifier: str, to_schema: str, to_identifier: str
) -> None:
    """Rename a table (move its directory: on object storage a copy, then a delete) or a view
    (re-create it under the new name)."""
    source, target = (
        catalog.location(schema, identifier),
        catalog.location(to_schema, to_identifier),
    )
    if not is_delta(source) and storage.exists(view_file(catalog, schema, identifier)):
        sql = storage.read_text(view_file(catalog, schema, identifier))
        create_view(spark, catalog, to_schema, to_identifier, sql)
        drop_view(spark, catalog, schema, identifier)
        storage.remove_tree(source)
        return
    catalog.unbind(schema, identifier)
    catalog.unbind(to_schema, to_identifier)
    storage.move_tree(source, target)
    catalog.bind(to_schema, to_identifier)


def last_modified(catalog: Catalog, schema: str, identifier: str) -> dt.datetime | None:
    """UTC time of the Delta table's latest commit (None if it is not a Delta table)."""
    from deltalake import DeltaTable

    path = catalog.location(schema, identifier)
    if not is_delta(path):
        return None
    history = DeltaTable(path).history(1)
    if not history or history[0].get("timestamp") is None:
        return None
    return dt.datetime.fromtimestamp(history[0]["timestamp"] / 1000, tz=dt.timezone.utc)
