"""A committer's last committed batch id (delta/sink.py Applied): read from the table's log at
the first look, kept after its own commits, read again after a commit that failed."""

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction

from dbt.adapters.spark_streaming.delta.sink import Applied, append_files, create_table

SCHEMA = pa.schema([("n", pa.int64())])


def _commit(path: str, app: str, batch_id: int) -> None:
    append_files(path, [], SCHEMA, CommitProperties(app_transactions=[Transaction(app, batch_id)]))


def test_read_once_kept_after_commits_read_again_after_a_failed_one(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {})
    _commit(path, "app", 3)  # an earlier run's
    loads = []
    real = DeltaTable.transaction_version
    monkeypatch.setattr(
        DeltaTable, "transaction_version", lambda t, app: loads.append(app) or real(t, app)
    )
    applied = Applied(path, "app")
    assert applied.last() == 3 and Applied(path, "other").last() == -1
    assert len(loads) == 2
    for batch_id in (4, 5):
        applied.committing()
        _commit(path, "app", batch_id)
        applied.committed(batch_id)
        assert applied.last() == batch_id
    assert len(loads) == 2  # not loaded again
    applied.committing()
    _commit(path, "app", 6)  # committed, then the process failed before it knew
    assert applied.last() == 6 and len(loads) == 3
