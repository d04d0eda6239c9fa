"""The servers of the scale-out tests, each started once per test session and only when a
selected test asks for it: a Spark standalone cluster (`-m cluster`) and an S3 endpoint."""

import os

import pytest

from .moto_s3 import MotoS3
from .standalone import StandaloneCluster


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A master and two workers (2 cores, 2 GB each) on 127.0.0.1, stopped at the end of the
    session (their process groups killed), also when a test or the start fails."""
    cluster = StandaloneCluster(str(tmp_path_factory.mktemp("spark_cluster")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with a bucket `warehouse`; its AWS environment is set in
    this process (deltalake and pyarrow read it here) for the session, and `s3.env` is what a
    profile's `storage_options` or a subprocess needs. Stopped by PID at the end."""
    with MotoS3(str(tmp_path_factory.mktemp("moto"))) as server:
        saved = {k: os.environ.get(k) for k in server.env}
        os.environ.update(server.env)
        try:
            server.bucket("warehouse")
            yield server
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
