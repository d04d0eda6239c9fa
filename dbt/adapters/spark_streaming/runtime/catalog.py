"""Binding relation names (`schema.identifier`) to Delta tables.

Spark cannot read catalog tables backed by a Python data source through options (it
hands the source empty options), so each Delta table gets its own registered data
source with its path baked in, and an in-memory catalog table over it. Spark's own name
resolution then works everywhere: model SQL, dbt tests, `dbt show`, singular tests,
`show table extended` (docs generate). Reads see the latest Delta version.

A relation lives at `<warehouse_path>/<schema>/<identifier>` unless a source declares
`meta: {location: ...}` (recorded by `register_location`, bound on next use).
"""

from __future__ import annotations

import os
import threading

from ..delta import types
from ..delta.source import bound_source
from ..delta.upsert import changelog_path

_locations: dict[tuple[str, str], str] = {}  # (schema, identifier) -> path, from source meta
_lock = threading.Lock()


def register_location(schema: str, identifier: str, location: str) -> None:
    """Record a source's explicit location (pure bookkeeping: safe at parse time)."""
    with _lock:
        _locations[(schema.lower(), identifier.lower())] = os.path.abspath(location)


def registered_locations() -> list:
    """[[schema, identifier], location] of every explicitly located table (for a runner process)."""
    with _lock:
        return [[list(key), path] for key, path in _locations.items()]


def is_delta(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "_delta_log"))


class Catalog:
    """The Spark catalog view of the warehouse; one per SparkSession."""

    def __init__(self, spark, warehouse_path: str):
        self.spark = spark
        self.warehouse = os.path.abspath(warehouse_path)
        self._bound: dict[tuple[str, str], tuple[str, list]] = {}  # -> (path, columns)
        self._lock = threading.RLock()

    def location(self, schema: str, identifier: str) -> str:
        key = (schema.lower(), identifier.lower())
        return _locations.get(key) or os.path.join(self.warehouse, *key)

    def bind(self, schema: str, identifier: str) -> bool:
        """(Re)bind `schema.identifier` to its Delta table; unbind it if none is there.
        Returns whether a table is bound. Cheap when nothing changed."""
        schema, identifier = schema.lower(), identifier.lower()
        path = self.location(schema, identifier)
        with self._lock:
            if not is_delta(path):
                self.unbind(schema, identifier)
                return False
            columns = types.table_columns(path)
            if self._bound.get((schema, identifier)) == (path, columns):
                return True
            fmt = f"delta__{schema}__{identifier}"
            self.spark.dataSource.register(bound_source(fmt, f"{schema}.{identifier}", path))
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
            self.spark.sql(f"DROP TABLE IF EXISTS `{schema}`.`{identifier}`")
            self.spark.sql(
                f"CREATE TABLE `{schema}`.`{identifier}` ({types.ddl(columns)}) USING {fmt}"
            )
            self._bound[(schema, identifier)] = (path, columns)
            return True

    def unbind(self, schema: str, identifier: str) -> None:
        with self._lock:
            if self._bound.pop((schema.lower(), identifier.lower()), None) is not None:
                self.spark.sql(f"DROP TABLE IF EXISTS `{schema}`.`{identifier}`")

    def bind_all(self) -> None:
        """Bind every Delta table under the warehouse and every registered source location,
        then re-create the stored views (runtime/views.py)."""
        with self._lock:
            if os.path.isdir(self.warehouse):
                for schema in sorted(os.listdir(self.warehouse)):
                    sdir = os.path.join(self.warehouse, schema)
                    if not os.path.isdir(sdir) or schema.startswith((".", "_")):
                        continue
                    self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
                    for identifier in sorted(os.listdir(sdir)):
                        if is_delta(os.path.join(sdir, identifier)):
                            self.bind(schema, identifier)
                            self.bind_changelog(schema, identifier)
            self.bind_registered()
            from .views import restore_views  # `view` models, kept as SQL in the warehouse

            restore_views(self)

    def bind_changelog(self, schema: str, identifier: str) -> None:
        """Bind an upsert_table's changelog (kept inside its table) as `<identifier>_changelog`."""
        path = changelog_path(self.location(schema, identifier))
        if is_delta(path):
            register_location(schema, f"{identifier}_changelog", path)
            self.bind(schema, f"{identifier}_changelog")

    def bind_registered(self) -> None:
        """Bind source locations registered since the last call (cheap when none are new)."""
        with _lock:
            pending = [k for k in _locations if k not in self._bound]
        for schema, identifier in pending:
            self.bind(schema, identifier)

    def tables(self, schema: str) -> list[str]:
        """Identifiers bound in `schema`."""
        with self._lock:
            return [i for (s, i) in self._bound if s == schema.lower()]
