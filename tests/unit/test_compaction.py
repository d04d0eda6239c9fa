"""Order-keeping compaction (delta/compaction.py) without Spark: the bins it plans, the names
its outputs sort by, and a compaction of a real Delta table whose snapshot a new stream reads in
the same order, row for row, before and after (the outputs written by the executors' task,
delta/writer.py Concatenator, run here in process)."""

import datetime as dt
import json
import os
import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dbt.adapters.spark_streaming.delta import compaction, origins, writer
from dbt.adapters.spark_streaming.delta.compaction import Compaction, bins, output_stem
from dbt.adapters.spark_streaming.delta.log import snapshot_files, version_files
from dbt.adapters.spark_streaming.delta.sink import append_files, create_table
from dbt.adapters.spark_streaming.delta.source import _moved, _read
from dbt.adapters.spark_streaming.delta.writer import FileWriter

SCHEMA = pa.schema([("id", pa.int64()), ("price", pa.float64()), ("item", pa.string())])


def action(path, size, mtime):
    return {"path": path, "size_bytes": size, "modification_time": mtime}


def test_bins_are_runs_of_neighbours_in_reading_order():
    actions = [
        action("e", 10, 3),
        action("a", 10, 1),
        action("c", 10, 2),
        action("b", 10, 2),
        action("big", 100, 2),  # as large as the target: it ends a run ("b" is before it)
        action("d", 60, 3),
        action("f", 50, 3),
        action("g", 10, 4),
    ]
    runs = [[a["path"] for a in r] for r in bins(actions, 100, tiered=False)]
    # reading order: a(1) b big c (2) d e f (3) g (4); runs total at most 100
    assert runs == [["a", "b"], ["c", "d", "e"], ["f", "g"]]
    assert bins([action("a", 10, 1)], 100, tiered=False) == []
    # tiered (the default): in the last run, the one new files join, a file larger than the
    # rest of it together stays, the run split there: "f" (50) of f g (c d e is closed: whole)
    assert [[a["path"] for a in r] for r in bins(actions, 100)] == [["a", "b"], ["c", "d", "e"]]
    bigger = [action("x", 30, 1), action("y", 20, 2), action("z", 20, 3)]
    assert [[a["path"] for a in r] for r in bins(bigger, 100)] == [["x", "y", "z"]]


def simulate(tiered: bool, target: int, appends: int = 3000, min_files: int = 50):
    """Appends of ~1,000-byte files, compacted (bins, then each run replaced by one file in
    its first input's place) whenever `min_files` new small files came: the most live files
    seen, and the bytes compactions wrote per byte appended."""
    rng = random.Random(3)
    live, written, appended, new, most = [], 0, 0, 0, 0
    for i in range(appends):
        size = rng.randrange(500, 1500)
        live.append(action(f"f{i:06d}", size, i))
        appended, new = appended + size, new + 1
        most = max(most, len(live))
        if new >= min_files:
            for run in bins(live, target, tiered):
                first = run[0]
                out = action(first["path"] + ".c", sum(a["size_bytes"] for a in run), i)
                out["modification_time"] = first["modification_time"]
                written += out["size_bytes"]
                live = [a for a in live if a not in run] + [out]
            new = 0
    return most, written / appended


def test_tiered_compaction_rewrites_each_byte_a_few_times():
    # 3,000 files of ~1 kB (60 compactions), outputs up to 10 MB: no output reaches the target
    most, amplification = simulate(tiered=True, target=10**7)
    # each rewrite at least doubles a byte's file: log2 of the files joined, 3.5 measured
    assert most <= 2 * 50 and amplification <= 5
    # untiered, the output at the table's end is rewritten with every compaction's new files
    most_untiered, amplification_untiered = simulate(tiered=False, target=10**7)
    assert most_untiered <= 51 and amplification_untiered > 25
    # 6,000 files, outputs up to 100 kB: runs closed by the target are joined whole, so no
    # small file is left behind between them (tiering every run left 172 live files, not 110)
    assert simulate(tiered=True, target=10**5, appends=6000)[0] <= 110
    assert simulate(tiered=False, target=10**5, appends=6000)[0] <= 110


