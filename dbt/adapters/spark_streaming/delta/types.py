"""Type mapping between Delta, Spark and Arrow (kept here: pyspark's own helper changed
signature between 4.0 and 4.3)."""

from __future__ import annotations

import pyarrow as pa

# Delta primitive type name -> Spark SQL type
_DELTA_TO_SPARK = {
    "string": "string",
    "long": "bigint",
    "integer": "int",
    "short": "smallint",
    "byte": "tinyint",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "date": "date",
    "binary": "binary",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}
# Spark simpleString -> Arrow type that Spark's Arrow path expects
_SPARK_TO_ARROW = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def delta_to_spark_type(delta_type) -> str:
    """Spark SQL type of a delta-rs schema field type (primitive or decimal)."""
    name = getattr(delta_type, "type", str(delta_type))
    if name.startswith("decimal"):
        return name
    try:
        return _DELTA_TO_SPARK[name]
    except KeyError:
        raise TypeError(
            f"Delta type {name!r} is not supported by dbt-spark-streaming yet"
        ) from None


def spark_to_arrow_type(spark_type: str) -> pa.DataType:
    """Arrow type for a Spark SQL simpleString type."""
    if spark_type.startswith("decimal"):
        p, s = spark_type[len("decimal(") : -1].split(",")
        return pa.decimal128(int(p), int(s))
    try:
        return _SPARK_TO_ARROW[spark_type]
    except KeyError:
        raise TypeError(
            f"Spark type {spark_type!r} is not supported by dbt-spark-streaming yet"
        ) from None


def table_columns(path: str, version: int | None = None) -> list[tuple[str, str]]:
    """(name, Spark SQL type) of the Delta table at `path` (at `version`, else its latest)."""
    from .log import table

    return [(f.name, delta_to_spark_type(f.type)) for f in table(path, version).schema().fields]


def ddl(columns: list[tuple[str, str]]) -> str:
    """Spark DDL column list: `a` bigint, `b` string."""
    return ", ".join(f"`{n}` {t}" for n, t in columns)


def arrow_schema(columns: list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(n, spark_to_arrow_type(t)) for n, t in columns])


def conform(
    batch: pa.RecordBatch, target: pa.Schema, constants: dict | None = None
) -> pa.RecordBatch:
    """Cast `batch` to exactly `target` (Spark 4.3 rejects any other Arrow type); columns
    missing from the file (partition columns) are filled from `constants`."""
    cols = []
    for f in target:
        i = batch.schema.get_field_index(f.name)
        if i < 0:
            value = (constants or {}).get(f.name)
            c = pa.array([value] * batch.num_rows, pa.string()).cast(f.type)
        else:
            c = batch.column(i)
        if not c.type.equals(f.type):
            c = c.cast(f.type)
        cols.append(c)
    return pa.RecordBatch.from_arrays(cols, schema=target)
