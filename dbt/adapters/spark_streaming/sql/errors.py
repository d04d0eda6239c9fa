"""Structured, user-facing errors raised by the SQL front-end."""

from __future__ import annotations

from typing import Optional, Tuple

Position = Optional[Tuple[int, int]]


class SqlError(Exception):
    """A model-SQL problem with a stable code and a what / why / fix message.

    ``str(e)`` is ``"[dbt-spark-streaming CODE] what: why. fix"`` followed by
    ``" (line L, column C)"`` when the position in the model SQL is known.
    """

    def __init__(self, code: str, what: str, why: str, fix: str, position: Position = None):
        self.code = code
        self.what = what
        self.why = why.rstrip(".")
        self.fix = fix
        self.position = position
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"[dbt-spark-streaming {self.code}] {self.what}: {self.why}. {self.fix}"
        if self.position is not None:
            text += f" (line {self.position[0]}, column {self.position[1]})"
        return text

    def __str__(self) -> str:
        return self._render()
