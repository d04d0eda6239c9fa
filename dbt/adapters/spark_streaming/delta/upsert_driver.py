"""The copy-on-write MERGE of a small micro-batch in the dbt process: delta/upsert.py's path for
batches of at most `driver_rows` rows whose candidate files total at most `driver_bytes`.

It computes what the executors' path computes, in Arrow: the batch's last row per key, matched
with the table's current rows read from the candidate files (NULL keys match NULL keys, NaN
matches NaN, as Spark's `<=>`), the changelog rows (-U, -D, +I, +U), and the new content of
the files holding a changed key (their other rows, plus the new rows). Both are written as one
Parquet file each, named and with statistics as a Spark task writes them (delta/writer.py's
FileWriter, run here as task 0), so the commits, the crash sweep and the statistics pruning
are the same on both paths. No Spark job runs: a batch costs the collect of its rows.

Memory: the batch (at most `driver_rows` rows) and the candidate files (at most
`driver_bytes` of Parquet, a few times that in Arrow).
"""

from __future__ import annotations

import math
from typing import Sequence
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .writer import FileWriter, absolute, conform

SEQ = "__seq"  # the batch's row order (the last row of a repeated key wins)
KEEP = "__keep"
# a state_ttl batch's column: the key started afresh (its row, even unchanged, is logged again)
RESTARTED_FLAG = "__restarted"


def _key(value):
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def key_tuples(table: pa.Table, keys: Sequence[str]) -> list[tuple]:
    """Each row's key as a tuple of Python values (NULL is None, NaN one value): equal tuples are
    the keys Spark's `<=>` matches."""
    columns = [[_key(v) for v in table.column(k).to_pylist()] for k in keys]
    return list(zip(*columns, strict=True))


def conform_rows(rows: pa.Table, schema: pa.Schema, others: Sequence[str] = ()) -> pa.Table:
    """`schema`'s columns of `rows` conformed to it (writer.conform), then the columns
    `others` as they are."""
    out = pa.Table.from_batches([conform(b, schema) for b in rows.to_batches()], schema)
    for name in others:
        out = out.append_column(name, rows.column(name))
    return out


def last_per_key(batch: pa.Table, keys: Sequence[str]) -> pa.Table:
    """`batch` in SEQ order with one row per key, the last."""
    if SEQ in batch.column_names:
        batch = batch.take(pc.sort_indices(batch.column(SEQ))).drop_columns([SEQ])
    last = {key: i for i, key in enumerate(key_tuples(batch, keys))}
    if len(last) == batch.num_rows:
        return batch
    return batch.take(pa.array(sorted(last.values()), pa.int64()))


def bounds(new: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The batch's row count and per key column its min, max and NULL count, as the executors'
    path aggregates them (delta/upsert.py candidate_files reads them)."""
    columns: dict[str, pa.Array] = {"rows": pa.array([new.num_rows], pa.int64())}
    for k in keys:
        column = new.column(k)
        if column.null_count < len(column):
            mm = pc.min_max(column)
            lo, hi = mm["min"], mm["max"]
        else:
            lo = hi = pa.scalar(None, column.type)
        columns[f"min_{k}"] = pa.array([lo.as_py()], column.type)
        columns[f"max_{k}"] = pa.array([hi.as_py()], column.type)
        columns[f"nulls_{k}"] = pa.array([column.null_count], pa.int64())
    return pa.table(columns)


def read_files(location: str, paths: Sequence[str], schema: pa.Schema) -> list[pa.Table]:
    """The rows of the table's data files `paths` (as the Delta log names them, relative to
    `location` and URL-encoded, or absolute URIs), conformed to `schema`."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, root = pafs.FileSystem.from_uri(absolute(location))
    out = []
    for p in paths:
        if "://" in p:
            file_fs, file = pafs.FileSystem.from_uri(p)
        else:
            file_fs, file = fs, f"{root.rstrip('/')}/{unquote(p)}"
        data = pq.read_table(file, filesystem=file_fs)
        out.append(pa.Table.from_batches([conform(b, schema) for b in data.to_batches()], schema))
    return out


def _differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.Array:
    """Per row, whether `a` and `b` differ, as NOT (a <=> b) in Spark (maps always differ)."""
    t = a.type
    if pa.types.is_map(t):
        return pa.array(np.ones(len(a), bool))
    if pa.types.is_nested(t):
        return pa.array([x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)])
    differ = pc.fill_null(pc.not_equal(a, b), True)
    same = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_floating(t):  # Spark: NaN = NaN
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return pc.and_(differ, pc.invert(same))


