"""A `state_ttl` model's micro-batch (sql/state.py): its partial aggregates merged with the
stored partials of the keys it touches, the result rows of those keys, and which of them
started afresh because their stored partials had expired.

Three Spark jobs per batch: the batch's partial aggregates (collected: one row per key it
touches), their merge with the stored partials of those keys (read with delta-rs, matched in
Arrow), and the query's projection of the merged partials. Telling which keys started afresh
reads the table's key columns of the keys without stored partials, and runs the projection
again on them only where the result does not name the key columns as they are stored;
apply_changes reads the partials' marker and expiring tombstones (`_after_expiry`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..delta.partials import UPDATED, key_tuples, rows_with_keys
from ..delta.storage import is_delta
from ..delta.upsert import RESTARTED_FLAG
from ..layout import partials_path
from ..sql.state import TOMBSTONE, key_columns


def _step(plan, step: str, df, name: str):
    """The state_ttl step `step` ('partial', 'merge' or 'final') of the query over `df`."""
    view = f"__dss_{step}_{name.replace('.', '_')}"
    df.createOrReplaceTempView(view)
    return df.sparkSession.sql(plan.partials_sql_for(step, view))


def result_schema(plan, spark, stream_schema, name: str):
    """The result columns of the model (the stream itself only projects)."""
    partial = _step(plan, "partial", spark.createDataFrame([], stream_schema), name)
    return _step(plan, "final", _step(plan, "merge", partial, name), name).schema


def _stored(
    partials: DeltaTable | None, partial: pa.Table, keys: list[str], cutoff_ms: int
) -> tuple[pa.Table | None, set, set]:
    """(the stored partials of `partial`'s keys last updated at or after `cutoff_ms` (with a
    TOMBSTONE column, apply_changes: and those of keys not deleted), as `partial`'s types, or
    None; the keys whose stored partials expired; apply_changes: the keys that exist)."""
    if partials is None:
        return None, set(), set()
    touched = partial.select(keys)
    stored = rows_with_keys(partials, keys, touched)
    wanted = set(key_tuples(touched, keys))
    stored = stored.filter(pa.array([k in wanted for k in key_tuples(stored, keys)], pa.bool_()))
    fresh, existing = pc.greater_equal(stored.column(UPDATED), cutoff_ms), set()
    if TOMBSTONE in stored.schema.names:
        stored = stored.filter(pc.is_valid(stored.column(TOMBSTONE)))  # not the marker row
        exists = pc.invert(stored.column(TOMBSTONE))
        existing = set(key_tuples(stored.filter(exists), keys))
        fresh = pc.or_(pc.greater_equal(stored.column(UPDATED), cutoff_ms), exists)
    expired = set(key_tuples(stored.filter(pc.invert(fresh)), keys))
    live = stored.filter(fresh).select(partial.schema.names)
    live = live.cast(partial.schema) if live.num_rows else None  # cast: e.g. string_view
    return live, expired, existing


def batch(plan, batch_df, table_path: str, batch_ts_ms: int, name: str, result_keys: list[str]):
    """(result rows, with RESTARTED_FLAG true for the keys that started afresh, as an Arrow table
    for delta/upsert.py; the merged partials to store; the number of restarted keys).

    A key started afresh if its stored partials expired: found expired, or dropped by an
    earlier batch (then the key has no live partials but a row in the table; apply_changes:
    `_after_expiry`; a Top-N of the aggregate: only the keys found expired)."""
    spark, spec = batch_df.sparkSession, plan.upsert.partials
    keys, cutoff_ms = list(spec.keys), batch_ts_ms - spec.ttl_ms
    partial = _step(plan, "partial", batch_df, name).toArrow()  # reads the batch
    path = partials_path(table_path)
    stored = DeltaTable(path) if is_delta(path) else None  # the partials, as of this batch
    live, expired, existing = _stored(stored, partial, keys, cutoff_ms)
    if live is not None:
        partial = pa.concat_tables([partial, live])
    merged = _step(plan, "merge", spark.createDataFrame(partial), name).toArrow()
    merged = merged.append_column(
        pa.field(UPDATED, pa.int64(), nullable=False),
        pa.array([batch_ts_ms] * merged.num_rows, pa.int64()),
    )
    rows = _step(plan, "final", spark.createDataFrame(merged), name)
    if spec.sequence is not None:  # apply_changes: keys back after a tombstone expired
        again, marker = _after_expiry(spark, spec, merged, existing, stored, cutoff_ms)
        if marker is not None:
            merged = pa.concat_tables([merged, marker])
        restarted = set(
            key_tuples(_result_keys(spark, plan, again, name, result_keys), result_keys)
        )
    else:
        touched = key_tuples(merged, keys)
        found_expired = merged.filter(pa.array([k in expired for k in touched], pa.bool_()))
        restarted = set(
            key_tuples(_result_keys(spark, plan, found_expired, name, result_keys), result_keys)
        )
        fresh = set() if live is None else set(key_tuples(live, keys))
        new = pa.array([k not in fresh and k not in expired for k in touched], pa.bool_())
        if plan.upsert.rank_sql is None and is_delta(table_path) and pc.any(new).as_py():
            # keys without stored partials that have a row: an earlier batch dropped them
            candidates = _result_keys(spark, plan, merged.filter(new), name, result_keys)
            found = rows_with_keys(DeltaTable(table_path), result_keys, candidates, result_keys)
            restarted |= set(key_tuples(found, result_keys)) & set(
                key_tuples(candidates, result_keys)
            )
    rows = rows.toArrow()
    flags = (
        pa.array([k in restarted for k in key_tuples(rows, result_keys)], pa.bool_())
        if restarted
        else pa.repeat(False, rows.num_rows)
    )
    return rows.append_column(RESTARTED_FLAG, flags), merged, len(restarted)


def _result_keys(spark, plan, merged, name: str, result_keys: list[str]) -> pa.Table:
    """The result keys of `merged`'s rows (None: none): their stored key columns when the
    result names them as they are (sql/state.py key_columns), else the query's final step."""
    if merged is None or not merged.num_rows:
        return pa.table({k: pa.array([]) for k in result_keys})
    direct = key_columns(plan.upsert.partials.final_sql)
    if all(k.lower() in direct for k in result_keys):
        return merged.select([direct[k.lower()] for k in result_keys]).rename_columns(result_keys)
    rows = _step(plan, "final", spark.createDataFrame(merged), name)
    return rows.select(*result_keys).toArrow()


