"""What a streaming query's failure means, and the way out: Spark's error, read and turned
into a coded error whose advice works when followed.

- SSR324: the state in the checkpoint cannot be read (a state file truncated or corrupted):
  a run again fails the same way, so the way out is `--full-refresh`.
- SSR326: a disk is full: free space, and `dbt run` resumes from the last committed batch.
- SSR306 otherwise: fix the cause and `dbt run` again (it resumes from the last committed
  batch).

The message quotes Spark's error by its first line that says something (an error class or an
exception) other than that a query or foreachBatch failed (the cause, where Spark's error
wraps one), never a line of Python traceback such as ``raise Py4JJavaError(``.
"""

from __future__ import annotations

import re

from ..errors import StreamingError

# Spark's words for state it cannot load (error classes and HDFSBackedStateStoreProvider /
# RocksDB messages); lower case
_STATE_MARKERS = (
    "cannot_load_state_store",
    "state_store_corrupt",
    "cannot_read_streaming_state_file",
    "cannot_read_delta_file",
    "cannot_read_snapshot_file",
    "error reading delta file",
    "error reading snapshot file",
    "stream is corrupted",
    "unexpected_file_size",
    "operator state of another layout",  # runtime/over.py, runtime/temporaljoin.py
)
_DISK_FULL = ("no space left on device", "disk quota exceeded", "enospc")
# a line of Python traceback or source, not a message
_CODE_LINE = re.compile(r"^\s*(raise |File \"|Traceback|return |\^|~|at |\.\.\. \d+ more)")
# errors that say only that another one happened (a query ended, foreachBatch raised, py4j)
_WRAPPERS = ("[STREAM_FAILED]", "[FOREACH_BATCH_USER_FUNCTION_ERROR]", "Py4JJavaError")
_MESSAGE = re.compile(
    r"(\[dbt-spark-streaming |\[[A-Z][A-Z0-9_.]+\]|[A-Za-z0-9_.$]*(Exception|Error)\b:?)"
)


def first_error_line(text: str) -> str:
    """The line of `text` (a Spark or Python error) that says what failed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "[dbt-spark-streaming " in line:
            return line[line.index("[dbt-spark-streaming ") :]
    candidates = [line for line in lines if not _CODE_LINE.match(line)]
    messages = [line for line in candidates if _MESSAGE.search(line)]
    for line in messages:  # the cause, not the error that wraps it
        if not any(wrapper in line for wrapper in _WRAPPERS):
            return line
    if messages:
        return messages[0]
    return candidates[0] if candidates else (lines[0] if lines else "unknown error")


def _state_line(text: str) -> str | None:
    for line in text.splitlines():
        if any(marker in line.lower() for marker in _STATE_MARKERS):
            return line.strip()
    return None


def query_failed(identifier: str, name: str, checkpoint: str, text: str) -> StreamingError:
    """The coded error of model `name`'s query failing with Spark's error `text`."""
    lower = text.lower()
    if any(marker in lower for marker in _DISK_FULL):
        return StreamingError(
            "SSR326",
            f"a disk is full while {name} writes its table or checkpoint",
            first_error_line(
                next((line for line in text.splitlines() if "space" in line.lower()), text)
            ),
            "Free space on the file system of the table and its checkpoint (or grow it) and run "
            "`dbt run` again: it resumes from the last committed batch, nothing committed is "
            "lost or duplicated.",
        )
    state = _state_line(text)
    if state is not None:
        return StreamingError(
            "SSR324",
            f"the state in the checkpoint of {name} is damaged beyond use ({checkpoint})",
            first_error_line(state) + "; every run would fail the same way",
            f"Run `dbt run --full-refresh -s {identifier}`: it rebuilds the table and a new "
            "checkpoint from the sources as they are now.",
        )
    return StreamingError(
        "SSR306",
        f"the streaming query of {name} failed",
        first_error_line(text),
        "Fix the cause and run `dbt run` again: it resumes from the last committed "
        "batch, nothing is lost or duplicated.",
    )
