"""Auto-compaction of the tables a model writes every micro-batch (its table, an upsert_table's
changelog): once `min_files` of their files are smaller than `target_size`, they are bin-packed
into files of about that size by delta-rs's OPTIMIZE, in one commit whose removes and adds are
`dataChange: false`. Delta's streaming readers, and ours (delta/log.py), skip such a commit:
a downstream model reads no row twice; the change data feed has no change in it; the rows a
version holds are the same. It runs in the model's own query, after a micro-batch's commits and
before the next batch, so it never races the model's commits. A crash in it leaves the table as
it was (the commit is atomic; the files it wrote unreferenced, for VACUUM).

The small files are counted from the table's add actions once per run, then followed by the
files each commit adds (an upsert_table's copy-on-write also removes some: the count is checked
against the table before compacting). A compaction's own outputs below the target stay small:
the next one waits for `min_files` more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .history import KEEP_LOG, tidy
from .log import add_action_table

MIN_FILES = 50  # Databricks' auto compaction's default (minNumFiles)
TARGET_SIZE = 128 * 1024 * 1024  # bytes: delta.targetFileSize's default in Databricks' OPTIMIZE


@dataclass
class Compaction:
    """Auto-compaction of the Delta table at `path` (`model`: a model's own table, whose log the
    adapter cleans up itself: delta/history.py)."""

    path: str
    min_files: int = MIN_FILES
    target_size: int = TARGET_SIZE
    model: bool = False
    small: int | None = field(default=None)  # its files smaller than target_size (estimate)
    left: int = 0  # small files the last compaction left (its own outputs below the target)

    def added(self, files: list[dict]) -> dict | None:
        """After a commit that added `files` (each with `size`): compact once `min_files` small
        files came since the last compaction. Returns delta-rs's metrics of a compaction, or
        None."""
        if self.small is None:
            self.small = self._count()
        else:
            self.small += sum(1 for f in files if f["size"] < self.target_size)
        if self.small - self.left < self.min_files:
            return None
        self.small = self._count()
        if self.small - self.left < self.min_files:
            return None
        return self.compact()

    def compact(self) -> dict:
        """Bin-pack the table's small files, in one dataChange=false commit (then, on a model's
        table, its log kept and cleaned up as after its own commits)."""
        from deltalake import DeltaTable

        metrics = DeltaTable(self.path).optimize.compact(
            target_size=self.target_size,
            max_concurrent_tasks=2,  # in the dbt or runner process, beside the queries
            post_commithook_properties=KEEP_LOG,
        )
        self.small = self.left = self._count()
        if self.model:
            table = DeltaTable(self.path)
            tidy(self.path, table.version(), table.metadata().configuration)
        logging.getLogger(__name__).info(
            f"{self.path}: compacted {metrics['numFilesRemoved']} files into "
            f"{metrics['numFilesAdded']}"
        )
        return metrics

    def _count(self) -> int:
        from deltalake import DeltaTable

        sizes = add_action_table(DeltaTable(self.path)).column("size_bytes").to_pylist()
        return sum(1 for s in sizes if s < self.target_size)