def _after_expiry(
    spark, spec, merged: pa.Table, existing: set, partials: DeltaTable | None, cutoff_ms: int
):
    """apply_changes, scd_type 1: (the merged partials of the keys that exist again at a
    sequence no higher than that of some expired tombstone, or None; the marker row to store,
    or None).

    An expired tombstone is dropped (delta/partials.py), and with it what it deleted. What is
    kept is the highest sequence of all the tombstones that expired, in one marker row of the
    partials (the tombstone of that sequence, TOMBSTONE NULL). A key that did not exist
    (`existing`: those that did) and exists after the batch at a higher sequence is what the
    batch query gives too; at a lower or equal one it may not be (a dropped tombstone may
    delete it there), and it is marked restarted. With a sequence that grows over the whole
    feed (a log position, a commit time) only changes older than a dropped tombstone are."""
    import pyarrow.dataset as ds
    from pyspark.sql import functions as F

    if partials is None:
        return None, None

    # the marker and the tombstones that expire now (`== True`: files without are not read)
    tombstone = ds.field(TOMBSTONE)
    expiring = (ds.field(UPDATED) < cutoff_ms) & (tombstone == True)  # noqa: E712
    found = partials.to_pyarrow_dataset().to_table(filter=tombstone.is_null() | expiring)
    highest, marker = found.select(merged.schema.names).cast(merged.schema), None
    if pc.any(pc.is_valid(highest.column(TOMBSTONE))).as_py():  # the marker rises to theirs
        top = spark.createDataFrame(highest).orderBy(F.expr(spec.sequence).desc()).limit(1)
        highest = top.toArrow().cast(merged.schema)
        at = merged.schema.get_field_index(TOMBSTONE)
        marker = highest.set_column(at, merged.schema.field(at), pa.nulls(1, pa.bool_()))
    if not highest.num_rows:
        return None, marker
    back = merged.filter(
        pc.and_(
            pc.invert(merged.column(TOMBSTONE)),
            pa.array([k not in existing for k in key_tuples(merged, list(spec.keys))]),
        )
    )
    if not back.num_rows:
        return None, marker
    bound = spark.createDataFrame(highest).select(F.expr(spec.sequence).alias("__highest"))
    late = spark.createDataFrame(back).crossJoin(bound)
    late = late.where(F.expr(spec.sequence) <= F.col("__highest")).drop("__highest")
    return late.toArrow().cast(merged.schema), marker


