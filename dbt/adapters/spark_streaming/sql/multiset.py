"""MIN, MAX and COUNT(DISTINCT) over a retracting input, kept as a count per value.

A removed row cannot be subtracted from a MIN: when the smallest value is retracted, the next
smallest must still be known. Flink keeps such aggregates under retraction as a map from value
to how many input rows hold it (``MinWithRetractAggFunction``); so does this module, as a Spark
``MAP<value, BIGINT>`` per group, built from the changelog's signed rows (sql/retract.py: each
aggregate's argument is ``STRUCT(value AS v, __s AS s)``, ``__s`` +1 or -1)::

    partial   a batch's rows, with the sum of the signs per group key and value (a window
              column), one row per pair collected into a map (NULL values skipped, as MIN,
              MAX and COUNT(DISTINCT) skip them)
    merge     sum the maps of a group key by value (MAP_ZIP_WITH); drop values counted 0
    final     MIN: ARRAY_MIN(MAP_KEYS(<values counted above 0>)), MAX: ARRAY_MAX(...),
              COUNT(DISTINCT): their number

A map holds one entry per distinct value present in its group, so its size is bounded by the
group's distinct values, not by the changes it has seen. The partials live in Delta
(sql/state.py split_aggregate, runtime/partials.py), never in Spark's state. The batch
oracle computes it another way: one scan of each group's signed rows sorted by value.
"""

from __future__ import annotations

from functools import lru_cache
from typing import List, Sequence

import sqlglot
from sqlglot import exp

ARGUMENT = "__arg"  # the placeholder column in the templates below

_MERGE = (
    "MAP_FILTER(AGGREGATE(SLICE(COLLECT_LIST(__arg), 2, SIZE(COLLECT_LIST(__arg)) - 1), "
    "ELEMENT_AT(COLLECT_LIST(__arg), 1), (__m, __x) -> MAP_ZIP_WITH(__m, __x, "
    "(__v, __a, __b) -> COALESCE(__a, 0) + COALESCE(__b, 0))), (__v, __n) -> __n <> 0)"
)
_PRESENT = "MAP_KEYS(MAP_FILTER(__arg, (__v, __n) -> __n > 0))"
# the oracle: one pass over a group's (value, sign) rows sorted by value, summing each value's
# signs and taking, at the end of each value's run, the value if its sum is above 0 (linear
# after the sort; folding the rows into a map would cost rows x values)
_SORTED = "ARRAY_SORT(FILTER(COLLECT_LIST(__arg), __e -> NOT __e.v IS NULL))"
_SCAN = (  # over the sorted rows, bound once as __l
    "ELEMENT_AT(TRANSFORM(ARRAY(__arg), __l -> AGGREGATE(__l, STRUCT(TRY_ELEMENT_AT(__l, 1).v AS "
    "v, CAST(0 AS BIGINT) AS n, IF(FALSE, TRY_ELEMENT_AT(__l, 1).v, NULL) AS lo, IF(FALSE, "
    "TRY_ELEMENT_AT(__l, 1).v, NULL) AS hi, CAST(0 AS BIGINT) AS cnt), (__r, __e) -> IF(__e.v "
    "<=> __r.v, STRUCT(__r.v AS v, __r.n + __e.s AS n, __r.lo AS lo, __r.hi AS hi, __r.cnt AS "
    "cnt), STRUCT(__e.v AS v, CAST(__e.s AS BIGINT) AS n, IF(__r.n > 0, COALESCE(__r.lo, "
    "__r.v), __r.lo) AS lo, IF(__r.n > 0, __r.v, __r.hi) AS hi, __r.cnt + IF(__r.n > 0, 1, 0) "
    "AS cnt)), __r -> STRUCT(IF(__r.n > 0, COALESCE(__r.lo, __r.v), __r.lo) AS lo, IF(__r.n > "
    "0, __r.v, __r.hi) AS hi, __r.cnt + IF(__r.n > 0, 1, 0) AS cnt))), 1)"
)


class Retracted(exp.Expression, exp.AggFunc):  # (sqlglot's own aggregates list both)
    """An aggregate of ``this`` (``STRUCT(value AS v, sign AS s)``) under retraction."""

    arg_types = {"this": True}
    FINAL = ""  # the aggregate of the values present (__arg)
    SCANNED = ""  # its field of _SCAN's result

    def oracle(self) -> exp.Expr:
        """The aggregate as batch SQL over all the signed rows of a group (a sorted scan, not
        the stream's maps: the oracle computes it another way)."""
        scan = _filled(_SCAN, _filled(_SORTED, self.this))
        return exp.Dot(this=exp.Paren(this=scan), expression=exp.to_identifier(self.SCANNED))


class RetractedMin(Retracted):
    FINAL, SCANNED = "ARRAY_MIN(__arg)", "lo"


class RetractedMax(Retracted):
    FINAL, SCANNED = "ARRAY_MAX(__arg)", "hi"


class RetractedCountDistinct(Retracted):
    FINAL, SCANNED = "CAST(SIZE(__arg) AS BIGINT)", "cnt"


RETRACTED = (RetractedMin, RetractedMax, RetractedCountDistinct)


@lru_cache(maxsize=None)
def _template(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read="spark")


def _filled(sql: str, arg: exp.Expr) -> exp.Expr:
    def fill(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.name == ARGUMENT and not node.table:
            return arg.copy()
        return node

    return _template(sql).copy().transform(fill)


def window_columns(arg: exp.Column, keys: Sequence[str]) -> List[exp.Expr]:
    """Columns to add to a batch's rows for ``partial(arg)``: per group key and value, the sum
    of the signs, and one row marked (Spark sorts the rows once; a fold of the rows into a
    map would cost rows x values)."""
    a, by = arg.name, ", ".join([*keys, f"{arg.name}.v"])
    return [
        sqlglot.parse_one(f"SUM({a}.s) OVER (PARTITION BY {by}) AS {a}_n", read="spark"),
        sqlglot.parse_one(
            f"ROW_NUMBER() OVER (PARTITION BY {by} ORDER BY {a}.s) = 1 AS {a}_first", read="spark"
        ),
    ]


def partial(arg: exp.Column) -> exp.Expr:
    """The value -> count map of a group's rows (an aggregate over them, ``window_columns``
    added), NULL values left out."""
    a = arg.name
    return sqlglot.parse_one(
        f"MAP_FROM_ENTRIES(COLLECT_LIST(IF({a}_first AND NOT {a}.v IS NULL, "
        f"STRUCT({a}.v AS k, {a}_n AS n), NULL)))",
        read="spark",
    )


def merge(maps: exp.Expr) -> exp.Expr:
    """The sum of the maps ``maps`` (an aggregate over a group's partials)."""
    return _filled(_MERGE, maps)


def final(kind: type, counts: exp.Expr) -> exp.Expr:
    """The aggregate ``kind`` (a Retracted class) of the map ``counts``."""
    assert issubclass(kind, Retracted) and kind.FINAL
    return _filled(kind.FINAL, _filled(_PRESENT, counts))
