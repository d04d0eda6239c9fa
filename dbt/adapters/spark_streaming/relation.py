from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbt.adapters.spark.relation import SparkRelation


@dataclass(frozen=True, eq=False, repr=False)
class SparkStreamingRelation(SparkRelation):
    """A Spark relation backed by a Delta table. A source table's `meta: {location: ...}`
    is recorded here, where dbt turns the source into a relation, for runtime/catalog."""

    @classmethod
    def create_from(cls, quoting: Any, relation_config: Any, **kwargs: Any):
        relation = super().create_from(quoting, relation_config, **kwargs)
        location = (getattr(relation_config, "meta", None) or {}).get("location")
        if location and str(getattr(relation_config, "resource_type", "")) == "source":
            from .runtime.catalog import register_location

            register_location(relation.schema, relation.identifier, location)
        return relation
