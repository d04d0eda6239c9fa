"""A fork server for the Python processes Spark starts on the driver.

Spark asks a Python data source for its offsets through a process of its own per streaming query
(`PythonStreamingSourceRunner`: ``python -m pyspark.sql.streaming.python_streaming_source_runner``,
started directly, never forked from pyspark's daemon as its other Python processes are), and
it starts a daemon (``python -m pyspark.daemon <worker module>``) per kind of Python worker the
first time it needs one: to look the data sources up, to create one (its schema), to plan a read,
and the tasks' workers (in local mode the driver's too). Each process imports pyspark, and the
daemons' first workers their worker module, before any work: ~0.15-0.3 s each, on the way of a
`dbt run`'s first query, up to five times.

The driver starts this server with its session (runtime/session.py's ``start_forkserver``); the
server imports those modules once and waits on a Unix socket whose path is in
``DBT_SPARK_STREAMING_FORKSERVER``. The process Spark starts hands its standard streams,
command, environment and working directory over from its ``sitecustomize`` (before any import
of its own), the server forks a child that runs the module's ``__main__`` with them (a daemon
then forks its workers from there, the modules they import already loaded), and the process
Spark started waits for that child and exits with its status (a SIGTERM to it, Spark's way to
stop the runner or a daemon, is passed on). When anything differs (no server, another
interpreter or hash seed, a ``sys.path`` that would import another pyspark, numpy or pyarrow
than the server's, a refused or broken connection) the process goes on as before and imports
the module itself.
"""

from __future__ import annotations

import io
import marshal
import os
import signal
import socket
import struct
import sys
from collections.abc import Sequence

ENV = "DBT_SPARK_STREAMING_FORKSERVER"
MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
DAEMON = "pyspark.daemon"
# the worker modules of the daemons Spark 4 starts (the server imports them)
WORKERS = (
    "pyspark.worker",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
)
_LENGTH = struct.Struct("!I")


def command() -> list[str] | None:
    """The module and arguments this process was started to run, if the server runs it: the
    offsets runner, or a daemon of pyspark's workers."""
    args = sys.orig_argv[1:]
    if args == ["-m", MODULE] or (
        len(args) == 3 and args[:2] == ["-m", DAEMON] and args[2].startswith("pyspark.")
    ):
        return args[1:]
    return None


def wanted() -> bool:
    """Whether this process is one the server runs and a server is there to take it."""
    return os.environ.get(ENV, "off") != "off" and command() is not None


def _interpreter() -> tuple:
    """What a process's interpreter fixes at its start (its string hashes' seed among them)."""
    return (sys.executable, sys.version, tuple(sys.flags), os.environ.get("PYTHONHASHSEED"))


def _preloaded() -> dict[str, str]:
    """The server's top-level modules from outside the standard library (pyspark, py4j, numpy,
    pyarrow, ...), with their files."""
    files = {}
    for name, module in sys.modules.items():
        spec = getattr(module, "__spec__", None)
        origin = spec.origin if spec is not None else None
        if origin and os.path.isabs(origin) and "." not in name:
            if name not in sys.stdlib_module_names:
                files[name] = origin
    return files


def _same_modules(files: dict[str, str], path: list[str]) -> bool:
    """Whether a process with `path` as its sys.path would import these files for these modules."""
    from importlib.machinery import PathFinder

    for name, origin in files.items():
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.origin != origin:
            return False
    return True


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed since (the JVM's, e.g. a test's temporary directory): not needed
        return None


def hand_over() -> None:
    """Called by sitecustomize in the process Spark started: have the server run the runner, wait
    for it and exit; return (and let the process import the runner) if the server does not."""
    # a process started with ^C ignored (pyspark starts the JVM so, and the JVM its children)
    # keeps it ignored in the child
    deaf = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    run = (command(), deaf)
    request = marshal.dumps((_interpreter(), list(sys.path), dict(os.environ), _cwd(), run))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(os.environ[ENV])
        socket.send_fds(sock, [_LENGTH.pack(len(request)) + request], [0, 1, 2])
        replies = sock.makefile("rb")
        reply = replies.readline()
    except OSError:
        return
    if not reply.strip().isdigit():
        sock.close()
        return
    child = int(reply)

    def stop(signum, _frame):
        try:
            os.kill(child, signum)
        finally:
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    if not deaf:
        signal.signal(signal.SIGINT, stop)
    status = replies.readline().strip()  # the child's exit status, or nothing if it was killed
    os._exit(int(status) if status.isdigit() else 1)


