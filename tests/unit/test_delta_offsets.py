"""Offsets of the Delta streaming source and admission control (delta/offsets.py), over a
made-up table: no Delta, no Spark."""

import json

import pytest

from dbt.adapters.spark_streaming.delta.offsets import (
    BY_PATH,
    ORIGIN,
    File,
    Position,
    advance,
    between,
    starting,
    versions_read,
)

# version -> sizes of the files it adds; the snapshot at v is every file of versions <= v
ADDS = {0: [10, 10, 10], 1: [], 2: [50], 3: [5, 5, 5, 5, 5], 4: [100, 1]}


def files(version: int, snapshot: bool) -> list[File]:
    if snapshot:
        out = [
            File(f"v{v}-f{i}", {}, s) for v in ADDS if v <= version for i, s in enumerate(ADDS[v])
        ]
        return sorted(out, key=lambda f: f.path)
    return [File(f"v{version}-f{i}", {}, s) for i, s in enumerate(ADDS[version])]


def batches(start: Position, target: int, **limits) -> list[list[str]]:
    """The files of each batch until nothing is left, as the available-now trigger runs them."""
    out = []
    for _ in range(50):
        end = advance(start, target, files, **limits)
        if end == start:
            return out
        out.append([f.path for f in between(start, end, files)])
        start = end
    raise AssertionError("no end")


def test_unlimited_reads_everything_in_one_batch_as_before():
    assert advance(ORIGIN, 4, files) == Position(4)
    assert len(between(ORIGIN, Position(4), files)) == 11
    assert advance(Position(2), 4, files) == Position(4)
    assert [f.path for f in between(Position(2), Position(4), files)] == [
        *(f"v3-f{i}" for i in range(5)),
        "v4-f0",
        "v4-f1",
    ]
    assert advance(Position(4), 4, files) == Position(4)  # nothing new: start itself


def test_the_snapshot_splits_by_files_in_path_order():
    got = batches(ORIGIN, 2, max_files=2)
    assert got == [["v0-f0", "v0-f1"], ["v0-f2", "v2-f0"]]
    assert advance(ORIGIN, 2, files, max_files=2) == Position(2, 1, True)
    # the snapshot's last file ends the version: the next offset is "version 2 read"
    assert advance(Position(2, 1, True), 2, files, max_files=2) == Position(2)


def test_snapshot_offsets_say_their_order_and_old_ones_keep_path_order():
    """A snapshot is read by modification time (Delta's order); offsets written before say
    nothing and index the snapshot sorted by path, so an old checkpoint in the middle of a
    snapshot goes on with the files it had not read."""
    new = Position(2, 1, True)
    assert new.offset("t") == {
        "table": "t",
        "version": 2,
        "index": 1,
        "snapshot": True,
        "order": "time",
    }
    assert Position.parse(new.offset("t")) == new
    old = Position.parse({"table": "t", "version": 2, "index": 1, "snapshot": True})
    assert old == Position(2, 1, BY_PATH)
    assert old.offset("t") == {"table": "t", "version": 2, "index": 1, "snapshot": True}
    assert Position.parse(old.offset("t")) == old

    # written in the order c, a, b: time order differs from path order
    written = [File("c", {}, 1), File("a", {}, 1), File("b", {}, 1)]

    def lookup(version: int, snapshot) -> list[File]:
        return sorted(written, key=lambda f: f.path) if snapshot == BY_PATH else written

    assert [f.path for f in between(ORIGIN, advance(ORIGIN, 0, lookup, 2), lookup)] == ["c", "a"]
    assert [f.path for f in between(Position(0, 0, True), Position(0), lookup)] == ["a", "b"]
    # an old offset after "a" (path order) goes on with b and c
    assert [f.path for f in between(Position(0, 0, BY_PATH), Position(0), lookup)] == ["b", "c"]
    # ... and a first batch that an old offset ends (a replay, or the oracle) read "a" alone
    assert [f.path for f in between(ORIGIN, Position(0, 0, BY_PATH), lookup)] == ["a"]


def test_a_version_splits_and_batches_cross_versions():
    got = batches(Position(2), 4, max_files=3)
    assert got == [
        ["v3-f0", "v3-f1", "v3-f2"],
        ["v3-f3", "v3-f4", "v4-f0"],  # a batch may end inside the next version
        ["v4-f1"],
    ]
    assert advance(Position(2), 4, files, max_files=3) == Position(3, 2)
    assert advance(Position(3, 2), 4, files, max_files=3) == Position(4, 0)
    assert advance(Position(4, 0), 4, files, max_files=3) == Position(4)


def test_every_file_once_whatever_the_limits():
    everything = [f.path for f in between(ORIGIN, Position(4), files)]
    for limits in ({"max_files": 1}, {"max_files": 4}, {"max_bytes": 12}, {"max_bytes": 1}):
        got = batches(ORIGIN, 4, **limits)
        assert sorted(sum(got, [])) == sorted(everything), limits
        assert all(got), limits  # no empty batch


