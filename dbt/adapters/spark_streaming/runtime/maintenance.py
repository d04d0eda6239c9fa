"""Maintenance of a streaming model's tables: compaction (config `auto_compact`) and VACUUM,
by the model's own run between its batches (`Upkeep`), and on demand by `dbt run-operation
optimize` and `vacuum` (macros/operations/maintenance.sql).

A vacuum keeps every file removed after the lowest position that the streams of the models
reading the model's table (or its changelog) have read it up to: every table of the warehouse
whose last commit records a position of it (delta/vacuum.py). A model's run vacuums its own
tables the same way, at most once an hour (`vacuum_due`), the first time an hour after the
table was created. An optimize is the
model's auto-compaction run now, down to two small files (delta/compaction.py); it holds the
model's run lock, so a model that is running (a continuous one, or a `dbt run` under way) is
refused with SSR307: it compacts its tables itself between its batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dbt.adapters.events.logging import AdapterLogger

from ..delta import storage
from ..delta.compaction import MIN_FILES, TARGET_SIZE, Compaction
from ..delta.history import last_metadata
from ..delta.offsets import Position
from ..delta.source import consumed
from ..delta.storage import is_delta
from ..delta.upsert import DRIVER_BYTES
from ..delta.vacuum import vacuum
from ..errors import config_error
from ..faults import fault_point
from ..layout import changelog_path, partials_path, vacuumed_path
from .catalog import Catalog, warehouse_tables
from .lifecycle import model_lock

logger = AdapterLogger("SparkStreaming")

VACUUM_EVERY = 3600  # seconds: how often a model's run vacuums its tables
MAINTENANCE_FAILURES = 3  # a run's failed compactions (or vacuums) before it does no more
UPSERT_TARGET_SIZE = DRIVER_BYTES // 2  # an upsert_table's files stay MERGEd in the process


def auto_compact(config) -> tuple[int, int] | None:
    """Config `auto_compact` (default on): (min_files, target size in bytes) of the model's
    tables' compaction (delta/compaction.py), or None for `false`."""
    from .admission import SIZE_EXPECTED, parse_size

    value = config.get("auto_compact", True)
    if value is False or value is None:
        return None
    if value is True:
        return MIN_FILES, TARGET_SIZE
    expected = (
        "true, false, or {min_files: <n >= 2>, target_file_size: <size>} "
        f"(a size: {SIZE_EXPECTED})"
    )
    if not isinstance(value, dict) or not set(value) <= {"min_files", "target_file_size"}:
        raise config_error("auto_compact", value, expected)
    files = value.get("min_files", MIN_FILES)
    size = parse_size(value.get("target_file_size", TARGET_SIZE))
    if isinstance(files, bool) or not isinstance(files, int) or files < 2 or size is None:
        raise config_error("auto_compact", value, expected)
    return files, size


@dataclass
class Done:
    model: str
    table: str
    files: int  # removed (vacuum: deleted, or would be with dry_run)
    version: int | None = None  # the compaction's version

    def line(self, verb: str) -> str:
        at = f" (version {self.version})" if self.version is not None else ""
        return f"{self.model}: {self.table}: {verb} {self.files} files{at}"


def merged(table: str, path: str, upsert: bool) -> bool:
    """Whether `table`, of the model at `path`, is MERGEd batch by batch (an upsert_table's own
    table and its partials, not its changelog): its files are rewritten whole, in the dbt
    process up to DRIVER_BYTES, so they are compacted to UPSERT_TARGET_SIZE at most."""
    return upsert and table != changelog_path(path)


def _tables(path: str, name: str) -> list[tuple[str, str | None]]:
    """The Delta tables of model `name` at `path`: (table, the name downstream models read it
    by, or None for the partials, which only the model reads)."""
    found = [(path, name), (changelog_path(path), f"{name}_changelog"), (partials_path(path), None)]
    return [(t, label) for t, label in found if is_delta(t)]


def lowest_positions(warehouse: str, names: set[str]) -> dict[str, int]:
    """Per name of `names` (lower case), the lowest version of that table at which the streams
    of the warehouse's models are, as their last commits record it (absent: no model reads
    it). A stream at version v (all of it read, or part of its snapshot or of the files it
    added) reads no file that version v or an earlier one removed. A table whose commits
    cannot be read is passed over (logged)."""
    lowest: dict[str, int] = {}
    for reader, path in warehouse_tables(warehouse):
        try:
            meta = last_metadata(path) or {}
        except Exception as exc:  # noqa: BLE001 - one unreadable table stops no vacuum
            logger.warning(f"{reader}: its position of its sources not read: {exc}")
            continue
        for source, position in consumed(meta).items():
            if source.lower() in names and source.lower() != reader.lower():
                version = Position.parse(position).version
                lowest[source.lower()] = min(lowest.get(source.lower(), version), version)
    return lowest


