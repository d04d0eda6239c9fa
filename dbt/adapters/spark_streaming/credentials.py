"""Profile keys of `type: spark_streaming` (each is documented in profile_template.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from dbt.adapters.spark.connections import SparkConnectionMethod, SparkCredentials

from .delta import storage
from .errors import StreamingError


@dataclass
class SparkStreamingCredentials(SparkCredentials):
    # Only `session` (Spark inside the dbt process) is supported so far.
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    # Not used by the session method; dbt-spark's base class requires a value.
    host: Optional[str] = "embedded"
    # Root of the Delta tables, <warehouse_path>/<schema>/<identifier>: a local or shared
    # directory, or object storage (s3://bucket/prefix).
    warehouse_path: str = "warehouse"
    # Spark master URL of the embedded session.
    master: str = "local[*]"
    # Local or shared directory for Spark checkpoints and the adapter's run files (locks,
    # continuous runners). Default: inside the warehouse; required when the warehouse is object
    # storage (Spark writes checkpoints through Hadoop, which has no S3A jars here).
    checkpoint_root: Optional[str] = None
    # Object storage settings, set as the standard AWS environment of the driver and the
    # executors (e.g. {AWS_ENDPOINT_URL: ..., AWS_REGION: ..., AWS_ALLOW_HTTP: "true"});
    # credentials are best left to the AWS environment or credential chain of every node.
    storage_options: Optional[Dict[str, str]] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method != SparkConnectionMethod.SESSION:
            raise StreamingError(
                "SSC203",
                f"unsupported `method` {self.method!r}",
                "only `session` (embedded Spark) is implemented",
                "Set `method: session` in profiles.yml.",
            )
        problem = storage.check_uri(self.warehouse_path)
        if problem:
            raise StreamingError(
                "SSC204",
                f"unsupported `warehouse_path` {self.warehouse_path!r}",
                problem,
                "Set it to a directory or to s3://bucket/prefix in profiles.yml.",
            )
        self.warehouse_path = storage.normalize(self.warehouse_path)
        root = self.checkpoint_root
        if storage.is_remote(root or self.warehouse_path):
            raise StreamingError(
                "SSC205",
                f"`checkpoint_root` {root!r} is object storage"
                if root
                else "`checkpoint_root` is required when `warehouse_path` is object storage "
                f"({self.warehouse_path})",
                "Spark writes its streaming checkpoints through Hadoop filesystems, and the S3A "
                "connector is not installed",
                "Set `checkpoint_root` in profiles.yml to a local directory, or one every node "
                "shares.",
            )
        if root is not None:
            self.checkpoint_root = storage.normalize(root)

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
        return (
            "method",
            "master",
            "schema",
            "warehouse_path",
            "checkpoint_root",
            "server_side_parameters",
        )
