"""apply_changes (SCD type 1, sql/applychanges.py) through `dbt run`: a seeded random feed of
change events (inserts, updates, deletes, re-inserts after a delete, sequence numbers out of
order within and across appends, duplicates, ties, NULL sequences, DOUBLE values with NULLs
and wide magnitudes), applied over several runs and compared after each with a plain-Python
oracle: the table, the changelog's replay, Delta's change data feed, snapshot_equivalence.
Then the tombstone TTL, and a crash at each commit point of a batch."""

import random
import time

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, write_deltalake

from .helpers import equivalence_project, table_path
from .test_upsert_table import changelog, replay

SOURCES = """
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: changes}]
"""
CONFIG = (
    "materialized='upsert_table', unique_key='id', apply_changes={'sequence_by': 'seq', "
    "'delete_when': \"op = 'd'\", 'except_columns': ['op']TTL}"
)
MODEL = "{{ config(" + CONFIG + ") }}\nSELECT * FROM {{ source('raw', 'changes') }}"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("seq", pa.int64()),
        ("op", pa.string()),
        ("name", pa.string()),
        ("price", pa.float64()),
    ]
)


def append_changes(path: str, events: list[tuple], mode: str = "append") -> None:
    columns = list(zip(*events, strict=True))
    write_deltalake(
        path,
        pa.table([pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)], SCHEMA),
        mode=mode,
    )


def rows(path: str) -> list[tuple]:
    """The table's rows, sorted as text (a NULL key sorts among the others)."""
    return sorted(
        (tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()), key=str
    )


def _order(value):
    """Spark's ascending order of a struct field: NULL first."""
    return (0,) if value is None else (1, value)


def oracle(events: list[tuple]) -> list[tuple]:
    """The SCD 1 table of `events` (id, seq, op, name, price): per id, the event with the
    highest seq (NULL seqs ignored); at an equal seq a delete, then the greatest row; absent if
    that is a delete. Rows without `op`, sorted."""
    kept: dict = {}
    for e in events:
        if e[1] is None:
            continue
        rank = (e[1], e[2] == "d", *map(_order, e))
        if e[0] not in kept or rank > kept[e[0]][0]:
            kept[e[0]] = (rank, e)
    return sorted(((e[0], e[1], e[3], e[4]) for _, e in kept.values() if e[2] != "d"), key=str)


def history(events: list[tuple]) -> list[tuple]:
    """The SCD 2 table of `events`: per id and seq the event ranked as in `oracle`; per id in
    seq order, a version (id, seq, name, price, __start_at, __end_at) of each that is not a
    delete, ended by the next one's seq (NULL: the current version)."""
    kept: dict = {}
    for e in events:
        if e[1] is None:
            continue
        rank = (e[2] == "d", *map(_order, e))
        if (e[0], e[1]) not in kept or rank > kept[(e[0], e[1])][0]:
            kept[(e[0], e[1])] = (rank, e)
    by_id: dict = {}
    for _, e in kept.values():
        by_id.setdefault(e[0], []).append(e)
    out = []
    for changes in by_id.values():
        changes.sort(key=lambda e: e[1])
        for e, after in zip(changes, changes[1:] + [None], strict=True):
            if e[2] != "d":
                out.append((e[0], e[1], e[3], e[4], e[1], after[1] if after else None))
    return sorted(out, key=str)


def source_events(path: str) -> list[tuple]:
    return [tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]


class Feed:
    """Change events of a seeded generator over a few keys: each key's events get increasing
    sequence numbers when made, but they are appended shuffled, some held back for a later
    append (out of order across appends), some repeated (duplicates), some tied."""

    def __init__(self, seed: int, keys: int = 12):
        self.rng, self.keys = random.Random(seed), keys
        self.seq = {k: 0 for k in range(keys)}
        self.held: list[tuple] = []
        self.all: list[tuple] = []

    def _value(self):
        r = self.rng.random()
        if r < 0.1:
            return None
        return self.rng.choice([1e-9, 1.0, 1e12]) * round(self.rng.uniform(-1000, 1000), 3)

    def _event(self) -> tuple:
        k = self.rng.randrange(self.keys) if self.rng.random() > 0.05 else None  # NULL key
        if k is None:
            return (None, self.rng.randrange(100), "u", "nullkey", self._value())
        self.seq[k] += self.rng.choice([1, 1, 2, 5])
        op = self.rng.choices(["i", "u", "d"], [2, 5, 2])[0]
        name = None if self.rng.random() < 0.1 else self.rng.choice(["ann", "bob", "cy", "dé"])
        return (k, self.seq[k], op, name, self._value())

    def batch(self, n: int) -> list[tuple]:
        events = [self._event() for _ in range(n)]
        events += self.held
        self.held = []
        extra = []
        for e in list(events):
            r = self.rng.random()
            if r < 0.08:
                extra.append(e)  # an exact duplicate
            elif r < 0.12 and e[0] is not None:  # a tie: same key and sequence, other values
                extra.append((e[0], e[1], self.rng.choice("iud"), "tie", self._value()))
            elif r < 0.14:
                extra.append((e[0], None, "u", "noseq", 1.0))  # NULL sequence: ignored
        events += extra
        self.rng.shuffle(events)
        cut = len(events) // 5  # held back: arrive with a later append
        self.held, events = events[:cut], events[cut:]
        self.all += events
        return events