def vacuum_model(
    warehouse: str,
    name: str,
    path: str,
    retention_hours: int | None,
    dry_run: bool,
    lowest: dict[str, int] | None = None,
) -> list[Done]:
    """VACUUM the tables of model `name` (schema.identifier) at `path`; `lowest`: the readers'
    positions (lowest_positions) of its tables, if read already (a reader's position only moves
    on, so one read earlier keeps as much or more; a reader that starts meanwhile starts from
    the table's latest snapshot, whose files are not removed)."""
    tables = _tables(path, name)
    if lowest is None:
        lowest = lowest_positions(warehouse, {label.lower() for _, label in tables if label})
    out = []
    for table, label in tables:
        keep_after = lowest.get(label.lower()) if label else None
        out.append(Done(name, table, len(vacuum(table, retention_hours, keep_after, dry_run))))
    if not dry_run:
        storage.write_text(vacuumed_path(path), str(time.time()))
    return out


def vacuum_due(path: str) -> bool:
    """Whether the model's run should vacuum its table at `path`: not in the last VACUUM_EVERY
    seconds."""
    try:
        return time.time() - float(storage.read_text(vacuumed_path(path))) >= VACUUM_EVERY
    except (FileNotFoundError, ValueError):
        return True


def vacuum_models(
    catalog: Catalog, models: list[dict], retention_hours: int | None, dry_run: bool
) -> list[Done]:
    """VACUUM the tables of `models` ([{name: schema.identifier, ...}]), the readers' positions
    read once for all of them (a look at every model table of the warehouse)."""
    paths = {m["name"]: catalog.location_of(m["name"]) for m in models}
    names = {label.lower() for n, p in paths.items() for _, label in _tables(p, n) if label}
    lowest = lowest_positions(catalog.warehouse, names)
    out = []
    for name, path in paths.items():
        out += vacuum_model(catalog.warehouse, name, path, retention_hours, dry_run, lowest)
    return out


def optimize_models(spark, catalog: Catalog, models: list[dict]) -> list[Done]:
    """Compact the tables of `models` ([{name, config}]) now, each under its run lock."""
    out = []
    for m in models:
        _, target = auto_compact(m["config"]) or (None, TARGET_SIZE)
        path = catalog.location_of(m["name"])
        with model_lock(catalog.control, m["name"]):
            for table, _ in _tables(path, m["name"]):
                upsert = m["config"].get("materialized") == "upsert_table"
                size = min(target, UPSERT_TARGET_SIZE) if merged(table, path, upsert) else target
                result = (
                    Compaction(table, 2, size, table == path, tiered=False).compact(spark) or {}
                )
                out.append(
                    Done(m["name"], table, result.get("files_removed", 0), result.get("version"))
                )
    return out


class Upkeep:
    """A model run's maintenance of its tables after each committed batch, before the next:
    the tables the batch added files to compacted once they hold many small files, then, at
    most every VACUUM_EVERY seconds (across runs), the model's tables vacuumed. A failure is
    logged: the batch is committed; after MAINTENANCE_FAILURES compactions (or vacuums) failed,
    the run does no more of them."""

    def __init__(self, model, build: str, upsert: bool, warehouse: str | None):
        self.name, self.build, self.upsert, self.warehouse = model.name, build, upsert, warehouse
        self.auto_compact = auto_compact(model.config)  # (min files, target size) or None
        self.compactions: dict[str, Compaction] = {}
        self.failures = {"compaction": 0, "vacuum": 0}
        self.next_vacuum = 0.0  # time.monotonic() of the next look at vacuum_due

    def created(self) -> None:
        """The model's table was just created: nothing to vacuum for VACUUM_EVERY seconds."""
        if self.warehouse is not None:
            storage.write_text(vacuumed_path(self.build), str(time.time()))

    def after_batch(self, spark, written: dict[str, list[dict]], batch_id: int) -> None:
        """`written`: per table, the files the batch's commit added."""
        if self.auto_compact is not None and self.failures["compaction"] < MAINTENANCE_FAILURES:
            for path, files in written.items():
                if self._attempt("compaction", self._compaction(path).added, spark, files):
                    fault_point("after_compaction", batch_id)
        if (
            self.warehouse is not None
            and self.failures["vacuum"] < MAINTENANCE_FAILURES
            and time.monotonic() >= self.next_vacuum
        ):
            self.next_vacuum = time.monotonic() + VACUUM_EVERY
            if vacuum_due(self.build):
                self._attempt(
                    "vacuum", vacuum_model, self.warehouse, self.name, self.build, None, False
                )
                fault_point("after_vacuum", batch_id)

    def _attempt(self, kind: str, fn, *args):
        """fn(*args), or None if it fails: logged and counted, the batch stands."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the batch stands; maintenance can wait
            self.failures[kind] += 1
            logger.warning(f"{self.name}: {kind} failed: {exc}")
            return None

    def _compaction(self, path: str) -> Compaction:
        if path not in self.compactions:
            min_files, target = self.auto_compact
            if merged(path, self.build, self.upsert):
                target = min(target, UPSERT_TARGET_SIZE)
            self.compactions[path] = Compaction(path, min_files, target, path == self.build)
        return self.compactions[path]
