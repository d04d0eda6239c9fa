"""Rows through a pandas operator (applyInPandasWithState) without changing a value.

pyspark hands such an operator each column as a pandas Series. An integer column holding a NULL
becomes float64 (a BIGINT above 2**53 loses its last digits), and a float column's NaN cannot
be told from NULL; on the way back a NaN becomes NULL. Inside a struct column every value
crosses as a Python object (one dict per row): integers stay int and NULL is None, and only a
float NaN still turns NULL on the way out (pyspark 4.3, measured 2026-11-29). So an operator's
rows travel as one struct column whose FLOAT and DOUBLE fields are strings: Spark's CAST to
STRING gives every double back exactly (a FLOAT is first widened to the DOUBLE that Spark's
aggregates take), Python's float() reads it ('NaN', 'Infinity', '-0.0') and repr() writes it
('nan', 'inf', ...), which Spark's CAST reads back. Only top-level fields are converted: the
tables here hold primitive types only (delta/types.py), so no array, map or struct of floats
reaches an operator from a source.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence


def _floats(schema) -> List[bool]:
    from pyspark.sql.types import DoubleType, FloatType

    return [isinstance(f.dataType, (DoubleType, FloatType)) for f in schema.fields]


def carried(schema):
    """The struct type that carries rows of ``schema`` (a StructType) through pandas."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType(
        [
            StructField(f.name, StringType() if floating else f.dataType, True)
            for f, floating in zip(schema.fields, _floats(schema), strict=True)
        ]
    )


def pack(df, name: str, keep: Sequence[str] = (), packed: Optional[Sequence[str]] = None):
    """``df`` as the columns ``keep`` and one struct column ``name`` carrying its columns
    ``packed`` (all of them if None)."""
    from pyspark.sql import functions as F

    fields = [
        F.col(f"`{f.name}`").cast("double").cast("string").alias(f.name)
        if floating
        else F.col(f"`{f.name}`").alias(f.name)
        for f, floating in zip(df.schema.fields, _floats(df.schema), strict=True)
        if packed is None or f.name in packed
    ]
    return df.select(*[F.col(f"`{k}`") for k in keep], F.struct(*fields).alias(name))


def unpacked(column, schema) -> list:
    """The fields of a carried struct ``column`` (carried(schema)) as the columns of
    ``schema``, each cast back on its own."""
    return [column[f.name].cast(f.dataType).alias(f.name) for f in schema.fields]


def unpack(df, name: str, schema):
    """The rows of ``df``'s struct column ``name`` (carried(schema)) as the columns of
    ``schema``."""
    from pyspark.sql import functions as F

    return df.select(*unpacked(F.col(f"`{name}`"), schema))


def reader(schema) -> Callable[[Any], dict]:
    """The function giving a carried row (a dict from pandas) as {column: Python value}."""
    names = schema.fieldNames()
    floats = [n for n, floating in zip(names, _floats(schema), strict=True) if floating]

    def read(row: Any) -> dict:
        row = dict(row)
        for n in floats:
            if row[n] is not None:
                row[n] = float(row[n])
        return row

    return read


def writer(schema) -> Callable[[Sequence[Any]], dict]:
    """The function giving a tuple of Python values as a carried row (a dict for pandas)."""
    names = schema.fieldNames()
    floats = _floats(schema)

    def write(values: Sequence[Any]) -> dict:
        return {
            n: repr(float(v)) if floating and v is not None else v
            for n, v, floating in zip(names, values, floats, strict=True)
        }

    return write
