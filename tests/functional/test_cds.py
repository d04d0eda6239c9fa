"""runtime/cds.py: the driver JVM's class archive is made once by a process of its own, then
mapped by the next sessions; a missing archive costs nothing but its making in the background
as the process exits, once at a time, and a maker that fails is not tried again at every exit.

The tests' JVMs run without an archive (tests/conftest.py); these make one in a cache of their
own."""

import os
import subprocess
import sys

from dbt.adapters.spark_streaming.runtime import cds

SESSION = """
import sys
from dbt.adapters.spark_streaming.runtime.session import get_spark
spark = get_spark("local[1]", {}, sys.argv[1])
assert spark.range(5).count() == 5
"""
MAKER = ["-m", cds.MAKER]


def _python(args: list[str], cache, **env: str) -> subprocess.CompletedProcess:
    """`python args` with the cache `cache`, this package's archive switched on unless `env`
    says otherwise, and no JVM options but `env`'s."""
    drop = ("PYSPARK_", "JAVA_TOOL_OPTIONS", cds.ENV)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return subprocess.run(
        [sys.executable, *args],
        env={**environment, "XDG_CACHE_HOME": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _archive(cache) -> str:
    run = _python(
        ["-c", "from dbt.adapters.spark_streaming.runtime import cds\nprint(cds.archive_path())"],
        cache,
    )
    return run.stdout.strip()


def test_the_archive_is_made_then_mapped_by_a_session(tmp_path):
    cache = tmp_path / "cache"
    archive = _archive(cache)
    assert archive.startswith(str(cache / "dbt-spark-streaming" / "spark-"))
    made = _python([*MAKER, archive], cache, **{cds.ENV: "off"})
    assert made.returncode == 0, made.stderr[-3000:]
    assert sorted(os.listdir(os.path.dirname(archive))) == [os.path.basename(archive)]
    assert os.path.getsize(archive) > 10_000_000
    # a session of the adapter's: -Xshare:on, the JVM does not start unless it maps the
    # archive; every class it loads from the archive's top layer is logged as such
    loads = tmp_path / "classes.txt"
    options = f"-Xshare:on -Xlog:class+load=info:file={loads}"
    run = _python(["-c", SESSION, str(tmp_path / "spark.log")], cache, JAVA_TOOL_OPTIONS=options)
    assert run.returncode == 0, run.stderr[-3000:]
    shared = loads.read_text().count("source: shared objects file (top)")
    assert shared > 5000, f"{shared} classes from the archive"


def test_a_failed_maker_says_why_and_is_not_tried_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    archive = str(cache / "spark.jsa")
    os.makedirs(cache)
    # without the JDK's base archive the JVM writes no dynamic one
    made = _python([*MAKER, archive], cache, **{cds.ENV: "off", "JAVA_TOOL_OPTIONS": "-Xshare:off"})
    assert made.returncode != 0
    assert sorted(os.listdir(cache)) == ["spark.jsa.failed"]  # no archive, part or lock
    assert (cache / "spark.jsa.failed").read_text().startswith("RuntimeError: ")
    started = []
    monkeypatch.setattr(cds.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    cds._make_in_background(archive)
    assert started == []
    os.utime(archive + ".failed", (0, 0))  # a day later: tried again
    cds._make_in_background(archive)
    assert [c[-1] for c in started] == [archive]


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
    assert cds.java_options({}) == {cds.OPTION: f'"-XX:SharedArchiveFile={path}" {cds.QUIET}'}
    assert cds.java_options({cds.OPTION: "-Xshare:off"}) == {}  # the profile's own
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    for line in (f"{cds.OPTION}  -Xshare:off", f"  {cds.OPTION}=-Dx=1", f"{cds.OPTION}:-Dx"):
        (conf / "spark-defaults.conf").write_bytes(b"# caf\xe9\n" + line.encode() + b"\n")
        assert cds.java_options({}) == {}, line  # spark-defaults.conf's own
    (conf / "spark-defaults.conf").write_text(f"{cds.OPTION}Other -Dx\n")
    assert cds.java_options({}) != {}
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv(cds.ENV, "off")
    assert cds.java_options({}) == {}
    assert len(exits) == 1


def test_the_archive_is_named_by_what_the_jvm_checks(tmp_path, monkeypatch):
    """Another size or time of a jar of Spark's class path, another archive."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "a.jar").write_bytes(b"x")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    first = cds.archive_path()
    assert cds.archive_path() == first
    os.utime(jars / "a.jar", (1, 1))
    assert cds.archive_path() != first


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
    assert len(started) == 2 and not os.path.exists(path + ".lock")


def test_a_maker_that_cannot_start_leaves_no_lock(tmp_path, monkeypatch):
    def refuse(cmd, **kw):
        raise OSError("no process")

    monkeypatch.setattr(cds.subprocess, "Popen", refuse)
    path = str(tmp_path / "spark.jsa")
    cds._make_in_background(path)
    assert sorted(os.listdir(tmp_path)) == ["spark.jsa.log"]


def test_no_cache_to_write_to_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cds.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    started: list = []
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    cds._make_in_background(str(tmp_path / "cache" / "spark.jsa"))
    assert started == []
