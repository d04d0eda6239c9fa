"""Group windows (Flink's and Calcite's older syntax) rewritten to the window TVF query.

::

    SELECT user, TUMBLE_START(ts, INTERVAL '1' HOUR) AS w, SUM(amount)
    FROM orders GROUP BY TUMBLE(ts, INTERVAL '1' HOUR), user

is the window aggregate

::

    SELECT user, window_start AS w, SUM(amount)
    FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' HOUR))
    GROUP BY window_start, window_end, user

and is then compiled as one (rewrite.py), so both give the same rows. ``HOP(ts, slide, size)``
becomes the HOP TVF, ``SESSION(ts, gap)`` the SESSION TVF partitioned by the other GROUP BY keys
(a group window's sessions are per key). The auxiliary functions ``<W>_START`` / ``<W>_END`` /
``<W>_ROWTIME`` become ``window_start`` / ``window_end`` / ``window_time`` (Flink's rowtime of a
window is its end minus 1 ms, as ``window_time``). Calcite's alignment argument
(``TUMBLE(ts, INTERVAL '30' MINUTE, TIME '0:12')``: windows start at 0:12, 0:42, ...) is the
TVF's offset: the time of day modulo the size (HOP: the slide).

Calcite's ``GROUP BY FLOOR(ts TO HOUR)`` is a tumbling window of one hour whose value is
``window_start``. ``CEIL(ts TO HOUR)`` groups the rows of (h - 1 hour, h] under h: a tumbling
window offset by one microsecond, whose value is ``window_end`` minus one microsecond. Units of
a fixed length only (DAY to MILLISECOND; days are UTC days, the session's time zone); other
units (WEEK, MONTH, ...) stay ordinary GROUP BY expressions (``DATE_TRUNC``, dialect.py).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from sqlglot import exp

from .analysis import own_nodes, window_key
from .dialect import PartitionedTable, WindowTVF
from .errors import POSITION, SqlError, position_of
from .intervals import duration_string, interval_micros

_SIGNATURES = {
    "TUMBLE": "TUMBLE(<time column>, <size interval> [, <alignment TIME>])",
    "HOP": "HOP(<time column>, <slide interval>, <size interval> [, <alignment TIME>])",
    "SESSION": "SESSION(<time column>, <gap interval>)",
}
_ARITY = {"TUMBLE": (2, 3), "HOP": (3, 4), "SESSION": (2, 2)}
_AUX = {
    f"{w}_{suffix}": (w, column)
    for w in _SIGNATURES
    for suffix, column in (("START", "window_start"), ("END", "window_end"))
} | {f"{w}_ROWTIME": (w, "window_time") for w in _SIGNATURES}
_FLOOR_UNITS = {
    "DAY": "DAY",
    "HOUR": "HOUR",
    "MINUTE": "MINUTE",
    "SECOND": "SECOND",
    "MILLISECOND": "MILLISECOND",
}
_DAY_US = 86_400_000_000


def _error(what: str, why: str, fix: str, node: Optional[exp.Expr]) -> SqlError:
    return SqlError("SSV113", what, why, fix, node)


def _is_floor_window(node: exp.Expr) -> bool:
    unit = node.args.get("to") if isinstance(node, (exp.Floor, exp.Ceil)) else None
    return (
        isinstance(unit, exp.Var)
        and unit.name.upper() in _FLOOR_UNITS
        and isinstance(node.this, exp.Column)
    )


def _is_group_window(node: exp.Expr) -> bool:
    return (
        isinstance(node, exp.Anonymous) and node.name.upper() in _SIGNATURES
    ) or _is_floor_window(node)


def _single_table(select: exp.Select, ctes: Set[str]) -> Optional[exp.Table]:
    """The one relation a SELECT reads (no join, not a CTE, subquery or TVF), if so."""
    from_ = select.args.get("from_")
    if from_ is None or select.args.get("joins") or select.args.get("laterals"):
        return None
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    if not table.db and table.name.lower() in ctes:
        return None
    return table


def _time_of_day_us(node: exp.Expr) -> Optional[int]:
    """Microseconds since midnight of a ``TIME 'h:mm[:ss[.ffffff]]'`` literal, or None."""
    if not (
        isinstance(node, exp.Cast)
        and node.to.this == exp.DataType.Type.TIME
        and isinstance(node.this, exp.Literal)
    ):
        return None
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?\s*", node.this.name)
    if m is None:
        return None
    h, mi, s, frac = m.groups()
    return ((int(h) * 60 + int(mi)) * 60 + int(s or 0)) * 1_000_000 + int(
        (frac or "").ljust(6, "0")
    )


def _interval(us: int) -> exp.Interval:
    """An interval literal of ``us`` microseconds (INTERVAL '720' SECOND)."""
    number, unit = duration_string(us).split()
    return exp.Interval(this=exp.Literal.string(number), unit=exp.var(unit.upper().rstrip("S")))


def _tvf_arguments(win: exp.Expr) -> Tuple[str, exp.Column, List[exp.Expr]]:
    """(TVF name, time column, size arguments) of a group window (SSV113 on bad arguments)."""
    if isinstance(win, (exp.Floor, exp.Ceil)):
        unit = _FLOOR_UNITS[win.args["to"].name.upper()]
        size: List[exp.Expr] = [exp.Interval(this=exp.Literal.string("1"), unit=exp.var(unit))]
        if isinstance(win, exp.Ceil):  # (h - 1 unit, h]: windows start 1 us after the unit
            size.append(_interval(1))
        return "TUMBLE", win.this, size
    name = win.name.upper()
    args = list(win.expressions)
    low, high = _ARITY[name]
    fix = f"Write GROUP BY {_SIGNATURES[name]}, <keys>; or the window TVF TABLE({name}(...))."
    if not low <= len(args) <= high or not isinstance(args[0], exp.Column):
        raise _error(
            f"invalid group window {win.sql(dialect='spark')}",
            f"{name} takes {_SIGNATURES[name]}: {low} to {high} arguments, a column of the "
            "table first",
            fix,
            win,
        )
    sizes = args[1:low]
    if len(args) == high and name != "SESSION":  # Calcite's alignment: the TVF's offset
        align = _time_of_day_us(args[-1])
        period = interval_micros(sizes[0])  # TUMBLE: the size; HOP: the slide
        period_name = "slide" if name == "HOP" else "size"
        if align is None or align >= _DAY_US or period is None or period <= 0:
            raise _error(
                f"invalid alignment {args[-1].sql(dialect='spark')} of group window {name}",
                "the alignment is a time of day (TIME 'h:mm[:ss]') at which windows start, "
                f"and needs an interval literal as the window's {period_name}",
                fix,
                args[-1],
            )
        sizes.append(_interval(align % period))
    return name, args[0], sizes


def _same_window(aux: exp.Expr, win: exp.Expr) -> bool:
    """Whether an auxiliary function names the group window's time column and sizes."""

    def shape(args: List[exp.Expr]) -> List[object]:
        return [
            a.name.lower()
            if isinstance(a, exp.Column)
            else interval_micros(a) or a.sql(dialect="spark")
            for a in args
        ]

    return shape(list(aux.expressions)) == shape(list(win.expressions))


