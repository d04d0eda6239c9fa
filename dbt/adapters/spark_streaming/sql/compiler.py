"""compile_query(): parse, analyse and rewrite a model's SQL into a QueryPlan."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import AbstractSet, List, Mapping, Optional, Sequence, Set, Tuple

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from . import backlog, oracle
from .aggtopn import rewrite_aggregate_rank
from .ambiguous import refuse_ambiguous_columns
from .analysis import WindowSpec, analyse_tvf, classify, table_key
from .applychanges import (
    ApplyChanges,
    keep_tombstones,
    parse_apply_changes,
    refuse_stateful,
    rewrite_apply_changes,
)
from .dialect import SparkStreaming, WatermarkedTable, WindowTVF
from .errors import SqlError
from .groupwin import rewrite_group_windows
from .intervaljoin import interval_joins, refuse_as_upsert, rewrite_interval_joins
from .intervals import parse_duration
from .joins import window_joins
from .multiset import RETRACTED
from .over import OverSpec, analyse_over
from .over import emitted as over_emitted
from .over import late_rows as over_late_rows
from .refused import refuse_constant_relations, refuse_wall_clock
from .retract import rewrite_retractions
from .rewrite import rewrite_distinct_counts, rewrite_tvfs
from .semijoin import rewrite_window_subqueries
from .state import (
    BATCH_INPUT,
    MERGED_INPUT,
    NEVER_EXPIRES_US,
    PARTIALS_INPUT,
    check_joins,
    split_aggregate,
    unbounded_aggregate,
    undeclared_keys,
)
from .temporaljoin import BATCH_INPUT as TEMPORAL_BATCH
from .temporaljoin import TemporalSpec, Versioned, analyse_temporal_join
from .temporaljoin import emitted as temporal_emitted
from .temporaljoin import late_rows as temporal_late_rows
from .topn import inline_ranked_ctes, window_topns
from .upsert import (
    KEEP_COLUMN,
    RANK_INPUT,
    UPDATE,
    UpsertSpec,
    analyse_upsert,
    dedups,
    ranked_aggregate,
    rewrite_dedup,
    rewrite_rank,
)

STREAMING_VIEW = "streaming_view"
UPSERT_TABLE = "upsert_table"


@dataclass(frozen=True)
class QueryPlan:
    """The analysed, rewritten model query."""

    spark_sql: str
    sources: Tuple[str, ...]
    kind: str
    windows: Tuple[WindowSpec, ...]
    watermark_delay_us: Optional[int]
    fingerprint: str
    upsert: Optional[UpsertSpec] = None  # how an upsert_table maintains it (None: streaming_view)
    _tree: exp.Expr = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _oracle: Optional[exp.Expr] = field(
        repr=False, compare=False, default=None
    )  # Top-N: the whole query
    _stream: Optional[exp.Expr] = field(
        repr=False, compare=False, default=None
    )  # state_ttl: the projection; OVER: the operator's input
    over: Optional[OverSpec] = None  # an OVER aggregation (sql/over.py, runtime/over.py)
    # an event-time temporal join (sql/temporaljoin.py, runtime/temporaljoin.py)
    temporal: Optional[TemporalSpec] = None
    # its streamed sources are read as Delta change feeds, rows with _op (config
    # read_change_feed: runtime/model.py compile_model sets it)
    change_feed: bool = False

    @property
    def updating(self) -> bool:
        """Whether the result's rows change (update mode semantics)."""
        return self.upsert is not None and self.upsert.output_mode == UPDATE

    @property
    def output_mode(self) -> str:
        """Spark's output mode: 'update' for updating upsert_table queries whose state Spark keeps,
        else 'append' (the stream of a query with partials in Delta only projects)."""
        upsert = self.upsert
        return UPDATE if self.updating and upsert and upsert.partials is None else "append"

    def partials_sql_for(self, step: str, view: str) -> str:
        """A state_ttl step's batch SQL ('partial', 'merge' or 'final'; sql/state.py) over
        ``view``."""
        spec = self.upsert.partials if self.upsert is not None else None
        if spec is None:
            raise ValueError("the query keeps no partials in Delta (no state_ttl)")
        sql, placeholder = {
            "partial": (spec.partial_sql, BATCH_INPUT),
            "merge": (spec.merge_sql, PARTIALS_INPUT),
            "final": (spec.final_sql, MERGED_INPUT),
        }[step]
        return _generate(self._bound({placeholder: view}, _parse(sql)))

    def sql_for(self, bindings: Mapping[str, str]) -> str:
        """``spark_sql`` with each source ``name`` replaced by the identifier ``bindings[name]``.

        Sources missing from ``bindings`` are left unchanged. A replaced table keeps a
        correlation name (its alias, else its original table name) so qualified column
        references such as ``bids.price`` keep resolving.
        """
        return _generate(self._bound(bindings, self._stream))

    @property
    def backlog_window(self) -> Optional[WindowSpec]:
        """The window TVF at which a backlog's windows can be split between a batch query and
        the stream (sql/backlog.py), or None: only for a streaming_view's window aggregate."""
        if any(x is not None for x in (self.upsert, self._oracle, self.over, self.temporal)):
            return None
        return backlog.splittable(self._bound({}), self.windows)

    def backlog_sql_for(
        self, bindings: Mapping[str, str], closed_us: int, marker: Optional[str] = None
    ) -> str:
        """``sql_for(bindings)`` aggregating only the windows that end at or before
        ``closed_us``, or, with the stream's ``marker`` column, the stream's part: without the
        first batch's rows of those windows (sql/backlog.py)."""
        return _generate(backlog.split(self._bound(bindings), closed_us, marker))

    def emitted_sql(self, bindings: Mapping[str, str], watermark_us: int) -> str:
        """Batch SQL giving exactly what the stream emitted up to a batch with watermark
        ``watermark_us``, over bound inputs that carry each row's batch watermark in column
        ``oracle.LATE_COLUMN`` (see sql/oracle.py for Spark's rule). In update mode every
        group is emitted (open windows too), and HAVING (``__keep``) decides which are kept."""
        if self.over is not None:
            return _generate(over_emitted(self._bound(bindings), self.over, watermark_us))
        if self.temporal is not None:
            tree = temporal_emitted(self._bound(bindings), self.temporal, watermark_us)
            return _generate(tree)
        if self._oracle is not None:  # a Top-N without a window: no watermark, nothing late
            return _generate(self._bound(bindings, self._oracle))
        updating = self.updating
        tree = oracle.emitted(self._bound(bindings), watermark_us, closed=not updating)
        keep = self.upsert.keep_column if self.upsert is not None else None
        if updating and keep:
            tree = oracle.kept(tree, keep)
        return _generate(tree)

    def late_rows_sql(self, bindings: Mapping[str, str]) -> List[str]:
        """Per window aggregate, batch SQL listing the input rows the stream dropped as late
        (inputs bound as for ``emitted_sql``)."""
        if self.over is not None:
            return [_generate(over_late_rows(self._bound(bindings), self.over))]
        if self.temporal is not None:
            return [_generate(q) for q in temporal_late_rows(self._bound(bindings), self.temporal)]
        return [_generate(q) for q in oracle.late_rows(self._bound(bindings))]

    def over_sql_for(self, bindings: Mapping[str, str]) -> str:
        """An OVER aggregation's own query (its result's columns and types) over ``bindings``."""
        return _generate(self._bound(bindings))

    def temporal_inputs_sql(self, bindings: Mapping[str, str]) -> Tuple[str, str]:
        """A temporal join's two inputs, the stream's and the versions' (sql/temporaljoin.py),
        over ``bindings``."""
        spec = self.temporal
        if spec is None:
            raise ValueError("the query is not a temporal join")
        left, right = (
            self._bound(bindings, _parse(sql)) for sql in (spec.left_sql, spec.right_sql)
        )
        return _generate(left), _generate(right)

    def temporal_sql_for(self, view: str) -> str:
        """A temporal join's result over the view ``view`` of a micro-batch of the operator's
        output."""
        if self.temporal is None:
            raise ValueError("the query is not a temporal join")
        return _generate(self._bound({TEMPORAL_BATCH: view}, _parse(self.temporal.post_sql)))

    def rank_sql_for(self, view: str) -> str:
        """A Top-N's re-ranking query (sql/upsert.py rewrite_rank) over the view ``view``."""
        rank_sql = self.upsert.rank_sql if self.upsert is not None else None
        if rank_sql is None:
            raise ValueError("the query is not a Top-N without a window")
        return _generate(self._bound({RANK_INPUT: view}, _parse(rank_sql)))

    def _bound(self, bindings: Mapping[str, str], tree: Optional[exp.Expr] = None) -> exp.Expr:
        tree = (
            (tree or self._tree).copy()
            if (tree or self._tree) is not None
            else _parse(self.spark_sql)
        )
        lowered = {k.lower(): v for k, v in bindings.items()}
        for table in _source_tables(tree):
            key = table_key(table)
            if key not in lowered:
                continue
            new = exp.Table(this=exp.to_identifier(lowered[key]))
            if table.args.get("alias") is not None:
                new.set("alias", table.args["alias"].copy())
            elif not isinstance(table.parent, WatermarkedTable):
                new.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            for arg in ("joins", "pivots", "hints"):
                if table.args.get(arg):
                    new.set(arg, table.args[arg])
            table.replace(new)
        return tree


