"""dbt's batch materializations on the Delta warehouse: `table`, `incremental`, `snapshot`.

Spark computes the model's SELECT (reading every relation through the catalog, at its latest
Delta version); each write is one Delta commit, so readers (and streaming models) see the old
table or the new one, never a mix:

- table: an overwrite with the new schema and `partition_by` (a new Delta version; the old
  ones stay readable with time travel until vacuumed);
- incremental: append, MERGE on `unique_key` (delta-rs `DeltaTable.merge`), or replace the
  partitions present in the new rows (insert_overwrite), after aligning the new rows with
  the table's columns per `on_schema_change`;
- snapshot: dbt's snapshot MERGE (close the changed rows' current version, insert new ones).

Where the rows go: a `table` and an `append` into an unpartitioned table are written by Spark
tasks, one Parquet file each (delta/writer.py), and only the files' metadata reaches the driver,
which commits them. A MERGE's new rows are staged as files by Spark tasks and streamed into
delta-rs's MERGE. The other writes collect the rows to the driver as Arrow for delta-rs
(partitioned tables, insert_overwrite, snapshots, an append that adds columns, nested column
types): right for dimension, reporting and snapshot tables, not for very large ones.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Optional

import pyarrow as pa
from dbt.adapters.contracts.connection import AdapterResponse
from dbt_common.exceptions import CompilationError
from deltalake import CommitProperties, DeltaTable, Schema, write_deltalake

from ..delta import storage, types
from ..delta.sink import append_files, replace_files
from ..delta.writer import write_files
from ..errors import StreamingError, config_error
from ..layout import staging_path
from .catalog import Catalog

STRATEGIES = ("append", "merge", "insert_overwrite")
ON_SCHEMA_CHANGE = ("ignore", "fail", "append_new_columns", "sync_all_columns")
# MERGE aliases, as in dbt's own macros (incremental_predicates may use them); delta-rs
# parses predicates as DataFusion SQL, which folds unquoted names to lower case.
SOURCE, TARGET = "dbt_internal_source", "dbt_internal_dest"

Columns = list  # [(name, Spark SQL type)]


def _frame(spark, sql: str):
    """The DataFrame of `sql` and its columns. A bare NULL column (Spark type void) is a string:
    Delta has no null type."""
    df = spark.sql(sql)
    columns = [
        (f.name, "string" if f.dataType.simpleString() == "void" else f.dataType.simpleString())
        for f in df.schema.fields
    ]
    return df, columns


def _collect(df) -> pa.Table:
    """`df`'s rows on the driver as Arrow, every column nullable (as Delta columns are)."""
    data = df.toArrow()
    schema = pa.schema(
        [pa.field(f.name, pa.string() if pa.types.is_null(f.type) else f.type) for f in data.schema]
    )
    return data.cast(schema)


def query(spark, sql: str) -> tuple[pa.Table, Columns]:
    """Run `sql` in Spark: its rows as Arrow on the driver, and its columns."""
    df, columns = _frame(spark, sql)
    return _collect(df), columns


def _tasks_write(columns: Columns, partitions: list[str]) -> bool:
    """Whether Spark tasks can write these rows (delta/writer.py): unpartitioned, and every
    column of a type with a known Arrow type (no nested types)."""
    try:
        types.arrow_schema(columns)
    except TypeError:
        return False
    return not partitions


def _write(df, path: str, columns: Columns) -> tuple[list[dict], pa.Schema]:
    """Spark tasks write `df`'s rows as `columns` into files at `path` (not yet committed)."""
    schema = types.arrow_schema(columns)
    return write_files(df, path, schema, f"part-{uuid.uuid4().hex[:8]}-"), schema


def _q(name: str) -> str:
    """A column name quoted for delta-rs predicates and MERGE expressions."""
    return "`" + name.replace("`", "``") + "`"


def _as_list(value: Any) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def _arrow_type(spark_type: str, fallback: pa.DataType) -> pa.DataType:
    try:
        return types.spark_to_arrow_type(spark_type)
    except TypeError:  # nested types: keep what Spark produced
        return fallback


