"""Delta I/O through delta-rs (the JVM Delta connector cannot be downloaded here).

`source` is a PySpark Python data source (batch and streaming reads; its offsets and
admission control in `offsets`, the files of a table's versions in `log`); `writer` writes
Parquet files in Spark tasks and `sink` commits them exactly once per micro-batch (`upsert`
and `partials`: MERGEs); `storage` says where files live (a directory or s3://). Everything
Delta-specific is behind these modules so that a cluster with the JVM connector can swap them.
"""
