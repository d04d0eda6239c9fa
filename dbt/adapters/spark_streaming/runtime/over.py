"""OVER aggregations on event time (sql/over.py): the stateful operator Spark lacks.

Spark Structured Streaming has no streaming OVER (window function) operator. This one is
``groupBy(<partition keys>).applyInPandasWithState(...)`` with an event-time timeout
(GroupStateTimeout.EventTimeTimeout), chosen over ``transformWithStateInPandas``:

- transformWithState(InPandas) must run on the RocksDB state store provider (Spark's and
  Databricks' docs: set spark.sql.streaming.stateStore.providerClass to
  RocksDBStateStoreProvider). That is a setting of the shared SparkSession, which the queries of
  every other model would pick up (and a new query records it in its checkpoint);
  applyInPandasWithState runs on the default (HDFS-backed) provider. transformWithState was
  not measured here: this requirement decided it.
- With an event-time timeout, Spark itself drops the input rows whose time is at or below the
  batch's watermark before they reach the operator, and counts them in the operator's
  ``numRowsDroppedByWatermark``, as for window aggregates (the late-row report and the oracle
  rely on that rule).

Per partition key the state is one pickled record: the rows not yet emitted (``pending``),
the emitted rows still inside the frame (``kept``: RANGE, the rows within the interval of the
latest emitted time; ROWS, the last n) and, for UNBOUNDED frames, one accumulator per
aggregate. When the operator is called (new rows, or the timer fired), the rows at or below
the watermark are emitted in time order (arrival order among equal times), each with its
frame's aggregates; RANGE peers (equal time) are all in each other's frames. The timer is set
for the earliest pending row (it fires once the watermark reaches it) or, for RANGE with
nothing pending, for when the kept rows leave every future frame (then the state goes).
The frames' aggregates are computed in Python per emitted row (O(frame) per row for RANGE and
ROWS; O(1) for UNBOUNDED).
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Iterator, List, Optional

from ..sql.over import RANGE, ROWS, TIME, UNBOUNDED_RANGE, OverSpec

STATE_SCHEMA = "state binary"


def over_dataframe(df, spec: OverSpec, output_schema):
    """The OVER aggregation of the input rows ``df`` (sql/over.py's input query), with the
    result columns ``output_schema`` (the batch query's own schema)."""
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql.types import StructField, StructType

    schema = StructType([StructField(f.name, f.dataType, True) for f in output_schema.fields])
    return df.groupBy(*spec.keys).applyInPandasWithState(
        _operator(spec, [f.name for f in schema.fields]),
        schema,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.EventTimeTimeout,
    )


def _operator(spec: OverSpec, names: List[str]):
    frame, preceding = spec.frame, spec.preceding
    columns = [c for _, c in spec.outputs if isinstance(c, str)]
    args = [a.arg for a in spec.aggregates]
    functions = [a.function for a in spec.aggregates]

    def run(key, pdfs, state) -> Iterator[Any]:
        import warnings

        import pandas as pd

        # pyspark's worker concatenates the groups' outputs, some empty: pandas warns each time
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)

        watermark = state.getCurrentWatermarkMs() * 1000
        held = pickle.loads(state.get[0]) if state.exists else None
        pending, kept, accs, seq = held or ([], [], [_empty() for _ in functions], 0)
        for pdf in pdfs:
            times = pdf[TIME].tolist()
            values = [pdf[c].tolist() for c in columns]
            arg_values = [pdf[a].tolist() if a else [1] * len(pdf) for a in args]
            for i, t in enumerate(times):
                row = tuple(v[i] for v in values)
                pending.append((t, seq, row, tuple(v[i] for v in arg_values)))
                seq += 1
        ready = sorted(r for r in pending if r[0] <= watermark)
        pending = [r for r in pending if r[0] > watermark]
        rows = _emit(ready, kept, accs, frame, preceding, functions) if ready else []
        if ready:
            kept = _keep(kept + ready, frame, preceding)
        if frame == RANGE:  # rows after the watermark cannot reach further back than this
            kept = [r for r in kept if r[0] > watermark - preceding]
        if pending:
            state.update((pickle.dumps((pending, kept, accs, seq)),))
            due = min(r[0] for r in pending)
            state.setTimeoutTimestamp(max(math.ceil(due / 1000) - 1, watermark // 1000))
        elif frame == RANGE and kept:
            state.update((pickle.dumps((pending, kept, accs, seq)),))
            state.setTimeoutTimestamp(max((kept[-1][0] + preceding) // 1000, watermark // 1000))
        elif frame == RANGE or not (kept or ready or held):
            state.remove()
        else:
            state.update((pickle.dumps((pending, kept, accs, seq)),))
        if rows:
            out = {n: [] for n in names}
            for row, results in rows:
                for (_, ref), n in zip(spec.outputs, names, strict=True):
                    value = row[2][columns.index(ref)] if isinstance(ref, str) else results[ref]
                    out[n].append(value)
            yield pd.DataFrame(out, columns=names)

    return run


def _empty() -> list:
    return [0, None, None, None]  # non-null count, sum, min, max


def _add(acc: list, value: Any) -> None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return
    acc[0] += 1
    acc[1] = value if acc[1] is None else acc[1] + value
    acc[2] = value if acc[2] is None or value < acc[2] else acc[2]
    acc[3] = value if acc[3] is None or value > acc[3] else acc[3]


def _result(acc: list, function: str) -> Any:
    count, total, low, high = acc
    if function == "count":
        return count
    if function == "avg":
        return None if count == 0 else total / count
    return {"sum": total, "min": low, "max": high}[function]


def _emit(ready, kept, accs, frame, preceding, functions):
    """(row, [aggregate results]) for each row of ``ready`` (sorted), in order."""
    out = []
    if frame in (RANGE, ROWS):
        rows = kept + ready
        times = [r[0] for r in rows]
        for i in range(len(kept), len(rows)):
            t = times[i]
            if frame == RANGE:
                lo = _first_at_or_after(times, t - preceding)
                hi = _last_at(times, t, i)
            else:
                lo, hi = max(0, i - preceding), i
            results = []
            for j, function in enumerate(functions):
                acc = _empty()
                for r in rows[lo : hi + 1]:
                    _add(acc, r[3][j])
                results.append(_result(acc, function))
            out.append((rows[i], results))
        return out
    i = 0
    while i < len(ready):
        end = i + 1
        if frame == UNBOUNDED_RANGE:  # peers: every row of the same time
            while end < len(ready) and ready[end][0] == ready[i][0]:
                end += 1
        for r in ready[i:end]:
            for j, acc in enumerate(accs):
                _add(acc, r[3][j])
        results = [_result(acc, f) for acc, f in zip(accs, functions, strict=True)]
        out.extend((r, results) for r in ready[i:end])
        i = end
    return out


def _first_at_or_after(times: List[int], t: int) -> int:
    import bisect

    return bisect.bisect_left(times, t)


def _last_at(times: List[int], t: int, i: int) -> int:
    import bisect

    return max(i, bisect.bisect_right(times, t) - 1)


def _keep(rows: list, frame: str, preceding: Optional[int]) -> list:
    """The emitted rows a later row's frame may still include."""
    if frame == RANGE:
        return [r for r in rows if r[0] >= rows[-1][0] - preceding]
    if frame == ROWS:
        return rows[len(rows) - preceding :] if preceding else []
    return []
