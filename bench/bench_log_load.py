"""Benchmark: what loading a Delta table with delta-rs costs, by what its log holds (issue 36).

A table's load (`DeltaTable(path).file_uris()`) reads `_last_checkpoint`, lists the log from the
checkpoint on, reads the checkpoint and replays the commits after it. This measures the three
things that can grow, one at a time, on a table of one live file, medians of `--repeat` loads:

- **expired log files**: N commit files older than the checkpoint (what a log keeps for
  `delta.logRetentionDuration`; copies of a real commit, named as the versions they stand for),
  on the local disk and on S3 (a moto server on 127.0.0.1);
- **the tail**: T commits after the checkpoint (at most `delta.checkpointInterval`);
- **removes in the checkpoint**: R files removed (kept as tombstones for
  `delta.deletedFileRetentionDuration`).

Run (from the repo root, with the project venv; moto is a test dependency):
  .venv/bin/python bench/bench_log_load.py [--expired 0 10000 40000] [--tail 0 10 50 100] \
      [--removes 0 4000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

ROW = pa.table({"a": [1]})


def load_ms(path: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        DeltaTable(path).file_uris()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def checkpointed(path: str, removes: int = 0, tail: int = 0) -> None:
    """A table of one live file at `path` (local), its last commit checkpointed after
    `removes` files were removed, then `tail` empty-handed commits (appends of one row, undone
    by nothing: the live files grow by `tail`, as a tail's appends would)."""
    write_deltalake(path, ROW, configuration={"delta.checkpointInterval": "1000000"})
    for _ in range(removes):
        write_deltalake(path, ROW, mode="append")
    if removes:
        write_deltalake(path, ROW, mode="overwrite")
    DeltaTable(path).create_checkpoint()
    for _ in range(tail):
        write_deltalake(path, ROW, mode="append")


def shift(path: str, n: int) -> None:
    """Move the table's one version (0, checkpointed) to version `n` and name `n` copies of its
    commit as versions 0..n-1: a log that keeps `n` versions before its checkpoint, as one does
    for `delta.logRetentionDuration` (only listed, never read)."""
    log = os.path.join(path, "_delta_log")
    for suffix in ("json", "checkpoint.parquet"):
        os.rename(os.path.join(log, f"{0:020d}.{suffix}"), os.path.join(log, f"{n:020d}.{suffix}"))
    with open(os.path.join(log, "_last_checkpoint")) as fh:
        hint = json.load(fh)
    with open(os.path.join(log, "_last_checkpoint"), "w") as fh:
        json.dump({**hint, "version": n}, fh)
    for v in range(n):
        shutil.copyfile(os.path.join(log, f"{n:020d}.json"), os.path.join(log, f"{v:020d}.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--expired", type=int, nargs="+", default=[0, 10000, 40000])
    ap.add_argument("--tail", type=int, nargs="+", default=[0, 10, 50, 100])
    ap.add_argument("--removes", type=int, nargs="+", default=[0, 4000])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_log_load_")
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: str) -> None:
    print("| what | count | local ms | S3 (moto) ms |")
    print("| --- | ---: | ---: | ---: |")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.scaleout.moto_s3 import MotoS3

    with MotoS3(work) as s3:
        os.environ.update(s3.env)
        s3.bucket("warehouse")
        import boto3

        client = boto3.client("s3", endpoint_url=s3.endpoint)
        for n in args.expired:
            local = os.path.join(work, f"expired{n}")
            checkpointed(local)
            shift(local, n)
            assert DeltaTable(local).version() == n
            remote = f"s3://warehouse/expired{n}"
            for root, _, names in os.walk(local):
                for name in names:
                    key = os.path.relpath(os.path.join(root, name), work)
                    with open(os.path.join(root, name), "rb") as fh:
                        client.put_object(Bucket="warehouse", Key=key, Body=fh.read())
            print(
                f"| expired log files | {n:,} | {load_ms(local, args.repeat):.1f} | "
                f"{load_ms(remote, args.repeat):.1f} |",
                flush=True,
            )
        for t in args.tail:
            local = os.path.join(work, f"tail{t}")
            checkpointed(local, tail=t)
            print(f"| commits after the checkpoint | {t} | {load_ms(local, args.repeat):.1f} | |")
        for r in args.removes:
            local = os.path.join(work, f"removes{r}")
            checkpointed(local, removes=r)
            print(f"| removes in the checkpoint | {r:,} | {load_ms(local, args.repeat):.1f} | |")


if __name__ == "__main__":
    main()
