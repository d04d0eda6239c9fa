"""SQL front-end of dbt-spark-streaming: Flink window TVFs (FLIP-145) rewritten to Spark SQL.

Models are written with Flink's windowing table-valued functions::

    SELECT window_start, window_end, item, SUM(price) AS total
    FROM TABLE(TUMBLE(TABLE analytics.bids, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
    GROUP BY window_start, window_end, item

:func:`compile_query` parses this with a sqlglot dialect (Spark + window TVFs + Spark 4's
``WATERMARK`` clause), checks it, and rewrites every TVF into a derived table over its input::

    (SELECT *, window(bidtime, '600 seconds', '600 seconds', '0 seconds') AS __w
     FROM analytics.bids WATERMARK bidtime DELAY OF INTERVAL '60' SECONDS) AS bids

The same SQL then runs over batch tables (the WATERMARK clause is a no-op there) and over
streaming views.

Why group by the window struct: Spark's append-mode check only lets an aggregation emit
finished groups when a GROUP BY key is the event-time ``window()`` attribute that carries the
watermark. ``window_start`` / ``window_end`` derived from it (``__w.start``) are ordinary
columns to that check, so a window aggregate's ``GROUP BY window_start, window_end, k`` becomes
``GROUP BY __w, k`` and its ``window_start`` / ``window_end`` / ``window_time`` references
become ``__w.start`` / ``__w.end`` / ``__w.end - INTERVAL 1 MILLISECOND``. A TVF that is not
aggregated is wrapped once more so it exposes exactly the input's columns plus
``window_start``, ``window_end`` and ``window_time`` (as in Flink), hiding ``__w``.

CUMULATE has no Spark built-in. Each cumulative window [S, S + k * step) is keyed by the Spark
sliding window (max size, step) that ends with it; a row's sliding windows that start after its
max window start S are filtered out, and ``window_start`` is S, computed from ``__w``. So its
aggregates group by ``__w`` like any other, and the watermark closes each cumulative window at
its own end (rewrite._windowed_input). SESSION uses ``session_window(ts, gap)`` as ``__w`` and
groups by it plus the PARTITION BY keys (a constant ``__p`` without them: Spark refuses a
streaming session aggregate with no other key). SESSION rows without an aggregate come from a
session aggregate that collects each session's rows and unnests them (INLINE).

A window join (two TVFs of the same kind and sizes, joined on both window bounds; joins.py)
gives each side its window struct ``__w`` and joins on ``L.__w = R.__w`` instead of the bounds,
so Spark's stream-stream join keeps each side's rows until the watermark passes ``__w.end``.
The sides may instead both be window aggregates of such TVFs: each also projects ``__w`` and
the join is on it; Spark chains aggregates and join in append mode, and a
window's rows of both sides reach the join in the micro-batch that closes it.

An interval join (intervaljoin.py: two tables joined on a key and bounded event times) reads
each side with a watermark on its time column and keeps the ON as written; window SEMI / ANTI
joins (semijoin.py: IN / EXISTS / NOT EXISTS over a second TVF) become window joins first.

A window Top-N (topn.py: ROW_NUMBER, RANK or DENSE_RANK over the rows of a TVF, filtered by
the rank) becomes a window aggregate too: it groups the rows by ``__w`` (and the PARTITION BY
keys), collects and sorts them, and unnests the top ones. Over a window aggregate, that
aggregate also projects ``__w`` and the Top-N groups its rows by it: Spark chains the two
stateful operators in append mode, the second emitting a window in the micro-batch in which
the first closes it. Over an INNER / LEFT / RIGHT window join of window aggregates (in a
subquery, or a CTE used only there, inlined), the join projects its left (RIGHT: right) side's
``__w`` and the Top-N groups by it: aggregate -> join -> aggregate, FLIP-145's
cumulative example.

Contract for other modules (sql/oracle.py): every windowed derived table projects Spark's
window struct as ``__w`` (``rewrite.WINDOW_STRUCT``), whose ``end`` is what Spark's state
eviction compares with the watermark, and every window aggregate groups by ``__w``. A Top-N
over a window aggregate groups by ``__w`` too, but reads it as a plain column of the
aggregate's rows (not as an ``AS __w`` projection), so the oracle applies the late-row and
closed-window rules to the first aggregate only.
"""

from .analysis import WindowSpec
from .compiler import QueryPlan, compile_query, parse_watermark_delay
from .dialect import SparkStreaming
from .errors import SqlError
from .temporaljoin import LATEST, SCD2, SOURCE_META, Versioned

__all__ = [
    "QueryPlan",
    "SparkStreaming",
    "SqlError",
    "LATEST",
    "SCD2",
    "SOURCE_META",
    "Versioned",
    "WindowSpec",
    "compile_query",
    "parse_watermark_delay",
]
