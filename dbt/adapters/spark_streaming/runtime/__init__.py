"""Spark-side work: the shared SparkSession, binding relation names to Delta tables,
and running streaming queries. Imported lazily: nothing here runs during `dbt parse`."""
