"""Helpers for functional tests: Delta tables are read back with delta-rs, not through the
adapter, so a test checks what is really stored."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

META_KEY = "dbt_spark_streaming"


def table_path(project, identifier: str) -> str:
    return os.path.join(
        project.adapter.config.credentials.warehouse_path, project.test_schema, identifier
    )


def rows(path: str) -> list[tuple]:
    """All rows of the Delta table at `path`, as tuples in column order, sorted."""
    table = DeltaTable(path).to_pyarrow_table()
    return sorted(tuple(r.values()) for r in table.to_pylist())


def commits(path: str) -> list[dict]:
    """Our metadata of every commit that has it, oldest first, with the table version."""
    out = []
    for entry in reversed(DeltaTable(path).history()):
        if META_KEY in entry:
            out.append({**json.loads(entry[META_KEY]), "table_version": entry["version"]})
    return out


def committed_once(path: str) -> list[dict]:
    """`commits(path)`, having asserted that no micro-batch was committed twice."""
    meta = commits(path)
    batch_ids = [m["batch_id"] for m in meta if m["batch_id"] is not None]
    assert batch_ids == sorted(set(batch_ids)), "a batch was committed twice"
    return meta


def equivalence_tests(models) -> str:
    """A schema file giving each of `models` the snapshot_equivalence test."""
    return "models:\n" + "".join(
        f"  - {{name: {name}, data_tests: [snapshot_equivalence]}}\n" for name in models
    )


def equivalence_project(sources: str, models: dict[str, str]) -> dict[str, str]:
    """The files of a project: its `sources` schema file, each of `models` (name: SQL) with
    the snapshot_equivalence test."""
    files = {"sources.yml": sources, "tests.yml": equivalence_tests(models)}
    return files | {f"{name}.sql": sql for name, sql in models.items()}


def write_crash_project(project, warehouse) -> None:
    """Make `models/`, dbt_project.yml and profiles.yml of a crash test's project (the
    pathlib.Path `project`) whose warehouse is `warehouse`."""
    (project / "models").mkdir(parents=True, exist_ok=True)
    (project / "dbt_project.yml").write_text(
        "name: crash\nversion: '1.0'\nconfig-version: 2\nprofile: crash\n"
    )
    (project / "profiles.yml").write_text(
        "crash:\n  target: t\n  outputs:\n    t:\n      type: spark_streaming\n"
        f"      method: session\n      schema: crash\n      warehouse_path: {warehouse}\n"
        "      threads: 1\n"
    )


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def append_bids(path: str, bids: list[tuple[str, float, str]]) -> None:
    """Append (bidtime, price, item) rows to the bids Delta table as one version."""
    write_deltalake(
        path,
        pa.table(
            {
                "bidtime": pa.array([ts(b[0]) for b in bids], pa.timestamp("us", tz="UTC")),
                "price": pa.array([float(b[1]) for b in bids]),
                "item": pa.array([b[2] for b in bids]),
            }
        ),
        mode="append",
    )
