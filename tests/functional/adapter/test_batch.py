"""Batch materializations beyond dbt's base suites: incremental merge and on_schema_change,
insert_overwrite, partition_by, hooks, grants (a no-op), views kept across processes,
rename/drop, `dbt show`, `dbt build`, `dbt source freshness` (loaded_at_field and Delta
commit times), and a table model reading a streaming_view's Delta table. Stored rows are
read back with delta-rs."""

import os

import pytest
from dbt.tests.util import (
    get_connection,
    relation_from_name,
    run_dbt,
    run_dbt_and_capture,
    write_file,
)
from deltalake import DeltaTable

from ..helpers import rows, table_path

EVENTS_CSV = """id,name,part,updated_at
1,a,x,2020-01-01 00:00:00
2,b,x,2020-01-02 00:00:00
3,c,y,2020-01-03 00:00:00
"""
# id 2 changes, id 4 is new; partition y is not in the new rows
EVENTS_V2_CSV = """id,name,part,updated_at
2,bb,x,2020-02-02 00:00:00
4,d,z,2020-02-04 00:00:00
"""

DIM = """
{{ config(materialized='table', partition_by='part', grants={'select': ['analyst']},
          post_hook="create or replace temporary view {{ this.identifier }}_hooked \
as select count(*) as n from {{ this }}") }}
select id, name, part from {{ ref('events') }}
"""
DIM_VIEW = "{{ config(materialized='view') }} select id, upper(name) as name from {{ ref('dim') }}"
INC_MERGE = """
{{ config(materialized='incremental', unique_key='id', on_schema_change=var('osc', \
'append_new_columns')) }}
select id, name{% if var('extra', false) %}, length(name) as name_len{% endif %} \
from {{ ref('events') }}
"""
INC_OVERWRITE = """
{{ config(materialized='incremental', incremental_strategy='insert_overwrite', \
partition_by='part') }}
select id, name, part from {{ ref('events') }}
"""
# A batch model over a streaming model's Delta table.
STREAM = (
    "{{ config(materialized='streaming_view') }} "
    "select id, name from {{ ref('events') }} where id > 1"
)
FROM_STREAM = "{{ config(materialized='table') }} select count(*) as n from {{ ref('stream') }}"

SCHEMA_YML = """
version: 2
models:
  - name: dim
    columns:
      - name: id
        data_tests: [unique, not_null]
sources:
  - name: raw
    schema: "{{ target.schema }}"
    freshness: {warn_after: {count: 1, period: day}}
    tables:
      - name: events
        loaded_at_field: updated_at
      - name: dim            # no loaded_at_field: the time of its latest Delta commit
"""


class TestBatchMaterializations:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"events.csv": EVENTS_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "dim.sql": DIM,
            "dim_view.sql": DIM_VIEW,
            "inc_merge.sql": INC_MERGE,
            "inc_overwrite.sql": INC_OVERWRITE,
            "stream.sql": STREAM,
            "from_stream.sql": FROM_STREAM,
            "schema.yml": SCHEMA_YML,
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"updated_at": "timestamp"}}}

    def test_batch_materializations(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        dim = table_path(project, "dim")
        assert rows(dim) == [(1, "a", "x"), (2, "b", "x"), (3, "c", "y")]
        assert DeltaTable(dim).metadata().partition_columns == ["part"]
        assert project.run_sql("select n from dim_hooked", fetch="one")[0] == 3
        assert os.path.isfile(os.path.join(table_path(project, "dim_view"), "_dbt_view.sql"))
        assert rows(table_path(project, "from_stream")) == [(2,)]

        # New seed content; incremental runs merge on id, add the new column, replace partitions.
        write_file(EVENTS_V2_CSV, project.project_root, "seeds", "events.csv")
        run_dbt(["seed"])
        run_dbt(["run", "-s", "inc_merge", "inc_overwrite", "--vars", "{extra: true}"])
        merged = table_path(project, "inc_merge")
        assert rows(merged) == [(1, "a", None), (2, "bb", 2), (3, "c", None), (4, "d", 1)]
        assert rows(table_path(project, "inc_overwrite")) == [
            (2, "bb", "x"),
            (3, "c", "y"),
            (4, "d", "z"),
        ]

        # on_schema_change: fail refuses the dropped column; sync_all_columns drops it.
        results = run_dbt(["run", "-s", "inc_merge", "--vars", "{osc: fail}"], expect_pass=False)
        assert "SSD403" in results.results[0].message
        run_dbt(["run", "-s", "inc_merge", "--vars", "{osc: sync_all_columns}"])
        assert rows(merged) == [(1, "a"), (2, "bb"), (3, "c"), (4, "d")]
        run_dbt(["run", "-s", "inc_merge", "--full-refresh"])
        assert rows(merged) == [(2, "bb"), (4, "d")]

        # dbt build (models and their tests) and dbt show over the view.
        run_dbt(["build", "-s", "dim", "dim_view"])
        _, log = run_dbt_and_capture(
            ["show", "--inline", "select name from {{ ref('dim_view') }} order by id"]
        )
        assert "BB" in log and "D" in log

        # Freshness: events from its loaded_at_field (2020: warn), dim from its last commit (pass).
        results = run_dbt(["source", "freshness"], expect_pass=True)
        status = {r.node.name: str(r.status) for r in results.results}
        assert status == {"events": "warn", "dim": "pass"}

    def test_views_survive_the_process(self, project):
        """A new process binds the warehouse from scratch: it re-creates the stored views."""
        from dbt.adapters.spark_streaming.runtime.catalog import Catalog

        run_dbt(["seed"])
        run_dbt(["run", "-s", "dim", "dim_view"])
        adapter = project.adapter
        with get_connection(adapter):
            spark = adapter._session()[0]
            dim_rows = rows(table_path(project, "dim"))
            spark.sql(f"DROP VIEW {project.test_schema}.dim_view")  # as if in a new process
            Catalog(spark, adapter.config.credentials.warehouse_path).bind_all()
            assert spark.sql(f"select count(*) from {project.test_schema}.dim_view").first()[
                0
            ] == len(dim_rows)

            # rename and drop keep the catalog and the warehouse in agreement
            view, table = (
                relation_from_name(adapter, "dim_view"),
                relation_from_name(adapter, "dim"),
            )
            adapter.rename_relation(
                view.incorporate(type="view"), view.incorporate(path={"identifier": "dim_v2"})
            )
            adapter.rename_relation(
                table.incorporate(type="table"), table.incorporate(path={"identifier": "dim2"})
            )
            assert not os.path.exists(table_path(project, "dim_view"))
            assert rows(table_path(project, "dim2")) == dim_rows
            names = {r.identifier: r.type for r in adapter.list_relations_without_caching(view)}
            assert names["dim_v2"] == "view" and names["dim2"] == "table" and "dim" not in names
            adapter.drop_relation(view.incorporate(path={"identifier": "dim_v2"}, type="view"))
            assert not os.path.exists(table_path(project, "dim_v2"))
            assert "dim_v2" not in {
                r.identifier for r in adapter.list_relations_without_caching(view)
            }