def reranked(plan, spark, merged: pa.Table, table_path: str, name: str, rank) -> pa.Table:
    """A Top-N over an aggregate (sql/aggtopn.py): the top N of every partition `merged` touches,
    ranked by `rank` (runtime/upsert.py ranked) over the result rows of all the partition's keys:
    the merged partials of the batch's keys and the stored partials of the others."""
    keys = list(plan.upsert.partials.keys)
    partition = list(plan.upsert.rank_keys)
    path, rows = partials_path(table_path), merged
    if is_delta(path):
        touched = merged.select(partition)
        table = DeltaTable(path)
        stored = (  # no PARTITION BY: every key is ranked together
            rows_with_keys(table, partition, touched) if partition else table.to_pyarrow_table()
        )
        if len(partition) > 1:  # rows_with_keys gave a superset: the touched partitions only
            wanted = set(key_tuples(touched, partition))
            parts = key_tuples(stored, partition)
            stored = stored.filter(pa.array([p in wanted for p in parts], pa.bool_()))
        if stored.num_rows:
            rows = _first_per_key(
                pa.concat_tables([merged, stored.select(merged.schema.names).cast(merged.schema)]),
                keys,
            )
    result = _step(plan, "final", spark.createDataFrame(rows), name)
    top = rank(plan, result, name).toArrow()
    # RANK / DENSE_RANK: keyed by group, leavers deleted (none when every group is ranked)
    if plan.upsert.keep_column is not None and top.num_rows < rows.num_rows:
        top = _with_leavers(top, result, table_path, plan.upsert)
    return top.append_column(RESTARTED_FLAG, pa.array([False] * top.num_rows, pa.bool_()))


def _first_per_key(rows: pa.Table, keys: list[str]) -> pa.Table:
    """The first row of each key of `rows` (NULL keys match), in Arrow: the batch's merged
    partials come first, so a key's stored partials are left out where the batch has it."""
    index = "__dss_row"
    rows = rows.append_column(index, pa.array(np.arange(rows.num_rows)))
    first = rows.group_by(keys, use_threads=False).aggregate([(index, "min")])
    return rows.take(np.sort(first.column(f"{index}_min").to_numpy())).drop_columns([index])


def _with_leavers(top: pa.Table, result, table_path: str, upsert) -> pa.Table:
    """`top` (the re-ranked top N, `__keep` true) and, with `__keep` false, the table's rows of
    the re-ranked groups (`result`) that are not in it any more: the sink deletes them."""
    if not is_delta(table_path):
        return top
    keys, keep = list(upsert.unique_key), upsert.keep_column
    groups = result.select(*keys).toArrow()
    gone = set(key_tuples(groups, keys)) - set(key_tuples(top, keys))
    if not gone:
        return top
    current = rows_with_keys(DeltaTable(table_path), keys, groups)
    current = current.filter(pa.array([k in gone for k in key_tuples(current, keys)], pa.bool_()))
    left = current.select([n for n in top.schema.names if n != keep])
    left = left.append_column(keep, pa.array([False] * left.num_rows, pa.bool_()))
    return pa.concat_tables([top, left.select(top.schema.names).cast(top.schema)])
