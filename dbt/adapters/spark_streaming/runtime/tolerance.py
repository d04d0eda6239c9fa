"""The float tolerance of snapshot_equivalence (runtime/equivalence.py): FLOAT and DOUBLE columns
of the table and of the batch query are equal within a tolerance, every other type exactly.

A stream adds partial sums in another order than the batch query, and floating-point addition
is not associative: a correct table holds 2036.7600000000002 where the batch query says
2036.76. Two values a and b are equal when a = b (NaN equals NaN, an infinity only itself,
NULL only NULL) or |a - b| <= max(rel * max(|a|, |b|), floor).

The exact pass of the check leaves the rows that differ, missing (from the batch query) and
unexpected (in the table). `pair` pairs them in Spark: within each group of equal non-float
values, the n-th missing row with the n-th unexpected row, each side in the order of its
float values, and a pair whose floats are all within the tolerance counts as equal. Rows that
pass stay unpaired (a group whose sorted orders do not line up, with several float columns)
get a second chance in Python when few (`pair_rows`, greedy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

FLOAT_TOLERANCE = 1e-9  # relative: a sum's rounding error is ~1e-16 of its size per term
FLOAT_ABS_TOLERANCE = 1e-12  # near zero, where a relative tolerance is no tolerance
SECOND_CHANCE = 2_000  # differing rows left after the Spark pass paired again in Python
SAMPLE_PAIRS = 5  # pairs beyond the tolerance described in the summary


def within(a: Optional[float], b: Optional[float], rel: float, floor: float) -> bool:
    """Whether float values `a` and `b` are equal within the tolerance (module docstring)."""
    if a is None or b is None:
        return a is None and b is None
    if a != a or b != b:  # NaN
        return a != a and b != b
    if a == b:
        return True
    big = max(abs(a), abs(b))
    return big != float("inf") and abs(a - b) <= max(rel * big, floor)


def describe(at: str, column: str, a: Any, b: Any, rel: float, floor: float) -> str:
    """A line saying that `column` of the row at `at` is `a` in the batch query and `b` in the
    table, with their difference and the tolerance."""
    head = f"{column} ({at}): {a} from the batch query, {b} in the table"
    if a is None or b is None or a != a or b != b:
        return head
    diff = abs(a - b)
    scale = max(abs(a), abs(b))
    relative = f"{diff / scale:.3g}" if scale and scale != float("inf") else "-"
    return (
        f"{head}: differs by {diff:.3g} (relative {relative}), beyond the tolerance "
        f"(relative {rel:g}, absolute {floor:g})"
    )


@dataclass
class Paired:
    """What pairing the differing rows found."""

    rows: Any  # DataFrame of the rows left: _diff, then the columns
    missing: int
    unexpected: int
    matched: int = 0  # pairs equal within the tolerance
    largest: Optional[tuple[str, float, float]] = None  # (column, absolute, relative)
    beyond: list[str] = field(default_factory=list)  # lines: pairs differing beyond it


def _largest(
    largest: Optional[tuple[str, float, float]], column: str, a: float, b: float
) -> Optional[tuple[str, float, float]]:
    if a is None or b is None or a != a or b != b or a == b:
        return largest
    diff, scale = abs(a - b), max(abs(a), abs(b))
    relative = diff / scale
    return max(largest, (column, diff, relative), key=lambda t: (t[2] or 0.0, t[1]) if t else (-1,))


def pair_rows(
    missing: list[tuple], unexpected: list[tuple], floats: set[int], rel: float, floor: float
):
    """Pair `missing` with `unexpected` rows (tuples of the columns) greedily: equal at every
    position not in `floats`, within the tolerance at those. Returns the missing and the
    unexpected rows left and the pairs made."""
    groups: dict[str, list[tuple]] = {}
    for row in unexpected:
        groups.setdefault(_key(row, floats), []).append(row)
    left, pairs = [], []
    for row in missing:
        candidates = groups.get(_key(row, floats), [])
        for j, other in enumerate(candidates):
            if all(within(row[i], other[i], rel, floor) for i in floats):
                pairs.append((row, candidates.pop(j)))
                break
        else:
            left.append(row)
    return left, [r for rows in groups.values() for r in rows], pairs


def _key(row: tuple, floats: set[int]) -> str:
    # repr: values of one column have one type; arrays and maps are not hashable
    return repr(tuple(v for i, v in enumerate(row) if i not in floats))


def _order(value: Any) -> tuple:
    """Spark's ascending order of a float: NULL first, NaN last."""
    if value is None:
        return (0, 0.0)
    return (2, 0.0) if value != value else (1, value)