def _generate(tree: exp.Expr) -> str:
    return tree.sql(dialect=SparkStreaming, comments=False)


def _parse(sql: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read=SparkStreaming) if s is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        pos = (err["line"], err["col"]) if err.get("line") else None
        why = str(err.get("description") or e).splitlines()[0].split(" <Token")[0]
        if err.get("highlight"):
            why += (
                f" {err['highlight']!r}" if why.endswith(" got") else f" near {err['highlight']!r}"
            )
        raise SqlError(
            "SSV101",
            "the model SQL does not parse",
            why,
            "Fix the syntax; window TVFs are written TABLE(TUMBLE(TABLE <table>, "
            "DESCRIPTOR(<time column>), INTERVAL '10' MINUTES)).",
            position=pos,
        ) from None
    except TokenError as e:
        raise SqlError(
            "SSV101",
            "the model SQL does not parse",
            str(e),
            "Check quotes and comments are closed.",
        ) from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise SqlError(
            "SSV101",
            "the model SQL is not a single query",
            f"expected one SELECT statement, found {len(statements)} statement(s)"
            + (
                ""
                if not statements or isinstance(statements[0], exp.Query)
                else f" starting with {statements[0].key.upper()}"
            ),
            "Write the model as a single SELECT (CTEs and set operations are fine).",
        )
    return statements[0]