def project(data: pa.Table, columns: Columns) -> pa.Table:
    """`data` with exactly `columns` (matched by name, case-insensitively), cast to their
    types; a column `data` lacks is all NULL."""
    index = {n.lower(): i for i, n in enumerate(data.column_names)}
    arrays, fields = [], []
    for name, spark_type in columns:
        i = index.get(name.lower())
        col = data.column(i) if i is not None else None
        target = _arrow_type(spark_type, col.type if col is not None else pa.string())
        arrays.append(col.cast(target) if col is not None else pa.nulls(data.num_rows, target))
        fields.append(pa.field(name, target))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _check_partitions(partition_by: list[str], columns: Columns, label: str) -> None:
    names = [n for n, _ in columns]
    missing = [p for p in partition_by if p not in names]
    if missing:
        raise config_error(
            "partition_by",
            partition_by,
            f"columns of {label}: {names}",
            f"Partition only by columns the model selects (missing: {missing}).",
        )


def _done(catalog: Catalog, schema: str, identifier: str, verb: str, rows: int) -> AdapterResponse:
    catalog.bind(schema, identifier)
    return AdapterResponse(_message=f"{verb} {rows}", rows_affected=rows)


def write_table(
    spark, catalog: Catalog, schema: str, identifier: str, sql: str, partition_by: Any = None
) -> AdapterResponse:
    """(Re)build the Delta table from `sql`: one overwrite commit, new schema and partitioning."""
    path = catalog.location(schema, identifier)
    df, columns = _frame(spark, sql)
    partitions = _as_list(partition_by)
    _check_partitions(partitions, columns, f"{schema}.{identifier}")
    if _tasks_write(columns, partitions):
        files, arrow = _write(df, path, columns)
        replace_files(path, files, arrow)
        return _done(catalog, schema, identifier, "CREATE TABLE", sum(f["rows"] for f in files))
    data = _collect(df)
    write_deltalake(path, data, mode="overwrite", schema_mode="overwrite", partition_by=partitions)
    return _done(catalog, schema, identifier, "CREATE TABLE", data.num_rows)


@dataclass
class IncrementalConfig:
    """The configs of an `incremental` model that this adapter reads, validated."""

    strategy: str = "append"
    unique_key: list[str] = field(default_factory=list)
    on_schema_change: str = "ignore"
    partition_by: list[str] = field(default_factory=list)
    merge_update_columns: list[str] = field(default_factory=list)
    merge_exclude_columns: list[str] = field(default_factory=list)
    incremental_predicates: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: dict) -> "IncrementalConfig":
        unique_key = _as_list(config.get("unique_key"))
        strategy = config.get("incremental_strategy") or ("merge" if unique_key else "append")
        if strategy not in STRATEGIES:
            raise config_error("incremental_strategy", strategy, " or ".join(map(repr, STRATEGIES)))
        on_schema_change = config.get("on_schema_change") or "ignore"
        if on_schema_change not in ON_SCHEMA_CHANGE:
            raise config_error(
                "on_schema_change", on_schema_change, " or ".join(map(repr, ON_SCHEMA_CHANGE))
            )
        if strategy == "merge" and not unique_key:
            raise config_error(
                "unique_key",
                None,
                "one column or a list of columns",
                "The 'merge' strategy needs `unique_key`; use 'append' to insert every row.",
            )
        return cls(
            strategy=strategy,
            unique_key=unique_key,
            on_schema_change=on_schema_change,
            partition_by=_as_list(config.get("partition_by")),
            merge_update_columns=_as_list(config.get("merge_update_columns")),
            merge_exclude_columns=_as_list(config.get("merge_exclude_columns")),
            incremental_predicates=_as_list(
                config.get("incremental_predicates") or config.get("predicates")
            ),
        )


