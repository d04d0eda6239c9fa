"""Where Delta tables and the adapter's own files live: a local (or shared) directory, or object
storage (``s3://bucket/prefix``).

Everything that reads or writes under the warehouse goes through these functions (and
deltalake), never through ``open()`` / ``os.path`` on a URI: a path the adapter cannot serve is
refused (SSC204) instead of being written to a local directory named ``s3:``.

Object storage is reached with deltalake (object_store) and pyarrow's S3 filesystem, which both
take their endpoint, region and credentials from the standard AWS environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``) or the AWS credential chain, on every node. The
profile's ``storage_options`` are set into that environment for the driver and, through
``spark.executorEnv.*``, for the executors (runtime/session.py).

This module is imported by Spark's Python workers (delta/source.py): no dbt, no Spark.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from functools import lru_cache

from pyarrow import fs

REMOTE_SCHEMES = ("s3",)  # tested here (moto); deltalake and pyarrow both serve them


def scheme(uri: str) -> str:
    """'s3' for s3://..., '' for a local path (file:// included)."""
    head, sep, _ = uri.partition("://")
    return "" if not sep or head == "file" else head.lower()


def is_remote(uri: str) -> bool:
    return scheme(uri) != ""


def check_uri(uri: str) -> str | None:
    """Why `uri` cannot hold a warehouse (None if it can)."""
    s = scheme(uri)
    if s and s not in REMOTE_SCHEMES:
        return f"the scheme {s}:// is not supported (supported: a local path, file://, s3://)"
    if s and not uri.partition("://")[2].strip("/"):
        return "the URI names no bucket"
    return None


def normalize(uri: str) -> str:
    """A local path made absolute (file:// stripped); a URI without its trailing slash."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if is_remote(uri):
        return uri.rstrip("/")
    return os.path.abspath(os.path.expanduser(uri))


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_remote(base) else os.path.join(base, *parts)


@lru_cache(maxsize=None)
def _remote(uri_root: str) -> fs.FileSystem:
    filesystem, _ = fs.FileSystem.from_uri(uri_root)
    return filesystem


def filesystem(uri: str) -> tuple[fs.FileSystem, str]:
    """(pyarrow filesystem, path within it) of `uri`."""
    if not is_remote(uri):
        return fs.LocalFileSystem(), normalize(uri)
    s, _, rest = uri.partition("://")
    bucket = rest.split("/", 1)[0]
    return _remote(f"{s}://{bucket}"), rest.rstrip("/")


def is_dir(uri: str) -> bool:
    if not is_remote(uri):
        return os.path.isdir(uri)
    f, path = filesystem(uri)
    return f.get_file_info(path).type == fs.FileType.Directory


def exists(uri: str) -> bool:
    if not is_remote(uri):
        return os.path.exists(uri)
    f, path = filesystem(uri)
    return f.get_file_info(path).type != fs.FileType.NotFound


def is_delta(uri: str) -> bool:
    """Whether a Delta table is at `uri` (it has a `_delta_log`)."""
    return is_dir(join(uri, "_delta_log"))


def list_dirs(uri: str) -> list[str]:
    """Names of the directories directly under `uri`, sorted ([] if there is none)."""
    if not is_remote(uri):
        if not os.path.isdir(uri):
            return []
        return sorted(n for n in os.listdir(uri) if os.path.isdir(os.path.join(uri, n)))
    f, path = filesystem(uri)
    infos = f.get_file_info(fs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == fs.FileType.Directory)


def list_files(uri: str) -> list[str]:
    """Names of the files directly under `uri`, sorted ([] if there is none)."""
    if not is_remote(uri):
        if not os.path.isdir(uri):
            return []
        with os.scandir(uri) as found:
            return sorted(e.name for e in found if e.is_file())
    f, path = filesystem(uri)
    infos = f.get_file_info(fs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == fs.FileType.File)


def read_text(uri: str) -> str:
    """The file's text (FileNotFoundError if there is none)."""
    if not is_remote(uri):
        with open(uri) as fh:
            return fh.read()
    f, path = filesystem(uri)
    if f.get_file_info(path).type != fs.FileType.File:
        raise FileNotFoundError(uri)
    with f.open_input_stream(path) as stream:
        return stream.read().decode("utf-8")


def write_text(uri: str, text: str) -> None:
    """Write the file atomically: a reader sees the old text or the new one (a local file is
    written aside and renamed; an object store's PUT is atomic)."""
    if not is_remote(uri):
        os.makedirs(os.path.dirname(uri), exist_ok=True)
        tmp = f"{uri}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, uri)
        return
    f, path = filesystem(uri)
    with f.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))


def remove(uri: str) -> None:
    """Delete a file (no error if it is gone)."""
    f, path = filesystem(uri)
    try:
        f.delete_file(path)
    except FileNotFoundError:
        pass


def remove_tree(uri: str) -> None:
    """Delete a directory and everything under it (no error if it is gone)."""
    f, path = filesystem(uri)
    if f.get_file_info(path).type == fs.FileType.Directory:
        f.delete_dir(path)


def copy_file(source: str, target: str) -> None:
    """Copy a file within one filesystem, replacing what is at `target`: a hard link where a
    local filesystem allows one (the files copied are never modified), else a copy; on object
    storage a server-side copy."""
    if not is_remote(source) and not is_remote(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.exists(target):
            os.remove(target)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
        return
    f, src = filesystem(source)
    _, dst = filesystem(target)
    f.copy_file(src, dst)


def move_tree(source: str, target: str) -> None:
    """Move a directory to `target`, replacing what is there: a rename on a local filesystem;
    on object storage a copy of every object, then the source deleted (not atomic)."""
    remove_tree(target)
    if not is_remote(source) and not is_remote(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(source, target)
        return
    src_fs, src_path = filesystem(source)
    dst_fs, dst_path = filesystem(target)
    fs.copy_files(src_path, dst_path, source_filesystem=src_fs, destination_filesystem=dst_fs)
    remove_tree(source)
