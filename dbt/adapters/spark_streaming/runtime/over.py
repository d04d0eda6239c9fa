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
the watermark are due, in time order (arrival order among equal times). The timer is set for
the earliest pending row (it fires once the watermark reaches it) or, for RANGE with nothing
pending, for when the kept rows leave every future frame (then the state goes).

- A RANGE or ROWS frame: the operator outputs the due rows (EMIT true) after the kept rows
  (EMIT false), each with its arrival number SEQ; the micro-batch then evaluates each aggregate
  as a Spark window function over them (sql/over.py OverSpec.frame_items) and keeps the due
  rows. So any aggregate Spark has runs over the frame, as Spark computes it in batch; a
  key's rows are in one call, so each due row's frame is among them.
- An UNBOUNDED frame: the operator keeps one accumulator per aggregate (sql/over.py RUNNING:
  SUM, COUNT, MIN, MAX, AVG, the STDDEV / VARIANCE family, COUNT_IF, BOOL_AND, BOOL_OR) and
  outputs the result rows itself; RANGE peers (equal time) share one result.
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Callable, Iterator, List, Optional, Tuple

from ..sql.over import EMIT, EVENT_TIME, RANGE, ROWS, SEQ, TIME, UNBOUNDED_RANGE, OverSpec
from .exact import carried, pack, reader, unpack, writer

STATE_SCHEMA = "state binary"
ROW = "__dss_row"  # the operator's rows, packed (runtime/exact.py)
LAYOUT = 3  # the state record's layout (_held); records of layout 1 have no such field


def over_dataframe(df, spec: OverSpec, output_schema) -> Tuple[Any, Optional[Callable], Any]:
    """The OVER aggregation of the input rows ``df`` (sql/over.py's input query), with the
    result columns ``output_schema`` (the batch query's own schema): the streaming DataFrame,
    the function that turns each of its micro-batches into result rows (None for an unbounded
    frame: the stream's rows are the results), and the results' schema. The rows cross the
    operator packed in one struct column (runtime/exact.py), so no value changes on the way."""
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    result = StructType([StructField(f.name, f.dataType, True) for f in output_schema.fields])
    packed = pack(df, ROW, keep=[*spec.keys, EVENT_TIME])  # the watermarked column stays
    timeout = GroupStateTimeout.EventTimeTimeout
    framed = bool(spec.frame_items)
    rows = (
        StructType(
            [StructField(f.name, f.dataType, True) for f in df.schema.fields]
            + [StructField(SEQ, LongType(), True), StructField(EMIT, BooleanType(), True)]
        )
        if framed
        else result
    )
    operator = _operator(spec, df.schema, rows, framed)
    stream = packed.groupBy(*spec.keys).applyInPandasWithState(
        operator, StructType([StructField(ROW, carried(rows))]), STATE_SCHEMA, "append", timeout
    )
    stream = unpack(stream, ROW, rows)
    if not framed:
        return stream, None, result

    def results(batch):
        return batch.selectExpr(*spec.frame_items).where(EMIT).drop(EMIT).to(result)

    results(df.sparkSession.createDataFrame([], rows))  # analysed before any stream starts
    return stream, results, result