def _lines(missing, unexpected, columns, floats: set[int], rel: float, floor: float):
    """Lines describing the floats beyond the tolerance of the rows left, each group's n-th
    missing row against its n-th unexpected one (in the order of their floats)."""
    groups: dict[str, tuple[list, list]] = {}
    for side, rows in ((0, missing), (1, unexpected)):
        for row in rows:
            groups.setdefault(_key(row, floats), ([], []))[side].append(row)
    order = sorted(floats)
    lines: list[str] = []
    for left, right in groups.values():
        left, right = (
            sorted(s, key=lambda r: [_order(r[i]) for i in order]) for s in (left, right)
        )
        for m, u in zip(left, right, strict=False):
            at = ", ".join(f"{c} {m[i]}" for i, c in enumerate(columns) if i not in floats)
            lines += [
                describe(at, columns[i], m[i], u[i], rel, floor)
                for i in order
                if not within(m[i], u[i], rel, floor)
            ]
    return lines[:SAMPLE_PAIRS]


def float_columns(df) -> list[str]:
    return [f.name for f in df.schema.fields if f.dataType.typeName() in ("double", "float")]


def _close(a, b, rel: float, floor: float):
    """`within` of float columns `a` and `b`, in Spark (where NaN equals NaN)."""
    from pyspark.sql import functions as F

    big = F.greatest(F.abs(a), F.abs(b))
    near = (big < F.lit(float("inf"))) & (
        F.abs(a - b) <= F.greatest(F.lit(rel) * big, F.lit(floor))
    )
    return a.eqNullSafe(b) | F.coalesce(near, F.lit(False))


