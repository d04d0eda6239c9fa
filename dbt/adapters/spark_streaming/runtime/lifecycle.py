"""Running a streaming model safely: one run at a time, and crash-safe full refreshes.

Both keep their files under ``<warehouse>/.dbt_streaming/`` (hidden from the catalog; layout.py
names the paths; locks under the profile's ``checkpoint_root`` when it has one):

- ``locks/<schema>.<identifier>.lock``: held by the process running the model, with its pid
  and host. A second run fails at once (SSR307); a lock whose process is gone (same host) is
  stale and broken.
- ``refresh/<schema>.<identifier>``: where ``--full-refresh`` builds the new table and its
  checkpoint while the old table stays readable. When the build is complete (marker file),
  the old table is moved to ``trash/`` and the new one into place, two renames. A crash
  before the marker leaves the old table; a crash between the renames is finished by the
  next run of the model (``recover``), which moves the complete build into place.

With a ``checkpoint_root`` (object storage) a full refresh rebuilds in place instead (``clear``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

from .. import layout
from ..delta import storage
from ..errors import StreamingError
from ..faults import fault_point

COMPLETE = "_dbt_refresh_complete"


def _made(path: str) -> str:
    """`path`, once its parent directory exists."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def alive(pid: int) -> bool:
    """Whether process `pid` (of this host) runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def model_lock(warehouse: str, name: str) -> Iterator[None]:
    """Hold the run lock of model `name` (schema.identifier) for the duration of the block."""
    path = _made(layout.lock_path(warehouse, name))
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(path) as fh:
                    owner = json.load(fh)
            except (OSError, ValueError):
                owner = {}
            if (
                owner.get("host") == me["host"]
                and isinstance(owner.get("pid"), int)
                and not alive(owner["pid"])
            ):
                os.remove(path)  # stale: its process is gone
                continue
            raise StreamingError(
                "SSR307",
                f"{name} is already being run",
                f"process {owner.get('pid', '?')} on host {owner.get('host', '?')} holds its lock "
                f"since {owner.get('since', '?')} ({path})",
                "Wait for that run to finish. If that process is gone (another host, say), delete "
                "the lock file.",
            ) from None
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        break
    try:
        yield
    finally:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def empty_build(warehouse: str, name: str) -> str:
    """Where to build model `name`'s new table, emptied (a crashed build is discarded)."""
    path = _made(layout.refresh_path(warehouse, name))
    shutil.rmtree(path, ignore_errors=True)
    return path


def swap_in(warehouse: str, name: str, built: str, target: str) -> None:
    """Replace the table at `target` by the complete build at `built` (see module docstring)."""
    open(os.path.join(built, COMPLETE), "w").close()
    fault_point("refresh_built", -1)
    trash = _made(layout.trash_path(warehouse, name, uuid.uuid4().hex[:8]))
    if os.path.exists(target):
        os.rename(target, trash)
    fault_point("refresh_swapping", -1)
    os.rename(built, target)
    os.remove(os.path.join(target, COMPLETE))
    shutil.rmtree(trash, ignore_errors=True)


def clear(table: str, checkpoint: str) -> None:
    """Delete a table and its checkpoint, for a full refresh that rebuilds it in place (when the
    checkpoint is not beside the table: a `checkpoint_root`, as object storage needs). Readers
    see the table empty, then growing, until the rebuild is done; a crash meanwhile leaves a
    consistent prefix of it, which the next run goes on from."""
    # the checkpoint first: a table without one is refused (SSR305), a checkpoint without its
    # table would resume into an empty one
    shutil.rmtree(checkpoint, ignore_errors=True)
    storage.remove_tree(table)


def recover(warehouse: str, name: str, target: str) -> bool:
    """Finish a full refresh that crashed between its two renames; True if one was."""
    built = layout.refresh_path(warehouse, name)
    if os.path.exists(target) or not os.path.exists(os.path.join(built, COMPLETE)):
        return False
    os.rename(built, target)
    os.remove(os.path.join(target, COMPLETE))
    return True
