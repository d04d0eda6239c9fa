"""Cold start: a run with nothing new to read starts neither Spark nor the query, and a process
binds only the relations its statements read (runtime/catalog.py, runtime/checkpoint.py)."""

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.spark_streaming.runtime.catalog import Catalog
from dbt.adapters.spark_streaming.runtime.model import StreamingModel
from dbt.adapters.spark_streaming.runtime.session import get_spark
from dbt.adapters.spark_streaming.runtime.streaming import run_streaming_model

from . import test_lifecycle as lifecycle
from .helpers import append_bids, commits, rows, table_path

VIEW = "{{ config(materialized='view') }}\nSELECT item, price FROM {{ ref('bids') }}\n"


def no_spark():
    raise AssertionError("Spark was started")


class TestColdStart(lifecycle.Base):
    @pytest.fixture(scope="class")
    def models(self):
        return {"per_10min.sql": lifecycle.MODEL, "bids_view.sql": VIEW}

    def test_lazy_session_and_binding(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        schema, path = project.test_schema, table_path(project, "per_10min")
        warehouse = project.adapter.config.credentials.warehouse_path
        model = StreamingModel(
            schema=schema,
            identifier="per_10min",
            sql=lifecycle.MODEL.split("}}", 1)[1].replace("{{ ref('bids') }}", f"{schema}.bids"),
            config={"watermark_delay": "1 minute"},
            full_refresh=False,
            materialization="streaming_view",
        )
        before = commits(path)

        # A new process (a catalog of its own) with nothing new to read: no Spark, no commit.
        cold = Catalog(no_spark, warehouse)
        response = run_streaming_model(cold.session, cold, model)
        assert response.batches == 0 and response._message == "no new data"
        assert not cold.started and commits(path) == before
        kinds = dict(cold.relations(schema))
        assert kinds["bids"] == "table" and kinds["bids_view"] == "view"

        # New data: the query runs; it reads its source by path, so nothing else is bound.
        append_bids(table_path(project, "bids"), [("2020-04-15 08:31:00", 1.0, "Z")])
        warm = Catalog(get_spark, warehouse)
        response = run_streaming_model(warm.session, warm, model)
        assert response.rows_read == 1 and response.batches >= 1
        assert {i for _, i, _ in warm.bound()} <= {"per_10min"}
        # A statement binds what it reads: a stored view and, through it, its table.
        get_spark().sql(f"DROP VIEW IF EXISTS {schema}.bids_view")
        count = warm.sql(f"SELECT COUNT(*) FROM {schema}.bids_view").first()[0]
        assert count == len(rows(table_path(project, "bids")))
        assert {i for _, i, _ in warm.bound()} == {"per_10min", "bids"}
