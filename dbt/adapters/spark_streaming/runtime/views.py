"""`view` models: Spark views whose definition is kept in the warehouse.

Spark's catalog is in-memory, so a view created with `CREATE VIEW` would vanish with the
process. The view's SQL is therefore also written to `<warehouse>/<schema>/<identifier>/`
`_dbt_view.sql` (where a table of that name would keep its Delta log), and every process
re-creates a view when a statement first names it (`Catalog.sql`, runtime/catalog.py).
Dropping the relation deletes that directory, so views and tables share one namespace on disk
as they do in Spark.
"""

from __future__ import annotations

from dbt.adapters.contracts.connection import AdapterResponse
from dbt_common.exceptions import DbtRuntimeError

from ..delta import storage
from ..delta.storage import is_delta
from ..layout import view_path
from .catalog import Catalog


def view_file(catalog: Catalog, schema: str, identifier: str) -> str:
    return view_path(catalog.location(schema, identifier))


def create_view(spark, catalog: Catalog, schema: str, identifier: str, sql: str) -> AdapterResponse:
    """Create or replace the view in Spark (which checks the SQL), then persist its SQL."""
    schema, identifier = schema.lower(), identifier.lower()
    path = view_file(catalog, schema, identifier)
    if is_delta(catalog.location(schema, identifier)):
        raise DbtRuntimeError(
            f"{schema}.{identifier} is a Delta table; drop it before creating a view"
        )
    catalog.unbind(schema, identifier)
    catalog.define_view(schema, identifier, sql)
    storage.write_text(path, sql)  # atomic: a later process sees the old or the new SQL
    return AdapterResponse(_message="OK")


def drop_view(spark, catalog: Catalog, schema: str, identifier: str) -> None:
    """Drop the Spark view and its definition file (no-op when there is none).
    `DROP TABLE IF EXISTS` drops a view too, and does not fail on a missing schema."""
    path = view_file(catalog, schema, identifier)
    storage.remove(path)
    # a bound Delta table is not ours to drop; without Spark running there is no view to drop
    if catalog.started and identifier.lower() not in catalog.tables(schema):
        spark.sql(f"DROP TABLE IF EXISTS `{schema}`.`{identifier}`")
