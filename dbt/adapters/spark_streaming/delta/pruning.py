"""Which data files of a keyed Delta table may hold a row of a micro-batch's keys, from the
files' statistics in the Delta log (delta/upsert.py reads and rewrites only those)."""

from __future__ import annotations

from datetime import timedelta
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from .log import add_action_table


def candidate_files(table: DeltaTable, bounds: pa.Table, keys: Sequence[str]) -> list[str]:
    """The paths of the table's files that may hold a row of a key in the batch."""
    return candidate_actions(table, bounds, keys).column("path").to_pylist()


def candidate_actions(table: DeltaTable, bounds: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The add actions of the table's files that may hold a row of a key in the batch: `bounds` has
    one row, per key column k the batch's `min_k`, `max_k` and `nulls_k` (a count). A file
    is ruled out when its statistics put some key column wholly outside the batch's range
    (and it has no NULL there that a NULL of the batch could match); files without
    statistics are kept."""
    actions = add_action_table(table)
    keep = pa.array([True] * actions.num_rows, pa.bool_())
    for k in keys:
        lo, hi = bounds.column(f"min_{k}")[0], bounds.column(f"max_{k}")[0]
        nulls = bounds.column(f"nulls_{k}")[0].as_py() or 0
        names = (f"min.{k}", f"max.{k}", f"null_count.{k}")
        if not all(n in actions.column_names for n in names):
            continue
        mins, maxs, null_count = (actions.column(n) for n in names)
        if pa.types.is_floating(mins.type):
            continue  # NaN: Spark's max puts it above all numbers, the statistics leave it out
        if pa.types.is_timestamp(maxs.type):  # Delta writers truncate the max to milliseconds
            slack = pa.scalar(timedelta(microseconds=999))
            maxs = pc.add(maxs, slack.cast(pa.duration(maxs.type.unit), safe=False))
        if lo.is_valid:
            try:
                lo, hi = lo.cast(mins.type), hi.cast(maxs.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue  # statistics of another type: no pruning on this column
            overlap = pc.fill_null(
                pc.and_(pc.less_equal(mins, hi), pc.greater_equal(maxs, lo)), True
            )
        else:
            overlap = pa.array([False] * actions.num_rows, pa.bool_())
        if nulls:
            overlap = pc.or_(overlap, pc.fill_null(pc.greater(null_count, 0), True))
        keep = pc.and_(keep, overlap)
    return actions.filter(keep)
