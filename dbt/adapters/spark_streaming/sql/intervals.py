"""Interval / duration handling: Flink interval literals and config strings to microseconds."""

from __future__ import annotations

import re
from typing import Optional, Tuple

from sqlglot import exp

_US_PER_UNIT = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
_ALIASES = {
    "us": "microsecond",
    "usec": "microsecond",
    "usecs": "microsecond",
    "ms": "millisecond",
    "msec": "millisecond",
    "msecs": "millisecond",
    "s": "second",
    "sec": "second",
    "secs": "second",
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "d": "day",
}
# Only used on the *content* of a string literal such as '1 minute' or '1 hour 30 minutes'.
_PART = re.compile(r"\s*([+-]?\d+)\s*([A-Za-z_]+)\s*")


def unit_micros(unit: str) -> Optional[int]:
    """Microseconds in one ``unit`` (singular, plural or short form, any case), or None."""
    u = unit.strip().lower()
    u = _ALIASES.get(u, u)
    if u not in _US_PER_UNIT and u.endswith("s"):
        u = u[:-1]
    return _US_PER_UNIT.get(u)


def parse_duration(text: str) -> int:
    """Parse '1 minute', '30 seconds', '1 hour 30 minutes', '-1 minute' into microseconds.

    Raises ValueError if the text is not a sequence of ``<integer> <unit>`` parts.
    """
    pos, total, parts = 0, 0, 0
    text = text.strip()
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(text)
        per = unit_micros(m.group(2))
        if per is None:
            raise ValueError(text)
        total += int(m.group(1)) * per
        parts += 1
        pos = m.end()
    if parts == 0:
        raise ValueError(text)
    return total


def interval_micros(node: exp.Expr) -> Optional[int]:
    """Microseconds of an interval expression such as INTERVAL '10' MINUTES, or None.

    Accepts Flink/Spark spellings: ``INTERVAL '10' MINUTE[S]``, ``INTERVAL 10 MINUTES``,
    ``INTERVAL '10 minutes'``, ``INTERVAL '-1' MINUTES`` and a leading unary minus.
    """
    if isinstance(node, exp.Neg):
        inner = interval_micros(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Paren):
        return interval_micros(node.this)
    if not isinstance(node, exp.Interval):
        return None
    value, unit = node.this, node.args.get("unit")
    sign = 1
    if isinstance(value, exp.Neg):
        sign, value = -1, value.this
    if not isinstance(value, exp.Literal):
        return None
    try:
        if unit is None:
            return sign * parse_duration(value.name)
        if not isinstance(unit, exp.Var):
            return None
        per = unit_micros(unit.name)
        if per is None:
            return None
        return sign * int(value.name.strip()) * per
    except ValueError:
        return None


def _split(us: int) -> Tuple[int, str]:
    if us % 1_000_000 == 0:
        return us // 1_000_000, "seconds"
    if us % 1_000 == 0:
        return us // 1_000, "milliseconds"
    return us, "microseconds"


def duration_string(us: int) -> str:
    """A Spark duration string for ``window()``: 'N seconds', 'N milliseconds' or
    'N microseconds'."""
    n, unit = _split(us)
    return f"{n} {unit}"


def describe(us: int) -> str:
    """Human-readable duration for messages, e.g. '10 minutes', '-90 seconds',
    '1500 microseconds'."""
    for unit in ("week", "day", "hour", "minute", "second", "millisecond", "microsecond"):
        per = _US_PER_UNIT[unit]
        if us % per == 0:
            n = us // per
            return f"{n} {unit}" + ("" if abs(n) == 1 else "s")
    return f"{us} microseconds"  # pragma: no cover - microsecond always divides


def interval_literal(us: int) -> exp.Interval:
    """A Spark interval literal expression (e.g. INTERVAL '60' SECONDS) for ``us`` microseconds."""
    n, unit = _split(us)
    return exp.Interval(this=exp.Literal.string(str(n)), unit=exp.var(unit.upper()))
