"""The one SparkSession of this process (embedded: `local[*]`, or the driver of an application
on the cluster the profile's `master` names, e.g. `spark://host:7077`)."""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import IO, Any, Optional

_lock = threading.Lock()
_spark = None
_forkserver: subprocess.Popen | None = None


def machine_cores() -> int:
    """The cores this process may run on: its CPU affinity, which a container's cpuset limits
    (os.cpu_count() counts the machine's; Spark's local[*] counts the JVM's available
    processors, which also follow a CPU quota)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "4g",
    # one stateful partition per core (at most 8): each has a fixed cost per micro-batch (its state
    # store's load and commit), measured ~25% of a small batch's time at 4 partitions on 2 cores;
    # a query keeps the count it started with (Spark stores it in the checkpoint)
    "spark.sql.shuffle.partitions": str(min(machine_cores(), 8)),
    # Spark's cache of compiled generated code (100 classes by default) is shared by every query
    # of the session: a runner's 20 queries outgrew it and compiled their code again at each
    # micro-batch (10% of the JVM's CPU under appends, measured with JFR; bench/README)
    "spark.sql.codegen.cache.maxEntries": "1000",
    # Not the session extensions Java's ServiceLoader finds on Spark's class path: pyspark's jars
    # have one, spark-mllib's, which registers three functions of Spark Connect's ML and starts
    # Scala's runtime reflection for them: ~0.5 s of JVM time in `new SparkSession` (seen with
    # JFR), which nothing a model runs needs (bench/README "A cold `dbt run` against PyFlink's
    # whole job"). Those of `spark.sql.extensions` still apply. An internal setting of Spark's
    # (meant for its tests): a Spark without it ignores it and loads them.
    "spark.sql.extensions.test.loadFromCp": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    # Checkpoint files (offsets and commit logs, state store files) written through Hadoop's
    # FileSystem rather than its FileContext: ~13 ms instead of ~40 ms per file on a local disk
    # (measured here; two files per micro-batch plus the state's), with the same write-then-rename,
    # atomic where the file system's rename is (a local disk, HDFS; on an object store neither
    # class's is). Its check that a batch's offsets file is new is not atomic with the rename: one
    # run at a time uses a model's checkpoint (runtime/lifecycle.py's lock).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}

# With a cluster master, every `dbt` invocation and every continuous model's runner is an
# application of its own, holding its executors until it ends: each takes two 1-core executors
# (standalone spreads them over two workers) instead of every core of the cluster, so a runner
# started by `dbt run` finds free cores. `server_side_parameters` override them.
CLUSTER_DEFAULTS = {
    "spark.executor.cores": "1",
    "spark.cores.max": "2",  # standalone (YARN, Kubernetes: spark.executor.instances, default 2)
    "spark.executor.memory": "1g",
}


def spark_settings(master: str, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The session's Spark settings: the defaults (and CLUSTER_DEFAULTS unless `master` is
    local), overridden by the profile's `server_side_parameters` (`conf`)."""
    cluster = {} if master.startswith("local") else CLUSTER_DEFAULTS
    return {**DEFAULTS, **cluster, **(conf or {})}


DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
COLLECTOR = "-XX:+UseParallelGC"
# what else may give the driver JVM options: the JVM's own variables, Spark's launcher's
JAVA_ENVIRONMENT = (
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "SPARK_SUBMIT_OPTS",
    "PYSPARK_SUBMIT_ARGS",
)
# a collector, the driver's Java options given to spark-submit, or options from a file whose
# content is not read here
_CHOSEN = re.compile(
    r"-XX:\+Use\w*GC\b|driver-java-options|JavaOptions|-XX:(Flags|VMOptionsFile)="
    r"|--properties-file|(^|\s)@\S"
)


