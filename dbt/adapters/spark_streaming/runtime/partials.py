"""A `state_ttl` model's micro-batch (sql/state.py): its partial aggregates merged with the
stored partials of the keys it touches, the result rows of those keys, and which of them
started afresh because their stored partials had expired."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..delta.partials import UPDATED, partials_path
from ..delta.upsert import rows_with_keys
from .catalog import is_delta

RESTARTED = "__restarted"


def _views(name: str) -> dict[str, str]:
    tag = name.replace(".", "_")
    return {step: f"__dss_{step}_{tag}" for step in ("batch", "partial", "merged")}


def result_schema(plan, spark, stream_schema, name: str):
    """The result columns of the model (the stream itself only projects)."""
    return _evaluate(plan, spark.createDataFrame([], stream_schema), None, name, 0)[0].schema


def _evaluate(plan, batch_df, stored_of, name: str, batch_ts_ms: int):
    """(result rows, merged partials) of a batch; `stored_of(touched keys as Arrow)` gives the
    stored partials of (at least) those keys as a DataFrame, or None (no stored partials)."""
    from pyspark.sql import functions as F

    spark, views, keys = batch_df.sparkSession, _views(name), list(plan.upsert.partials.keys)
    batch_df.createOrReplaceTempView(views["batch"])
    partial = spark.sql(plan.partials_sql_for("partial", views["batch"])).localCheckpoint()  # read the batch once
    expired = None
    touched = partial.select(*keys)
    stored = stored_of(touched.toArrow()) if stored_of else None
    if stored is not None:
        stored = stored.join(touched, [stored[k].eqNullSafe(touched[k]) for k in keys], "left_semi")
        cutoff = batch_ts_ms - plan.upsert.partials.ttl_ms
        partial = partial.unionByName(stored.where(F.col(UPDATED) >= cutoff).drop(UPDATED))
        expired = stored.where(F.col(UPDATED) < cutoff).select(*[F.col(k).alias(f"__x{k}") for k in keys])
    partial.createOrReplaceTempView(views["partial"])
    merged = spark.sql(plan.partials_sql_for("merge", views["partial"]))
    if expired is not None:
        merged = (merged.join(expired, [merged[k].eqNullSafe(expired[f"__x{k}"]) for k in keys], "left")
                  .withColumn(RESTARTED, F.col(f"__x{keys[0]}").isNotNull() | F.lit(False))
                  .drop(*[f"__x{k}" for k in keys]))
    else:
        merged = merged.withColumn(RESTARTED, F.lit(False))
    merged = merged.withColumn(UPDATED, F.lit(batch_ts_ms).cast("long")).localCheckpoint()
    merged.createOrReplaceTempView(views["merged"])
    return spark.sql(plan.partials_sql_for("final", views["merged"])), merged


def _plain(t: pa.DataType) -> pa.DataType:
    """`t` with string views (which Spark does not read) as strings, nested types included."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, _plain(t.value_type), t.value_field.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    return t


def batch(plan, batch_df, table_path: str, batch_ts_ms: int, name: str, result_keys: list[str]):
    """(result rows, merged partials to store, result keys of the rows that started afresh)."""
    path = partials_path(table_path)

    def stored_of(touched: pa.Table):  # read with delta-rs: partials may be structs and arrays
        if not is_delta(path):
            return None
        table = rows_with_keys(DeltaTable(path), touched.column_names, touched)
        if not table.num_rows:
            return None
        table = table.cast(pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in table.schema]))
        return batch_df.sparkSession.createDataFrame(table)

    rows, merged = _evaluate(plan, batch_df, stored_of, name, batch_ts_ms)
    partials = merged.toArrow()
    restarted = set()
    if pc.any(partials.column(RESTARTED)).as_py():
        merged.where(RESTARTED).createOrReplaceTempView(_views(name)["merged"])
        again = batch_df.sparkSession.sql(plan.partials_sql_for("final", _views(name)["merged"]))
        keys = again.select(*result_keys).toArrow()
        restarted = set(zip(*(keys.column(k).to_pylist() for k in result_keys)))
    return rows.toArrow(), partials.drop_columns([RESTARTED]), restarted
