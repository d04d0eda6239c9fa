"""Running a streaming model safely: one run at a time, and crash-safe full refreshes.

Both keep their files under ``<warehouse>/.dbt_streaming/`` (hidden from the catalog; layout.py
names the paths; locks under the profile's ``checkpoint_root`` when it has one):

- ``locks/<schema>.<identifier>.lock``: held by the process running the model, with its pid
  and host. A second run fails at once (SSR307); a lock whose process is gone (same host) is
  stale and broken.
- ``refresh/<schema>.<identifier>``: where ``--full-refresh`` builds the new table and its
  checkpoint while the old table stays readable. When the build is complete (marker file),
  the two directories are exchanged in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so a
  reader sees the old table or the new one, never none; the old one, now in the build's place,
  is deleted. A crash before the marker leaves the old table; a crash after the exchange is
  finished by the next run of the model (``recover``: the marker is in the table). Where the
  exchange is not available (another OS or filesystem), the old table is moved to ``trash/``
  and the new one into place, two renames, and a crash between them is finished the same way.

With a ``checkpoint_root`` (as object storage needs), the checkpoint is not beside the table,
and object storage cannot rename a directory. A full refresh is built aside all the same
(``refresh/<schema>.<identifier>`` under the warehouse, its checkpoint under the control
root), then swapped in by Delta commits (``swap_by_commit``, delta/swap.py: an upsert_table's
changelog and partials, then the table): readers see the old rows until the table's commit,
then the new ones. A token file under the control root marks the build complete; a crash
after it is finished by the next run of the model (``recover_by_commit``): each commit is made
unless its table has it, then the checkpoint is moved in.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from typing import Iterator, Optional

from .. import layout
from ..delta import storage, swap
from ..errors import StreamingError
from ..faults import fault_point
from ..layout import Refresh
from .checkpoint import query_app_id

COMPLETE = "_dbt_refresh_complete"
AT_FDCWD, RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


def _made(path: str) -> str:
    """`path`, once its parent directory exists."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def alive(pid: int) -> bool:
    """Whether process `pid` (of this host) runs: exists and is not a zombie (a killed runner,
    detached from dbt, stays one where the container's init does not reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def started_at(pid: int) -> Optional[int]:
    """When process `pid` started (clock ticks since boot, Linux), or None if unknown: with the
    pid it names one process, as a pid alone does not once the system has reused it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _holder(owner: dict) -> bool:
    """Whether the process named by a lock's `owner` runs (on another host: assumed so)."""
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname():
        return bool(owner)  # an empty or unreadable lock names no one: stale
    if not isinstance(pid, int):
        return False
    if not alive(pid):
        return False
    start = owner.get("start")
    return start is None or started_at(pid) in (None, start)


def _read(path: str) -> dict:
    try:
        with open(path) as fh:
            owner = json.load(fh)
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


