"""Binding relation names (`schema.identifier`) to Delta tables.

Spark cannot read catalog tables backed by a Python data source through options (it
hands the source empty options), so each Delta table gets its own registered data
source with its path baked in, and an in-memory catalog table over it. Spark's own name
resolution then works everywhere: model SQL, dbt tests, `dbt show`, singular tests,
`show table extended` (docs generate). Reads see the latest Delta version.

A relation lives at `<warehouse_path>/<schema>/<identifier>` unless a source declares
`meta: {location: ...}` (recorded by `register_location`, bound on next use).

`view` models are Spark views whose SQL is kept in the warehouse (runtime/views.py writes it);
a new process re-creates them when a statement names them.

Binding is lazy, and so is the SparkSession: a Catalog is made with a function that starts the
session, which runs the first time something needs Spark (a `dbt run` whose models have nothing
new to read starts none). `Catalog.sql` binds, when Spark reports a table or view it does not
know, the Delta table, changelog or stored view of that name, and runs the statement again: a
statement binds only what it reads. `bind_all` binds everything at once (kept for callers that
want it). What dbt lists (its relation cache) comes from the warehouse directories
(`relations`), without Spark.
"""

from __future__ import annotations

import logging
import threading

from dbt.adapters.events.logging import AdapterLogger

from .. import layout
from ..delta import storage, types
from ..delta.source import bound_source
from ..delta.storage import is_delta
from ..layout import changelog_path, view_path

_locations: dict[tuple[str, str], str] = {}  # (schema, identifier) -> path, from source meta
_lock = threading.Lock()

logger = AdapterLogger("SparkStreaming")


def register_location(schema: str, identifier: str, location: str) -> None:
    """Record a source's explicit location (pure bookkeeping: safe at parse time)."""
    with _lock:
        _locations[(schema.lower(), identifier.lower())] = storage.normalize(location)


def registered_locations() -> list:
    """[[schema, identifier], location] of every explicitly located table (for a runner process)."""
    with _lock:
        return [[list(key), path] for key, path in _locations.items()]


