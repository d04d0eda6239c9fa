"""dbt-spark-streaming's dbt plugin (`Plugin`, which dbt reads when it loads the adapter).

It is built on first access: Spark's Python workers import delta/source.py from this package
to read a source, and must not pay for importing dbt (~0.8 s per worker process)."""


def __getattr__(name: str):
    if name != "Plugin":
        raise AttributeError(name)
    from dbt.adapters.base import AdapterPlugin

    from dbt.adapters.spark_streaming.credentials import SparkStreamingCredentials
    from dbt.adapters.spark_streaming.impl import SparkStreamingAdapter
    from dbt.include import spark_streaming

    global Plugin
    Plugin = AdapterPlugin(
        adapter=SparkStreamingAdapter,  # type: ignore[arg-type]
        credentials=SparkStreamingCredentials,
        include_path=spark_streaming.PACKAGE_PATH,
        dependencies=["spark"],
    )
    return Plugin