def cdf_replay(path: str, key=(0,)) -> list[tuple]:
    """The table replayed from Delta's change data feed (from version 0), by the columns at
    positions `key`."""
    table: dict = {}
    changes = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all()).to_pylist()
    changes.sort(
        key=lambda c: (c["_commit_version"], c["_change_type"] in ("insert", "update_postimage"))
    )
    for c in changes:
        row = tuple(v for n, v in c.items() if not n.startswith("_") or n.startswith("__"))
        k = tuple(row[i] for i in key)
        if c["_change_type"] in ("delete", "update_preimage"):
            assert table.pop(k) == row
        else:
            table[k] = row
    return sorted(table.values(), key=str)


class TestApplyChanges:
    @pytest.fixture(scope="class")
    def models(self):
        scd2 = MODEL.replace("TTL", "").replace(
            "'except_columns'", "'scd_type': 2, 'except_columns'"
        )
        return equivalence_project(
            SOURCES, {"customers": MODEL.replace("TTL", ""), "customers_history": scd2}
        )

    def test_random_feed_over_runs(self, project):
        source, out = table_path(project, "changes"), table_path(project, "customers")
        feed, ops = Feed(seed=35), set()
        for _ in range(4):
            for _ in range(2):  # two source versions per run
                append_changes(source, feed.batch(40))
            run_dbt(["run"])
            expected = oracle(feed.all)
            assert rows(out) == expected
            log = changelog(out)
            assert replay(log) == expected
            assert cdf_replay(out) == expected
            ops |= {r[-3] for r in log}
            self.check_history(project, feed.all)
            assert [r.status for r in run_dbt(["test"])] == ["pass", "pass"]
        assert ops == {"+I", "-U", "+U", "-D"}
        assert [c.name for c in DeltaTable(out).schema().fields] == ["id", "seq", "name", "price"]
        # out-of-order changes end versions already written (-U/+U of their __end_at)
        assert {"+I", "-U", "+U"} <= {
            r[-3] for r in changelog(table_path(project, "customers_history"))
        }

    @staticmethod
    def check_history(project, events: list[tuple]) -> None:
        """The SCD 2 table equals `history`, and so do its changelog's and CDF's replays."""
        out = table_path(project, "customers_history")
        expected = history(events)
        assert rows(out) == expected
        assert sorted(replay(changelog(out), (0, 4)), key=str) == expected
        assert cdf_replay(out, (0, 4)) == expected

    def test_older_events_change_nothing(self, project):
        """Events older than a key's applied one, a delete too, arriving in a later run."""
        source, out = table_path(project, "changes"), table_path(project, "customers")
        history_path = table_path(project, "customers_history")
        before, changes, versions = rows(out), len(changelog(out)), len(rows(history_path))
        old = [(k, 0, "u", "stale", 1.0) for k in range(12)]
        old += [(k, 0, "d", None, None) for k in range(0, 12, 2)]  # a tie: the delete wins
        append_changes(source, old)
        run_dbt(["run"])
        assert rows(out) == before and len(changelog(out)) == changes
        # in the history: a first version of the odd keys, ended where the next one starts
        self.check_history(project, source_events(source))
        assert len(rows(history_path)) == versions + 6
        assert [r.status for r in run_dbt(["test"])] == ["pass", "pass"]


