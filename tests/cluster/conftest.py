"""The Spark standalone cluster of the cluster tests: started once per test session, and only
when a selected test asks for it (`-m cluster`, or any run that includes tests/cluster)."""

import pytest

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
