"""The process that makes the driver JVM's class archive (runtime/cds.py starts it:
`python -m dbt.adapters.spark_streaming.runtime.cds_maker <archive path>`): a session whose JVM
archives the classes it loads as it exits, a small streaming query over the Delta source so
that those are the classes a model's run loads, then the archive put in place once the JVM has
exited cleanly, or a `.failed` file saying why."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from .cds import OPTION, QUIET


def make(path: str) -> None:
    """Run a small streaming query in a session whose JVM archives its classes at exit, then
    put the archive at `path` once the JVM has exited."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from ..delta.source import FORMAT
    from .session import get_spark

    part = f"{path}.{os.getpid()}.part"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    work = tempfile.mkdtemp(prefix="dbt-spark-streaming-cds-")
    try:
        spark = get_spark(
            "local[*]",
            {OPTION: f"-XX:ArchiveClassesAtExit={part} {QUIET}"},
            os.path.join(work, "log"),
        )
        table = os.path.join(work, "t")
        ts = pa.array(
            [1_700_000_000_000_000 + i * 7_000_000 for i in range(200)], pa.timestamp("us", "UTC")
        )
        write_deltalake(
            table,
            pa.table(
                {"ts": ts, "k": [i % 7 for i in range(200)], "v": [i * 0.5 for i in range(200)]}
            ),
        )
        spark.read.format(FORMAT).load(table).groupBy("k").sum("v").collect()
        from pyspark.sql import functions as F

        query = (
            spark.readStream.format(FORMAT)
            .load(table)
            .withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "1 minute"), "k")
            .agg(F.sum("v"), F.count("*"))
            .writeStream.outputMode("append")
            .foreachBatch(lambda df, _: df.toArrow())
            .trigger(availableNow=True)
            .option("checkpointLocation", os.path.join(work, "checkpoint"))
            .start()
        )
        query.awaitTermination()
        proc = spark.sparkContext._gateway.proc
        spark.stop()
        proc.stdin.close()  # the JVM exits at the end of its input, writing the archive
        if proc.wait(timeout=600) != 0 or not os.path.exists(part):
            raise RuntimeError(
                f"the JVM exited with {proc.returncode}, archive written: {os.path.exists(part)}"
            )
        os.replace(part, path)
        if os.path.exists(path + ".failed"):
            os.remove(path + ".failed")
    except BaseException as exc:
        with open(path + ".failed", "w", encoding="utf-8") as fh:
            fh.write(f"{type(exc).__name__}: {exc}\n")
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for leftover in (part, path + ".lock"):
            if os.path.exists(leftover):
                os.remove(leftover)


if __name__ == "__main__":
    make(sys.argv[1])
