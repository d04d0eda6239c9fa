"""`dbt seed` into Delta tables through delta-rs.

A seed whose content is unchanged is not rewritten: an overwrite is a Delta version that
removes data, which streaming models reading the seed would have to refuse.
"""

from __future__ import annotations

import pyarrow as pa
from dbt.adapters.contracts.connection import AdapterResponse
from deltalake import DeltaTable, write_deltalake

from ..delta.storage import is_delta
from ..delta.types import spark_to_arrow_type
from .catalog import Catalog


def agate_to_arrow(agate_table, types: dict[str, str]) -> pa.Table:
    """Arrow table with the Spark `types` of each column; naive datetimes are UTC."""
    arrays = []
    for i, name in enumerate(agate_table.column_names):
        target = spark_to_arrow_type(types[name])
        values = [row[i] for row in agate_table.rows]
        if all(v is None for v in values):
            arrays.append(pa.nulls(len(values), target))
        else:
            array = pa.array(values)
            if pa.types.is_timestamp(target) and (
                pa.types.is_string(array.type) or array.type.tz is None
            ):
                array = array.cast(pa.timestamp("us"))  # a zone-less value is UTC
            arrays.append(array.cast(target))
    return pa.Table.from_arrays(arrays, names=list(agate_table.column_names))


def load_seed(catalog: Catalog, schema: str, identifier: str, agate_table, types: dict[str, str]):
    table = agate_to_arrow(agate_table, types)
    path = catalog.location(schema, identifier)
    if is_delta(path) and DeltaTable(path).to_pyarrow_table().equals(table):
        message = f"UNCHANGED {table.num_rows}"
    else:
        write_deltalake(path, table, mode="overwrite", schema_mode="overwrite")
        message = f"INSERT {table.num_rows}"
    catalog.bind(schema, identifier)
    return AdapterResponse(_message=message, rows_affected=table.num_rows)
