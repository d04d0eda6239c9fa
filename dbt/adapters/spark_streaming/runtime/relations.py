"""Relation management on the warehouse, so dbt's relation cache agrees with the disk:
listing (rebinding a schema from its directory), rename, and last-modified times from Delta
commit timestamps (`dbt source freshness` without a `loaded_at_field`)."""

from __future__ import annotations

import datetime as dt
import os
import shutil

from ..layout import is_delta
from .catalog import Catalog
from .views import create_view, drop_view, view_file


def sync_schema(catalog: Catalog, schema: str) -> None:
    """Rebind the schema's tables from disk: Delta tables written since (by another process)
    are bound, tables whose directory is gone are unbound, and their columns are refreshed."""
    sdir = os.path.join(catalog.warehouse, schema.lower())
    names = set(catalog.tables(schema))
    if os.path.isdir(sdir):
        names |= {i for i in os.listdir(sdir) if is_delta(os.path.join(sdir, i))}
    for identifier in sorted(names):
        catalog.bind(schema, identifier)


def rename(
    spark, catalog: Catalog, schema: str, identifier: str, to_schema: str, to_identifier: str
) -> None:
    """Rename a table (move its directory) or a view (re-create it under the new name)."""
    source, target = (
        catalog.location(schema, identifier),
        catalog.location(to_schema, to_identifier),
    )
    if os.path.isfile(view_file(catalog, schema, identifier)) and not is_delta(source):
        with open(view_file(catalog, schema, identifier)) as fh:
            sql = fh.read()
        create_view(spark, catalog, to_schema, to_identifier, sql)
        drop_view(spark, catalog, schema, identifier)
        shutil.rmtree(source, ignore_errors=True)
        return
    catalog.unbind(schema, identifier)
    catalog.unbind(to_schema, to_identifier)
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(source, target)
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
