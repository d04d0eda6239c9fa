"""A model whose compiled query changed over an existing table and checkpoint: go on with the
state (a change after the stateful operator, logged with its class) or refuse (SSR301, naming
the change), before any stream starts. The comparison is sql/querychange.py's; the old query is
the one recorded beside the table (model.record_query)."""

from __future__ import annotations

from typing import Optional

from dbt.adapters.events.logging import AdapterLogger

from ..errors import StreamingError
from ..sql.querychange import QueryChange, classify
from .model import StreamingModel, compile_model, query_change, recorded_model, recorded_query

logger = AdapterLogger("SparkStreaming")


def classify_change(catalog, target: str, fingerprint: str, plan) -> Optional[QueryChange]:
    """How `plan` differs from the query with `fingerprint` recorded beside the table at
    `target`; None if that query is not recorded or no longer compiles (then the state cannot
    be shown to be kept)."""
    if catalog is None:
        return None
    try:
        old = compile_model(catalog, recorded_model(target, recorded_query(target, fingerprint)))
    except (OSError, ValueError, KeyError, StreamingError):
        return None
    return classify(old, plan)


def check_query_change(
    catalog, model: StreamingModel, plan, target: str, fingerprint: str, runner: str = ""
) -> QueryChange:
    """Log and return a change that keeps the state; refuse any other (SSR301). `runner`: the
    'pid ... on host' of a runner that runs the old query (it is then restarted by the caller)."""
    change = classify_change(catalog, target, fingerprint, plan)
    if change is not None and change.keeps_state:
        logger.info(
            f"{model.name}: query changed, class keeps_state ({change.what}): going on from its "
            "checkpoint and state"
        )
        return change
    what = change.what if change is not None else "the old query is not recorded"
    since = (
        f"while its runner ({runner}) runs the old one" if runner else "since its table was built"
    )
    logger.info(f"{model.name}: query changed, class changes_state ({what})")
    raise StreamingError(
        "SSR301",
        f"the query of {model.name} changed {since}: it changes the state ({what})"
        + query_change(target, fingerprint, model.sql),
        "its checkpoint holds state of the old query, and reusing it could silently miscount",
        f"Run `dbt run --full-refresh -s {model.identifier}` to rebuild it from the sources' "
        "full history" + (" (it stops the runner)" if runner else "") + ", or revert the change.",
    )