def _matching(current: pa.Table, new: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Positions of the rows of `current` whose every key column holds a value of that column in
    `new`: a superset of the rows of `new`'s keys, found without a Python tuple per row."""
    mask = None
    for k in keys:
        column, values = current.column(k), new.column(k)
        if pa.types.is_floating(column.type):
            continue  # NaN: leave floats to the exact match
        match = pc.is_in(column, value_set=pc.unique(values).drop_null())
        match = pc.fill_null(match, False)
        if values.null_count:
            match = pc.or_(match, pc.is_null(column))
        mask = match if mask is None else pc.and_(mask, match)
    if mask is None:
        return pa.array(np.arange(current.num_rows), pa.int64())
    return pc.indices_nonzero(mask)


class Merge:
    """A batch's changes against the current rows of its candidate files."""

    def __init__(
        self,
        new: pa.Table,
        files: Sequence[str],
        contents: Sequence[pa.Table],
        schema: pa.Schema,
        keys: Sequence[str],
    ):
        """`new`: the batch's rows (one per key) with the table's columns, KEEP and maybe
        RESTARTED_FLAG; `contents`: the rows of each of `files`."""
        self.new, self.schema, names = new, schema, schema.names
        current = pa.concat_tables(contents) if contents else schema.empty_table()
        sizes = [t.num_rows for t in contents]
        self.file_of = np.repeat(np.arange(len(files), dtype=np.int64), sizes)
        self.files, self.current = list(files), current
        candidates = _matching(current, new, keys)
        at = {
            key: pos
            for key, pos in zip(
                key_tuples(current.take(candidates), keys), candidates.to_pylist(), strict=True
            )
        }
        match = [at.get(key) for key in key_tuples(new, keys)]
        found = np.array([m is not None for m in match], bool)
        self.positions = np.array([m if m is not None else 0 for m in match], np.int64)
        old = current.take(pa.array(self.positions)) if current.num_rows else None
        changed = np.zeros(new.num_rows, bool)
        if old is not None:
            for c in names:
                if c not in keys:
                    changed |= _differs(new.column(c), old.column(c)).to_numpy(zero_copy_only=False)
        if RESTARTED_FLAG in new.schema.names:  # the changelog marks a restart, even unchanged
            changed |= new.column(RESTARTED_FLAG).to_numpy(zero_copy_only=False).astype(bool)
        keep = new.column(KEEP).to_numpy(zero_copy_only=False).astype(bool)
        self.ins, self.upd, self.dele = ~found & keep, found & changed & keep, found & ~keep
        self.old = old

    def count(self) -> int:
        """The number of changelog rows."""
        return int(self.ins.sum() + 2 * self.upd.sum() + self.dele.sum())

    def touched(self) -> list[str]:
        """The files holding a row of a key that changes (they are rewritten)."""
        gone = self.positions[self.upd | self.dele]
        return [self.files[i] for i in sorted(set(self.file_of[gone].tolist()))]

    def changes(self, extra: dict[str, pa.Array | None]) -> pa.Table:
        """The changelog rows: -U/-D the current rows, +I/+U the new ones, with `_op` and the
        `extra` columns (name -> a value per batch row, or None: the restart flag column)."""
        names, parts = self.schema.names, []
        for flags, op, old in (
            (self.upd, "-U", True),
            (self.dele, "-D", True),
            (self.ins, "+I", False),
            (self.upd, "+U", False),
        ):
            source = self.old if old else self.new
            if source is None or not flags.any():
                continue
            rows = source.select(names).filter(pa.array(flags))
            columns = {"_op": pa.array([op] * rows.num_rows, pa.string())}
            for name, values in extra.items():
                columns[name] = values.filter(pa.array(flags))  # type: ignore[union-attr]
            for name, values in columns.items():
                rows = rows.append_column(name, values)
            parts.append(rows)
        return pa.concat_tables(parts) if parts else pa.table({})

    def rewritten(self) -> pa.Table:
        """The rows of the new files: the touched files' rows but those of the keys that change,
        and the new rows of inserted and updated keys."""
        names = self.schema.names
        gone = np.zeros(self.current.num_rows, bool)
        gone[self.positions[self.upd | self.dele]] = True
        touched = np.zeros(len(self.files), bool)
        touched[self.file_of[gone]] = True
        kept = self.current.filter(pa.array(touched[self.file_of] & ~gone))
        added = self.new.select(names).filter(pa.array(self.ins | self.upd))
        return pa.concat_tables([kept, added.cast(self.schema)])


def write(table: pa.Table, location: str, schema: pa.Schema, prefix: str) -> list[dict]:
    """Write `table` as one Parquet file at `location` as a Spark task would (writer.py); returns
    its metadata as write_files does ([] for no rows)."""
    if not table.num_rows:
        return []
    import pyarrow.fs as pafs

    location = absolute(location)
    fs, root = pafs.FileSystem.from_uri(location)
    fs.create_dir(root, recursive=True)
    out = FileWriter(location, schema, prefix)(iter(table.to_batches()))
    return [row for batch in out for row in batch.to_pylist()]