def test_an_output_sorts_where_its_first_input_did():
    rng = random.Random(7)
    names = [
        f"part-{rng.randrange(100):05d}-{rng.randrange(10**6):06d}.snappy.parquet"
        for _ in range(200)
    ]
    names = sorted(set(names))
    for i in range(1, len(names) - 1):  # it replaces names[i]: between its neighbours
        out = output_stem(names[i], 12) + f"-{rng.randrange(16**8):08x}.snappy.parquet"
        assert names[i - 1] < out < names[i + 1]
        again = output_stem(out, 40) + "-0123abcd.snappy.parquet"  # an output compacted again
        assert again != out and names[i - 1] < again < names[i + 1]
        assert again.endswith(".c00000000000000000040-0123abcd.snappy.parquet")
        assert again.count(".c000") == 1


def in_process(spark, location, schema, named):
    """concatenate_files with the task run here, one call per output (as one task each)."""
    task = writer.Concatenator(
        writer.absolute(location), schema, tuple((n, tuple(i)) for n, i in named)
    )
    out = []
    for i in range(len(named)):
        ids = pa.RecordBatch.from_pydict({"id": pa.array([i], pa.int64())})
        out += [row for b in task(iter([ids])) for row in b.to_pylist()]
    return out


def snapshot_rows(path):
    """The table's rows in the order a new stream reads its snapshot."""
    rows = []
    for f in snapshot_files(path, None):
        rows += pq.read_table(f.path).to_pylist()
    return rows


def append(path, rows, n):
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    files = [
        r for b in FileWriter(path, SCHEMA, f"part-{n:05d}-")(iter([batch])) for r in b.to_pylist()
    ]
    append_files(path, files, SCHEMA, CommitProperties(), model=True)
    return files


