"""delta/storage.py on a local directory and on S3 (a moto server on 127.0.0.1): the same
operations give the same answers, and nothing is written to a local directory named `s3:`."""

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt.adapters.spark_streaming.delta import storage


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "wh")
    request.getfixturevalue("s3")
    return f"s3://warehouse/storage-test/{tmp_path.name}"


def test_uri_checks():
    assert storage.check_uri("./warehouse") is None
    assert storage.check_uri("s3://bucket/prefix") is None
    assert "gs://" in storage.check_uri("gs://bucket/x")
    assert "no bucket" in storage.check_uri("s3://")
    assert storage.normalize("s3://b/p/") == "s3://b/p"
    assert storage.normalize("file:///tmp/x") == "/tmp/x"
    assert storage.join("s3://b/p", "a", "b") == "s3://b/p/a/b"


def test_files_directories_and_tables(root):
    assert storage.list_dirs(root) == [] and not storage.exists(root)
    storage.write_text(storage.join(root, "s", "v", "_dbt_view.sql"), "SELECT 1")
    storage.write_text(storage.join(root, "s", "v", "_dbt_view.sql"), "SELECT 2")
    assert storage.read_text(storage.join(root, "s", "v", "_dbt_view.sql")) == "SELECT 2"
    with pytest.raises(FileNotFoundError):
        storage.read_text(storage.join(root, "s", "nothing.sql"))
    table = storage.join(root, "s", "t")
    write_deltalake(table, pa.table({"a": [1, 2]}))
    assert storage.list_dirs(root) == ["s"]
    assert storage.list_dirs(storage.join(root, "s")) == ["t", "v"]
    assert storage.is_delta(table) and not storage.is_delta(storage.join(root, "s", "v"))
    assert DeltaTable(table).to_pyarrow_table().column("a").to_pylist() == [1, 2]
    storage.remove(storage.join(root, "s", "v", "_dbt_view.sql"))
    storage.remove(storage.join(root, "s", "v", "_dbt_view.sql"))  # gone: no error
    storage.remove_tree(table)
    assert not storage.is_delta(table) and not storage.exists(table)
    assert not os.path.exists("s3:")
