"""Imported by every Python process Spark starts for the session (this directory is put on
their PYTHONPATH by runtime/session.py): it lets them import pyspark and py4j from the
installed packages instead of the zip archives Spark puts first on their path.

Spark starts a Python process per streaming query for the Python data source's offsets, one
per query start for its read plan, and the workers' daemon; it puts
``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on their ``sys.path``. With
pyspark installed from PyPI, ``SPARK_HOME`` is the installed package, and those zips hold the
same version of the same files; but Python caches no bytecode for modules in a zip, so every
process compiles pyspark again: ~1.1 s to import the streaming source runner instead of
~0.3 s (measured here). The zips are dropped from ``sys.path`` only when they are the
installed pyspark's own (``<pyspark>/python/lib/``); with a Spark distribution and no pyspark
package (a cluster's workers), nothing changes.

Python imports one ``sitecustomize``: the one this shadows, if any, is run after. Then, in the
process Spark starts for a streaming query's offsets and in pyspark's daemons, the driver's fork
server takes over (spark_streaming_forkserver.py)."""

import importlib.machinery
import importlib.util
import os
import sys


def _installed_package_dir(name: str, path: list) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _is_spark_zip(name: str) -> bool:
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith(".zip"))


def _drop_spark_zips() -> None:
    zips = [p for p in sys.path if _is_spark_zip(os.path.basename(p))]
    if not zips:
        return
    rest = [p for p in sys.path if p not in zips]
    home = _installed_package_dir("pyspark", rest)
    if home is None or _installed_package_dir("py4j", rest) is None:
        return
    if all(os.path.dirname(z) == os.path.join(home, "python", "lib") for z in zips):
        sys.path[:] = rest


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_drop_spark_zips()
_run_shadowed()

import spark_streaming_forkserver  # noqa: E402  (this directory is on the path)

if spark_streaming_forkserver.wanted():
    spark_streaming_forkserver.hand_over()
