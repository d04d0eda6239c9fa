"""Connections: every dbt connection uses the process's one embedded SparkSession and
the catalog binding of the profile's warehouse."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Generator, List, Optional

from dbt.adapters.contracts.connection import AdapterResponse, Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.connections import SparkConnectionManager
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

logger = AdapterLogger("SparkStreaming")

_catalogs: dict = {}


def profile_spark(creds) -> tuple[str, dict]:
    """The profile's Spark master and settings: `server_side_parameters`, and its
    `storage_options` as the executors' environment (they are also set in this process's
    environment, which deltalake and pyarrow read here and a runner process inherits)."""
    from .runtime.session import storage_environment

    conf = storage_environment(creds.storage_options)
    return creds.master, {**conf, **(creds.server_side_parameters or {})}


def spark_log() -> Optional[str]:
    """Where the JVM's and Spark's output goes: spark.log beside dbt.log (dbt's `--log-path`),
    or the console with `--debug`."""
    from dbt.flags import get_flags

    flags = get_flags()
    path = getattr(flags, "LOG_PATH", None)
    if getattr(flags, "DEBUG", False) or not path:
        return None
    os.makedirs(path, exist_ok=True)
    return os.path.join(os.path.abspath(path), "spark.log")


def session_and_catalog(creds):
    """The Catalog of `creds.warehouse_path` and its SparkSession, which starts on first use
    (`catalog.session`: its `sql` binds the relations a statement reads; runtime/catalog.py).
    A `dbt run` that has nothing to do for Spark starts none."""
    from .runtime.catalog import Catalog
    from .runtime.session import get_spark

    catalog = _catalogs.get(creds.warehouse_path)
    if catalog is None:
        settings = profile_spark(creds)  # sets the storage environment, which delta-rs reads
        log = spark_log()
        catalog = Catalog(
            lambda: get_spark(*settings, log=log), creds.warehouse_path, creds.checkpoint_root
        )
        _catalogs[creds.warehouse_path] = catalog
    return catalog.session, catalog


class EmbeddedHandle:
    """A DB-API-like handle over SparkSession.sql (cursor() returns itself)."""

    def __init__(self, creds):
        self.spark, self.catalog = session_and_catalog(creds)
        self._df = None
        self._rows: Optional[list] = None

    def cursor(self) -> "EmbeddedHandle":
        return self

    def execute(self, sql: str, bindings: Optional[List[Any]] = None) -> None:
        from pyspark.errors import PySparkException

        sql = sql.strip().rstrip(";")
        if bindings:
            sql = sql % tuple(_literal(b) for b in bindings)
        self._rows = None
        try:
            self._df = self.catalog.sql(sql)
        except PySparkException as exc:
            raise DbtDatabaseError(str(exc)) from exc

    def fetchall(self):
        if self._rows is None and self._df is not None:
            self._rows = self._df.collect()
        return self._rows

    def fetchone(self):
        rows = self.fetchall()
        return rows.pop(0) if rows else None

    @property
    def description(self):
        if self._df is None:
            return []
        return [
            (f.name, f.dataType.simpleString(), None, None, None, None, f.nullable)
            for f in self._df.schema.fields
        ]

    def cancel(self) -> None:
        if self.catalog.started:
            self.catalog.spark.sparkContext.cancelAllJobs()

    def close(self) -> None:
        self._df, self._rows = None, None

    def rollback(self, *args: Any, **kwargs: Any) -> None:
        pass


def _literal(value: Any) -> str:
    import datetime as dt
    from decimal import Decimal

    if value is None:
        return "NULL"
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dt.datetime):
        return f"'{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


class SparkStreamingConnectionManager(SparkConnectionManager):
    TYPE = "spark_streaming"

    @contextmanager
    def exception_handler(self, sql: str) -> Generator[None, None, None]:
        try:
            yield
        except (DbtRuntimeError, DbtDatabaseError):
            raise
        except Exception as exc:
            logger.debug(f"Error while running:\n{sql}")
            raise DbtRuntimeError(str(exc)) from exc

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        connection.handle = EmbeddedHandle(connection.credentials)
        connection.state = ConnectionState.OPEN
        return connection

    @classmethod
    def get_response(cls, cursor: Any) -> AdapterResponse:
        return AdapterResponse(_message="OK")
