"""One streaming model: what dbt passes (`StreamingModel`), its compiled plan (`compile_model`),
where a run of it reads and writes (`Places`), and the record of its query kept beside its table
(``<table>/_dbt_streaming/queries/<fingerprint>.json``), which snapshot_equivalence compiles
again and a changed query is compared with."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import layout
from .. import sql as sqlfront
from ..delta import storage, types
from ..delta.log import OP
from ..errors import StreamingError
from . import upsert
from .catalog import Catalog

QUERY_CONFIG = (
    "watermark_delay",
    "unique_key",
    "emit",
    "state_ttl",
    "constant_domain",
    "apply_changes",
    "read_change_feed",
    "versioned",
)  # the configs that shape the compiled query, or how it reads its sources


@dataclass
class StreamingModel:
    """A streaming_view or upsert_table model, as the materialization hands it over."""

    schema: str
    identifier: str
    sql: str
    config: Mapping[str, Any]
    full_refresh: bool
    materialization: str

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.identifier}"

    def location(self, catalog: Catalog) -> str:
        """The model's Delta table."""
        return catalog.location(self.schema, self.identifier)

    def runner_spec(self) -> dict:
        """The model as JSON for its runner process (runtime/runner_main.py), which resumes it:
        `StreamingModel(**spec)` is the model again, never a full refresh."""
        return {**self.__dict__, "full_refresh": False, "config": dict(self.config)}


@dataclass(frozen=True)
class Places:
    """Where one run of a model reads and writes."""

    target: str  # the model's Delta table
    build: str  # where this run writes: the target, or aside for a full refresh (lifecycle.py)
    sources: dict[str, str]  # each source of the plan -> its Delta table, in the plan's order
    checkpoint: str  # Spark's checkpoint of the query (Catalog.checkpoint)
    dimensions: frozenset[str] = frozenset()  # the sources joined as tables (config dimensions)

    @property
    def streams(self) -> dict[str, str]:
        """The sources read as streams (not `dimensions`), name -> Delta table."""
        return {n: p for n, p in self.sources.items() if n not in self.dimensions}


class SourceSchemas(Mapping):
    """Column types of relations by name, read from Delta on demand (for sql.compile_query)."""

    def __init__(self, catalog: Catalog, change_feed: bool = False):
        self.catalog, self.change_feed = catalog, change_feed

    def __getitem__(self, name: str) -> dict[str, str]:
        path = self.catalog.location_of(name)
        if not storage.is_delta(path):
            raise KeyError(name)
        columns = dict(types.table_columns(path))
        if self.change_feed:  # read as a change feed (config read_change_feed)
            columns.setdefault(OP, "string")
        return columns

    def __iter__(self):
        return iter(f"{s}.{i}" for s, i, _ in self.catalog.bound())

    def __len__(self) -> int:
        return len(self.catalog.bound())


def compile_model(catalog: Catalog, model: StreamingModel):
    """The model's QueryPlan (sql/), with SQL errors raised as StreamingError."""
    feed = model.config.get("read_change_feed") is True
    changelogs = upsert.Changelogs(
        catalog,
        model.config.get("dimensions"),
        feed and model.materialization == upsert.UPSERT_TABLE,  # retractions
    )
    plan = compile_sql(
        model.sql, model.config, model.materialization, SourceSchemas(catalog, feed), changelogs
    )
    if feed and plan.temporal is not None:
        raise StreamingError(
            "SSV164",
            "a temporal join over sources read as change feeds (read_change_feed)",
            "a temporal join emits each row of its stream once; an update or delete of an "
            "input row could not retract the row it was joined into",
            "Read the sources as they are appended (drop read_change_feed), or apply the feed "
            "in an upstream upsert_table.",
        )
    return replace(plan, change_feed=True) if feed else plan


def compile_sql(
    sql: str,
    config: Mapping[str, Any],
    materialization: str,
    schemas: Mapping[str, Mapping[str, str]],
    changelogs: Mapping[str, str],
    dimensions: list[str] | None = None,
):
    """A QueryPlan of `sql` with the model configs that shape it, over relations of `schemas`
    (`dimensions`: the names of config `dimensions` as the query spells them, if not those)."""
    try:
        return sqlfront.compile_query(
            sql,
            schemas=schemas,
            watermark_delay=config.get("watermark_delay"),
            materialization=materialization,
            unique_key=upsert.unique_key(config),
            emit_early=upsert.emit_early(config, materialization),
            changelogs=changelogs,
            state_ttl=config.get("state_ttl"),
            constant_domain=upsert.names_config(config, "constant_domain"),
            dimensions=(
                upsert.names_config(config, "dimensions") if dimensions is None else dimensions
            ),
            apply_changes=config.get("apply_changes"),
            event_time=config.get("event_time") if materialization == "upsert_table" else None,
            versioned={
                relation: sqlfront.Versioned(
                    tuple(v["unique_key"]),
                    v["event_time"],
                    v.get("how") or sqlfront.SOURCE_META,
                    v.get("end"),
                )
                for relation, v in (config.get("versioned") or {}).items()
            },
        )
    except sqlfront.SqlError as exc:
        raise StreamingError(exc.code, exc.what, exc.why, exc.fix + _position(exc)) from None


def _position(exc) -> str:
    return (
        f" (line {exc.position[0]}, column {exc.position[1]})"
        if getattr(exc, "position", None)
        else ""
    )


# The record of a model's query, by fingerprint, written before its stream runs.


def record_query(target: str, plan, model: StreamingModel) -> None:
    """Keep the model's query beside the table at `target` (once per fingerprint)."""
    path = layout.query_path(target, plan.fingerprint)
    if storage.exists(path):
        return
    config = dict(model.config)
    query = {
        "sql": model.sql,
        "materialization": model.materialization,
        "dimensions": config.get("dimensions") or [],
        **{k: config.get(k) for k in QUERY_CONFIG},
    }
    storage.write_text(path, json.dumps(query))


def recorded_query(target: str, fingerprint: str) -> dict:
    """The recorded query with `fingerprint` of the table at `target` (OSError if there is
    none, ValueError if it is unreadable)."""
    return json.loads(storage.read_text(layout.query_path(target, fingerprint)))


def recorded_model(target: str, query: dict) -> StreamingModel:
    """The model that a recorded query describes, to compile it again (its identifier is the
    table's path: it is named in messages only)."""
    return StreamingModel(
        schema="",
        identifier=target,
        sql=query["sql"],
        config={k: query.get(k) for k in QUERY_CONFIG},
        full_refresh=False,
        materialization=query["materialization"],
    )


def query_change(target: str, fingerprint: str, sql: str) -> str:
    """' (- old line / + new line ...)': the model SQL lines that changed, if the old query is
    recorded."""
    try:
        old = recorded_query(target, fingerprint)["sql"]
    except (OSError, ValueError, KeyError):
        return ""
    lines = [
        line[0] + " " + " ".join(line[1:].split())
        for line in difflib.unified_diff(
            old.strip().splitlines(), sql.strip().splitlines(), n=0, lineterm=""
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()
    ]
    if not lines:
        return ""
    return " (" + " / ".join(lines[:4]) + (" / ..." if len(lines) > 4 else "") + ")"
