"""Delta I/O through delta-rs (the JVM Delta connector cannot be downloaded here).

`source` is a PySpark Python data source (batch and streaming reads; its offsets and
admission control in `offsets`), `sink` commits micro-batches exactly once, `log` lists the
files of a table's versions. Everything Delta-specific is behind these modules so that a
cluster with the JVM connector can swap them.
"""
