"""Delta Change Data Feed of an upsert_table: its changes written with each commit, as Delta
writers do, so that Delta readers (deltalake's ``load_cdf``, Spark's ``readChangeFeed``) replay
the table.

Per the Delta protocol ("Change Data Files"; writer version 4, which delta-rs sets when a table
is created with ``delta.enableChangeDataFeed=true``): a commit that updates or deletes rows
carries ``cdc`` actions (``dataChange: false``) naming Parquet files under ``_change_data/``
that hold every row the commit changed, with ``_change_type`` ``insert``,
``update_preimage``, ``update_postimage`` or ``delete``; readers then take the commit's changes
from those files only. A commit that only inserts rows has no cdc files: readers take its
``add`` actions as inserts.

delta-rs's Python API commits add and remove actions only, so a commit with cdc actions is
written here: one JSON file ``_delta_log/<version>.json`` (commitInfo, txn, add, remove, cdc),
put if absent (a hard link of a temporary file, locally; on object storage the run lock makes
this process the table's only writer). Every 100th version gets a checkpoint, as delta-rs's
post-commit hook would make.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from .history import tidy
from .log import commit_path
from .storage import filesystem, is_remote, join
from .writer import WRITTEN, absolute

PROPERTY = "delta.enableChangeDataFeed"
CHANGE_DATA = "_change_data"
CHANGE_TYPE = "_change_type"
CHANGE_TYPES = {
    "+I": "insert",
    "-U": "update_preimage",
    "+U": "update_postimage",
    "-D": "delete",
}
ENGINE = "dbt-spark-streaming"


def enabled(table: DeltaTable) -> bool:
    """Whether `table` has the Change Data Feed on."""
    return table.metadata().configuration.get(PROPERTY, "false").lower() == "true"


def cdc_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of the change data files of a table of `schema`."""
    return schema.append(pa.field(CHANGE_TYPE, pa.string()))


def change_rows(changes: pa.Table, schema: pa.Schema, op: str = "_op") -> pa.Table:
    """Changelog rows (`op` +I/-U/+U/-D) as change data rows (CHANGE_TYPE)."""
    types = pa.array(CHANGE_TYPES.values(), pa.string())
    index = pc.index_in(changes.column(op), value_set=pa.array(CHANGE_TYPES.keys()))
    kind = pc.take(types, index)
    return changes.select(schema.names).append_column(CHANGE_TYPE, kind)


def change_column(op: str = "_op"):
    """change_rows' CHANGE_TYPE as a Spark column of the changelog's `op` column."""
    from pyspark.sql import functions as F

    (code, name), *others = CHANGE_TYPES.items()
    column = F.when(F.col(op) == code, F.lit(name))
    for code, name in others:
        column = column.when(F.col(op) == code, F.lit(name))
    return column.alias(CHANGE_TYPE)


def location(path: str) -> str:
    """Where the change data files of the table at `path` are written."""
    return join(path, CHANGE_DATA)


def commit(
    path: str,
    version: int,
    actions: dict,
    app: tuple[str, int],
    metadata: dict[str, str],
    configuration: Mapping[str, Optional[str]],
) -> None:
    """Write version `version` of the table at `path`: `actions` {"add": [files], "remove":
    [log paths], "cdc": [files]} (files as writer.write_files returns them, cdc files relative
    to CHANGE_DATA), the app transaction `app` (app id, batch id) and `metadata` in commitInfo.
    Fails if the version exists. Then, every `delta.checkpointInterval` versions (of the
    table's `configuration`), a checkpoint of the log, our metadata of its commits kept and its
    expired versions removed (delta/history.py `tidy`): reading the log stays flat as versions
    add up."""
    now = int(time.time() * 1000)
    lines = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "MERGE",
                "operationParameters": {},
                "readVersion": version - 1,
                "engineInfo": ENGINE,
                "clientVersion": ENGINE,
                **metadata,
            }
        },
        {"txn": {"appId": app[0], "version": app[1], "lastUpdated": now}},
    ]
    for f in actions.get("add", []):
        add = {"path": f["path"], "partitionValues": {}, "size": f["size"]}
        add.update({"modificationTime": now, "dataChange": True, "stats": f["stats"]})
        lines.append({"add": add})
    for p in actions.get("remove", []):
        remove = {"path": p, "dataChange": True, "deletionTimestamp": now}
        lines.append({"remove": {**remove, "extendedFileMetadata": False}})
    for f in actions.get("cdc", []):
        cdc = {"path": f"{CHANGE_DATA}/{f['path']}", "partitionValues": {}, "size": f["size"]}
        lines.append({"cdc": {**cdc, "dataChange": False}})
    put_if_absent(
        commit_path(path, version),
        "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines),
    )
    tidy(path, version, configuration, checkpoint=True)


def put_if_absent(uri: str, text: str) -> None:
    """Create the file at `uri` with `text`; FileExistsError if it exists (locally atomic: a
    hard link of a temporary file; on object storage the run lock makes us the only writer)."""
    if not is_remote(uri):
        temporary = join(os.path.dirname(uri), f".{uuid.uuid4()}.json.tmp")
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            os.link(temporary, uri)  # atomic; FileExistsError if another commit won
        finally:
            os.remove(temporary)
        return
    fs, file = filesystem(uri)
    from pyarrow.fs import FileType

    if fs.get_file_info(file).type != FileType.NotFound:
        raise FileExistsError(uri)
    with fs.open_output_stream(file) as out:
        out.write(text.encode("utf-8"))


def sweep(location: str, prefix: str, files: Sequence[dict]) -> None:
    """Delete the change data files named `prefix`... at `location` but `files`: those of a
    crashed attempt at the batch (the prefix names the query and the batch, not committed)."""
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(absolute(location))
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return
    ours, keep = re.compile(re.escape(prefix) + WRITTEN), {f["path"] for f in files}
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=False)):
        if ours.fullmatch(info.base_name) and info.base_name not in keep:
            fs.delete_file(f"{root.rstrip('/')}/{info.base_name}")
