"""dbt's adapter test suites (dbt-tests-adapter) against the embedded session profile: the
batch materializations (table, view, incremental, ephemeral, snapshot) on the Delta
warehouse. All classes share the one SparkSession and warehouse (tests/conftest.py); each
class has its own schema."""

import pytest
from dbt.tests.adapter.basic import (
    expected_catalog,
    test_snapshot_check_cols,
    test_snapshot_timestamp,
)
from dbt.tests.adapter.basic.test_adapter_methods import BaseAdapterMethod
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_ephemeral import BaseEphemeral
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.util import generate_update_clause, get_connection, relation_from_name


class TestSimpleMaterializations(BaseSimpleMaterializations):
    pass


class TestSingularTests(BaseSingularTests):
    pass


class TestSingularTestsEphemeral(BaseSingularTestsEphemeral):
    pass


class TestEmpty(BaseEmpty):
    pass


class TestEphemeral(BaseEphemeral):
    pass


class TestIncremental(BaseIncremental):
    pass


class TestGenericTests(BaseGenericTests):
    pass


class TestAdapterMethod(BaseAdapterMethod):
    pass


def delta_update_rows(adapter, config):
    """`dbt.tests.util.update_rows` for Delta tables. Spark's UPDATE needs the JVM Delta
    connector, so the seed is rewritten (one overwrite commit, as a `table` model is) with
    the column recomputed by the same clause."""
    clause = generate_update_clause(adapter, config["clause"])
    relation = relation_from_name(adapter, config["name"])
    dst, where = config["dst_col"], config.get("where", "true")
    with get_connection(adapter):
        names = [c.name for c in adapter.get_columns_in_relation(relation)]
        select = ", ".join(
            f"case when {where} then {clause} else {n} end as {n}" if n == dst else n for n in names
        )
        adapter.write_delta_table(relation, f"select {select} from {relation}")


class TestSnapshotCheckCols(BaseSnapshotCheckCols):
    @pytest.fixture(autouse=True)
    def delta_updates(self, monkeypatch):
        monkeypatch.setattr(test_snapshot_check_cols, "update_rows", delta_update_rows)


class TestSnapshotTimestamp(BaseSnapshotTimestamp):
    @pytest.fixture(autouse=True)
    def delta_updates(self, monkeypatch):
        monkeypatch.setattr(test_snapshot_timestamp, "update_rows", delta_update_rows)


class TestDocsGenerate(BaseDocsGenerate):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project):
        # Spark's own type names in `show table extended` (as dbt-spark shows them: long for
        # bigint); the embedded catalog records no owner and no table statistics.
        return expected_catalog.base_expected_catalog(
            project,
            role=None,
            id_type="long",
            text_type="string",
            time_type="timestamp",
            view_type="view",
            table_type="table",
            model_stats=expected_catalog.no_stats(),
        )