def subtract(rows, earlier, rel: float, floor: float):
    """`rows` less `earlier` (as exceptAll), a row of `earlier` also taking away a row of `rows`
    equal to it but for float columns within the tolerance: what two batch computations of the
    same rows (a window's SUM over other files, so in another order) leave. The rows exceptAll
    leaves on each side are paired as `pair` does: the n-th of each group of equal non-float
    values, in the order of the float values."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    earlier = earlier.select(*[F.col(f"`{c}`") for c in rows.columns])
    floats = float_columns(rows)
    if not floats or not (rel or floor):
        return rows.exceptAll(earlier)
    keys = [f"`{c}`" for c in rows.columns if c not in floats]
    order = Window.partitionBy(*keys).orderBy(*[f"`{c}`" for c in floats])
    left = rows.exceptAll(earlier).withColumn("__n", F.row_number().over(order)).alias("r")
    gone = earlier.exceptAll(rows).withColumn("__n", F.row_number().over(order)).alias("e")
    on = [F.col(f"r.{k}").eqNullSafe(F.col(f"e.{k}")) for k in keys]
    on += [F.col("r.__n") == F.col("e.__n")]
    on += [_close(F.col(f"r.`{c}`"), F.col(f"e.`{c}`"), rel, floor) for c in floats]
    return left.join(gone, on, "left_anti").drop("__n")


def pair(rows, columns: list[str], floats: list[str], counts: tuple[int, int], rel, floor):
    """Pair the differing `rows` (column _diff, then `columns`; `counts` of missing and
    unexpected ones) that are equal but for `floats` within the tolerance (module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    names = {c: f"c{i}" for i, c in enumerate(columns)}
    keys = [names[c] for c in columns if c not in floats]
    numbered = (
        rows.select("_diff", *[F.col(f"`{c}`").alias(names[c]) for c in columns])
        .withColumn(
            "__n",
            F.row_number().over(
                Window.partitionBy("_diff", *keys).orderBy(*[names[c] for c in floats])
            ),
        )
        .withColumn("__id", F.monotonically_increasing_id())
        .localCheckpoint()
    )
    m = numbered.where(F.col("_diff") == "missing").alias("m")
    u = numbered.where(F.col("_diff") == "unexpected").alias("u")
    on = [F.col(f"m.{k}").eqNullSafe(F.col(f"u.{k}")) for k in keys]
    pairs = m.join(u, on + [F.col("m.__n") == F.col("u.__n")], "inner")
    sides = {c: (F.col(f"m.{names[c]}"), F.col(f"u.{names[c]}")) for c in floats}
    every = F.lit(True)
    for a, b in sides.values():
        every = every & _close(a, b, rel, floor)
    pairs = pairs.withColumn("__within", every).localCheckpoint()
    equal = pairs.where("__within")
    # per float column, the largest absolute and relative difference of the pairs within
    diffs = {c: F.when(~a.eqNullSafe(b), F.abs(a - b)) for c, (a, b) in sides.items()}
    stats = equal.agg(
        F.count(F.lit(1)),
        *[F.max(diffs[c]) for c in floats],
        *[
            F.max(F.try_divide(diffs[c], F.greatest(F.abs(a), F.abs(b))))
            for c, (a, b) in sides.items()
        ],
    ).first()
    matched = int(stats[0])
    found = [(c, stats[1 + i], stats[1 + len(floats) + i]) for i, c in enumerate(floats)]
    found = [f for f in found if f[1] is not None]
    largest = max(found, key=lambda f: (f[2] or 0.0, f[1])) if found else None
    used = equal.select(F.col("m.__id").alias("__id")).union(equal.select(F.col("u.__id")))
    left = numbered.join(used, "__id", "left_anti").select(
        "_diff", *[F.col(names[c]).alias(c) for c in columns]
    )
    paired = Paired(left, counts[0] - matched, counts[1] - matched, matched, largest)

    at = {i for i, c in enumerate(columns) if c in floats}
    if paired.missing and paired.unexpected and paired.missing + paired.unexpected <= SECOND_CHANCE:
        collected = left.collect()
        ms, us, more = pair_rows(
            [tuple(r)[1:] for r in collected if r[0] == "missing"],
            [tuple(r)[1:] for r in collected if r[0] == "unexpected"],
            at,
            rel,
            floor,
        )
        for a, b in more:
            for i in at:
                paired.largest = _largest(paired.largest, columns[i], a[i], b[i])
        if more:
            data = [("missing", *r) for r in ms] + [("unexpected", *r) for r in us]
            spark = rows.sparkSession
            paired.rows = spark.createDataFrame(data, left.schema) if data else left.limit(0)
            paired.matched += len(more)
            paired.missing, paired.unexpected = len(ms), len(us)
        paired.beyond = _lines(ms, us, columns, at, rel, floor)
    elif paired.missing and paired.unexpected:
        shown = [F.col(f"m.{k}").alias(f"k{i}") for i, k in enumerate(keys)]
        for i, (a, b) in enumerate(sides.values()):
            shown += [a.alias(f"m{i}"), b.alias(f"u{i}")]
        for row in pairs.where("NOT __within").select(*shown).limit(SAMPLE_PAIRS).collect():
            where = ", ".join(
                f"{c} {row[f'k{i}']}" for i, c in enumerate(c for c in columns if c not in floats)
            )
            paired.beyond += [
                describe(where, c, row[f"m{i}"], row[f"u{i}"], rel, floor)
                for i, c in enumerate(floats)
                if not within(row[f"m{i}"], row[f"u{i}"], rel, floor)
            ]
        paired.beyond = paired.beyond[:SAMPLE_PAIRS]
    return paired