class Catalog:
    """The Spark catalog view of the warehouse; one per SparkSession."""

    def __init__(self, spark, warehouse_path: str, checkpoint_root: str | None = None):
        """`spark`: the SparkSession, or a function that starts it (called on first use)."""
        self._spark = None if callable(spark) else spark
        self._start = spark if callable(spark) else None
        self.session = LazySession(self)  # a SparkSession whose `sql` binds on demand
        self._schemas: set[str] = set()  # created by create_schema in this process
        self._views: set[tuple[str, str]] = set()  # views this catalog defined in Spark
        self.warehouse = storage.normalize(warehouse_path)  # a directory or an s3:// URI
        self.checkpoint_root = checkpoint_root and storage.normalize(checkpoint_root)
        # where locks and runners live: local (or shared) even when the warehouse is not
        self.control = self.checkpoint_root or self.warehouse
        self._bound: dict[tuple[str, str], tuple[str, list]] = {}  # -> (path, columns)
        self._lock = threading.RLock()

    @property
    def spark(self):
        """The SparkSession, started on first use; its catalog then has a database per schema."""
        with self._lock:
            if self._spark is None:
                spark = self._start()
                for schema in sorted(self.schemas()):
                    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
                self._spark = spark
            return self._spark

    @property
    def started(self) -> bool:
        """Whether this catalog's SparkSession runs (without starting it)."""
        return self._spark is not None

    def sql(self, text: str, *args, **kwargs):
        """`spark.sql(text)`, binding on demand each relation Spark does not know (the Delta
        table, changelog or stored view of that name) and running it again. Analysis fails
        before anything executes, so a statement runs once."""
        from pyspark.errors import AnalysisException

        spark = self.spark
        with self._lock:
            unbound = _named_relations(text) - set(self._bound) - self._views
        for schema, identifier in sorted(unbound):
            self.resolve(schema, identifier)
        tried: set[tuple[str, str]] = set()
        while True:  # names the parse above missed (or a view's own)
            quiet = logging.getLogger("SQLQueryContextLogger")
            quiet.disabled = True  # PySpark logs each AnalysisException: not the ones we resolve
            try:
                return spark.sql(text, *args, **kwargs)
            except AnalysisException as exc:
                name = _missing_relation(exc)
                if name is None or name in tried or not self.resolve(*name):
                    raise
                tried.add(name)
            finally:
                quiet.disabled = False

    def resolve(self, schema: str, identifier: str) -> bool:
        """Bind `schema`.`identifier` from the warehouse: its Delta table (or a source's
        registered location), an upsert_table's changelog, or a stored view. Returns whether
        there was one."""
        schema, identifier = schema.lower(), identifier.lower()
        if self.bind(schema, identifier):
            return True
        base = identifier.removesuffix("_changelog")
        if base != identifier and is_delta(changelog_path(self.location(schema, base))):
            self.bind_changelog(schema, base)
            return True
        try:
            sql = storage.read_text(view_path(self.location(schema, identifier)))
        except FileNotFoundError:
            return False
        self.define_view(schema, identifier, sql)
        return True

    def schemas(self) -> set[str]:
        """Schemas that exist: the warehouse's directories, those created in this process, and
        (once Spark runs) its databases."""
        names = {schema for schema, _ in _schema_dirs(self.warehouse, tables=False)}
        names |= self._schemas | {schema for schema, _ in _locations}
        if self._spark is not None:
            names |= {r[0] for r in self._spark.sql("SHOW DATABASES").collect()}
        return names

    def create_schema(self, schema: str) -> None:
        """Record the schema (its directory appears with its first table); a database in Spark
        if it runs."""
        with self._lock:
            self._schemas.add(schema.lower())
            if self._spark is not None:
                self._spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")

    def drop_schema(self, schema: str) -> None:
        with self._lock:
            self._schemas.discard(schema.lower())
            if self._spark is not None:
                self._spark.sql(f"DROP DATABASE IF EXISTS `{schema}` CASCADE")

    def relations(self, schema: str) -> list[tuple[str, str]]:
        """(identifier, 'table' | 'view') of the schema's relations in the warehouse (Delta
        tables, registered source locations, stored views), read from disk; tables bound in
        Spark whose directory is gone are unbound, those whose columns changed are rebound."""
        schema = schema.lower()
        sdir = storage.join(self.warehouse, schema)
        out = {}
        for identifier in storage.list_dirs(sdir):
            path = storage.join(sdir, identifier)
            if is_delta(path):
                out[identifier] = "table"
            elif storage.exists(view_path(path)):
                out[identifier] = "view"
        with _lock:
            out.update({i: "table" for (s, i), p in _locations.items() if s == schema})
        for identifier in self.tables(schema):
            self.bind(schema, identifier)  # rebinds or unbinds (Spark runs: it has bound tables)
        return sorted(out.items())

    def delta_tables(self) -> list[tuple[str, str, str]]:
        """(schema, identifier, path) of every Delta table in the warehouse and at a registered
        location, read from disk (nothing is bound)."""
        out = {
            (schema, identifier): storage.join(self.warehouse, schema, identifier)
            for schema, identifiers in _schema_dirs(self.warehouse)
            for identifier in identifiers
        }
        with _lock:
            out.update(_locations)
        return sorted((s, i, p) for (s, i), p in out.items() if is_delta(p))

    def location(self, schema: str, identifier: str) -> str:
        """Where the relation `schema`.`identifier` lives (its Delta table, or a view's SQL)."""
        key = (schema.lower(), identifier.lower())
        return _locations.get(key) or storage.join(self.warehouse, *key)

    def location_of(self, name: str) -> str:
        """`location` of a relation named `schema.identifier` (schema `default` if it has none),
        as model SQL and the compiled plan name sources."""
        schema, _, identifier = name.rpartition(".")
        return self.location(schema or "default", identifier)

    def checkpoint(self, name: str, table: str) -> str:
        """Spark's checkpoint of model `name` (schema.identifier) whose table is built at
        `table`: beside the table, or under the profile's `checkpoint_root` if it has one."""
        if self.checkpoint_root:
            return layout.external_checkpoint_path(self.checkpoint_root, name)
        return layout.checkpoint_path(table)

    def bound(self) -> list[tuple[str, str, str]]:
        """(schema, identifier, path) of every bound Delta table."""
        with self._lock:
            return [(s, i, path) for (s, i), (path, _) in self._bound.items()]

    def bind(self, schema: str, identifier: str) -> bool:
        """(Re)bind `schema.identifier` to its Delta table; unbind it if none is there.
        Returns whether a table is bound. Cheap when nothing changed."""
        schema, identifier = schema.lower(), identifier.lower()
        path = self.location(schema, identifier)
        with self._lock:
            if not is_delta(path):
                self.unbind(schema, identifier)
                return False
            if self._spark is None:  # bound when a statement reads it (`sql`)
                return True
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
        then re-create the stored views."""
        with self._lock:
            for schema, identifiers in _schema_dirs(self.warehouse):
                self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
                for identifier in identifiers:
                    if is_delta(storage.join(self.warehouse, schema, identifier)):
                        self.bind(schema, identifier)
                        self.bind_changelog(schema, identifier)
            self.bind_registered()
            self.restore_views()

    def define_view(self, schema: str, identifier: str, sql: str) -> None:
        """Create or replace the Spark view `schema`.`identifier` (Spark checks the SQL)."""
        self._views.add((schema.lower(), identifier.lower()))  # also: no resolving it meanwhile
        self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
        self.sql(f"CREATE OR REPLACE VIEW `{schema}`.`{identifier}` AS\n{sql}")

    def restore_views(self) -> None:
        """Re-create the stored views in Spark. A view may read another view, so views that fail
        are retried while others succeed; those that still fail (their tables are gone) are left
        out of the catalog, and the next `dbt run` of the model re-creates them."""
        pending = stored_views(self.warehouse)
        while pending:
            failed = []
            for schema, identifier, sql in pending:
                try:
                    self.define_view(schema, identifier, sql)
                except Exception as exc:  # noqa: BLE001 - reported below if it never succeeds
                    failed.append((schema, identifier, sql, exc))
            if len(failed) == len(pending):
                for schema, identifier, _, exc in failed:
                    logger.debug(f"view {schema}.{identifier} not restored: {exc}")
                return
            pending = [f[:3] for f in failed]

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


def warehouse_tables(warehouse: str) -> list[tuple[str, str]]:
    """(schema.identifier, path) of the Delta tables in the warehouse, read from disk."""
    return [
        (f"{schema}.{identifier}", path)
        for schema, identifiers in _schema_dirs(warehouse)
        for identifier in identifiers
        if is_delta(path := storage.join(warehouse, schema, identifier))
    ]


def _schema_dirs(warehouse: str, tables: bool = True) -> list[tuple[str, list[str]]]:
    """(schema, [identifier, ...]) of the warehouse's directories, sorted ([] without `tables`);
    the adapter's own directories (starting with '.' or '_') are not schemas."""
    return [
        (schema, storage.list_dirs(storage.join(warehouse, schema)) if tables else [])
        for schema in storage.list_dirs(warehouse)
        if not schema.startswith((".", "_"))
    ]


