"""Event-time temporal joins (sql/temporaljoin.py): the stateful operator Spark lacks.

The two inputs (the stream's rows and the versions, each watermarked on its event time) are
unioned into one stream, so its watermark is the minimum of both (Flink's "both watermarks";
it stalls while one side is idle, as Flink's does), and grouped by the join key into
``applyInPandasWithState`` with an event-time timeout, as runtime/over.py (which says why not
transformWithState). Spark drops the rows of either side at or below the batch's watermark
before they reach the operator (the oracle's rule, sql/temporaljoin.py emitted).

Per key the state is one pickled record: the stream's rows not yet emitted and the versions
that can still be joined. When called (new rows, or the timer fired) the operator first takes
in the new rows and versions, then emits each row whose time is at or below the watermark
with the version of greatest time at or below the row's (among equal times, the last to
arrive; an upsert_table's: the last committed), or with none (an INNER join drops it). A
later version at or below the watermark would have been dropped as late, so that choice is
final. It then keeps only the latest version at or below the watermark and those after it,
and sets the timer for the earliest pending row. The rows cross the operator packed
(runtime/exact.py) and are never looked into.

Versions read as changes (an upsert_table's changelog, SCD2) are held by start with their end;
a row past its version's end has none. Spark drops none of these changes (their TIME is NULL):
the operator pairs each version's ``-U``/``+U`` of one commit and drops the changes whose
effect is at or below the watermark (sql/temporaljoin.py's rule, which the oracle applies);
it applies the others in commit order: ``+I``/``+U`` set the version, ``-D`` removes it.
"""

from __future__ import annotations

import bisect
import math
import pickle
from typing import Any, Callable, Iterator, Optional, Tuple

from ..sql.temporaljoin import (
    CHANGE_COLUMNS,
    COMMIT,
    END_US,
    LEFT_ROW,
    MICROS,
    OP,
    RIGHT_ROW,
    TIME,
    TemporalSpec,
)
from .exact import carried, pack, unpacked

STATE_SCHEMA = "state binary"
LAYOUT = 1  # the state record's layout


