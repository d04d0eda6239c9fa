"""The adapter: a thin facade of `@available` methods that the macros call.
The work is done in runtime/ (Spark) and delta/ (Delta I/O)."""
from __future__ import annotations

import shutil
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo, BaseRelation
from dbt.adapters.spark.impl import SparkAdapter

from .connections import SparkStreamingConnectionManager, session_and_catalog
from .relation import SparkStreamingRelation


class SparkStreamingAdapter(SparkAdapter):
    ConnectionManager = SparkStreamingConnectionManager
    Relation = SparkStreamingRelation

    @classmethod
    def type(cls) -> str:
        return "spark_streaming"

    @classmethod
    def get_adapter_run_info(cls, config: Any) -> AdapterTrackingRelationInfo:
        # The base class derives the module name from the class name ("sparkstreaming").
        from dbt.adapters.__about__ import version as base_version

        from .__version__ import version

        return AdapterTrackingRelationInfo(
            adapter_name="spark_streaming", base_adapter_version=base_version, adapter_version=version,
            model_adapter_details=cls._get_adapter_specific_run_info(config))

    def _session(self):
        return session_and_catalog(self.config.credentials)

    @available
    def delta_location(self, relation: BaseRelation) -> str:
        """Directory of the relation's Delta table."""
        return self._session()[1].location(relation.schema, relation.identifier)

    @available.parse_none
    def load_seed(self, relation: BaseRelation, agate_table: Any, column_types: dict | None) -> Any:
        """Write a seed as a Delta table (see runtime/seeds.py)."""
        from .runtime.seeds import load_seed

        catalog = self._session()[1]
        types = {c: (column_types or {}).get(c) or self.convert_type(agate_table, i)
                 for i, c in enumerate(agate_table.column_names)}
        return load_seed(catalog, relation.schema, relation.identifier, agate_table, types)

    @available.parse_none
    def run_streaming_view(self, relation: BaseRelation, sql: str, config: dict, full_refresh: bool) -> Any:
        """Bring the streaming_view's Delta table up to date (see runtime/streaming.py)."""
        from .runtime.streaming import StreamingModel, run_streaming_model

        spark, catalog = self._session()
        model = StreamingModel(schema=relation.schema, identifier=relation.identifier, sql=sql,
                               config=config, full_refresh=full_refresh,
                               materialization="streaming_view")
        return run_streaming_model(spark, catalog, model)

    @available.parse_none
    def snapshot_equivalence(self, relation: BaseRelation, at_version: int | None = None,
                             float_tolerance: float | None = None) -> dict:
        """Check the streaming model's table against its query run in batch over the input it
        consumed (see runtime/equivalence.py); the differing rows are left in a temp view."""
        from .runtime.equivalence import check

        spark, catalog = self._session()
        result = check(spark, catalog, relation.schema, relation.identifier, at_version=at_version,
                       where=getattr(relation, "where", None), float_tolerance=float_tolerance)
        return {"view": result.view, "passed": result.passed, "summary": result.summary()}

    @available.parse_none
    def late_rows_view(self, relation: BaseRelation) -> str:
        """A temp view of the input rows the streaming model dropped as late."""
        from .runtime.equivalence import late_rows_view

        spark, catalog = self._session()
        return late_rows_view(spark, catalog, relation.schema, relation.identifier)

    @available.parse_none
    def drop_delta_relation(self, relation: BaseRelation) -> None:
        """Drop the relation from the catalog and delete its Delta table (and checkpoint)."""
        catalog = self._session()[1]
        path = catalog.location(relation.schema, relation.identifier)
        catalog.unbind(relation.schema, relation.identifier)
        shutil.rmtree(path, ignore_errors=True)
        self.cache_dropped(relation)

    @available.parse_none
    def drop_delta_schema(self, relation: BaseRelation) -> None:
        """Drop every table of the schema, the schema, and its warehouse directory."""
        import os

        spark, catalog = self._session()
        for name in catalog.tables(relation.schema):
            catalog.unbind(relation.schema, name)
        spark.sql(f"DROP DATABASE IF EXISTS `{relation.schema}` CASCADE")
        shutil.rmtree(os.path.join(catalog.warehouse, relation.schema.lower()), ignore_errors=True)
