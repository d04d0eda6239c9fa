"""Delta I/O through delta-rs (the JVM Delta connector cannot be downloaded here).

`source` is a PySpark Python data source (batch and streaming reads), `sink` commits
micro-batches exactly once, `log` reads table metadata. Everything Delta-specific is
behind these three modules so that a cluster with the JVM connector can swap them.
"""
