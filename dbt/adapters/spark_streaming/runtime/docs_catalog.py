"""`dbt docs generate`: what the catalog shows of a streaming model's table, beside its
columns: its query kind, watermark, trigger, state bound and last committed source versions,
as dbt catalog stats (``stats:<id>:label|value|description|include`` keys of each column
row, which dbt-core's catalog turns into the table's stats).

Read from the table's last commit and its recorded query (runtime/model.py), and its
runner's status (runtime/continuous/runner.py); the query is compiled again for its kind.
Nothing here fails `docs generate`: a figure it cannot read is left out."""

from __future__ import annotations

from typing import Optional

from ..delta.history import last_metadata
from ..delta.storage import is_delta
from .catalog import Catalog
from .continuous import runner
from .model import compile_model, recorded_model, recorded_query

STREAMING = ("streaming_view", "upsert_table")


def _kind(target: str, catalog: Catalog, query: dict) -> Optional[str]:
    """'append' or 'updating', with its windows (TVF and size) and upsert key."""
    model = recorded_model(target, query)
    model.config = {**model.config, "dimensions": query.get("dimensions") or []}
    try:
        plan = compile_model(catalog, model)
    except Exception:  # noqa: BLE001 - the catalog shows what it can
        return None
    parts = [plan.kind]
    parts += [
        f"{w.kind.upper()} {w.size_us // 1_000_000}s on {w.time_column}" for w in plan.windows
    ]
    if plan.upsert is not None:
        parts.append(f"key ({', '.join(plan.upsert.unique_key)})")
    return ", ".join(parts)


def _state_bound(query: dict, kind: Optional[str]) -> str:
    if query.get("state_ttl"):
        return f"state_ttl {query['state_ttl']}"
    if query.get("constant_domain"):
        return f"constant_domain {query['constant_domain']}"
    if query.get("watermark_delay"):
        return f"watermark (delay {query['watermark_delay']})"
    return "none"


def _trigger(catalog: Catalog, name: str) -> str:
    st = runner.status(catalog.control, name) or {}
    if st.get("alive"):
        return f"processing_time {st.get('interval')} (runner pid {st.get('pid')})"
    return "available_now (each dbt run)"


def streaming_stats(catalog: Catalog, schema: str, identifier: str) -> dict:
    """Catalog stats keys of the table `schema.identifier` if it is a streaming model's ({}
    otherwise)."""
    target = catalog.location(schema, identifier)
    try:
        meta = last_metadata(target) if is_delta(target) else None
    except Exception:  # noqa: BLE001
        meta = None
    if not meta or meta.get("materialization") not in STREAMING:
        return {}
    try:
        query = recorded_query(target, meta["fingerprint"])
    except (OSError, ValueError, KeyError):
        query = {}
    kind = _kind(target, catalog, query) if query else None
    sources = meta.get("sources") or {}
    figures = {
        "query_kind": ("Query kind", f"{meta['materialization']}: {kind or '?'}", "the query"),
        "watermark": ("Watermark", meta.get("watermark") or "none", "after the last batch"),
        "trigger": ("Trigger", _trigger(catalog, f"{schema}.{identifier}"), "how it runs"),
        "state_bound": ("State bound", _state_bound(query, kind), "what bounds its state"),
        "source_versions": (
            "Source versions",
            ", ".join(f"{s} v{v}" for s, v in sources.items()) or "none",
            "the source versions its last commit consumed",
        ),
        "last_batch": ("Last batch", str(meta.get("batch_id")), "Spark batch id committed"),
    }
    out = {}
    for key, (label, value, description) in figures.items():
        out.update(
            {
                f"stats:{key}:label": label,
                f"stats:{key}:value": value,
                f"stats:{key}:description": description,
                f"stats:{key}:include": True,
            }
        )
    return out