def align(path: str, columns: Columns, mode: str, label: str) -> tuple[Columns, bool]:
    """The columns the new rows take to match the table per `on_schema_change` (`mode`), and
    whether the write must add columns to the table. sync_all_columns first rewrites the table
    with the new columns (a commit of its own)."""
    existing = types.table_columns(path)
    have = {n.lower(): (n, t) for n, t in existing}
    new = {n.lower(): (n, t) for n, t in columns}
    added = [new[k] for k in new if k not in have]
    removed = [have[k] for k in have if k not in new]
    changed = [(have[k], new[k]) for k in new if k in have and have[k][1] != new[k][1]]
    if not (added or removed or changed) or mode == "ignore":
        return existing, False
    if mode == "fail":  # a compilation error, as dbt's own on_schema_change='fail' raises
        raise CompilationError(
            StreamingError(
                "SSD403",
                f"the columns of incremental model {label} changed",
                f"Got: added {added}, removed {removed}, retyped {changed} / "
                f"Expected: the table's columns {existing}",
                "Set on_schema_change to 'append_new_columns' or 'sync_all_columns', or rebuild "
                "the table with `dbt run --full-refresh`.",
            ).msg
        )
    if mode == "append_new_columns":
        return existing + added, bool(added)
    # sync_all_columns: the table takes the query's columns; old rows keep what they can.
    old = DeltaTable(path)
    partitions = [p for p in old.metadata().partition_columns if p.lower() in new]
    write_deltalake(
        path,
        project(old.to_pyarrow_table(), columns),
        mode="overwrite",
        schema_mode="overwrite",
        partition_by=partitions,
    )
    return columns, False


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime)):
        value = value.isoformat()
    return "'" + str(value).replace("'", "''") + "'"


def _partitions_predicate(data: pa.Table, partitions: list[str]) -> str:
    """A predicate matching the partitions that hold any of `data`'s rows."""
    values = data.select(partitions).group_by(partitions).aggregate([]).to_pylist()
    return " OR ".join(
        "("
        + " AND ".join(
            f"{_q(p)} IS NULL" if row[p] is None else f"{_q(p)} = {_literal(row[p])}"
            for p in partitions
        )
        + ")"
        for row in values
    )


def run_incremental(
    spark, catalog: Catalog, schema: str, identifier: str, sql: str, config: dict
) -> AdapterResponse:
    """Add the query's rows to the existing Delta table per the incremental strategy."""
    cfg = IncrementalConfig.from_config(config)
    label = f"{schema}.{identifier}"
    path = catalog.location(schema, identifier)
    df, columns = _frame(spark, sql)
    target, evolve = align(path, columns, cfg.on_schema_change, label)
    table = DeltaTable(path)
    if (
        cfg.strategy == "append"
        and not evolve
        and _tasks_write(target, table.metadata().partition_columns)
    ):
        files, _ = _write(df, path, target)
        if files:  # nothing new: no commit
            append_files(path, files, table.schema(), CommitProperties())
        return _done(catalog, schema, identifier, "APPEND", sum(f["rows"] for f in files))
    if cfg.strategy == "merge" and _tasks_write(target, []):
        rows = _merge_staged(df, path, target, cfg, evolve)
        return _done(catalog, schema, identifier, "MERGE", rows)
    data = project(_collect(df), target)
    schema_mode = "merge" if evolve else None
    if cfg.strategy == "append":
        write_deltalake(path, data, mode="append", schema_mode=schema_mode)
    elif cfg.strategy == "merge":
        _merge(table, data, cfg, evolve)
    else:  # insert_overwrite: replace the partitions the new rows fall in (or the whole table)
        partitions = cfg.partition_by or table.metadata().partition_columns
        if not partitions:
            write_deltalake(path, data, mode="overwrite", schema_mode=schema_mode)
        elif data.num_rows:
            write_deltalake(
                path,
                data,
                mode="overwrite",
                schema_mode=schema_mode,
                predicate=_partitions_predicate(data, partitions),
            )
    return _done(catalog, schema, identifier, cfg.strategy.upper(), data.num_rows)