def test_a_compaction_keeps_the_snapshot_in_reading_order(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "concatenate_files", in_process)
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None}, {"delta.checkpointInterval": "4"})
    rng = random.Random(3)
    c = Compaction(path, min_files=4, target_size=4_000, model=True)
    done, before, outputs = [], None, []
    appended, per_file = [], {}
    for n in range(13):
        rows = [
            {
                "id": n * 100 + i,
                "price": rng.choice([None, rng.uniform(-1e9, 1e9)]),
                "item": rng.choice("ABC"),
            }
            for i in range(rng.randrange(1, 40))
        ]
        before = snapshot_rows(path) + rows  # what the snapshot reads, uncompacted
        files = append(path, rows, n)
        appended += files
        per_file[files[0]["path"]] = rows
        time.sleep(0.002)  # distinct modification times (ms)
        result = c.added(None, files)
        if result is not None:
            done.append(result)
            commit = (tmp_path / "t" / "_delta_log" / f"{result['version']:020d}.json").read_text()
            actions = [json.loads(line) for line in commit.splitlines()]
            assert all(not a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a)
            outputs += [a["add"] for a in actions if "add" in a]
            assert version_files(path, result["version"]) == []  # a stream reads nothing there
        assert snapshot_rows(path) == before, n
    assert done and all(r["files_removed"] > r["files_added"] for r in done)
    table = DeltaTable(path)
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == sorted(
        before, key=lambda r: r["id"]
    )
    assert len(table.file_uris()) < 13
    # the outputs' statistics cover every column
    for add in outputs:
        stats = json.loads(add["stats"])
        assert set(stats["nullCount"]) == {"id", "price", "item"} and set(stats["minValues"]) >= {
            "id"
        }
        assert stats["numRecords"] == pq.read_metadata(tmp_path / "t" / add["path"]).num_rows
    assert table.history()  # loads: the checkpoints the compactions made are readable

    # every file ever appended, read as the snapshot-equivalence oracle reads a stream's input
    # (each with its batch's tag), after the compacted ones are gone from storage (vacuumed):
    # their rows are read from the files that hold them now, each with its own tag
    live = {os.path.basename(u) for u in table.file_uris()}
    for name in os.listdir(tmp_path / "t"):
        if name.endswith(".parquet") and name not in live:
            os.remove(tmp_path / "t" / name)
    entries = [(os.path.join(path, f["path"]), {"w": i}) for i, f in enumerate(appended)]
    schema = StructType(
        [
            StructField(n, t)
            for n, t in (
                ("id", LongType()),
                ("price", DoubleType()),
                ("item", StringType()),
                ("w", TimestampType()),
            )
        ]
    )
    read = [r for b in _read(_moved(path, entries), schema, "w") for r in b.to_pylist()]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert [{**r, "w": (r["w"] - epoch) // dt.timedelta(milliseconds=1)} for r in read] == [
        {**r, "w": i} for i, f in enumerate(appended) for r in per_file[f["path"]]
    ]
    moved = origins.moved(path)
    assert len(moved) > len(live) and any(".c0" in f for f in moved)  # outputs compacted again


def test_a_record_left_pending_is_settled_by_the_log(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, {"batch_id": None})
    files = append(path, [{"id": 1, "price": 1.0, "item": "A"}], 0)  # version 1
    first = files[0]["path"]
    folder = tmp_path / "t" / "_dbt_streaming" / "compacted"

    def log(version, token):
        (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").write_text(
            json.dumps({"commitInfo": {origins.TOKEN: token}}) + "\n"
        )

    # a crash after the record, before the commit, whose version a batch then took
    origins.record(path, 1, "aaaa", {"x.parquet": [[first, 1]]})
    # a crash after the commit of version 2, before its record was made final
    origins.record(path, 2, "bbbb", {"y.parquet": [[first, 1]]})
    log(2, "bbbb")
    # version 3: an attempt that crashed before its commit, then another that committed
    origins.record(path, 3, "cccc", {"z.parquet": [[first, 1]]})
    origins.record(path, 3, "dddd", {"w.parquet": [["y.parquet", 1]]})
    log(3, "dddd")
    origins.record(path, 4, "eeee", {"v.parquet": [["w.parquet", 1]]})  # under way
    assert origins.moved(path) == {}  # pending records are not read
    origins.settle(path)
    assert sorted(os.listdir(folder)) == [f"{2:020d}.json", f"{3:020d}.json", "pending"]
    assert sorted(os.listdir(folder / "pending")) == [
        f"{4:020d}.eeee.json",
        origins.BESIDE_SETTLED,
    ]
    # y.parquet compacted again into w.parquet: first's rows are there now
    settled = {first: ("w.parquet", 0, 1), "y.parquet": ("w.parquet", 0, 1)}
    assert origins.moved(path) == settled
    # a pending record as written beside the final ones before the pending folder (a table
    # of then: no marker): read if the log has its commit, not if another commit took its
    # version; the next settle makes it final or deletes it, once
    os.remove(folder / "pending" / origins.BESIDE_SETTLED)
    (folder / f"{5:020d}.ffff.pending.json").write_text(
        json.dumps({"token": "ffff", "outputs": {"u.parquet": [["w.parquet", 1]]}})
    )
    (folder / f"{6:020d}.0bad.pending.json").write_text(
        json.dumps({"token": "0bad", "outputs": {"t.parquet": [["u.parquet", 1]]}})
    )
    log(5, "ffff")
    log(6, "0ther")
    now = {**{f: ("u.parquet", 0, 1) for f in settled}, "w.parquet": ("u.parquet", 0, 1)}
    assert origins.moved(path) == now
    # a reader that listed the folder before that settle reads the record where it went
    listing = origins.storage.list_files(str(folder))
    origins.settle(path)
    monkeypatch.setattr(origins.storage, "list_files", lambda p: listing)
    assert origins.moved(path) == now
    monkeypatch.undo()
    assert sorted(os.listdir(folder)) == [f"{v:020d}.json" for v in (2, 3, 5)] + ["pending"]
    assert origins.BESIDE_SETTLED in os.listdir(folder / "pending")
    assert origins.moved(path) == now


def test_the_lowest_positions_of_a_models_readers(tmp_path):
    """Vacuum keeps what the warehouse's streams still read: per table (a model's, its
    changelog's), the lowest version their last commits are at."""
    from dbt.adapters.spark_streaming.runtime.maintenance import lowest_positions

    warehouse = tmp_path / "w"
    readers = {
        "orders": {},  # the model itself
        "a": {"sources": {"s.orders_changelog": 40}},
        "b": {"sources": {"s.orders": 12, "s.other": 3}},
        "c": {
            "sources": {"s.orders_changelog": 31},
            "positions": {"s.orders_changelog": {"table": "x", "version": 30, "index": 2}},
        },
    }
    for name, meta in readers.items():
        create_table(str(warehouse / "s" / name), SCHEMA, meta)
    assert lowest_positions(str(warehouse), {"s.orders", "s.orders_changelog"}) == {
        "s.orders": 12,
        "s.orders_changelog": 30,
    }