def collector(settings: Mapping[str, Any]) -> dict[str, str]:
    """The driver JVM's garbage collector: the Parallel one (with `local[*]` the executor is the
    same JVM). A `dbt run` over 1M or 10M events took 5-11% less time than with G1, Java's
    default, whose concurrent work takes a short process's cores (bench/README "A cold `dbt run`
    against PyFlink's whole job"). Not where Java options may be chosen otherwise, as a JVM
    given two collectors does not start: a profile's (or spark-defaults.conf's)
    `spark.driver.extraJavaOptions`, as a continuous runner's (continuous/host.py
    RUNNER_JAVA_OPTIONS: G1's periodic collections give its memory back); a collector (or an
    options file) named in `spark.driver.defaultJavaOptions` or in the environment
    (JAVA_ENVIRONMENT); a spark-env.sh or java-opts file in Spark's conf directory."""
    from . import cds

    named = [str(settings.get(cds.OPTION, "")), *(os.environ.get(v, "") for v in JAVA_ENVIRONMENT)]
    conf = cds.spark_conf_dir()
    if (
        DRIVER_OPTIONS in settings
        or any(_CHOSEN.search(text) for text in named)
        or any(os.path.exists(os.path.join(conf, f)) for f in ("spark-env.sh", "java-opts"))
        or cds.spark_defaults_set(DRIVER_OPTIONS, cds.OPTION)
    ):
        return {}
    return {DRIVER_OPTIONS: COLLECTOR}


def read_partitions(master: str, settings: Mapping[str, Any]) -> dict[str, str]:
    """How many partitions a read of a Delta source makes (delta/source.py PARTITIONS_ENV), as
    the environment of Spark's Python processes: the application's cores, as Spark's default
    parallelism counts them: `spark.default.parallelism` if set, else local[N]'s N (local[*]:
    `machine_cores`; local-cluster[N, C, ...]: N times C), a cluster's `spark.executor.instances`
    times `spark.executor.cores` or else its `spark.cores.max`; nothing (the source's own
    limit) if they are not known."""
    from ..delta.source import PARTITIONS_ENV

    cores: Any = settings.get("spark.default.parallelism")
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    workers = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),.*\]", master.strip())
    if cores is None and local is not None:
        cores = machine_cores() if local.group(1) == "*" else local.group(1) or 1
    elif cores is None and workers is not None:
        cores = int(workers.group(1)) * int(workers.group(2))
    elif cores is None:
        instances, per = (settings.get(f"spark.executor.{k}") for k in ("instances", "cores"))
        both = instances is not None and per is not None
        cores = int(instances) * int(per) if both else settings.get("spark.cores.max")
    return {} if cores is None else {f"spark.executorEnv.{PARTITIONS_ENV}": str(cores)}


def storage_environment(options: dict | None) -> dict[str, str]:
    """Set the profile's `storage_options` (AWS_ENDPOINT_URL, AWS_REGION, ...: the standard AWS
    environment, which deltalake and pyarrow read) in this process's environment, and return
    them as the executors' environment (spark.executorEnv.*; Spark redacts secrets in its UI)."""
    conf = {}
    for key, value in (options or {}).items():
        value = str(value).lower() if isinstance(value, bool) else str(value)
        os.environ[str(key)] = value
        conf[f"spark.executorEnv.{key}"] = value
    return conf


# Put on the PYTHONPATH of the Python processes Spark starts: they then import pyspark from the
# installed package, not from Spark's zip (no bytecode cache there: ~0.8 s more per process).
WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workerpath")


def _put_first_on_pythonpath(entry: str) -> None:
    """The JVM (started next) inherits the environment; its Python processes get its PYTHONPATH
    after Spark's own entries."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entry not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([entry, *paths])


FORKSERVER_ENV = "DBT_SPARK_STREAMING_FORKSERVER"  # its module is in WORKER_PATH: not imported here
# what the processes it runs import later: the data source's module, the tasks' file writer
FORKSERVER_PRELOAD = (
    "dbt.adapters.spark_streaming.delta.source",
    "dbt.adapters.spark_streaming.delta.writer",
    "deltalake",
)


def forkserver_command(socket_path: str) -> list[str]:
    """The fork server's command line (WORKER_PATH must be on its PYTHONPATH)."""
    serve = "import sys, spark_streaming_forkserver as f; f.serve(sys.argv[1], sys.argv[2:])"
    return [sys.executable, "-c", serve, socket_path, *FORKSERVER_PRELOAD]