@contextmanager
def model_lock(warehouse: str, name: str, take_over_from: Optional[int] = None) -> Iterator[None]:
    """Hold the run lock of model `name` (schema.identifier) for the duration of the block.
    `take_over_from`: the pid of a process of this host whose lock this one takes over while
    that process still runs (a `dbt run` that starts a continuous model's runner)."""
    path = _made(layout.lock_path(warehouse, name))
    me = {
        "pid": os.getpid(),
        "start": started_at(os.getpid()),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    # the lock file appears with its content (a hard link of a complete file), so no process
    # ever reads a lock without its holder; taking it, or breaking a stale one, is serialised by
    # an flock of `<lock>.guard` (released by the kernel when its process dies)
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    with open(tmp, "w") as fh:
        json.dump(me, fh)
    try:
        with open(f"{path}.guard", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            owner = _read(path) if os.path.exists(path) else None
            if owner is None:
                os.link(tmp, path)
            elif take_over_from is not None and (owner.get("pid"), owner.get("host")) == (
                take_over_from,
                me["host"],
            ):
                os.replace(tmp, path)
            elif _holder(owner):
                raise StreamingError(
                    "SSR307",
                    f"{name} is already being run",
                    f"process {owner.get('pid', '?')} on host {owner.get('host', '?')} holds "
                    f"its lock since {owner.get('since', '?')} ({path})",
                    "Wait for that run to finish (a continuous model's runner: `dbt "
                    "run-operation stream_stop`). If that process is gone (another host, say), "
                    "delete the lock file.",
                ) from None
            else:
                os.replace(tmp, path)  # stale: its process is gone
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    try:
        yield
    finally:
        with open(f"{path}.guard", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            if _read(path).get("pid") == me["pid"]:  # not taken over by a runner meanwhile
                os.remove(path)


def empty_build(refresh: Refresh) -> str:
    """Where to build the model's new table, emptied (a crashed build is discarded)."""
    path = _made(refresh.build)
    shutil.rmtree(path, ignore_errors=True)
    return path


def _exchange(a: str, b: str) -> bool:
    """Exchange directories `a` and `b` atomically (Linux renameat2 with RENAME_EXCHANGE);
    False where the C library or the filesystem cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), a)


def swap_in(refresh: Refresh, target: str) -> None:
    """Replace the table at `target` by the complete build (see module docstring)."""
    built = refresh.build
    open(os.path.join(built, COMPLETE), "w").close()
    fault_point("refresh_built", -1)
    if os.path.exists(target) and _exchange(built, target):  # one step: old or new, never none
        fault_point("refresh_swapping", -1)
        _finish(built, target)
        return
    trash = _made(f"{refresh.trash}-{uuid.uuid4().hex[:8]}")
    if os.path.exists(target):
        os.rename(target, trash)
    fault_point("refresh_swapping", -1)
    os.rename(built, target)
    os.remove(os.path.join(target, COMPLETE))
    shutil.rmtree(trash, ignore_errors=True)


def empty_build_aside(refresh: Refresh) -> tuple[str, str]:
    """With a checkpoint_root: where to build the model's new table (under the warehouse) and
    its checkpoint (under the control root), both emptied (a crashed build is discarded)."""
    storage.remove_tree(refresh.build)
    shutil.rmtree(refresh.checkpoint, ignore_errors=True)
    return refresh.build, refresh.checkpoint


def swap_by_commit(refresh: Refresh, target: str, checkpoint: str, keys: list[str]) -> None:
    """Replace the table at `target` (`keys`: an upsert_table's unique key) and its checkpoint
    at `checkpoint` by the complete build of `empty_build_aside` (see module docstring)."""
    marker = {"token": uuid.uuid4().hex, "keys": keys}
    storage.write_text(_made(refresh.marker), json.dumps(marker))
    fault_point("refresh_built", -1)
    _commit_swap(refresh, target, checkpoint, marker)


def _commit_swap(refresh: Refresh, target: str, checkpoint: str, marker: dict) -> None:
    built, built_checkpoint = refresh.build, refresh.checkpoint
    if os.path.isdir(built_checkpoint):  # else it was moved in, after the table's commit
        app_id = query_app_id(built_checkpoint)
        swap.replace_with(target, built, marker["token"], app_id, marker["keys"])
        fault_point("refresh_swapping", -1)
        shutil.rmtree(checkpoint, ignore_errors=True)
        os.rename(built_checkpoint, _made(checkpoint))
    os.remove(refresh.marker)
    storage.remove_tree(built)


def recover_by_commit(refresh: Refresh, target: str, checkpoint: str) -> bool:
    """Finish a full refresh of `swap_by_commit` that crashed once its build was complete;
    True if one was."""
    if not os.path.exists(refresh.marker):
        return False
    _commit_swap(refresh, target, checkpoint, _read(refresh.marker))
    return True


def _finish(old: str, target: str) -> None:
    """After the exchange: the new table is at `target`, the old one at `old`."""
    os.remove(os.path.join(target, COMPLETE))
    shutil.rmtree(old, ignore_errors=True)


def recover(refresh: Refresh, target: str) -> bool:
    """Finish a full refresh that crashed after its exchange, or between its two renames; True
    if one was."""
    built = refresh.build
    if os.path.exists(os.path.join(target, COMPLETE)):  # exchanged: the old table is at `built`
        _finish(built, target)
        return True
    if os.path.exists(target) or not os.path.exists(os.path.join(built, COMPLETE)):
        return False
    os.rename(built, target)
    os.remove(os.path.join(target, COMPLETE))
    return True