def _operator(spec: OverSpec, source, out, framed: bool):
    """The function of applyInPandasWithState over rows of ``source`` (a StructType) packed in
    column ROW, giving rows of ``out`` packed the same way (framed: the input's columns, SEQ
    and EMIT)."""
    frame, preceding = spec.frame, spec.preceding
    columns = source.fieldNames() if framed else [c for _, c in spec.outputs if isinstance(c, str)]
    args = [] if framed else [a.arg for a in spec.aggregates]
    functions = [a.function for a in spec.aggregates]
    read, write = reader(source), writer(out)

    def run(key, pdfs, state) -> Iterator[Any]:
        import warnings

        import pandas as pd

        # pyspark's worker concatenates the groups' outputs, some empty: pandas warns each time
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)

        watermark = state.getCurrentWatermarkMs() * 1000
        held = _held(state, framed)
        pending, kept, accs, seq = held or ([], [], [_empty(f) for f in functions], 0)
        for pdf in pdfs:
            for packed in pdf[ROW].tolist():
                values = read(packed)
                row = tuple(values[c] for c in columns)
                pending.append((values[TIME], seq, row, tuple(values[a] if a else 1 for a in args)))
                seq += 1
        ready = sorted(r for r in pending if r[0] <= watermark)
        pending = [r for r in pending if r[0] > watermark]
        if framed:
            out = [(*r[2], r[1], False) for r in kept] + [(*r[2], r[1], True) for r in ready]
        else:
            out = [_result_row(spec, columns, r, results) for r, results in
                   (_emit(ready, accs, frame, functions) if ready else [])]  # fmt: skip
        if ready:
            kept = _keep(kept + ready, frame, preceding)
        if frame == RANGE:  # rows after the watermark cannot reach further back than this
            kept = [r for r in kept if r[0] > watermark - preceding]
        if pending:
            state.update((pickle.dumps((pending, kept, accs, seq, LAYOUT)),))
            due = min(r[0] for r in pending)
            state.setTimeoutTimestamp(max(math.ceil(due / 1000) - 1, watermark // 1000))
        elif frame == RANGE and kept:
            state.update((pickle.dumps((pending, kept, accs, seq, LAYOUT)),))
            state.setTimeoutTimestamp(max((kept[-1][0] + preceding) // 1000, watermark // 1000))
        elif frame == RANGE or not (kept or ready or held):
            state.remove()
        else:
            state.update((pickle.dumps((pending, kept, accs, seq, LAYOUT)),))
        if ready:
            yield pd.DataFrame({ROW: [write(r) for r in out]}, columns=[ROW])

    return run


def _held(state, framed: bool) -> Optional[tuple]:
    """The key's state record (pending, kept, accumulators, next arrival number), or None. A
    record without LAYOUT is of the layout before it: the same for an unbounded frame; a
    bounded frame's held other rows, and its query cannot go on from it (SSR324). Before layout
    3 the rows' values came through pandas columns, where a float NaN was a NULL: read so."""
    if not state.exists:
        return None
    held = pickle.loads(state.get[0])
    if len(held) == 4 and framed:
        raise RuntimeError(
            "OVER operator state of another layout: written by an older dbt-spark-streaming "
            "for a RANGE or ROWS frame"
        )
    pending, kept, accs, seq = held[:4]
    if len(held) == 4 or held[4] < 3:
        pending, kept = ([_nan_is_null(r) for r in rows] for rows in (pending, kept))
    return pending, kept, accs, seq


def _nan_is_null(row: tuple) -> tuple:
    """A held row of layout 1 or 2 (time, arrival, values, aggregate arguments), NaN as NULL."""
    time, seq, values, args = row
    return time, seq, *(tuple(None if _nan(v) else v for v in vs) for vs in (values, args))


def _result_row(spec: OverSpec, columns: List[str], row: tuple, results: list) -> tuple:
    """An unbounded frame's output row: its columns in ``spec.outputs``'s order."""
    return tuple(
        row[2][columns.index(ref)] if isinstance(ref, str) else results[ref]
        for _, ref in spec.outputs
    )


MOMENTS = ("stddev_samp", "stddev_pop", "var_samp", "var_pop")


def _empty(function: str) -> list:
    """A running accumulator: the non-null count, sum, min, max; for the variance family also
    Welford's mean and M2, updated as Spark's stddev and variance update theirs."""
    return [0, None, None, None] + ([0.0, 0.0] if function in MOMENTS else [])


def _add(acc: list, value: Any, function: str) -> None:
    if value is None:
        return
    acc[0] += 1
    if function in ("sum", "avg", "count_if"):
        acc[1] = value if acc[1] is None else acc[1] + value
    elif function in ("min", "bool_and"):
        acc[2] = value if acc[2] is None or _less(value, acc[2]) else acc[2]
    elif function in ("max", "bool_or"):
        acc[3] = value if acc[3] is None or _less(acc[3], value) else acc[3]
    elif function in MOMENTS:
        delta = float(value) - acc[4]
        delta_n = delta / acc[0]
        acc[4] += delta_n
        acc[5] += delta * (delta - delta_n)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _less(a: Any, b: Any) -> bool:
    """a < b in Spark's order, where NaN is above every other number."""
    return not _nan(a) and (_nan(b) or a < b)


def _result(acc: list, function: str) -> Any:
    count, total, low, high = acc[:4]
    if function == "count":
        return count
    if function == "avg":
        return None if count == 0 else total / count
    if function == "count_if":
        return int(total or 0)
    if function in MOMENTS:  # Spark: NULL without rows, and a sample's with one row
        sample = function.endswith("_samp")
        if count == 0 or (sample and count == 1):
            return None
        variance = acc[5] / (count - 1 if sample else count)
        return math.sqrt(variance) if function.startswith("stddev") else variance
    return {"sum": total, "min": low, "max": high, "bool_and": low, "bool_or": high}[function]


def _emit(ready, accs, frame, functions):
    """(row, [aggregate results]) for each row of ``ready`` (sorted), in order, over an unbounded
    frame: the accumulators ``accs`` take each row in turn (RANGE: all peers first)."""
    out = []
    i = 0
    while i < len(ready):
        end = i + 1
        if frame == UNBOUNDED_RANGE:  # peers: every row of the same time
            while end < len(ready) and ready[end][0] == ready[i][0]:
                end += 1
        for r in ready[i:end]:
            for j, (acc, function) in enumerate(zip(accs, functions, strict=True)):
                _add(acc, r[3][j], function)
        results = [_result(acc, f) for acc, f in zip(accs, functions, strict=True)]
        out.extend((r, results) for r in ready[i:end])
        i = end
    return out


def _keep(rows: list, frame: str, preceding: Optional[int]) -> list:
    """The emitted rows a later row's frame may still include."""
    if frame == RANGE:
        return [r for r in rows if r[0] >= rows[-1][0] - preceding]
    if frame == ROWS:
        return rows[len(rows) - preceding :] if preceding else []
    return []
