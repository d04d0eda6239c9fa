"""`dbt run-operation optimize` and `vacuum` (macros/operations/maintenance.sql): compaction
and VACUUM of streaming models' tables on demand.

Each model comes with the names of the models that read it (from dbt's graph). A vacuum keeps
every file removed after the lowest position those readers' streams have read the model's table
(or its changelog) up to, as their last commits record it (delta/vacuum.py). An optimize is the
model's auto-compaction run now, down to two small files (delta/compaction.py); it holds the
model's run lock, so a model that is running (a continuous one, or a `dbt run` under way) is
refused with SSR307: it compacts its tables itself between its batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..delta.compaction import TARGET_SIZE, Compaction
from ..delta.history import last_metadata
from ..delta.offsets import Position
from ..delta.source import consumed
from ..delta.storage import is_delta
from ..delta.vacuum import vacuum
from ..layout import changelog_path, partials_path
from .catalog import Catalog
from .lifecycle import model_lock
from .sink import UPSERT_TARGET_SIZE, auto_compact


@dataclass
class Done:
    model: str
    table: str
    files: int  # removed (vacuum: deleted, or would be with dry_run)
    version: int | None = None  # the compaction's version

    def line(self, verb: str) -> str:
        at = f" (version {self.version})" if self.version is not None else ""
        return f"{self.model}: {self.table}: {verb} {self.files} files{at}"


def _tables(path: str) -> list[tuple[str, bool]]:
    """The Delta tables of a model at `path`: (table, read by downstream streams)."""
    found = [(path, True), (changelog_path(path), True), (partials_path(path), False)]
    return [(t, read) for t, read in found if is_delta(t)]


def lowest_position(catalog: Catalog, name: str, readers: list[str]) -> int | None:
    """The lowest version of model `name`'s table (or changelog) that `readers`' streams have
    still to read: one before their last commits' positions of it (None: no reader has one)."""
    lowest = None
    for reader in readers:
        meta = last_metadata(catalog.location_of(reader))
        for source, position in consumed(meta or {}).items():
            if source.lower() == name.lower():
                version = Position.parse(position).version - 1
                lowest = version if lowest is None else min(lowest, version)
    return lowest


def vacuum_models(
    catalog: Catalog, models: list[dict], retention_hours: int | None, dry_run: bool
) -> list[Done]:
    """VACUUM the tables of `models` ([{name: schema.identifier, readers: [...]}])."""
    out = []
    for m in models:
        keep_after = lowest_position(catalog, m["name"], m["readers"])
        for table, read in _tables(catalog.location_of(m["name"])):
            gone = vacuum(table, retention_hours, keep_after if read else None, dry_run)
            out.append(Done(m["name"], table, len(gone)))
    return out


def optimize_models(spark, catalog: Catalog, models: list[dict]) -> list[Done]:
    """Compact the tables of `models` ([{name, config}]) now, each under its run lock."""
    out = []
    for m in models:
        _, target = auto_compact(m["config"]) or (None, TARGET_SIZE)
        path = catalog.location_of(m["name"])
        with model_lock(catalog.control, m["name"]):
            for table, _ in _tables(path):
                size = target
                if m["config"].get("materialized") == "upsert_table" and table != changelog_path(
                    path
                ):
                    size = min(target, UPSERT_TARGET_SIZE)  # MERGEd in the process
                result = Compaction(table, 2, size, table == path).compact(spark) or {}
                out.append(
                    Done(m["name"], table, result.get("files_removed", 0), result.get("version"))
                )
    return out
