"""Structured, user-facing errors raised by the SQL front-end, and where in the model SQL they are.

The parser (dialect.py) stores on each node that carries a token's offset the (line, column) of
that token in the model SQL (``record_positions``); a ``SqlError`` raised on a node reports the
position of the node's first token. Nothing else needs the SQL text to say where an error is.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Optional, Tuple

from sqlglot import exp

Position = Optional[Tuple[int, int]]

POSITION = "dss_position"  # node.meta key: (line, column), 1-based, of the node's token


def record_positions(tree: exp.Expr, sql: str) -> None:
    """Store in ``tree``'s nodes the (line, column) of the token each starts with in ``sql``.

    sqlglot's ``line`` / ``col`` meta are where a token ends, and a string literal may span
    lines, so the position is computed here from ``start``, the token's offset in ``sql``.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", sql)]
    for node in tree.walk():
        start = node.meta_get("start")
        if isinstance(start, int):
            line = bisect_right(line_starts, start)
            node.meta[POSITION] = (line, start - line_starts[line - 1] + 1)


def position_of(node: Optional[exp.Expr]) -> Position:
    """(line, column), 1-based, of the first token of ``node`` in the model SQL, if known."""
    if node is None:
        return None
    return min(filter(None, (n.meta_get(POSITION) for n in node.walk())), default=None)


class SqlError(Exception):
    """A model-SQL problem with a stable code and a what / why / fix message.

    ``node`` is where in the parsed model SQL the problem is (None if nowhere in particular);
    ``position`` is the (line, column) of the node's first token, or, for a parse error (there
    is no tree yet), the ``position`` given. ``str(e)`` is
    ``"[dbt-spark-streaming CODE] what: why. fix"`` followed by ``" (line L, column C)"`` when
    the position is known.
    """

    def __init__(
        self,
        code: str,
        what: str,
        why: str,
        fix: str,
        node: Optional[exp.Expr] = None,
        *,
        position: Position = None,
    ):
        self.code = code
        self.what = what
        self.why = why.rstrip(".")
        self.fix = fix
        self.node = node
        self.position: Position = position if position is not None else position_of(node)
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"[dbt-spark-streaming {self.code}] {self.what}: {self.why}. {self.fix}"
        if self.position is not None:
            text += f" (line {self.position[0]}, column {self.position[1]})"
        return text

    def __str__(self) -> str:
        return self._render()
