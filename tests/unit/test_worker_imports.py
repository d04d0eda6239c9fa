"""Spark's Python workers import delta/source.py to read a source: a new process per streaming
query start (its offsets) and per worker. It must not pull in dbt or sqlglot, which cost ~0.9 s
per process (measured: 1.2 s -> 0.3 s for the import, ~0.45 s per query start)."""

import subprocess
import sys


def test_the_delta_source_imports_neither_dbt_nor_sqlglot():
    code = (
        "import sys, dbt.adapters.spark_streaming.delta.source as s; "
        "print(s.FORMAT, sorted(m for m in sys.modules if m.startswith(('dbt.adapters.base', "
        "'dbt_common', 'sqlglot', 'dbt.adapters.spark_streaming.sql'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["delta_rs", "[]"]


def test_dbt_still_finds_the_plugin():
    code = (
        "import dbt.adapters.spark_streaming as p; print(p.Plugin.adapter.__name__, "
        "p.Plugin.credentials.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["SparkStreamingAdapter", "SparkStreamingCredentials"]


def test_the_file_writer_imports_neither_dbt_nor_deltalake():
    """Each task of a write unpickles delta/writer.py's FileWriter in a Python worker."""
    code = (
        "import sys, dbt.adapters.spark_streaming.delta.writer as w; "
        "print(w.FILES_SCHEMA.split()[0], sorted(m for m in sys.modules if m.startswith(("
        "'dbt.adapters.base', 'dbt_common', 'sqlglot', 'deltalake', "
        "'dbt.adapters.spark_streaming.sql'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["path", "[]"]


def test_spark_python_processes_import_the_installed_pyspark_not_its_zip():
    """runtime/workerpath/sitecustomize.py: Spark puts `<pyspark>/python/lib/pyspark.zip` (and
    py4j's) first on its Python processes' path; modules in a zip are compiled at every start.
    With the directory on the path, they import the installed package (the same files)."""
    import os

    import pyspark

    from dbt.adapters.spark_streaming.runtime.session import WORKER_PATH

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zips = sorted(os.path.join(lib, n) for n in os.listdir(lib) if n.endswith(".zip"))
    assert [os.path.basename(z).split("-")[0] for z in zips] == ["py4j", "pyspark.zip"]
    code = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"

    def imported(pythonpath):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        return run.stdout.split()

    assert all(".zip" in f for f in imported(zips))  # what Spark's processes get
    assert imported([*zips, WORKER_PATH]) == [
        os.path.join(os.path.dirname(pyspark.__file__), "__init__.py"),
        __import__("py4j").__file__,
    ]


def test_the_delta_source_reads_a_log_without_pandas(tmp_path):
    """A streaming query's offsets process reads its source's log for each trigger: pyarrow's
    `pa.table()` on deltalake's tables imports pandas (~40 MB more in each of those processes,
    one per continuous model: bench/README "Continuous models sharing a runner")."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"x": [1, 2]}))
    write_deltalake(table, pa.table({"x": [3]}), mode="append")
    code = (
        "import sys; from dbt.adapters.spark_streaming.delta import log, source; "
        "files = log.snapshot_files(sys.argv[1], None); "
        "print(len(files), log.latest_version(sys.argv[1]), 'pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, table], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["2", "1", "False"]