def _cte_names(tree: exp.Expr) -> Set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _source_tables(tree: exp.Expr) -> List[exp.Table]:
    """Table references that name relations (not CTEs or table functions), in text order."""
    ctes = _cte_names(tree)
    tables = [
        t
        for t in tree.find_all(exp.Table)
        if isinstance(t.this, exp.Identifier) and not (not t.db and t.name.lower() in ctes)
    ]
    return sorted(tables, key=lambda t: t.this.meta.get("start", 0))


def _normalize_sources(tree: exp.Expr) -> Tuple[str, ...]:
    """Lower-case source table names in place (dropping catalogs); return them deduplicated."""
    seen: List[str] = []
    for table in _source_tables(tree):
        key = table_key(table)
        if key not in seen:
            seen.append(key)
        table.set("catalog", None)
        table.set("this", exp.to_identifier(table.name.lower()))
        table.set("db", exp.to_identifier(table.db.lower()) if table.db else None)
    return tuple(seen)


def _check_unsupported(tree: exp.Expr, allowed: AbstractSet[int] = frozenset()) -> None:
    for arg, label in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        node = tree.args.get(arg)
        if node is not None:
            raise SqlError(
                "SSV108",
                f"{label} on the model's result is not supported yet",
                "a streaming result is unbounded and is never complete, so it cannot be "
                "sorted or truncated",
                f"Remove the {label}; order or limit when querying the model's output.",
                node,
            )
    for node in tree.find_all(exp.Version):
        raise SqlError(
            "SSV160",
            "time travel (TIMESTAMP / VERSION AS OF, or FOR SYSTEM_TIME AS OF outside a join) "
            "is not supported in a streaming model",
            "Spark ignores the AS OF of a Delta source read here, so the query would read every "
            "version's rows instead of the one named",
            "Read the table at a version in a batch model, join its versions as of each row's "
            "event time (JOIN t FOR SYSTEM_TIME AS OF <stream>.<event time> ON ...), or list "
            "it in `dimensions` to join its latest version.",
            node,
        )
    for node in tree.find_all(exp.Window):
        if id(node) in allowed:
            continue
        raise SqlError(
            "SSV108",
            "window functions (OVER ...) are not supported yet",
            "Spark structured streaming cannot evaluate OVER clauses on streams; only a window "
            "Top-N is (ROW_NUMBER(), RANK() or DENSE_RANK() OVER (PARTITION BY window_start, "
            "window_end [, keys] ORDER BY ...) AS rownum in a subquery filtered by rownum <= N, "
            "over the rows of a TUMBLE, HOP or CUMULATE TVF, over a window aggregate of one, or "
            "over an INNER, LEFT or RIGHT window join of two window aggregates partitioned by the "
            "window of its left (RIGHT: right) side, in a subquery of its FROM or a CTE used only "
            "there)",
            "Use a window TVF aggregate (TABLE(TUMBLE(...)) grouped by window_start, "
            "window_end), a window Top-N, an OVER aggregation (an aggregate OVER (ORDER BY "
            "<event time> ...) in the model's outer SELECT over one source), or "
            "compute it in a batch model.",
            node,
        )