class TestTombstones:
    """A deleted key's tombstone is kept `tombstone_ttl` (processing time since a change last
    touched the key): an older change arriving before then is ignored, after it inserts the key
    again (marked _restarted, left out by snapshot_equivalence). A live key never expires."""

    @pytest.fixture(scope="class")
    def models(self):
        model = MODEL.replace("TTL", ", 'tombstone_ttl': '15 seconds'")
        return equivalence_project(SOURCES, {"customers": model})

    def test_tombstone_ttl(self, project):
        source, out = table_path(project, "changes"), table_path(project, "customers")
        log = f"{out}/_dbt_streaming/changelog"
        append_changes(
            source,
            [(1, 1, "i", "a", 1.0), (1, 5, "d", None, None), (2, 5, "i", "b", 2.0)]
            + [(3, 6, "i", "c", 3.0), (3, 9, "d", None, None)],
        )
        run_dbt(["run"])
        assert rows(out) == [(2, 5, "b", 2.0)]
        append_changes(source, [(1, 3, "u", "late", 3.0)])  # the tombstone holds
        run_dbt(["run"])
        assert rows(out) == [(2, 5, "b", 2.0)]
        time.sleep(16)
        append_changes(source, [(1, 4, "u", "later", 4.0), (2, 1, "u", "old", 0.0)])
        run_dbt(["run"])  # and key 3's expired tombstone is dropped
        # key 1's tombstone expired: its older change is applied; key 2 is live: kept
        assert rows(out) == [(1, 4, "later", 4.0), (2, 5, "b", 2.0)]
        marked = DeltaTable(log).to_pyarrow_table().to_pylist()
        assert [(r["id"], r["_op"]) for r in marked if r["_restarted"]] == [(1, "+I")]
        # key 3, whose tombstone (sequence 9) was dropped: an older delete stores a tombstone
        # of its own and logs nothing, then an older update inserts the key, marked restarted
        # although its sequence is higher than that tombstone's; a new key (sequence above
        # every dropped tombstone's) is not marked
        append_changes(source, [(3, 7, "d", None, None)])
        run_dbt(["run"])
        append_changes(source, [(3, 8, "u", "late", 8.0), (4, 10, "i", "d", 4.0)])
        run_dbt(["run"])
        assert rows(out) == [(1, 4, "later", 4.0), (2, 5, "b", 2.0)] + [
            (3, 8, "late", 8.0),
            (4, 10, "d", 4.0),
        ]
        marked = DeltaTable(log).to_pyarrow_table().to_pylist()
        assert sorted((r["id"], r["_op"]) for r in marked if r["_restarted"]) == [
            (1, "+I"),
            (3, "+I"),
        ]
        _, shown = run_dbt_and_capture(["test"])
        assert "2 keys left out: restarted after tombstone_ttl" in shown


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,scd",
    [
        # CI runs one case (each takes ~45 s); --full all four
        pytest.param("during_write@1", 1, marks=pytest.mark.full),  # the changelog committed,
        ("after_delta_commit@1", 1),  # the table too, the partials (and tombstones) not
        pytest.param("after_delta_commit@1", 2, marks=pytest.mark.full),
        pytest.param("during_write@1", 2, marks=pytest.mark.full),
    ],
)
def test_crash_then_rerun(tmp_path, fault, scd):
    """`dbt run` killed at a commit point of an apply_changes batch, then run again after one
    more append: the table equals the oracle and each change is logged once."""
    from dbt.adapters.spark_streaming.faults import EXIT_CODE

    from .test_exactly_once import dbt_run, write_project

    model = MODEL.replace("TTL", f", 'scd_type': {scd}")
    write_project(tmp_path, model.replace("source('raw', 'changes')", "source('feed', 'events')"))
    project, source = str(tmp_path / "project"), str(tmp_path / "feed" / "events")
    out = str(tmp_path / "warehouse" / "crash" / "per_item")
    feed = Feed(seed=7)
    append_changes(source, feed.batch(60), mode="overwrite")
    assert dbt_run(project).returncode == 0
    append_changes(source, feed.batch(60))
    crashed = dbt_run(project, fault)
    assert crashed.returncode == EXIT_CODE, crashed.stdout[-3000:] + crashed.stderr[-2000:]
    append_changes(source, feed.batch(60))
    rerun = dbt_run(project)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    expected, key = (oracle(feed.all), 1) if scd == 1 else (history(feed.all), (0, 4))
    assert rows(out) == expected
    log = changelog(out)
    assert len({r[:-1] for r in log}) == len(log), "a change was logged twice"
    assert sorted(replay(log, key), key=str) == expected
