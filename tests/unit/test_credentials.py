"""Profile keys that say where the data lives: a path the adapter cannot serve is refused
before anything runs (it was once written to a local directory named `s3:`)."""

import os

import pytest

from dbt.adapters.spark_streaming.credentials import SparkStreamingCredentials
from dbt.adapters.spark_streaming.errors import StreamingError


def creds(**keys) -> SparkStreamingCredentials:
    return SparkStreamingCredentials(schema="analytics", database=None, **keys)


def test_local_and_object_storage_warehouses(tmp_path):
    local = creds(warehouse_path=str(tmp_path / "wh"))
    assert local.warehouse_path == str(tmp_path / "wh") and local.checkpoint_root is None
    assert creds(warehouse_path="file://" + str(tmp_path)).warehouse_path == str(tmp_path)
    s3 = creds(warehouse_path="s3://bucket/wh/", checkpoint_root=str(tmp_path / "cp"))
    assert s3.warehouse_path == "s3://bucket/wh" and s3.checkpoint_root == str(tmp_path / "cp")
    assert not os.path.exists("s3:")


@pytest.mark.parametrize(
    "keys,code,text",
    [
        ({"warehouse_path": "gs://bucket/wh"}, "SSC204", "gs:// is not supported"),
        ({"warehouse_path": "s3://"}, "SSC204", "no bucket"),
        ({"warehouse_path": "s3://bucket/wh"}, "SSC205", "`checkpoint_root` is required"),
        (
            {"warehouse_path": "s3://bucket/wh", "checkpoint_root": "s3://bucket/cp"},
            "SSC205",
            "is object storage",
        ),
    ],
)
def test_paths_the_adapter_cannot_serve(keys, code, text):
    with pytest.raises(StreamingError) as info:
        creds(**keys)
    assert info.value.code == code and text in str(info.value), str(info.value)
    assert "Set" in info.value.fix
