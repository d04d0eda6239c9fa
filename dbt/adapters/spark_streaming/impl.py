"""The adapter: a thin facade of `@available` methods that the macros call.
The work is done in runtime/ (Spark) and delta/ (Delta I/O)."""

from __future__ import annotations

from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo, BaseRelation
from dbt.adapters.capability import Capability, CapabilityDict, CapabilitySupport, Support
from dbt.adapters.spark.impl import SparkAdapter

from .connections import SparkStreamingConnectionManager, profile_spark, session_and_catalog
from .relation import SparkStreamingRelation


class SparkStreamingAdapter(SparkAdapter):
    ConnectionManager = SparkStreamingConnectionManager
    Relation = SparkStreamingRelation
    # `dbt source freshness` without a loaded_at_field: Delta commit times
    # (get_relation_last_modified)
    _capabilities = CapabilityDict(
        {
            Capability.TableLastModifiedMetadata: CapabilitySupport(support=Support.Full),
            Capability.TableLastModifiedMetadataBatch: CapabilitySupport(support=Support.Full),
        }
    )

    @classmethod
    def type(cls) -> str:
        return "spark_streaming"

    @classmethod
    def get_adapter_run_info(cls, config: Any) -> AdapterTrackingRelationInfo:
        # The base class derives the module name from the class name ("sparkstreaming").
        from dbt.adapters.__about__ import version as base_version

        from .__version__ import version

        return AdapterTrackingRelationInfo(
            adapter_name="spark_streaming",
            base_adapter_version=base_version,
            adapter_version=version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    def _session(self):
        """(SparkSession, Catalog); the session starts on first use (runtime/catalog.py)."""
        return session_and_catalog(self.config.credentials)

    # The relation cache and schemas come from the warehouse directories, without Spark.

    def list_relations_without_caching(self, schema_relation: BaseRelation) -> list:
        from dbt.adapters.base.relation import RelationType

        from .runtime.relations import list_relations

        schema = schema_relation.schema
        return [
            self.Relation.create(
                schema=schema,
                identifier=identifier,
                type=RelationType(kind),
                information=info,
                is_delta=kind == "table",
            )
            for identifier, kind, info in list_relations(self._session()[1], schema)
        ]

    def get_columns_in_relation(self, relation: BaseRelation) -> list:
        """A Delta table's columns from its log (no Spark); a view's from Spark; [] if neither."""
        from .runtime.relations import columns

        return [
            self.Column(
                table_database=None,
                table_schema=relation.schema,
                table_name=relation.name,
                table_type=relation.type,
                table_owner=None,
                column=name,
                column_index=i,
                dtype=dtype,
            )
            for i, (name, dtype) in enumerate(
                columns(self._session()[1], relation.schema, relation.identifier)
            )
        ]

    def _get_columns_for_catalog(self, relation: BaseRelation) -> Any:
        """`dbt docs generate`: columns with Spark's type names as `show table extended` shows
        them (long for bigint), as dbt-spark reads them; a streaming model's table also its
        query kind, watermark, trigger, state bound and source versions (runtime/docs_catalog.py).
        """
        from .runtime.docs_catalog import streaming_stats

        names = {"bigint": "long", "int": "integer", "smallint": "short", "tinyint": "byte"}
        stats = streaming_stats(self._session()[1], relation.schema, relation.identifier)
        for column in self.get_columns_in_relation(relation):
            row = column.to_column_dict()
            row["column_name"] = row.pop("column", None)
            row["column_type"] = names.get(row["dtype"], row.pop("dtype"))
            row.pop("dtype", None)
            row["table_database"] = None
            yield {**row, **stats}

    def list_schemas(self, database: str) -> list[str]:
        return sorted(self._session()[1].schemas())

    def check_schema_exists(self, database: str, schema: str) -> bool:
        return schema.lower() in self._session()[1].schemas()

    def create_schema(self, relation: BaseRelation) -> None:
        self._session()[1].create_schema(relation.schema)

    @available
    def delta_location(self, relation: BaseRelation) -> str:
        """Directory of the relation's Delta table."""
        return self._session()[1].location(relation.schema, relation.identifier)

    @available.parse_none
    def register_source_location(self, schema: str, identifier: str, location: str) -> None:
        """Record a source's `meta: {location}` (macros/register_source_locations.sql)."""
        from .runtime.catalog import register_location

        register_location(schema, identifier, location)

    @available.parse_none
    def load_seed(self, relation: BaseRelation, agate_table: Any, column_types: dict | None) -> Any:
        """Write a seed as a Delta table (see runtime/seeds.py)."""
        from .runtime.seeds import load_seed

        catalog = self._session()[1]
        types = {
            c: (column_types or {}).get(c) or self.convert_type(agate_table, i)
            for i, c in enumerate(agate_table.column_names)
        }
        return load_seed(catalog, relation.schema, relation.identifier, agate_table, types)

    @available.parse_none
    def run_streaming_model(
        self,
        relation: BaseRelation,
        sql: str,
        config: dict,
        full_refresh: bool,
        materialization: str,
        inputs: list | None = None,
    ) -> Any:
        """Bring a streaming_view's or upsert_table's Delta table up to date
        (runtime/streaming.py); `inputs`: what the dbt graph says of the relations it reads
        (macros/streaming_inputs.sql, runtime/inputs.py)."""
        from .runtime.model import StreamingModel
        from .runtime.streaming import run_streaming_model

        spark, catalog = self._session()
        model = StreamingModel(
            schema=relation.schema,
            identifier=relation.identifier,
            sql=sql,
            config=config,
            full_refresh=full_refresh,
            materialization=materialization,
        )
        return run_streaming_model(
            spark, catalog, model, profile_spark(self.config.credentials), inputs=inputs
        )

    @available.parse_none
    def stream_status(self) -> dict:
        """Every streaming model's state (runtime/continuous/runner.py): {'rows': [...], 'text':
        table, 'json': the rows as JSON}."""
        from .runtime.continuous.runner import status_json, status_table, stream_status

        rows = stream_status(self._session()[1])
        return {"rows": rows, "text": status_table(rows), "json": status_json(rows)}

    @available.parse_none
    def stream_stop(self, model: str | None = None) -> list:
        """Stop the runner of `model` (identifier or schema.identifier), or every runner."""
        from .runtime.continuous.runner import stop_runners

        return stop_runners(self._session()[1].control, model)

    @available.parse_none
    def vacuum_models(
        self, models: list, retention_hours: int | None = None, dry_run: bool = False
    ) -> list:
        """VACUUM the tables of `models` ([{name, config}]): runtime/maintenance.py."""
        from .runtime.maintenance import vacuum_models

        verb = "would delete" if dry_run else "deleted"
        done = vacuum_models(self._session()[1], models, retention_hours, dry_run)
        return [d.line(verb) for d in done]

    @available.parse_none
    def optimize_models(self, models: list) -> list:
        """Compact the tables of `models` ([{name, config}]) now: runtime/maintenance.py."""
        from .runtime.maintenance import optimize_models

        spark, catalog = self._session()
        return [d.line("compacted") for d in optimize_models(spark, catalog, models)]

    @available.parse_none
    def snapshot_equivalence(
        self,
        relation: BaseRelation,
        at_version: int | None = None,
        float_tolerance: float | None = None,
        float_abs_tolerance: float | None = None,
    ) -> dict:
        """Check the streaming model's table against its query run in batch over the input it
        consumed (see runtime/equivalence.py); the differing rows are left in a temp view."""
        from .runtime.equivalence import check

        spark, catalog = self._session()
        result = check(
            spark,
            catalog,
            relation.schema,
            relation.identifier,
            at_version=at_version,
            where=getattr(relation, "where", None),
            float_tolerance=float_tolerance,
            float_abs_tolerance=float_abs_tolerance,
        )
        return {
            "view": result.view,
            "passed": result.passed,
            "summary": result.summary(),
            "restarted_keys": result.restarted_keys,
        }

    @available.parse_none
    def unit_test_query(self, sql: str, model: dict) -> dict:
        """The SQL of a dbt unit test's actual rows and their columns (runtime/unit.py): `sql`
        is the unit test's compiled SQL, `model` its node; the tested model's config and the
        unit test's own (meta `watermark`) come from the manifest."""
        from .runtime.unit import inputs_of, query

        manifest: Any = self.get_macro_resolver()  # the whole manifest (dbt-core sets it)
        tested = manifest.nodes[model["tested_node_unique_id"]]
        definition = manifest.unit_tests.get(model["unique_id"])
        meta = definition.config.meta if definition is not None else {}
        config = tested.config.to_dict(omit_none=True)
        spark, _ = self._session()
        return query(spark, sql, config, inputs_of(manifest, tested), meta.get("watermark"))

    @available.parse_none
    def late_rows_view(self, relation: BaseRelation) -> str:
        """A temp view of the input rows the streaming model dropped as late."""
        from .runtime.equivalence import late_rows_view

        spark, catalog = self._session()
        return late_rows_view(spark, catalog, relation.schema, relation.identifier)

    @available.parse_none
    def drop_delta_relation(self, relation: BaseRelation) -> None:
        """Drop the relation from the catalog and delete its Delta table (and checkpoint), or
        its view (runtime/relations.py)."""
        from .runtime.relations import drop

        drop(self._session()[1], relation.schema, relation.identifier)
        self.cache_dropped(relation)

    @available.parse_none
    def drop_delta_schema(self, relation: BaseRelation) -> None:
        """Drop every table of the schema, the schema, and its warehouse directory."""
        from .runtime.relations import drop_schema

        drop_schema(self._session()[1], relation.schema)

    # Batch materializations (table, view, incremental, snapshot): runtime/batch.py, views.py,
    # relations.py.

    @available.parse_none
    def write_delta_table(self, relation: BaseRelation, sql: str, partition_by: Any = None) -> Any:
        """Build (or atomically replace) the relation's Delta table from `sql`."""
        from .runtime.batch import write_table

        spark, catalog = self._session()
        return write_table(spark, catalog, relation.schema, relation.identifier, sql, partition_by)

    @available.parse_none
    def run_delta_incremental(self, relation: BaseRelation, sql: str, config: dict) -> Any:
        """Append or merge `sql`'s rows into the existing Delta table (incremental strategies)."""
        from .runtime.batch import run_incremental

        spark, catalog = self._session()
        return run_incremental(spark, catalog, relation.schema, relation.identifier, sql, config)

    @available.parse_none
    def merge_delta_snapshot(
        self,
        relation: BaseRelation,
        staging_sql: str,
        column_names: dict,
        valid_to_current: str | None = None,
    ) -> Any:
        """Apply dbt's snapshot staging rows to the snapshot's Delta table."""
        from .runtime.batch import merge_snapshot

        spark, catalog = self._session()
        return merge_snapshot(
            spark,
            catalog,
            relation.schema,
            relation.identifier,
            staging_sql,
            dict(column_names),
            valid_to_current,
        )

    @available.parse_none
    def create_delta_view(self, relation: BaseRelation, sql: str) -> Any:
        """Create or replace a view and keep its SQL in the warehouse for later processes."""
        from .runtime.views import create_view

        spark, catalog = self._session()
        return create_view(spark, catalog, relation.schema, relation.identifier, sql)

    @available.parse_none
    def rename_delta_relation(self, from_relation: BaseRelation, to_relation: BaseRelation) -> None:
        """Move a table's directory, or re-create a view under the new name (dbt's
        rename_relation updates the cache)."""
        from .runtime.relations import rename

        spark, catalog = self._session()
        rename(
            spark,
            catalog,
            from_relation.schema,
            from_relation.identifier,
            to_relation.schema,
            to_relation.identifier,
        )

    @available.parse_none
    def sync_delta_schema(self, relation: BaseRelation) -> None:
        """Rebind the schema's tables from the warehouse before dbt lists its relations."""
        from .runtime.relations import sync_schema

        sync_schema(self._session()[1], relation.schema)

    @available.parse_list
    def delta_last_modified(self, relations: list) -> list:
        """[schema, identifier, ISO UTC time of the latest Delta commit or None] per relation."""
        from .runtime.relations import last_modified

        catalog = self._session()[1]
        out = []
        for r in relations:
            when = last_modified(catalog, r.schema, r.identifier)
            out.append(
                [r.schema, r.identifier, when.strftime("%Y-%m-%d %H:%M:%S.%f") if when else None]
            )
        return out
