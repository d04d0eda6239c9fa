"""Constructs a streaming model refuses outright, whatever its shape: those whose rows would
depend on when a micro-batch ran (wall-clock functions), and constant relations (VALUES, a
query reading no table), which are not streams."""

from __future__ import annotations

from sqlglot import exp

from .dialect import WindowTVF
from .errors import SqlError, position_of

# sqlglot's nodes for the current date / time, and functions it leaves anonymous.
_WALL_CLOCK_NODES = (
    exp.CurrentTimestamp,
    exp.CurrentTimestampLTZ,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentDatetime,
    exp.Localtime,
    exp.Localtimestamp,
)
_WALL_CLOCK_FUNCTIONS = frozenset(
    {
        "NOW",
        "PROCTIME",
        "CURRENT_ROW_TIMESTAMP",
        "TUMBLE_PROCTIME",
        "HOP_PROCTIME",
        "SESSION_PROCTIME",
        "SYSDATE",
        "SYSTIMESTAMP",
        "GETDATE",
        "CURTIME",
        "CURDATE",
        "UTC_TIMESTAMP",
        "UTC_DATE",
        "CURRENT_TIMESTAMP",
        "CURRENT_DATE",
        "CURRENT_TIME",
        "LOCALTIMESTAMP",
        "LOCALTIME",
    }
)
# SQL-standard niladic functions written without parentheses, which sqlglot reads as columns.
_WALL_CLOCK_NAMES = frozenset(
    {"CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "LOCALTIMESTAMP", "LOCALTIME"}
)


def _is_wall_clock(node: exp.Expr) -> bool:
    if isinstance(node, _WALL_CLOCK_NODES):
        return True
    if isinstance(node, exp.Anonymous):
        return node.name.upper() in _WALL_CLOCK_FUNCTIONS
    return (
        isinstance(node, exp.Column)
        and not node.table
        and not node.this.args.get("quoted")
        and node.name.upper() in _WALL_CLOCK_NAMES
    )


def refuse_wall_clock(tree: exp.Expr) -> None:
    """SSV111 if the query calls a function of the current date or time (``now()``,
    ``CURRENT_TIMESTAMP``, ``LOCALTIMESTAMP``, ``CURRENT_DATE``, Flink's ``PROCTIME()``, ...).

    A streaming result must not depend on when each micro-batch ran: the same input would give
    other rows in another run, and the snapshot_equivalence test (the batch query over the rows
    consumed) could not hold.
    """
    for node in tree.walk():
        if not _is_wall_clock(node):
            continue
        shown = node.parent if isinstance(node.parent, exp.StrToUnix) else node
        near: exp.Expr = node  # niladic nodes keep no token offset: the nearest that does
        while position_of(near) is None and near.parent is not None:
            near = near.parent
        raise SqlError(
            "SSV111",
            f"{shown.sql(dialect='spark')} (the current date or time) in a streaming model",
            "a streaming result must not depend on when a micro-batch ran: the same rows would "
            "give other results in another run, a processing-time window would be cut by the "
            "batches' timing, and snapshot_equivalence (the batch query over the rows read) "
            "could not hold",
            "Use an event-time column of the rows instead (e.g. the input's timestamp, or a "
            "window TVF's window_start / window_end / window_time over it); to record when rows "
            "arrived, add that column where they are written. A column of that name needs "
            "backquotes.",
            near,
        )


def refuse_constant_relations(tree: exp.Expr) -> None:
    """SSV112 if the query reads ``VALUES`` (other than ``x IN (VALUES ...)``) or no table at all.

    A streaming model's query is a stream over its input tables; a constant relation is not a
    stream, and Spark cannot run a streaming write of one.
    """
    for values in tree.find_all(exp.Values):
        if isinstance(values.parent, exp.In) or isinstance(
            values.find_ancestor(exp.In, exp.Select), exp.In
        ):
            continue
        raise SqlError(
            "SSV112",
            "VALUES as a relation in a streaming model",
            "a streaming model maintains a query over the rows appended to its input tables; "
            "VALUES is a constant relation, not a stream",
            "Put the rows in a seed (dbt seed) and read it: as a stream, or joined as a table "
            "listed in config `dimensions`.",
            values,
        )
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    reads = any(isinstance(t, WindowTVF) for t in tree.walk()) or any(
        isinstance(t.this, exp.Identifier) and (t.db or t.name.lower() not in ctes)
        for t in tree.find_all(exp.Table)
    )
    if not reads:
        raise SqlError(
            "SSV112",
            "the streaming model reads no table",
            "a streaming model maintains a query over the rows appended to its input tables; "
            "a query without FROM is a constant, not a stream",
            "Select from a source, seed or model (ref / source), or make it a batch model "
            "(materialized='table').",
            tree,
        )