def _replace_aux(select: exp.Select, win: exp.Expr, name: str) -> None:
    """Replace the auxiliary functions (or FLOOR / CEIL expressions) of ``win`` in ``select``'s
    projections and HAVING by the TVF's window columns."""
    for node in list(own_nodes(select, "expressions", "having")):
        if isinstance(win, (exp.Floor, exp.Ceil)):
            if node == win and node is not win:
                column: exp.Expr = exp.column("window_start")
                if isinstance(win, exp.Ceil):
                    column = exp.Sub(this=exp.column("window_end"), expression=_interval(1))
                node.replace(column)
            continue
        if not isinstance(node, exp.Anonymous) or node.name.upper() not in _AUX:
            continue
        kind, target = _AUX[node.name.upper()]
        if kind != name or not _same_window(node, win):
            raise _error(
                f"{node.sql(dialect='spark')} does not match the group window "
                f"{win.sql(dialect='spark')}",
                f"{node.name.upper()} returns a bound of the {kind} group window with the same "
                "arguments in the GROUP BY",
                f"Call it with the arguments of the GROUP BY's {name}(...).",
                node,
            )
        node.replace(exp.column(target))


def _rewrite(select: exp.Select, ctes: Set[str]) -> None:
    group = select.args.get("group")
    found = [g for g in (group.expressions if group else []) if _is_group_window(g)]
    if group is None or not found:
        return
    if len(found) > 1:
        raise _error(
            "more than one group window in a GROUP BY",
            "each row belongs to the windows of one group window",
            "Group by one TUMBLE, HOP, SESSION, FLOOR or CEIL of the time column.",
            found[1],
        )
    win = found[0]
    table = _single_table(select, ctes)
    if table is None:
        if _is_floor_window(win):
            return  # an ordinary GROUP BY expression over a join, subquery or CTE
        raise _error(
            f"group window {win.sql(dialect='spark')} over something other than one table",
            "a group window is rewritten to a window TVF, whose input is a table (a join, "
            "subquery, CTE or window TVF in its FROM is not)",
            "Read the table directly in this SELECT's FROM, or write the window TVF over it "
            "(TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))) and join or filter its rows.",
            win,
        )
    name, time, sizes = _tvf_arguments(win)
    others = [g for g in group.expressions if g is not win]
    data: exp.Expr = table.copy()
    data.set("alias", None)
    if name == "SESSION" and others:
        bad = next((k for k in others if not isinstance(k, exp.Column)), None)
        if bad is not None:
            raise _error(
                f"SESSION group window with the key {bad.sql(dialect='spark')}, not a column",
                "sessions are formed per key: the keys become the SESSION TVF's PARTITION BY, "
                "which names columns of its table",
                "Group by columns of the table (compute the key in an upstream model).",
                bad,
            )
        data = PartitionedTable(this=data, expressions=[exp.column(k.name) for k in others])
    func = exp.var(name)
    func.meta["start"] = table.this.meta.get("start", 0)  # (the TVFs are ordered by it)
    position = position_of(win)
    if position is not None:
        func.meta[POSITION] = position
    descriptor = exp.Anonymous(this="DESCRIPTOR", expressions=[exp.column(time.name)])
    tvf = WindowTVF(this=func, expressions=[data, descriptor, *sizes])
    if table.args.get("alias") is not None:
        tvf.set("alias", table.args["alias"].copy())
    _replace_aux(select, win, name)
    table.replace(tvf)
    bounds: List[exp.Expr] = [exp.column("window_start"), exp.column("window_end")]
    group.set("expressions", bounds + others)


