"""`view` models: Spark views whose definition is kept in the warehouse.

Spark's catalog is in-memory, so a view created with `CREATE VIEW` would vanish with the
process. The view's SQL is therefore also written to `<warehouse>/<schema>/<identifier>/`
`_dbt_view.sql` (where a table of that name would keep its Delta log), and every process
re-creates the views when it binds the warehouse (`restore_views`, called by
`Catalog.bind_all`). Dropping the relation deletes that directory, so views and tables
share one namespace on disk as they do in Spark.
"""

from __future__ import annotations

import os

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from .catalog import Catalog, is_delta

VIEW_FILE = "_dbt_view.sql"

logger = AdapterLogger("SparkStreaming")


def view_file(catalog: Catalog, schema: str, identifier: str) -> str:
    return os.path.join(catalog.location(schema, identifier), VIEW_FILE)


def _create(spark, schema: str, identifier: str, sql: str) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
    spark.sql(f"CREATE OR REPLACE VIEW `{schema}`.`{identifier}` AS\n{sql}")


def create_view(spark, catalog: Catalog, schema: str, identifier: str, sql: str) -> AdapterResponse:
    """Create or replace the view in Spark (which checks the SQL), then persist its SQL."""
    schema, identifier = schema.lower(), identifier.lower()
    path = view_file(catalog, schema, identifier)
    if is_delta(os.path.dirname(path)):
        raise DbtRuntimeError(
            f"{schema}.{identifier} is a Delta table; drop it before creating a view"
        )
    catalog.unbind(schema, identifier)
    _create(spark, schema, identifier, sql)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as fh:
        fh.write(sql)
    os.replace(path + ".tmp", path)  # atomic: a later process sees the old or the new SQL
    return AdapterResponse(_message="OK")


def drop_view(spark, catalog: Catalog, schema: str, identifier: str) -> None:
    """Drop the Spark view and its definition file (no-op when there is none).
    `DROP TABLE IF EXISTS` drops a view too, and does not fail on a missing schema."""
    path = view_file(catalog, schema, identifier)
    if os.path.exists(path):
        os.remove(path)
    if identifier.lower() not in catalog.tables(schema):  # a bound Delta table is not ours to drop
        spark.sql(f"DROP TABLE IF EXISTS `{schema}`.`{identifier}`")


def stored_views(catalog: Catalog) -> list[tuple[str, str, str]]:
    """(schema, identifier, sql) of every view definition under the warehouse."""
    out = []
    if not os.path.isdir(catalog.warehouse):
        return out
    for schema in sorted(os.listdir(catalog.warehouse)):
        sdir = os.path.join(catalog.warehouse, schema)
        if not os.path.isdir(sdir) or schema.startswith((".", "_")):
            continue
        for identifier in sorted(os.listdir(sdir)):
            path = os.path.join(sdir, identifier, VIEW_FILE)
            if os.path.isfile(path) and not is_delta(os.path.dirname(path)):
                with open(path) as fh:
                    out.append((schema, identifier, fh.read()))
    return out


def restore_views(catalog: Catalog) -> None:
    """Re-create the stored views in Spark. A view may read another view, so views that fail
    are retried while others succeed; those that still fail (their tables are gone) are left
    out of the catalog, and the next `dbt run` of the model re-creates them."""
    pending = stored_views(catalog)
    while pending:
        failed = []
        for schema, identifier, sql in pending:
            try:
                _create(catalog.spark, schema, identifier, sql)
            except Exception as exc:  # noqa: BLE001 - reported below if it never succeeds
                failed.append((schema, identifier, sql, exc))
        if len(failed) == len(pending):
            for schema, identifier, _, exc in failed:
                logger.debug(f"view {schema}.{identifier} not restored: {exc}")
            return
        pending = [f[:3] for f in failed]
