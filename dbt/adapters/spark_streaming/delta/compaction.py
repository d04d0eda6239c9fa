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
against the table before compacting).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .history import KEEP_LOG
from .log import add_action_table

MIN_FILES = 50  # Databricks' auto compaction's default (minNumFiles)
TARGET_SIZE = 128 * 1024 * 1024  # bytes: delta.targetFileSize's default in Databricks' OPTIMIZE


@dataclass
class Compaction:
    """Auto-compaction of the Delta table at `path`."""

    path: str
    min_files: int = MIN_FILES
    target_size: int = TARGET_SIZE
    small: int | None = field(default=None)  # its files smaller than target_size (estimate)

    def added(self, files: list[dict]) -> dict | None:
        """After a commit that added `files` (each with `size`): compact if `min_files` are
        small. Returns delta-rs's metrics of a compaction, or None."""
        if self.small is None:
            self.small = self._count()
        else:
            self.small += sum(1 for f in files if f["size"] < self.target_size)
        if self.small < self.min_files:
            return None
        self.small = self._count()
        if self.small < self.min_files:
            return None
        return self.compact()

    def compact(self) -> dict:
        """Bin-pack the table's small files, in one dataChange=false commit."""
        from deltalake import DeltaTable

        metrics = DeltaTable(self.path).optimize.compact(
            target_size=self.target_size, post_commithook_properties=KEEP_LOG
        )
        self.small = self._count()
        logging.getLogger(__name__).info(
            f"{self.path}: compacted {metrics['numFilesRemoved']} files into "
            f"{metrics['numFilesAdded']}"
        )
        return metrics

    def _count(self) -> int:
        from deltalake import DeltaTable

        sizes = add_action_table(DeltaTable(self.path)).column("size_bytes").to_pylist()
        return sum(1 for s in sizes if s < self.target_size)