def private_directory() -> str:
    """A new directory of this process's own in the temp directory, removed when it exits."""
    directory = tempfile.mkdtemp(prefix="dbt-spark-streaming-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


def start_forkserver(directory: str, log: Optional[IO] = None) -> None:
    """Start the fork server for the Python processes this process's session will start on the
    driver: the streaming queries' offsets processes and pyspark's daemons
    (runtime/workerpath/spark_streaming_forkserver.py: ~0.15-0.3 s less for each), its socket
    in `directory`, and give the socket to the JVM (started next) in the
    environment. It ends with this process. `DBT_SPARK_STREAMING_FORKSERVER=off` in the
    environment turns it off. `log`: a file for its output and its children's (else the
    console)."""
    global _forkserver
    if os.environ.get(FORKSERVER_ENV) == "off":
        return
    path = os.path.join(directory, "socket")
    if len(path.encode()) > 100:  # a Unix socket's path has a length limit
        os.environ.pop(FORKSERVER_ENV, None)  # one inherited from a parent process's session
        return
    # PySpark gives its Python processes PYTHONHASHSEED (0 unless set): the server's must match
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    _forkserver = subprocess.Popen(
        forkserver_command(path), stdin=subprocess.PIPE, env=env, stdout=log, stderr=log
    )
    atexit.register(_forkserver.stdin.close)  # it stops when its standard input closes
    os.environ[FORKSERVER_ENV] = path


def quiet(log: str) -> IO:
    """Send py4j's logging (its traceback after an error raised in a foreachBatch call, which
    Spark reports again as the query's failure) to the file `log`, and return it open for the
    output of the processes the session starts."""
    out = open(log, "ab")
    py4j = logging.getLogger("py4j")
    if not any(getattr(h, "baseFilename", None) == os.path.abspath(log) for h in py4j.handlers):
        handler = logging.FileHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        py4j.addHandler(handler)
    py4j.propagate = False
    return out


def _start(master: str, settings: dict[str, Any], out: Optional[IO]):
    """The SparkSession of `master` and `settings`, its JVM's output to `out` (else the
    console), or the process's running one."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if master.startswith("local") and local_ip is None:
        # an embedded session's driver needs no other address than the loopback one (Spark
        # warns at each start where the host's name resolves to it); for the JVM only, not for
        # other processes this one starts later
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        if out is not None and SparkContext._gateway is None:  # else a context runs already
            conf = SparkConf().setMaster(master).setAll([(k, str(v)) for k, v in settings.items()])
            popen = {"stdout": out, "stderr": out}  # pyspark's hook for the JVM's output
            SparkContext._ensure_initialized(gateway=launch_gateway(conf, popen))
        builder = SparkSession.builder.master(master).appName("dbt-spark-streaming")
        for key, value in settings.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    finally:
        if master.startswith("local") and local_ip is None:
            os.environ.pop("SPARK_LOCAL_IP", None)


def get_spark(master: str = "local[*]", conf: dict[str, str] | None = None, log: str | None = None):
    """Create (once) and return the SparkSession, with the Delta source registered.

    The catalog is in-memory; its managed-table directory is in a private temp dir (removed at
    exit, with the fork server's socket) because the Delta data itself lives under the
    profile's `warehouse_path`. `log`: a file for the output of the JVM (Spark's logging, the
    JVM's warnings), of the Python processes it and the fork server start, and of py4j, instead
    of this process's console (None: the console, as a runner's, whose console is its log)."""
    global _spark
    with _lock:
        if _spark is not None:
            return _spark
        from . import cds

        private = private_directory()
        settings = spark_settings(master, conf)
        settings = {
            "spark.sql.warehouse.dir": os.path.join(private, "catalog"),
            **cds.java_options(settings),  # the driver JVM's class archive (runtime/cds.py)
            **collector(settings),
            **read_partitions(master, settings),
            **settings,
        }
        # Python workers (the executors' too) must run an interpreter that has pyarrow, deltalake
        # and this package: PySpark gives them PYSPARK_PYTHON as it is when the session starts
        # (it ignores spark.pyspark.python there, so a profile's value is moved into it).
        if settings.get("spark.pyspark.python"):
            os.environ["PYSPARK_PYTHON"] = str(settings["spark.pyspark.python"])
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        _put_first_on_pythonpath(WORKER_PATH)
        out = quiet(log) if log else None
        try:
            if _forkserver is None:
                start_forkserver(private, out)
            spark = _start(master, settings, out)
        except Exception as exc:
            if log is None:
                raise
            with open(log, errors="replace") as fh:
                tail = " | ".join(ln.strip() for ln in fh.read().splitlines()[-5:])
            raise RuntimeError(f"Spark did not start; its output is in {log}: {tail}") from exc
        finally:
            if out is not None:
                out.close()  # the JVM and the fork server have their own
        spark.sparkContext.setLogLevel("ERROR")
        from ..delta.source import DeltaSource

        spark.dataSource.register(DeltaSource)
        _spark = spark
        return spark