def rewrite_group_windows(tree: exp.Expr) -> None:
    """Rewrite every SELECT grouped by a group window (TUMBLE / HOP / SESSION, FLOOR / CEIL
    (ts TO unit)) into the window TVF query, in place; SSV113 for a group window or auxiliary
    function that cannot be rewritten."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for select in list(tree.find_all(exp.Select)):
        _rewrite(select, ctes)
    names: Dict[str, str] = {aux: w for aux, (w, _) in _AUX.items()}
    for node in tree.find_all(exp.Anonymous):
        if node.name.upper() in names:
            raise _error(
                f"{node.sql(dialect='spark')} outside a SELECT grouped by "
                f"{names[node.name.upper()]}(...)",
                "an auxiliary function returns a bound of its SELECT's group window",
                "Call it in the SELECT list or HAVING of the query that groups by the window, "
                "or use window_start / window_end of a window TVF.",
                node,
            )
    for node in tree.find_all(exp.Anonymous):
        if node.name.upper() in _SIGNATURES:
            raise _error(
                f"group window {node.sql(dialect='spark')} outside a GROUP BY",
                "TUMBLE, HOP and SESSION called as functions are group windows, and only "
                "group a SELECT",
                "Group by it (GROUP BY TUMBLE(ts, INTERVAL '1' HOUR), k), or use the window "
                "TVF TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size)) in the FROM.",
                node,
            )


def window_keys(
    select: exp.Select,
    keys: Sequence[exp.Expr],
    output_name: Callable[[exp.Select, exp.Expr], Optional[str]],
) -> Sequence[exp.Expr]:
    """A window aggregate's GROUP BY keys, less a window bound its result does not select when
    the other bound identifies the window (with the other keys): a TUMBLE's or HOP's end is its
    start plus the size, a key's sessions do not overlap, and a CUMULATE window's end names it
    (its start does not). Group windows select TUMBLE_START alone, FLOOR(ts TO HOUR) too.
    ``output_name`` is the result column a key is selected as, if any (sql/upsert.py)."""
    from_ = select.args.get("from_")
    tvf = from_.this if from_ is not None else None
    if not isinstance(tvf, WindowTVF):
        return keys
    bounds = {window_key(k, tvf): k for k in keys}
    keys = list(keys)
    for name, key in list(bounds.items()):  # a bound selected shifted: CEIL(ts TO HOUR)
        if name is None or output_name(select, key) is not None:
            continue
        shifted = next(iter(_shifted(select, key)), None)
        if shifted is not None:
            keys[keys.index(key)] = bounds[name] = shifted
    missing = [
        name
        for name in ("window_start", "window_end")
        if name in bounds and output_name(select, bounds[name]) is None
    ]
    if len(missing) != 1 or len(bounds.keys() & {"window_start", "window_end"}) != 2:
        return keys
    if tvf.function == "CUMULATE" and missing[0] != "window_start":
        return keys
    return [k for k in keys if k is not bounds[missing[0]]]


def _shifted(select: exp.Select, key: exp.Expr) -> List[exp.Expr]:
    """Projections of ``select`` that are ``key`` plus or minus an interval literal."""
    found: List[exp.Expr] = []
    for proj in select.expressions:
        target = proj.this if isinstance(proj, exp.Alias) else proj
        if (
            isinstance(target, (exp.Add, exp.Sub))
            and target.this == key
            and isinstance(target.expression, exp.Interval)
        ):
            found.append(target)
    return found