def _named_relations(text: str) -> set[tuple[str, str]]:
    """(schema, identifier) of each schema-qualified table a statement names, as far as sqlglot
    parses it (nothing if it cannot): bound before Spark analyses the statement."""
    import sqlglot
    from sqlglot import exp

    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "unsupported syntax, parsed as a Command": nothing to bind
    try:
        trees = sqlglot.parse(text, read="spark")
    except Exception:  # noqa: BLE001 - Spark reports the names it misses (Catalog.sql)
        return set()
    finally:
        quiet.setLevel(level)
    out = set()
    for tree in trees:
        if tree is None or isinstance(tree, exp.Drop):  # a drop reads nothing
            continue
        created = tree.find(exp.Table) if isinstance(tree, exp.Create) else None
        for t in tree.find_all(exp.Table):
            if t.db and t.name and t is not created:
                out.add((t.db.lower(), t.name.lower()))
    return out


def _missing_relation(exc) -> tuple[str, str] | None:
    """(schema, identifier) of the table or view an AnalysisException says is not found (schema
    `default` for an unqualified name), or None for any other error."""
    condition = getattr(exc, "getCondition", None) or exc.getErrorClass
    if condition() != "TABLE_OR_VIEW_NOT_FOUND":
        return None
    name = (exc.getMessageParameters() or {}).get("relationName", "")
    parts = [p.strip("`") for p in name.split("`.`")] if name else []
    if not parts or not parts[-1]:
        return None
    return (parts[-2] if len(parts) > 1 else "default", parts[-1])


class LazySession:
    """Stands for the catalog's SparkSession without starting it: any attribute starts it, and
    `sql` is `Catalog.sql` (binds what the statement reads)."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog

    def sql(self, *args, **kwargs):
        return self._catalog.sql(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._catalog.spark, name)


def stored_views(warehouse: str) -> list[tuple[str, str, str]]:
    """(schema, identifier, sql) of every view definition under the warehouse."""
    out = []
    for schema, identifiers in _schema_dirs(warehouse):
        for identifier in identifiers:
            location = storage.join(warehouse, schema, identifier)
            try:
                sql = storage.read_text(view_path(location))
            except FileNotFoundError:
                continue
            if not is_delta(location):
                out.append((schema, identifier, sql))
    return out
