from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from dbt.adapters.spark.relation import SparkRelation


@dataclass(frozen=True, eq=False, repr=False)
class SparkStreamingRelation(SparkRelation):
    """A Spark relation backed by a Delta table. A source table's `meta: {location: ...}`
    is recorded here, where dbt turns the source into a relation, for runtime/catalog.

    `where` is a data test's `where:` config (see macros/tests/where_subquery.sql): the
    relation renders as the filtered subquery, as dbt's default does, but a test that needs
    the table itself (snapshot_equivalence) still knows which table it is."""

    where: Optional[str] = None

    def __str__(self) -> str:
        rendered = super().__str__()
        return (
            f"(select * from {rendered} where {self.where}) dbt_subquery"
            if self.where
            else rendered
        )

    @classmethod
    def create_from(cls, quoting: Any, relation_config: Any, **kwargs: Any):
        relation = super().create_from(quoting, relation_config, **kwargs)
        location = (getattr(relation_config, "meta", None) or {}).get("location")
        if location and str(getattr(relation_config, "resource_type", "")) == "source":
            from .runtime.catalog import register_location

            register_location(relation.schema, relation.identifier, location)
        return relation
