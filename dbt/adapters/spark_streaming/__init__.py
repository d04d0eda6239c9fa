from dbt.adapters.base import AdapterPlugin

from dbt.adapters.spark_streaming.credentials import SparkStreamingCredentials
from dbt.adapters.spark_streaming.impl import SparkStreamingAdapter
from dbt.include import spark_streaming

Plugin = AdapterPlugin(
    adapter=SparkStreamingAdapter,  # type: ignore[arg-type]
    credentials=SparkStreamingCredentials,
    include_path=spark_streaming.PACKAGE_PATH,
    dependencies=["spark"],
)