def _over_plan(
    tree: exp.Expr, spec: OverSpec, body: exp.Select, delay_us: Optional[int]
) -> QueryPlan:
    """The plan of an OVER aggregation: its stream is the operator's input (sql/over.py)."""
    sources = _normalize_sources(tree)
    _normalize_sources(body)
    spark_sql = _generate(body)
    return QueryPlan(
        spark_sql=spark_sql,
        sources=sources,
        kind="append",
        windows=(),
        watermark_delay_us=delay_us,
        fingerprint=hashlib.sha256(f"{spark_sql}\n{spec}".encode("utf-8")).hexdigest(),
        _tree=tree,
        _stream=body,
        over=spec,
    )


def _temporal_plan(tree: exp.Expr, spec: TemporalSpec, delay_us: int) -> QueryPlan:
    """The plan of a temporal join: the runtime builds its stream (sql/temporaljoin.py)."""
    sources = _normalize_sources(tree)
    identity = "\n".join((spec.left_sql, spec.right_sql, spec.post_sql, spec.kind))
    return QueryPlan(
        spark_sql=_generate(tree),
        sources=sources,
        kind="append",
        windows=(),
        watermark_delay_us=delay_us,
        fingerprint=hashlib.sha256(identity.encode("utf-8")).hexdigest(),
        _tree=tree,
        temporal=spec,
    )


def parse_watermark_delay(value: Optional[str]) -> Optional[int]:
    """Parse the ``watermark_delay`` config ('1 minute', '30 seconds') to microseconds."""
    return _parse_duration_config(
        "watermark_delay", value, "SSV110", minimum_us=0, example="'0 seconds'"
    )


def _parse_duration_config(
    name: str, value: Optional[str], code: str, minimum_us: int, example: str
) -> Optional[int]:
    if value is None:
        return None
    try:
        us = parse_duration(str(value))
    except ValueError:
        us = -1
    if us < minimum_us:
        raise SqlError(
            code,
            f"invalid {name} {value!r}",
            f"it must be a {'positive' if minimum_us else 'non-negative'} duration made of "
            "<number> <unit> parts",
            f"Set {name} like '1 minute', '30 seconds', '2 hours' or {example}.",
        )
    return us