def test_byte_limit_is_soft_and_combines_with_files():
    # at most 12 bytes, but at least one file per batch (the 50 and 100 byte files alone)
    assert batches(Position(1), 4, max_bytes=12) == [
        ["v2-f0"],
        ["v3-f0", "v3-f1"],
        ["v3-f2", "v3-f3"],
        ["v3-f4"],
        ["v4-f0"],
        ["v4-f1"],
    ]
    assert batches(Position(2), 4, max_bytes=100, max_files=2) == [
        ["v3-f0", "v3-f1"],  # files first
        ["v3-f2", "v3-f3"],
        ["v3-f4"],  # 5 + 100 bytes > 100
        ["v4-f0"],  # 100 + 1 > 100
        ["v4-f1"],
    ]


def test_bytes_exactly_at_the_limit_are_admitted():
    assert batches(Position(2), 4, max_bytes=10) == [
        ["v3-f0", "v3-f1"],
        ["v3-f2", "v3-f3"],
        ["v3-f4"],
        ["v4-f0"],
        ["v4-f1"],
    ]


def test_versions_without_files_are_passed_over():
    assert advance(Position(0), 1, files, max_files=5) == Position(1)
    assert between(Position(0), Position(1), files) == []
    assert [f.path for f in between(Position(0), Position(2), files)] == ["v2-f0"]


def test_the_target_bounds_the_batch():
    assert advance(Position(3, 1), 3, files) == Position(3)  # the rest of v3, not v4
    assert advance(Position(3), 3, files, max_files=1) == Position(3)  # nothing up to v3
    assert advance(Position(2), 3, files, max_files=10) == Position(3)


def test_starting_version_reads_changes_not_the_snapshot():
    start = starting(3)
    assert start == Position(3, -1, False, 3)
    assert batches(start, 4, max_files=4) == [
        ["v3-f0", "v3-f1", "v3-f2", "v3-f3"],
        ["v3-f4", "v4-f0", "v4-f1"],
    ]
    end = advance(start, 4, files, max_files=4)
    assert end == Position(3, 3, False, 3) and end.offset("t")["start"] == 3
    assert advance(end, 4, files, max_files=4) == Position(4, None, False, 3)
    # a start after the latest version waits for it
    assert advance(starting(5), 4, files) == starting(5)
    # version 0 as start is not the snapshot
    assert [f.path for f in between(starting(0), Position(0, None, False, 0), files)] == [
        "v0-f0",
        "v0-f1",
        "v0-f2",
    ]


@pytest.mark.parametrize(
    "offset, position",
    [
        ({"table": "t", "version": -1}, ORIGIN),  # a new stream of the code before positions
        ({"table": "t", "version": 7}, Position(7)),  # an old checkpoint: version 7 fully read
        (7, Position(7)),  # a commit's `sources` before positions were recorded
        ('{"table": "t", "version": 3}', Position(3)),
        ({"table": "t", "version": 3, "index": 4, "snapshot": True}, Position(3, 4, BY_PATH)),
        (
            {"table": "t", "version": 3, "index": 4, "snapshot": True, "order": "time"},
            Position(3, 4, True),
        ),
        ({"table": "t", "version": 3, "index": -1, "snapshot": False, "start": 3}, starting(3)),
    ],
)
def test_offsets_parse_old_and_new(offset, position):
    assert Position.parse(offset) == position


def test_offsets_round_trip_and_keep_the_old_shape_at_version_ends():
    assert Position(5).offset("s.t") == {"table": "s.t", "version": 5}
    assert ORIGIN.offset("s.t") == {"table": "s.t", "version": -1}
    for p in (
        Position(5),
        Position(5, 2, True),
        Position(5, 0),
        starting(2),
        Position(4, None, False, 2),
    ):
        assert Position.parse(json.loads(json.dumps(p.offset("x")))) == p
        assert Position.parse(p.record()) == p


def test_an_old_checkpoint_continues_with_limits():
    # a checkpoint written before positions: version 2 fully read; the new code goes on
    old = Position.parse({"table": "t", "version": 2})
    assert batches(old, 4, max_files=4) == [
        ["v3-f0", "v3-f1", "v3-f2", "v3-f3"],
        ["v3-f4", "v4-f0", "v4-f1"],
    ]
    # and an old offset planned but not committed replays the same files
    assert len(between(Position.parse({"version": 2}), Position.parse({"version": 4}), files)) == 7


def test_versions_read_for_the_run_summary():
    assert versions_read({}, {"table": "t", "version": 4}) == (0, 4)
    assert versions_read(
        {"table": "t", "version": -1}, {"version": 4, "index": 1, "snapshot": True}
    ) == (0, 4)
    assert versions_read({"version": 2}, {"version": 3, "index": 1}) == (3, 3)
    assert versions_read({"version": 3, "index": 1}, {"version": 4}) == (3, 4)
    assert versions_read({"version": 4}, {"version": 4}) is None
    assert versions_read(starting(3).offset("t"), {"version": 3, "index": 0, "start": 3}) == (3, 3)
    assert versions_read({}, {"version": 5, "start": 3}) == (3, 5)
