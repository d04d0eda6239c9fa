"""Which inputs of a streaming model are streams and which are tables, from the dbt graph.

The materialization hands over what the graph says of each relation the model reads
(macros/streaming_inputs.sql): a seed and a `table`, `view`, `incremental` or `snapshot`
model is a table, a source and a `streaming_view` or `upsert_table` model is a stream. The
input's own `read_as` (a seed's or model's config, a source's meta) and the model's configs
`dimensions` (tables) and `streams` (streams) override that. The tables become the model's
`dimensions`: joined at each micro-batch as they are then, no state (sql/state.py).

A model whose inputs would all be tables only by this default (a streaming model over a seed
alone, or two seeds joined) reads them as streams, as before: a streaming query reads a
stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import config_error
from ..sql import LATEST, SCD2
from ..sql.applychanges import END, START
from .upsert import names_config

STREAMS = {"streaming_view", "upsert_table"}
TABLES = {"table", "view", "incremental", "snapshot", "materialized_view"}
READ_AS = ("stream", "table")


def graph_kind(node: Mapping[str, Any]) -> tuple[str | None, str]:
    """('stream' | 'table' | None, why) of one input as the graph describes it."""
    read_as = node.get("read_as")
    if read_as:
        if read_as not in READ_AS:
            raise config_error("read_as", read_as, "'stream' or 'table'")
        return read_as, f"read_as: {read_as}"
    kind, materialized = node.get("resource_type"), node.get("materialized")
    if kind in ("seed", "snapshot"):
        return "table", kind
    if kind == "source":
        return "stream", "source"
    if materialized in STREAMS:
        return "stream", materialized
    if materialized in TABLES:
        return "table", materialized
    return None, str(materialized or kind)


def named(relation: str, names: Sequence[str]) -> bool:
    relation = relation.lower()
    return bool({relation, relation.rpartition(".")[2]} & set(names))


def classify(config: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]):
    """(config with `dimensions` completed from the graph, the log line's text) for a model
    reading `inputs`; the config unchanged and '' without inputs."""
    # an ephemeral model is inlined: its own inputs are not in the model's graph edges
    inputs = [i for i in inputs if i.get("materialized") != "ephemeral"]
    if not inputs:
        return config, ""
    dimensions, streams = names_config(config, "dimensions"), names_config(config, "streams")
    unknown = [s for s in streams if not any(named(i["relation"], [s]) for i in inputs)]
    if unknown:
        read = ", ".join(i["relation"] for i in inputs)
        raise config_error("streams", unknown, f"names of relations the model reads: {read}")
    kinds = {}
    for node in inputs:
        relation = node["relation"].lower()
        if named(relation, dimensions):
            kinds[relation] = ("table", "config dimensions", True)
        elif named(relation, streams):
            kinds[relation] = ("stream", "config streams", True)
        else:
            kind, why = graph_kind(node)
            kinds[relation] = (kind or "stream", why, node.get("read_as") is not None)
    fallback = not any(k == "stream" for k, _, _ in kinds.values())
    if fallback:  # a streaming query reads a stream: the graph's default tables are streams
        kinds = {
            r: (k if explicit else "stream", w, explicit) for r, (k, w, explicit) in kinds.items()
        }
    tables = [r for r, (k, _, _) in kinds.items() if k == "table"]
    merged = list(dict.fromkeys([*dimensions, *(t for t in tables if not named(t, dimensions))]))
    line = "; ".join(
        f"{label} {', '.join(f'{r} ({w})' for r, (k, w, _) in kinds.items() if k == kind)}"
        for kind, label in (("stream", "streams:"), ("table", "tables:"))
        if any(k == kind for k, _, _ in kinds.values())
    )
    if fallback and any(w in ("seed", "snapshot") or w in TABLES for _, w, _ in kinds.values()):
        line += " (no input is a stream by the graph: its tables are read as streams)"
    return {**config, "dimensions": merged, "versioned": versioned(inputs)}, line


def versioned(inputs: Sequence[Mapping[str, Any]]) -> dict:
    """{relation: {unique_key, event_time[, end, how]}} of the inputs that hold versions, which
    a temporal join can join as of a time (sql/temporaljoin.py): the sources declared
    append-only streams of versions (`meta: {unique_key: <column or list>, event_time:
    <column>}`), the upsert_tables with `apply_changes` of `scd_type: 2` (their rows are the
    versions, from `__start_at` to `__end_at`) and those with `unique_key` and `event_time` in
    their config (each row their changelog upserts is a version from its `event_time`)."""
    out = {}
    for node in inputs:
        key, time, more = node.get("unique_key"), node.get("event_time"), {}
        changes = node.get("apply_changes")
        if node.get("resource_type") == "source" and key and time:
            pass
        elif key and isinstance(changes, Mapping) and str(changes.get("scd_type")) == "2":
            time, more = START, {"end": END, "how": SCD2}
        elif key and time and node.get("materialized") == "upsert_table":
            more = {"how": LATEST}
        else:
            continue
        keys = [key] if isinstance(key, str) else list(key)
        out[node["relation"].lower()] = {"unique_key": keys, "event_time": time, **more}
    return out