def compile_query(
    sql: str,
    *,
    schemas: Mapping[str, Mapping[str, str]],
    watermark_delay: Optional[str],
    materialization: str = STREAMING_VIEW,
    unique_key: Optional[Sequence[str]] = None,
    emit_early: bool = False,
    changelogs: Mapping[str, str] = {},
    state_ttl: Optional[str] = None,
    constant_domain: Sequence[str] = (),
    dimensions: Sequence[str] = (),
    apply_changes: Optional[Mapping] = None,
    versioned: Mapping[str, Versioned] = {},
    event_time: Optional[str] = None,
) -> QueryPlan:
    """Parse, check and rewrite model ``sql`` (Flink window TVFs) into Spark SQL.

    ``schemas`` maps lower-case 'schema.identifier' to {column: spark type}; it must
    cover every window TVF input. ``unique_key`` and ``emit_early`` are upsert_table configs
    (sql/upsert.py). ``changelogs`` maps the upsert_tables the query may read as streams to
    their changelogs (sql/retract.py). ``state_ttl``, ``constant_domain`` and ``dimensions``
    bound its state (sql/state.py). ``apply_changes`` applies the query's rows as a change
    feed by ``unique_key`` (sql/applychanges.py). ``versioned`` maps the relations that hold
    versions to their key and time (sql/temporaljoin.py); an upsert_table's ``event_time``
    makes the rows it upserts versions (SSV166 if it may delete a key). Raises SqlError (codes
    SSV1xx) on invalid input.
    """
    delay_us = parse_watermark_delay(watermark_delay)
    ttl_us = _parse_duration_config(
        "state_ttl", state_ttl, "SSV152", minimum_us=1, example="'7 days'"
    )
    apply = parse_apply_changes(apply_changes, materialization, state_ttl)
    tree = _parse(sql)
    refuse_ambiguous_columns(tree, schemas)
    refuse_wall_clock(tree)
    refuse_constant_relations(tree)
    temporal = analyse_temporal_join(
        tree, schemas, versioned, delay_us, materialization == UPSERT_TABLE, dimensions, changelogs
    )
    if temporal is not None:
        assert delay_us is not None  # (SSV105 otherwise)
        return _temporal_plan(tree, temporal, delay_us)
    rewrite_group_windows(tree)
    rewrite_window_subqueries(tree)
    retracting = rewrite_retractions(tree, changelogs, materialization, schemas)
    inline_ranked_ctes(tree)
    topns = window_topns(tree)
    found = dedups(tree, topns) if materialization == UPSERT_TABLE else []
    over = None if topns or found else analyse_over(tree, schemas, delay_us, materialization)
    if over is not None:
        return _over_plan(tree, *over, delay_us)
    _check_unsupported(tree, {id(t.window) for t in topns} | {id(d.window) for d in found})
    rewrite_distinct_counts(tree)
    tvfs = list(tree.find_all(WindowTVF))
    tvfs.sort(key=lambda t: t.this.meta.get("start", 0))
    specs = [analyse_tvf(tvf, schemas) for tvf in tvfs]
    joins = window_joins(tree, tvfs, specs)
    bounded = interval_joins(tree, schemas, dimensions, {id(j.scope) for j in joins})
    if materialization == UPSERT_TABLE:
        refuse_as_upsert(bounded)
    cls = classify(tree, tvfs, {id(j.scope) for j in joins})
    if materialization == STREAMING_VIEW:
        if cls.kind == "updating":
            why, node = cls.updating_reason or ("the query is updating", None)
            raise SqlError(
                "SSV106",
                "this query produces updating results, which a streaming_view cannot hold",
                why + "; a streaming_view only appends rows that never change",
                "Use materialized='upsert_table' for updating results, or aggregate over a "
                "window TVF grouped by window_start and window_end.",
                node,
            )
    check_joins(tree, {id(j.scope) for j in joins} | {id(j.scope) for j in bounded}, dimensions)
    ranked: Optional[exp.Expr] = None  # the whole query, when the stream computes a part of it
    if apply is not None:
        refuse_stateful(cls, bool(topns or found or joins or bounded))
        rewritten = rewrite_apply_changes(tree, apply, unique_key, schemas)
        tree, ranked = rewritten.tree, rewritten.oracle
        versions = rewritten.versions  # scd_type 2: re-ranked as sql/aggtopn.py's Top-N
        upsert: Optional[UpsertSpec] = UpsertSpec(
            rewritten.unique_key,
            UPDATE,
            KEEP_COLUMN,
            rank_sql=None if versions is None else _generate(versions),
            rank_keys=rewritten.partition or None,
        )
        ttl_us = apply.tombstone_ttl_us if apply.scd_type == 1 else NEVER_EXPIRES_US
    else:
        upsert = (
            analyse_upsert(tree, cls, found, topns, unique_key, emit_early)
            if materialization == UPSERT_TABLE
            else None
        )
    windowed = cls.window_aggregates or topns or joins or any(t.function == "SESSION" for t in tvfs)
    if ((cls.aggregating or topns or bounded) if upsert is None else windowed) and delay_us is None:
        raise SqlError(
            "SSV105",
            "windowed query (window aggregate, Top-N, join or SESSION) without a watermark delay"
            if not bounded
            else "interval join without a watermark delay",
            (
                "a window is complete, emitted finally and dropped from state when the watermark "
                "passes its end, so the stream needs to know how late rows may arrive"
                if not bounded
                else "a joined row is kept in state until the watermark passes its time bound, "
                "so the stream needs to know how late rows may arrive"
            ),
            "Set watermark_delay in the model config (e.g. watermark_delay='1 minute').",
            next(iter(cls.window_aggregates.values()), tree).args.get("group")
            or (topns[0].window if topns else None)
            or (bounded[0].join if bounded else None),
        )
    for dedup in found:
        if dedup.limit == 1 and ranked_aggregate(dedup) is None:
            rewrite_dedup(dedup, schemas)
    sources = _normalize_sources(tree)
    rewrite_tvfs(
        tvfs, specs, cls.window_aggregates, schemas, delay_us, {id(t.tvf): t for t in topns}, joins
    )
    if bounded:
        assert delay_us is not None  # SSV105 above
        rewrite_interval_joins(bounded, schemas, delay_us)
    if found and (found[0].limit != 1 or ranked_aggregate(found[0]) is not None):  # a Top-N
        assert upsert is not None  # (analyse_upsert refused a dedup without limit)
        agg = ranked_aggregate(found[0])
        if agg is not None:  # over an aggregate: sql/aggtopn.py
            if ttl_us is None and not undeclared_keys(agg, constant_domain):
                ttl_us = NEVER_EXPIRES_US  # constant_domain: partials kept, never expired
            tree, rank, ranked, rank_keys = rewrite_aggregate_rank(
                tree, found[0], ttl_us is not None
            )
            upsert = replace(upsert, rank_sql=_generate(rank), rank_keys=rank_keys)
        else:
            tree, rank, ranked = rewrite_rank(tree, found[0], schemas)
            upsert = replace(upsert, rank_sql=_generate(rank))
    retracted = [s for s in tree.find_all(exp.Select) if any(s.find_all(*RETRACTED))]
    if ttl_us is None and retracted and not undeclared_keys(retracted[0], constant_domain):
        ttl_us = NEVER_EXPIRES_US  # counts per value (sql/multiset.py) live in Delta only
    if event_time is not None and upsert is not None:
        _refuse_deleting_versions(event_time, unique_key, upsert, apply, retracting)
    stream = None
    scope = unbounded_aggregate(
        tree,
        updating=upsert is not None and upsert.output_mode == UPDATE,
        constant_domain=constant_domain,
        state_ttl=ttl_us is not None,
    )
    if scope is not None:
        assert ttl_us is not None and upsert is not None  # (a scope is returned only then)
        stream, partials = split_aggregate(tree, scope, ttl_us // 1000)
        if apply is not None and apply.scd_type == 1:
            partials = keep_tombstones(partials)
        upsert = replace(upsert, partials=partials)
    spark_sql = _generate(stream or tree)
    identity = spark_sql if upsert is None else f"{spark_sql}\n{upsert}"  # the key and mode too
    return QueryPlan(
        spark_sql=spark_sql,
        sources=sources,
        kind="updating" if upsert and upsert.output_mode == UPDATE else cls.kind,
        windows=tuple(specs),
        watermark_delay_us=delay_us,
        fingerprint=hashlib.sha256(identity.encode("utf-8")).hexdigest(),
        upsert=upsert,
        _tree=tree,
        _oracle=ranked,
        _stream=stream,
    )


def _refuse_deleting_versions(
    event_time: str,
    unique_key: Optional[Sequence[str]],
    upsert: UpsertSpec,
    apply: Optional[ApplyChanges],
    retracting: bool,
) -> None:
    """SSV166 unless an upsert_table with config ``event_time`` holds versions a temporal join
    can read (sql/temporaljoin.py LATEST): its key given in its config, and no key ever
    deleted, since its changelog's ``-D`` carries the deleted row but not when it was deleted.
    A key is deleted only where the plan has a keep column that can be false (HAVING, also
    that of a retracting aggregate, a RANK over an aggregate, apply_changes' delete_when)."""
    why = (
        "each row an upsert_table with event_time upserts is a version of its unique_key "
        "valid from its event_time, which downstream temporal joins (FOR SYSTEM_TIME AS OF) "
        "read from its changelog; a deleted key would need the time of its delete, which the "
        "changelog does not carry"
    )
    if apply is not None and apply.scd_type == 2:
        what, fix = "its versions are its rows already", "Remove event_time from its config."
    elif unique_key is None:
        what = "it has no unique_key in its config"
        fix = "Set unique_key (the key its query groups or partitions by): readers see its config."
        why = "a downstream model reads a version's key from the config, not the query"
    elif upsert.keep_column is None or (apply is not None and apply.delete_when is None):
        return  # no key is ever deleted
    elif apply is not None:
        what = "its apply_changes deletes keys (delete_when)"
        fix = "Keep the history with apply_changes scd_type 2 (a delete ends a version there)."
    elif retracting:
        what = "it aggregates an upsert_table's changes: a group whose rows all go is deleted"
        fix = "Remove event_time, or join the upstream's history instead (scd_type 2)."
    else:
        what = "its HAVING (or a RANK over an aggregate) deletes the keys that fail it"
        fix = (
            "Project the condition as a boolean column instead (its keys then stay, flagged) "
            "and test it in the joining model's ON, or remove event_time."
        )
    raise SqlError("SSV166", f"event_time '{event_time}' on an upsert_table: {what}", why, fix)