def temporal_dataframe(spark, plan, bindings, view: str) -> Tuple[Any, Callable, Any]:
    """The streaming DataFrame of the temporal join ``plan`` over the bound sources
    ``bindings``, the function that turns each of its micro-batches into result rows (through
    the temp view ``view``), and the results' schema."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql.types import StructField, StructType

    spec: TemporalSpec = plan.temporal
    changes = CHANGE_COLUMNS if spec.changes else (COMMIT,) if spec.upserts else ()
    kept = [*spec.keys, TIME, MICROS, *changes]
    inputs, rows = [], {}  # the packed inputs; each packed column's row type
    for sql, name in zip(plan.temporal_inputs_sql(bindings), (LEFT_ROW, RIGHT_ROW), strict=True):
        df = spark.sql(sql)
        packed = [f for f in df.schema.fields if f.name not in kept]
        rows[name] = StructType([StructField(f.name, f.dataType, True) for f in packed])
        keep = [k for k in kept if k in df.columns]  # the stream's side has no CHANGE_COLUMNS
        inputs.append(pack(df, name, keep=keep, packed=[f.name for f in packed]))
    union = inputs[0].unionByName(inputs[1], allowMissingColumns=True)
    out = StructType([StructField(name, carried(t), True) for name, t in rows.items()])
    stream = union.groupBy(*spec.keys).applyInPandasWithState(
        _operator(spec.kind == "INNER", spec.changes, spec.upserts),
        out,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.EventTimeTimeout,
    )
    post = plan.temporal_sql_for(view)

    def results(batch):
        pairs = batch.select(
            *[
                F.when(F.col(name).isNotNull(), F.struct(*unpacked(F.col(name), t))).alias(name)
                for name, t in rows.items()
            ]
        )
        pairs.createOrReplaceTempView(view)
        return pairs.sparkSession.sql(post)

    schema = results(spark.createDataFrame([], out)).schema  # analysed before any stream starts
    return stream, results, schema


def _operator(inner: bool, changes: bool = False, upserts: bool = False):
    """The function of applyInPandasWithState over the union of both sides (packed rows in
    LEFT_ROW or RIGHT_ROW, the event time in MICROS; ``changes``: the versions as changes, with
    CHANGE_COLUMNS; ``upserts``: the versions with their COMMIT, which orders those of one
    time), giving (LEFT_ROW, RIGHT_ROW) pairs."""

    def run(key, pdfs, state) -> Iterator[Any]:
        import pandas as pd

        watermark = state.getCurrentWatermarkMs() * 1000
        pending, versions, seq = _held(state) or ([], [], 0)
        keyed = not any(k is None for k in key)  # a NULL key matches no version
        changed: list = []  # the changes of versions (changes)
        for pdf in pdfs:
            columns = [pdf[MICROS].tolist(), pdf[LEFT_ROW].tolist(), pdf[RIGHT_ROW].tolist()]
            extra = [pdf[c].tolist() for c in (END_US, OP, COMMIT)] if changes else []
            extra += [pdf[COMMIT].tolist()] if upserts else []
            for t, row, version, *change in zip(*columns, *extra, strict=True):
                if row is not None:
                    pending.append((t, seq, row))
                elif keyed and changes:
                    end, op, commit = change
                    changed.append((int(commit), t, op, None if _null(end) else int(end), version))
                elif keyed:  # arrival order, or commit order (upserts: within a batch too)
                    order = (int(change[0]), seq) if upserts else seq
                    bisect.insort(versions, (t, order, version))
                seq += 1
        if changed:
            _apply(versions, changed, watermark)
        due = sorted(r for r in pending if r[0] <= watermark)
        pending = [r for r in pending if r[0] > watermark]
        out = []
        for t, _, row in due:
            version = _valid(versions, t)
            if version is not None or not inner:
                out.append((row, version))
        # the versions a row after the watermark can take: the last at or below it, and later
        versions = versions[max(0, bisect.bisect_right(versions, watermark, key=_start) - 1) :]
        if pending or versions:
            state.update((pickle.dumps((pending, versions, seq, LAYOUT)),))
        else:
            state.remove()
        if pending:
            due_ms = math.ceil(min(r[0] for r in pending) / 1000) - 1
            state.setTimeoutTimestamp(max(due_ms, watermark // 1000))
        if out:
            yield pd.DataFrame(
                {LEFT_ROW: [r for r, _ in out], RIGHT_ROW: [v for _, v in out]},
                columns=[LEFT_ROW, RIGHT_ROW],
            )

    return run


def _start(version: tuple) -> int:
    return version[0]


def _valid(versions: list, t: int) -> Optional[dict]:
    """The version of greatest (start, order) with start <= ``t`` (``versions`` sorted), if
    it has not ended by ``t``. A version is (start, arrival, row), (start, (commit, arrival),
    row) for an upsert_table's upserts, or, read as changes, (start, 0, row, end or None)."""
    i = bisect.bisect_right(versions, t, key=_start)
    if not i:
        return None
    version = versions[i - 1]
    end = version[3] if len(version) > 3 else None
    return version[2] if end is None or t < end else None


def _null(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _apply(versions: list, changed: list, watermark: int) -> None:
    """Apply to ``versions`` (by start, sorted) the ``changed`` versions (commit, start, op, end,
    row) whose effect is after ``watermark``, in commit order: per commit and start the pair of
    the version before (``-U``, ``-D``) and after (``+I``, ``+U``) the change; its effect is the
    start, or for a change of end only the earlier end (sql/temporaljoin.py)."""
    pairs: dict = {}
    for commit, start, op, end, row in changed:
        pair = pairs.setdefault((commit, start), [None, None])
        pair[op in ("+I", "+U")] = (end, row)
    for commit, start in sorted(pairs):
        before, after = pairs[(commit, start)]
        if before is None or after is None or before[1] != after[1]:
            effect = start
        else:
            effect = min(math.inf if e is None else e for e in (before[0], after[0]))
        if effect <= watermark:
            continue  # late: dropped, as the oracle does
        i = bisect.bisect_left(versions, start, key=_start)
        held = i < len(versions) and versions[i][0] == start
        if after is None:
            if held:
                del versions[i]
        elif held:
            versions[i] = (start, 0, after[1], after[0])
        else:
            versions.insert(i, (start, 0, after[1], after[0]))


def _held(state) -> Optional[tuple]:
    """The key's state record (pending rows, versions, next arrival number), or None."""
    if not state.exists:
        return None
    held = pickle.loads(state.get[0])
    if held[3] != LAYOUT:
        raise RuntimeError(
            f"temporal join operator state of another layout ({held[3]}): written by another "
            "dbt-spark-streaming"
        )
    return tuple(held[:3])
