"""runtime/cds.py: the driver JVM's class archive is made once by a process of its own, then
mapped by the next JVMs; a missing archive costs nothing but its making in the background as
the process exits, once at a time."""

import os
import subprocess
import sys

import pytest

from dbt.adapters.spark_streaming.runtime import cds

SESSION = """
import sys
from dbt.adapters.spark_streaming.runtime.session import get_spark
spark = get_spark("local[1]", {"spark.driver.defaultJavaOptions": sys.argv[1]}, sys.argv[2])
assert spark.range(5).count() == 5
"""


def _python(code_or_module: list[str], **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.run(
        [sys.executable, *code_or_module],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_archive_is_made_then_mapped(tmp_path):
    archive = str(tmp_path / "spark.jsa")
    made = _python(["-m", "dbt.adapters.spark_streaming.runtime.cds", archive], **{cds.ENV: "off"})
    assert made.returncode == 0, made.stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["spark.jsa"]  # no lock, no partial file left
    assert os.path.getsize(archive) > 10_000_000
    # -Xshare:on: the JVM does not start unless it maps the archive; every class it loads
    # from the archive's top layer is logged as such
    loads = tmp_path / "classes.txt"
    options = f"-Xshare:on -XX:SharedArchiveFile={archive} -Xlog:class+load=info:file={loads}"
    run = _python(["-c", SESSION, options, str(tmp_path / "spark.log")], **{cds.ENV: "off"})
    assert run.returncode == 0, run.stderr[-3000:]
    shared = loads.read_text().count("source: shared objects file (top)")
    assert shared > 5000, f"{shared} classes from the archive"


def test_the_session_option_only_with_an_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(cds.ENV, raising=False)
    exits = []
    monkeypatch.setattr(cds.atexit, "register", lambda f, *a: exits.append((f, a)))
    path = cds.archive_path()
    assert path.startswith(str(tmp_path / "dbt-spark-streaming"))
    assert cds.java_options({}) == {}  # none yet: made as this process exits
    assert exits == [(cds._make_in_background, (path,))]
    os.makedirs(os.path.dirname(path))
    open(path, "wb").close()
    assert cds.java_options({}) == {cds.OPTION: f"-XX:SharedArchiveFile={path} {cds.QUIET}"}
    assert cds.java_options({cds.OPTION: "-Xshare:off"}) == {}  # the profile's own
    monkeypatch.setenv(cds.ENV, "off")
    assert cds.java_options({}) == {}
    assert len(exits) == 1


def test_one_maker_at_a_time(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(cds.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    path = str(tmp_path / "cache" / "spark.jsa")
    cds._make_in_background(path)
    cds._make_in_background(path)  # the first one's lock is there
    assert [c[-1] for c in started] == [path]
    os.utime(path + ".lock", (0, 0))  # a maker that ended without removing it
    cds._make_in_background(path)
    assert len(started) == 2
    os.remove(path + ".lock")
    open(path, "wb").close()  # made since the session started: not made again
    cds._make_in_background(path)
    assert len(started) == 2


def test_no_cache_to_write_to_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cds.subprocess, "Popen", lambda cmd, **kw: pytest.fail("started"))
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    cds._make_in_background(str(tmp_path / "cache" / "spark.jsa"))
