"""Coded errors of the adapter (config, runtime, Delta). The SQL front-end has its own
`sql.SqlError`; both render as ``[dbt-spark-streaming CODE] what: why. fix``.

Codes
  SSC2xx  model config       SSR3xx  stream runtime / lifecycle       SSD4xx  Delta tables
  SST5xx  the snapshot_equivalence test
"""

from __future__ import annotations

from dbt_common.exceptions import DbtRuntimeError


class StreamingError(DbtRuntimeError):
    """A failure the user can act on: what failed, why, and how to fix it."""

    def __init__(self, code: str, what: str, why: str, fix: str):
        self.code, self.what, self.why, self.fix = code, what, why, fix
        super().__init__(f"[dbt-spark-streaming {code}] {what}: {why}. {fix}")


def config_error(key: str, got: object, expected: str, fix: str = "") -> StreamingError:
    """SSC201: a model config key has a value the adapter does not accept."""
    return StreamingError(
        "SSC201",
        f"invalid config `{key}`",
        f"Got: {got!r} / Expected: {expected}",
        fix
        or f"Set `{key}` in the model's config() or in dbt_project.yml to one of the expected "
        "values.",
    )
