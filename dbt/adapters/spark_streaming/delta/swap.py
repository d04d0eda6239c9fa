"""Replacing a Delta table's content with another table's in one commit, on storage that cannot
rename a directory (object storage; runtime/lifecycle.py `swap_by_commit`).

The built table's data files are copied beside the target's own (server-side on object
storage, hard links on a local disk; their names are UUIDs, so they collide with none), then
one overwrite commit removes the target's files and adds the copies. A reader sees the old
rows or the new ones, never none; a crash before the commit leaves the target as it was (the
copies are unreferenced until an attempt commits them). The commit carries the built table's
last metadata with a `refresh` token, so the attempt that finds the token committed does not
commit again, and the metadata of the built table's earlier commits (`rebuilt`), so that the
target's history reads as the rebuild's from that commit on (sink.commit_history). The
commit replaces the table's metadata too, with a new table id: the rebuilt table is another
table, as a local swap's is, but its versions go on from the old ones, which stay readable
(time travel; VACUUM reclaims their files).
"""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction, create_table_with_add_actions

from ..layout import queries_path
from . import storage
from .sink import META_KEY, REBUILT, commit_history, last_metadata


def committed(target: str, token: str) -> bool:
    """Whether the table at `target` has the swap commit of `token`."""
    return (last_metadata(target) or {}).get("refresh") == token


def replace_with(target: str, built: str, token: str, app_id: str) -> None:
    """Make the Delta table at `built` the content of the table at `target` (created if there
    is none) in one commit marked `token`, carrying the app transaction of `app_id` (the query
    that built it) at its last batch. Nothing if that commit is there already."""
    if committed(target, token):
        return
    source = DeltaTable(built)
    _copy_queries(built, target)
    files = pa.table(source.get_add_actions(flatten=False)).select(
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
    history = [{k: v for k, v in m.items() if k != "table_version"} for m in commit_history(built)]
    meta = {**history[-1], "refresh": token, REBUILT: history[:-1]}
    batch = meta.get("batch_id")
    properties = CommitProperties(
        custom_metadata={META_KEY: json.dumps(meta)},
        app_transactions=None if batch is None else [Transaction(app_id, batch)],
    )
    # CREATE OR REPLACE, as the rebuilt table is a new table (a new table id: a model that
    # reads it as a stream refuses it with SSR327, as after a local swap), with the built
    # table's schema, protocol and properties
    create_table_with_add_actions(
        target,
        source.schema(),
        actions,
        mode="overwrite",
        configuration=source.metadata().configuration,
        commit_properties=properties,
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