def _receive(conn: socket.socket) -> tuple[tuple, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    try:
        (size,) = _LENGTH.unpack_from(data)
        data = data[_LENGTH.size :]
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        if len(fds) != 3:
            raise EOFError
        return marshal.loads(data), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def module_path(cwd: str | None, path: list[str]) -> list[str]:
    """The sys.path of `python -m` run in `cwd`: the working directory first, unless it was
    removed (an empty entry would then fail every import that looks there)."""
    return path if cwd is None else [cwd, *path]


def _run_child(
    server, conn: socket.socket, fds: list[int], path: list, environ, cwd, run: tuple
) -> None:
    """In the forked child: leave the `server`'s sockets, become the process Spark started, run
    its module (`run`: the module and its arguments, and whether ^C was ignored there), and exit
    (never return)."""
    import runpy

    code = 1
    try:
        for closable in server:
            closable.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        (module, *args), deaf = run
        signal.signal(signal.SIGINT, signal.SIG_IGN if deaf else signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(environ)
        if cwd is not None:
            os.chdir(cwd)
        sys.path[:] = module_path(cwd, path)
        if environ.get("PYTHONUNBUFFERED"):  # as Spark starts its processes: nothing printed is
            for fd, name in ((1, "stdout"), (2, "stderr")):  # lost at a worker's os._exit
                stream = io.TextIOWrapper(
                    io.FileIO(fd, "w", closefd=False),
                    encoding=getattr(sys, name).encoding,
                    errors=getattr(sys, name).errors,
                    write_through=True,
                )
                setattr(sys, name, stream)
        sys.modules.pop(module, None)  # imported by the server; run afresh as __main__ (as `-m`)
        sys.argv[1:] = args
        conn.sendall(b"%d\n" % os.getpid())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        code &= 0xFF
        for flush in (sys.stdout.flush, sys.stderr.flush, lambda: conn.sendall(b"%d\n" % code)):
            try:
                flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str, preload: Sequence[str] = ()) -> None:
    """The server (started by the driver with this module on its PYTHONPATH, `python -c`): ends
    when its standard input closes, i.e. when the driver ends.

    Besides the modules it runs it imports `preload` (the modules the data source and the
    tasks load later, e.g. deltalake: their pages are then shared by every child instead of
    loaded and relocated in each), then freezes the garbage collector's view of what it has (a
    collection in a child would otherwise write to, and so copy, every page holding an object):
    ~9 MB less per child (bench/README "Continuous models sharing a runner")."""
    import gc
    import importlib
    import selectors

    for name in (MODULE, DAEMON, *WORKERS, *preload):
        try:
            importlib.import_module(name)
        except ImportError:  # the child imports it itself
            pass
    gc.freeze()
    interpreter = _interpreter()
    preloaded = _preloaded()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to dbt reaches the whole process group
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        for key, _ in events.select():
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 4096):
                    return
                continue
            conn, _ = listener.accept()
            conn.settimeout(10)  # a process that stops sending does not hold the others up
            with conn:
                try:
                    (theirs, their_path, environ, cwd, run), fds = _receive(conn)
                except (OSError, ValueError, EOFError, TypeError, struct.error):
                    continue
                try:
                    if theirs != interpreter or not _same_modules(preloaded, their_path):
                        conn.sendall(b"no\n")
                    elif os.fork() == 0:
                        child = (conn, fds, their_path, environ, cwd, run)
                        _run_child((events, listener), *child)
                except OSError:  # the process Spark started is gone, or no fork: it goes on alone
                    pass
                finally:
                    for fd in fds:
                        os.close(fd)
