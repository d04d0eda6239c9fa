"""A stream-to-table enrichment join (Calcite's streaming SQL, "Joining streams to tables"): a
streaming model joins a stream of orders with a `table` model of products listed in config
`dimensions`. Each micro-batch joins the products as they are when it runs: orders read
after a price change get the new price, rows already written keep the old one."""

import os

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import write_deltalake

from .helpers import rows, table_path

PRODUCTS = "id,name,price\n10,apple,0.30\n20,pear,0.50\n"
SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: orders}]
"""
DIM = "{{ config(materialized='table') }}\nSELECT id, name, price FROM {{ ref('products') }}"
ENRICHED = """
{{ config(materialized='streaming_view', dimensions=['dim_products']) }}
SELECT o.order_id, p.name, o.units, o.units * p.price AS amount
FROM {{ source('raw', 'orders') }} o JOIN {{ ref('dim_products') }} p ON o.product_id = p.id
"""


def append_orders(path: str, orders: list[tuple[int, int, int]]) -> None:
    write_deltalake(
        path,
        pa.table(
            {
                "order_id": pa.array([o[0] for o in orders], pa.int64()),
                "product_id": pa.array([o[1] for o in orders], pa.int64()),
                "units": pa.array([o[2] for o in orders], pa.int64()),
            }
        ),
        mode="append",
    )


class TestEnrichmentJoin:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"products.csv": PRODUCTS}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "dim_products.sql": DIM,
            "enriched.sql": ENRICHED,
            "tests.yml": "models:\n  - {name: enriched, data_tests: [snapshot_equivalence]}\n",
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"+column_types": {"id": "bigint", "name": "string", "price": "double"}}}

    def test_each_run_joins_the_current_dimension(self, project):
        orders = table_path(project, "orders")
        run_dbt(["seed"])
        append_orders(orders, [(1, 10, 2), (2, 20, 1)])
        run_dbt(["run"])
        assert rows(table_path(project, "enriched")) == [(1, "apple", 2, 0.6), (2, "pear", 1, 0.5)]

        # The price of product 10 changes (seed, then the table model), then more orders come.
        with open(os.path.join(project.project_root, "seeds", "products.csv"), "w") as fh:
            fh.write(PRODUCTS.replace("0.30", "0.35"))
        run_dbt(["seed"])
        append_orders(orders, [(3, 10, 2)])
        run_dbt(
            ["run"]
        )  # rebuilds dim_products (a new Delta version that rewrites it), then the join
        got = [(o, n, u, round(a, 6)) for o, n, u, a in rows(table_path(project, "enriched"))]
        assert got == [(1, "apple", 2, 0.6), (2, "pear", 1, 0.5), (3, "apple", 2, 0.7)]

        # No single batch query reproduces that, and the equivalence test says so.
        _, out = run_dbt_and_capture(["test"], expect_pass=False)
        assert "SST505" in out and "dim_products" in out

    def test_unknown_dimension_is_refused(self, project):
        with open(os.path.join(project.project_root, "models", "enriched.sql"), "w") as fh:
            fh.write(ENRICHED.replace("dimensions=['dim_products']", "dimensions=['dim_prodcts']"))
        _, out = run_dbt_and_capture(["run", "-s", "enriched"], expect_pass=False)
        assert "SSC201" in out and "dim_prodcts" in out
