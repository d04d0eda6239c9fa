"""Replacing a model's Delta table with one built aside, by commits, on storage that cannot
rename a directory (object storage; runtime/lifecycle.py `swap_by_commit`).

The built table's data files are copied beside the target's own (server-side on object
storage, hard links on a local disk; their names are UUIDs, so they collide with none), then
one CREATE OR REPLACE commit makes the copies the target's content. A reader sees the old rows
or the new ones, never none; a crash before the commit leaves the target as it was (the
copies are unreferenced until an attempt commits them). The commit carries the built table's
last metadata with a `refresh` token, so an attempt that finds the token committed does not
commit again, and the metadata of the built table's earlier commits (`rebuilt`), so that the
target's history reads as the rebuild's from that commit on (history.commit_history). It
replaces the table's metadata too, with a new table id: the rebuilt table is another table, as
a local swap's is, but its versions go on from the old ones, which stay readable (time
travel; VACUUM reclaims their files).

An upsert_table's own tables go first, each in one commit with the token: a state_ttl model's
partials are copied the same way; its changelog is written anew, squashed to the rebuilt
table's rows as `+I` at the version the table's swap commit will have (a changelog's
`_commit_version` names the table's versions, which the rebuild's do not), `_restarted` where
the rebuild restarted the key. Those rows pass through this process, in Arrow batches. The
table's commit is the last: the one that says the swap is done.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction, create_table_with_add_actions

from ..layout import changelog_path, partials_path, queries_path
from . import storage
from .history import KEEP_LOG, META_KEY, REBUILT, commit_history, last_metadata
from .log import add_action_table
from .upsert import BATCH, OP, RESTARTED, VERSION


def replace_with(target: str, built: str, token: str, app_id: str, keys: list[str]) -> None:
    """Make the model table built at `built` (with its changelog and partials, if an
    upsert_table: `keys` its unique key) the table at `target` (created if there is none), each
    in one commit marked `token`, carrying the app transaction of `app_id` (the query that
    built it) at its last batch. Nothing where that commit is there already."""
    history = [{k: v for k, v in m.items() if k != "table_version"} for m in commit_history(built)]
    batch = history[-1].get("batch_id")
    app = None if batch is None else [Transaction(app_id, batch)]
    if keys:
        if storage.is_delta(partials_path(built)):
            _replace_files(partials_path(target), partials_path(built), {"refresh": token}, app)
        else:  # none built: no state to keep
            storage.remove_tree(partials_path(target))
        _replace_changelog(target, built, token, app, batch, keys)
    _copy_queries(built, target)
    meta = {**history[-1], "refresh": token, REBUILT: history[:-1]}
    _replace_files(target, built, meta, app)


def _committed(path: str, token: str) -> bool:
    """Whether the Delta table at `path` has the swap commit of `token`."""
    return (last_metadata(path) or {}).get("refresh") == token


def _replace_files(target: str, built: str, meta: dict, app) -> None:
    """The files of the Delta table at `built`, copied, the whole content of `target`, in one
    CREATE OR REPLACE commit with `meta` and the app transaction `app` (a new table id, the
    built table's schema, protocol and properties)."""
    if _committed(target, meta["refresh"]):
        return
    source = DeltaTable(built)
    files = add_action_table(source, flatten=False).select(
        ["path", "size_bytes", "modification_time", "num_records"]
    )
    actions = []
    for f in files.to_pylist():
        storage.copy_file(storage.join(built, f["path"]), storage.join(target, f["path"]))
        # the files' other statistics are not carried over
        stats = "{}" if f["num_records"] is None else json.dumps({"numRecords": f["num_records"]})
        actions.append(
            AddAction(f["path"], f["size_bytes"], {}, f["modification_time"], True, stats)
        )
    create_table_with_add_actions(
        target,
        source.schema(),
        actions,
        mode="overwrite",
        configuration=source.metadata().configuration,
        commit_properties=CommitProperties(
            custom_metadata={META_KEY: json.dumps(meta)}, app_transactions=app
        ),
        post_commithook_properties=KEEP_LOG,
    )


def _replace_changelog(
    target: str, built: str, token: str, app, batch: int | None, keys: list[str]
) -> None:
    """The changelog of the table built at `built`, squashed (module docstring), the changelog
    of the one at `target`, in one commit."""
    path = changelog_path(target)
    if _committed(path, token):
        return
    log = DeltaTable(changelog_path(built)).to_pyarrow_dataset()
    schema, restarted = log.schema, None
    if RESTARTED in schema.names:  # the keys the rebuild restarted (state_ttl)
        found = log.to_table(columns=keys, filter=pc.field(RESTARTED))
        found = found.group_by(keys, use_threads=False).aggregate([])
        if found.num_rows:
            restarted = found.append_column(RESTARTED, pa.array([True] * found.num_rows))
    version = DeltaTable(target).version() + 1 if storage.is_delta(target) else 0
    added = {OP: "+I", BATCH: batch, VERSION: version}

    def column(rows: pa.Table, field: pa.Field):
        if field.name == RESTARTED:  # NULL keys match none: not flagged
            if restarted is None:
                return pa.array([False] * rows.num_rows)
            return pc.fill_null(rows.column(RESTARTED), False)
        if field.name in added:
            return pa.array([added[field.name]] * rows.num_rows, field.type)
        return rows.column(field.name).cast(field.type)

    data = DeltaTable(built).to_pyarrow_dataset()  # opened here: not within the writer's runtime

    def batches():
        for part in data.to_batches():
            rows = pa.Table.from_batches([part])
            if restarted is not None:
                rows = rows.join(restarted, keys, join_type="left outer")
            yield from pa.Table.from_arrays(
                [column(rows, f) for f in schema], schema=schema
            ).to_batches()

    write_deltalake(
        path,
        pa.RecordBatchReader.from_batches(schema, batches()),
        mode="overwrite",
        schema_mode="overwrite",
        commit_properties=CommitProperties(
            custom_metadata={META_KEY: json.dumps({"refresh": token})}, app_transactions=app
        ),
    )


def _copy_queries(built: str, target: str) -> None:
    """The built table's recorded queries (runtime/model.py record_query), for
    snapshot_equivalence."""
    queries = queries_path(built)
    f, path = storage.filesystem(queries)
    for info in f.get_file_info(storage.fs.FileSelector(path, allow_not_found=True)):
        storage.copy_file(
            storage.join(queries, info.base_name),
            storage.join(queries_path(target), info.base_name),
        )