def _merge(table: DeltaTable, source, cfg: IncrementalConfig, evolve: bool) -> None:
    """delta-rs's MERGE of `source` (an Arrow table or a stream of batches) on `unique_key`."""
    on = " AND ".join(
        [f"{SOURCE}.{_q(k)} = {TARGET}.{_q(k)}" for k in cfg.unique_key]
        + [f"({p})" for p in cfg.incremental_predicates]
    )
    merger = table.merge(
        source=source, predicate=on, source_alias=SOURCE, target_alias=TARGET, merge_schema=evolve
    )
    if cfg.merge_update_columns:
        merger = merger.when_matched_update(
            {_q(c): f"{SOURCE}.{_q(c)}" for c in cfg.merge_update_columns}
        )
    else:
        merger = merger.when_matched_update_all(except_cols=cfg.merge_exclude_columns or None)
    merger.when_not_matched_insert_all().execute()


def _merge_staged(df, path: str, columns: Columns, cfg: IncrementalConfig, evolve: bool) -> int:
    """MERGE `df`'s rows without collecting them: Spark tasks stage them as Parquet files beside
    the table, and delta-rs merges them as a stream of record batches (its streamed execution:
    the new rows are read once, batch by batch, never held whole). The staged files are
    deleted afterwards (also those a crashed run left). Returns the number of new rows."""
    import pyarrow.dataset as ds

    staging = staging_path(path)
    storage.remove_tree(staging)
    try:
        files, arrow = _write(df, staging, columns)
        if not files:
            return 0
        filesystem, root = storage.filesystem(staging)
        dataset = ds.dataset(
            [f"{root.rstrip('/')}/{f['path']}" for f in files],
            schema=arrow,
            format="parquet",
            filesystem=filesystem,
        )
        _merge(DeltaTable(path), dataset.scanner().to_reader(), cfg, evolve)
        return sum(f["rows"] for f in files)
    finally:
        storage.remove_tree(staging)


def add_columns(path: str, columns: Columns) -> None:
    """Add nullable columns to the Delta table (one commit)."""
    DeltaTable(path).alter.add_columns(Schema.from_arrow(types.arrow_schema(columns)).fields)


def merge_snapshot(
    spark,
    catalog: Catalog,
    schema: str,
    identifier: str,
    staging_sql: str,
    names: dict,
    valid_to_current: Optional[str] = None,
) -> AdapterResponse:
    """dbt's snapshot MERGE through delta-rs. `staging_sql` is dbt's snapshot staging query
    (one row per insert, update or delete, with `dbt_change_type`); `names` maps dbt's
    snapshot meta columns to this snapshot's names (`snapshot_table_column_names`)."""
    path = catalog.location(schema, identifier)
    data, columns = query(spark, staging_sql)
    internal = [
        n
        for n, _ in columns
        if n.lower() == "dbt_change_type" or n.lower().startswith("dbt_unique_key")
    ]
    have = {n.lower() for n, _ in types.table_columns(path)}
    missing = [(n, t) for n, t in columns if n.lower() not in have and n not in internal]
    if missing:
        add_columns(path, missing)
    scd, valid_to = _q(names["dbt_scd_id"]), _q(names["dbt_valid_to"])
    current = f"{TARGET}.{valid_to} IS NULL"
    if valid_to_current:
        current = f"({TARGET}.{valid_to} = {valid_to_current} OR {current})"
    stats = (
        DeltaTable(path)
        .merge(
            source=data,
            predicate=f"{SOURCE}.{scd} = {TARGET}.{scd}",
            source_alias=SOURCE,
            target_alias=TARGET,
        )
        .when_matched_update(
            {valid_to: f"{SOURCE}.{valid_to}"},
            predicate=f"{current} AND {SOURCE}.dbt_change_type IN ('update', 'delete')",
        )
        .when_not_matched_insert(
            {_q(n): f"{SOURCE}.{_q(n)}" for n, _ in columns if n not in internal},
            predicate=f"{SOURCE}.dbt_change_type = 'insert'",
        )
        .execute()
    )
    rows = stats.get("num_target_rows_inserted", 0) + stats.get("num_target_rows_updated", 0)
    return _done(catalog, schema, identifier, "MERGE", rows)
