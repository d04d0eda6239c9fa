"""Class data sharing for the driver's JVM: the classes a Spark driver loads to start and run a
streaming query, archived once per installation and mapped by every later JVM instead of being
loaded and verified again (Java's `-XX:SharedArchiveFile`, a dynamic archive of JDK 13+).

Measured on 2 cores (bench/README "A cold dbt run against PyFlink's whole job"): SparkSession
start ~5.9 s -> ~3.4 s, its first SQL statement ~1.0 s -> ~0.3 s.

- The archive is a file of the user's cache (`$XDG_CACHE_HOME` or `~/.cache`, then
  `dbt-spark-streaming/`), named by what the JVM checks before it maps one (`archive_path`):
  the JVM's build and the jars of Spark's class path, each with its size and time. A JVM that
  cannot use it anyway (a profile's own `spark.driver.extraClassPath`) starts as without it.
- Made by a process of its own (runtime/cds_maker.py), started
  in the background as the first process whose session found none exits, one at a time (a
  lock file), so no run waits for it (~20 s of CPU, once): it runs a small streaming query over
  the Delta source, and its JVM writes the archive (~170 MB) as it exits, to a temporary name
  renamed once the JVM has exited cleanly. A maker that fails leaves a `.failed` file (with its
  reason; its output is in the `.log` file) and none is tried again for RETRY_AFTER seconds.
- `DBT_SPARK_STREAMING_CDS=off` in the environment, or a `spark.driver.defaultJavaOptions` of
  the profile's or of spark-defaults.conf, turns it off.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

ENV = "DBT_SPARK_STREAMING_CDS"
OPTION = "spark.driver.defaultJavaOptions"  # prepended to spark.driver.extraJavaOptions
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # its warnings (e.g. a signed jar's classes)
STALE_LOCK = 900  # seconds after which a lock is an ended maker's
RETRY_AFTER = 86400  # seconds after a failed maker before another is started
MAKER = "dbt.adapters.spark_streaming.runtime.cds_maker"  # the process that makes the archive


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found or "java")


def _stat(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} -"
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def _spark_home() -> str:
    import pyspark

    return os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


def archive_path() -> str:
    """Where the archive for this JVM and this Spark class path is (or will be)."""
    import pyspark

    java = _java()
    jvm = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "server", "libjvm.so")
    jars = os.path.join(_spark_home(), "jars")
    try:
        names = sorted(os.listdir(jars))
    except OSError:
        names = []
    key = "\n".join(
        [
            _stat(java),
            _stat(jvm),
            pyspark.__version__,
            *(_stat(os.path.join(jars, n)) for n in names),
        ]
    )
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = f"spark-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"
    return os.path.join(cache, "dbt-spark-streaming", name)


def spark_conf_dir() -> str:
    """Where Spark's launcher reads spark-defaults.conf, spark-env.sh and java-opts."""
    return os.environ.get("SPARK_CONF_DIR") or os.path.join(_spark_home(), "conf")


def spark_defaults_set(*options: str) -> bool:
    """Whether spark-defaults.conf sets one of `options` (default: OPTION; a Java properties
    file: the key, then blanks, `=` or `:`; Spark reads it whatever its bytes)."""
    conf = spark_conf_dir()
    names = "|".join(re.escape(o) for o in options or (OPTION,))
    key = re.compile(rf"\s*(?:{names})\s*[=:\s]")
    try:
        with open(
            os.path.join(conf, "spark-defaults.conf"), encoding="utf-8", errors="replace"
        ) as fh:
            return any(key.match(line) for line in fh)
    except OSError:
        return False


def java_options(settings: dict) -> dict[str, str]:
    """The setting that makes the driver's JVM map the archive, if there is one (else this
    session starts without it, and the archive's maker starts in the background as this
    process exits, not to compete with its run for the cores)."""
    if os.environ.get(ENV) == "off" or OPTION in settings or spark_defaults_set():
        return {}
    path = archive_path()
    if os.path.exists(path):
        return {OPTION: f'"-XX:SharedArchiveFile={path}" {QUIET}'}
    atexit.register(_make_in_background, path)
    return {}


def _make_in_background(path: str) -> None:
    lock, failed = path + ".lock", path + ".failed"
    try:
        if os.path.exists(failed) and time.time() - os.path.getmtime(failed) < RETRY_AFTER:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(lock) and time.time() - os.path.getmtime(lock) > STALE_LOCK:
            os.remove(lock)
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:  # another process makes it, or no cache to write to: none is made
        return
    if os.path.exists(path):  # made since this process's session started
        os.remove(lock)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env[ENV] = "off"  # its own session maps none
    try:
        with open(path + ".log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", MAKER, path],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # not a child that a run's end or Ctrl-C stops
            )
    except OSError:  # no maker (a full disk, ...): the lock is not left to go stale
        os.remove(lock)
