"""Profile keys of `type: spark_streaming` (each is documented in profile_template.yml)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from dbt.adapters.spark.connections import SparkConnectionMethod, SparkCredentials
from dbt_common.exceptions import DbtRuntimeError


@dataclass
class SparkStreamingCredentials(SparkCredentials):
    # Only `session` (Spark inside the dbt process) is supported so far.
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    # Not used by the session method; dbt-spark's base class requires a value.
    host: Optional[str] = "embedded"
    # Root directory of the Delta tables: <warehouse_path>/<schema>/<identifier>.
    warehouse_path: str = "warehouse"
    # Spark master URL of the embedded session.
    master: str = "local[*]"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method != SparkConnectionMethod.SESSION:
            raise DbtRuntimeError(
                f"[dbt-spark-streaming SSC203] unsupported `method` {self.method!r}: only `session` "
                "(embedded Spark) is implemented. Set `method: session` in profiles.yml."
            )
        self.warehouse_path = os.path.abspath(os.path.expanduser(self.warehouse_path))

    @classmethod
    def __pre_deserialize__(cls, data: Any) -> Any:
        data = super().__pre_deserialize__(data)
        data.setdefault("method", "session")
        return data

    @property
    def type(self) -> str:
        return "spark_streaming"

    @property
    def unique_field(self) -> str:
        return self.warehouse_path

    def _connection_keys(self):
        return ("method", "master", "schema", "warehouse_path", "server_side_parameters")
