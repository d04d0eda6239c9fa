"""Event-time temporal joins without Spark: the analysis and plan (sql/temporaljoin.py), their
refusals through compile_query, and the operator (runtime/temporaljoin.py) driven through a
stand-in for Spark's GroupState. tests/functional/test_temporal_join.py runs them."""

import pickle

import pandas as pd
import pytest
import sqlglot
from groupstate import State

from dbt.adapters.spark_streaming.runtime.temporaljoin import _operator
from dbt.adapters.spark_streaming.sql import SqlError, compile_query
from dbt.adapters.spark_streaming.sql.dialect import SparkStreaming
from dbt.adapters.spark_streaming.sql.querychange import classify
from dbt.adapters.spark_streaming.sql.temporaljoin import LATEST, SCD2, Versioned, temporal_joins

RATES = {"a.rates": Versioned(("currency",), "rtime", "source meta {unique_key, event_time}")}


def analyse(sql, versioned=RATES):
    return temporal_joins(sqlglot.parse_one(sql, read=SparkStreaming), versioned)


def test_a_temporal_join_names_its_sides_keys_and_rest():
    [join] = analyse(
        "SELECT o.id, o.amount * r.rate AS c FROM a.orders AS o LEFT JOIN a.rates FOR "
        "SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency AND r.rate > 0"
    )
    assert (join.kind, join.left, join.right_alias, join.as_of.sql()) == ("LEFT", "o", "r", "o.ts")
    assert [(e.sql(), k) for e, k in join.keys] == [("o.currency", "currency")]
    assert [c.sql() for c in join.rest] == ["r.rate > 0"]
    [inner] = analyse(
        "SELECT * FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF ts AS r "
        "ON r.currency = UPPER(o.cur)"
    )
    assert inner.kind == "INNER" and [(e.sql(), k) for e, k in inner.keys] == [
        ("UPPER(o.cur)", "currency")
    ]


@pytest.mark.parametrize(
    "sql,versioned,code,text",
    [
        (
            "SELECT * FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF "
            "TIMESTAMP '2020-01-01' AS r ON o.currency = r.currency",
            RATES,
            "SSV161",
            "not an event-time column",
        ),
        (
            "SELECT * FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF r.rtime AS r "
            "ON o.currency = r.currency",
            RATES,
            "SSV161",
            "e.g. o.ts",
        ),
        (
            "SELECT * FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF o.ts AS r "
            "ON o.currency = r.currency",
            {},
            "SSV162",
            "meta: {unique_key: <key column>, event_time: <time column>}",
        ),
        (
            "SELECT * FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF o.ts AS r "
            "ON o.currency < r.currency",
            RATES,
            "SSV163",
            "does not equate its key currency",
        ),
        (
            "SELECT * FROM a.orders AS o FULL JOIN a.rates FOR SYSTEM_TIME AS OF o.ts AS r "
            "ON o.currency = r.currency",
            RATES,
            "SSV164",
            "INNER JOIN or LEFT JOIN",
        ),
    ],
)
def test_refused_temporal_joins_say_how_to_fix_them(sql, versioned, code, text):
    with pytest.raises(SqlError) as info:
        analyse(sql, versioned)
    assert info.value.code == code and text in str(info.value), str(info.value)


SCHEMAS = {
    "a.orders": {"id": "bigint", "ts": "timestamp", "currency": "string", "amount": "double"},
    "a.rates": {"currency": "string", "rtime": "timestamp", "rate": "double"},
    "a.asks": {"item": "string", "asktime": "timestamp"},
}
JOIN = "FROM a.orders AS o {kind} JOIN a.rates FOR SYSTEM_TIME AS OF o.ts AS r ON "


def plan(sql, materialization="streaming_view", delay="1 minute", versioned=RATES, dims=()):
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay=delay,
        materialization=materialization,
        versioned=versioned,
        dimensions=dims,
    )


def test_a_versioned_table_in_dimensions_is_refused():
    with pytest.raises(SqlError) as info:
        plan("SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency", dims=["rates"])
    assert info.value.code == "SSV165" and "remove it from `dimensions`" in str(info.value)


def test_the_plan_keys_both_inputs_and_applies_the_on_to_the_version():
    spec = plan(
        "SELECT *, amount * rate AS c " + JOIN.format(kind="LEFT") + "UPPER(o.currency) = "
        "r.currency AND rate > 0 WHERE o.amount > 1"
    ).temporal
    assert spec.kind == "LEFT" and spec.keys == ("__dss_k0",)
    assert spec.left_sql.startswith("SELECT TRY_CAST(UPPER(o.currency) AS STRING) AS __dss_k0")
    assert "WATERMARK ts DELAY OF INTERVAL '60' SECONDS" in spec.left_sql
    assert spec.right_sql.startswith("SELECT `r`.`currency` AS __dss_k0, `r`.`rtime` AS __dss_t")
    # the stars stand for both sides' columns, each named as in batch; unqualified columns
    # are qualified; the version is kept only where the whole ON holds
    assert spec.post_sql.startswith(
        "SELECT `o`.`id` AS `id`, `o`.`ts` AS `ts`, `o`.`currency` AS `currency`, "
        "`o`.`amount` AS `amount`, `r`.`currency` AS `currency`, `r`.`rtime` AS `rtime`, "
        "`r`.`rate` AS `rate`, o.amount * r.rate AS `c` FROM (SELECT `o`, "
        "IF(UPPER(o.currency) = r.currency AND r.rate > 0, `r`, NULL) AS `r`"
    ), spec.post_sql
    assert spec.post_sql.endswith("WHERE o.amount > 1")
    inner = plan("SELECT o.id, r.rate " + JOIN.format(kind="") + "o.currency = r.currency")
    assert inner.temporal.post_sql.endswith("WHERE NOT `r` IS NULL")
    oracle = inner.emitted_sql({"a.orders": "o_view", "a.rates": "r_view"}, 5_000_000)
    assert "LEAD(rtime) OVER (PARTITION BY currency ORDER BY rtime" in oracle
    assert "ts <= TIMESTAMP_MICROS(5000000)" in oracle


@pytest.mark.parametrize(
    "sql,materialization,delay,versioned,code,text",
    [
        (
            "SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency",
            "upsert_table",
            "1 minute",
            RATES,
            "SSV164",
            "materialized='streaming_view'",
        ),
        (
            "SELECT o.currency, COUNT(*) AS n " + JOIN.format(kind="") + "o.currency = "
            "r.currency GROUP BY o.currency",
            "streaming_view",
            "1 minute",
            RATES,
            "SSV165",
            "aggregate its rows in a downstream model",
        ),
        (
            "SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency "
            "JOIN a.asks AS k ON k.item = o.currency",
            "streaming_view",
            "1 minute",
            RATES,
            "SSV165",
            "beside another join",
        ),
        (
            "SELECT o.amount * r.rate " + JOIN.format(kind="") + "o.currency = r.currency",
            "streaming_view",
            "1 minute",
            RATES,
            "SSV165",
            "has no name",
        ),
        (
            "SELECT o.id FROM a.orders AS o JOIN a.rates FOR SYSTEM_TIME AS OF o.amount AS r "
            "ON o.currency = r.currency",
            "streaming_view",
            "1 minute",
            RATES,
            "SSV161",
            "not a TIMESTAMP column of a.orders",
        ),
        (
            "SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency",
            "streaming_view",
            "1 minute",
            {"a.rates": Versioned(("currency",), "valid_from")},
            "SSV162",
            "a.rates has no column valid_from, which its sources.yml meta",
        ),
        (
            "SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency",
            "streaming_view",
            None,
            RATES,
            "SSV105",
            "watermark_delay",
        ),
    ],
)
def test_refused_plans_say_how_to_fix_them(sql, materialization, delay, versioned, code, text):
    with pytest.raises(SqlError) as info:
        plan(sql, materialization, delay, versioned)
    assert info.value.code == code and text in str(info.value), str(info.value)


def call(operator, state, rows, key=("EUR",)):
    """One call with rows ('o' or 'v', time in ms, id): the (order id, version id) pairs out."""
    pdf = pd.DataFrame(
        {
            "__dss_us": [t * 1000 for _, t, _ in rows],
            "__dss_l": [{"id": i} if side == "o" else None for side, _, i in rows],
            "__dss_r": [{"id": i} if side == "v" else None for side, _, i in rows],
        }
    )
    out = list(operator(key, iter([pdf]), state))
    if not out:
        return []
    return [
        (o["id"], v and v["id"]) for o, v in zip(out[0]["__dss_l"], out[0]["__dss_r"], strict=True)
    ]


def test_a_row_waits_for_the_watermark_then_takes_the_version_valid_at_its_time():
    state, left = State(watermark_ms=0), _operator(inner=False)
    # versions out of order; two at 3 s: the later arrival wins
    assert call(left, state, [("v", 5000, "v5"), ("o", 4000, "o4"), ("v", 3000, "v3a")]) == []
    assert state.timeout == 3999  # the pending row's time, less one ms
    assert call(left, state, [("v", 3000, "v3b"), ("o", 1000, "o1")]) == []
    state.watermark_ms = 4000
    assert call(left, state, [("o", 6000, "o6")]) == [("o1", None), ("o4", "v3b")]
    pending, versions, _, _ = pickle.loads(state.get[0])
    # kept: the last version at or below the watermark (3 s), and the one after it
    assert [p[2]["id"] for p in pending] == ["o6"] and [v[0] for v in versions] == [
        3_000_000,
        5_000_000,
    ]
    state.watermark_ms = 9000
    assert call(left, state, []) == [("o6", "v5")]
    assert [v[0] for v in pickle.loads(state.get[0])[1]] == [5_000_000]


def test_an_inner_join_drops_a_row_without_a_version_and_a_null_key_matches_none():
    state, inner = State(watermark_ms=10_000), _operator(inner=True)
    assert call(inner, state, [("v", 5000, "v5"), ("o", 4000, "o4"), ("o", 6000, "o6")]) == [
        ("o6", "v5")
    ]
    state = State(watermark_ms=10_000)
    nulls = [("v", 1000, "v1"), ("o", 2000, "o2")]
    assert call(_operator(inner=False), state, nulls, key=(None,)) == [("o2", None)]
    assert state.value is None  # nothing kept for a NULL key


def test_a_changed_projection_filter_or_on_keeps_the_state_a_changed_key_does_not():
    base = "SELECT o.id, r.rate " + JOIN.format(kind="LEFT") + "o.currency = r.currency"
    kept = [
        base + " WHERE o.amount > 1",
        base.replace("r.rate", "r.rate, o.amount"),
        base.replace("LEFT JOIN", "JOIN") + " AND r.rate > 0",
    ]
    for sql in kept:
        assert classify(plan(base), plan(sql)).keeps_state, sql
    change = classify(plan(base), plan(base.replace("o.currency =", "UPPER(o.currency) =")))
    assert change.what == "the temporal join's inputs or key"


def test_keys_of_one_type_group_as_the_on_compares():
    """A key column of another type is refused; a key expression whose type the compiler does
    not tell is grouped as TRY_CAST to the version key's type (NULL: no version)."""
    with pytest.raises(SqlError) as info:
        plan("SELECT o.id " + JOIN.format(kind="") + "o.id = r.currency")
    assert info.value.code == "SSV163" and "o.id is BIGINT" in str(info.value)
    cast = plan("SELECT o.id " + JOIN.format(kind="") + "CAST(o.id AS STRING) = r.currency")
    assert cast.temporal.left_sql.startswith("SELECT CAST(o.id AS STRING) AS __dss_k0")
    unknown = plan("SELECT o.id " + JOIN.format(kind="") + "o.currency || 'x' = r.currency")
    assert unknown.temporal.left_sql.startswith("SELECT TRY_CAST(o.currency || 'x' AS STRING)")


def test_columns_are_qualified_before_the_key_is_read():
    """An unqualified column of the versioned side is not taken for the stream's; a struct
    field's path gets its side's alias."""
    with pytest.raises(SqlError) as info:
        plan("SELECT o.id " + JOIN.format(kind="") + "r.currency = rate")
    assert info.value.code == "SSV163"
    schemas = {**SCHEMAS, "a.orders": {**SCHEMAS["a.orders"], "addr": "struct<city:string>"}}
    spec = compile_query(
        "SELECT addr.city AS city " + JOIN.format(kind="") + "o.currency = r.currency",
        schemas=schemas,
        watermark_delay="1 minute",
        versioned=RATES,
    ).temporal
    assert spec.post_sql.startswith("SELECT o.addr.city AS `city` FROM")


def test_a_timestamp_ntz_event_time_is_refused():
    schemas = {**SCHEMAS, "a.orders": {**SCHEMAS["a.orders"], "ts": "timestamp_ntz"}}
    with pytest.raises(SqlError) as info:
        compile_query(
            "SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency",
            schemas=schemas,
            watermark_delay="1 minute",
            versioned=RATES,
        )
    assert info.value.code == "SSV161" and "TIMESTAMP_NTZ" in str(info.value)


# An upsert_table with apply_changes scd_type 2 as the versioned side: read from its changelog.
CUSTOMERS = {"a.customers": Versioned(("id",), "__start_at", SCD2, "__end_at")}
CHANGELOG = {
    "id": "bigint",
    "name": "string",
    "__start_at": "timestamp",
    "__end_at": "timestamp",
    "_op": "string",
    "_batch_id": "bigint",
    "_commit_version": "bigint",
}
SCD2_JOIN = "FROM a.orders AS o {kind} JOIN a.customers FOR SYSTEM_TIME AS OF o.ts AS c ON "


def scd2_plan(sql, changelog=CHANGELOG):
    return compile_query(
        sql,
        schemas={**SCHEMAS, "a.customers_changelog": changelog},
        watermark_delay="1 minute",
        versioned=CUSTOMERS,
        changelogs={"a.customers": "a.customers_changelog"},
    )


def test_versions_of_an_upsert_table_are_read_as_changes_of_its_changelog():
    plan = scd2_plan("SELECT o.id AS oid, c.* " + SCD2_JOIN.format(kind="LEFT") + "o.id = c.id")
    spec = plan.temporal
    assert spec.changes and spec.right_values == ("id", "name", "__start_at")
    assert sorted(plan.sources) == ["a.customers_changelog", "a.orders"]
    # Spark drops no change (TIME NULL); the watermark is on the change's latest time
    assert "WATERMARK GREATEST(`__start_at`, COALESCE(`__end_at`, `__start_at`)) AS __dss_wt" in (
        spec.right_sql
    )
    assert "CAST(NULL AS TIMESTAMP) AS __dss_t" in spec.right_sql
    # the version's columns but its end: the star too
    assert "`c`.`__start_at` AS `__start_at` FROM" in spec.post_sql
    assert "__end_at" not in spec.post_sql
    oracle = plan.emitted_sql({"a.orders": "o_view", "a.customers_changelog": "c_view"}, 5)
    assert "LEAD(`__start_at`) OVER (PARTITION BY `id` ORDER BY `__start_at`)" in oracle
    assert "FROM c_view" in oracle and "__dss_effect <= UNIX_MICROS(`__dss_late_wm`)" in oracle
    late = plan.late_rows_sql({"a.orders": "o_view", "a.customers_changelog": "c_view"})
    assert "WHERE __dss_late_change" in late[1]


@pytest.mark.parametrize(
    "sql,changelog,code,text",
    [
        (
            "SELECT o.id, c.__end_at " + SCD2_JOIN.format(kind="") + "o.id = c.id",
            CHANGELOG,
            "SSV165",
            "a version's end is not known",
        ),
        (
            "SELECT o.id, c.name " + SCD2_JOIN.format(kind="") + "o.id = c.id",
            {**CHANGELOG, "__start_at": "bigint", "__end_at": "bigint"},
            "SSV162",
            "a TIMESTAMP sequence_by",
        ),
    ],
)
def test_an_upsert_tables_versions_refused(sql, changelog, code, text):
    with pytest.raises(SqlError) as info:
        scd2_plan(sql, changelog)
    assert info.value.code == code and text in str(info.value), str(info.value)
    with pytest.raises(SqlError) as info:  # no changelog yet
        compile_query(
            "SELECT o.id " + SCD2_JOIN.format(kind="") + "o.id = c.id",
            schemas=SCHEMAS,
            watermark_delay="1 minute",
            versioned=CUSTOMERS,
        )
    assert info.value.code == "SSV162" and "Run a.customers first" in str(info.value)


def changes(operator, state, rows, key=(1,)):
    """One call with orders ('o', time s, id) and changes (op, commit, start s, end s or None,
    name): the (order id, name) pairs out."""
    orders = [r for r in rows if r[0] == "o"]
    versions = [r for r in rows if r[0] != "o"]
    s = 1_000_000
    pdf = pd.DataFrame(
        {
            "__dss_us": [o[1] * s for o in orders] + [v[2] * s for v in versions],
            "__dss_l": [{"id": o[2]} for o in orders] + [None] * len(versions),
            "__dss_r": [None] * len(orders) + [{"name": v[4]} for v in versions],
            "__dss_end_us": [None] * len(orders) + [v[3] and v[3] * s for v in versions],
            "__dss_op": [None] * len(orders) + [v[0] for v in versions],
            "__dss_cv": [None] * len(orders) + [v[1] for v in versions],
        }
    )
    out = list(operator(key, iter([pdf]), state))
    if not out:
        return []
    pairs = zip(out[0]["__dss_l"], out[0]["__dss_r"], strict=True)
    return [(o["id"], v and v["name"]) for o, v in pairs]


def test_changes_of_versions_apply_unless_late_and_a_version_ends():
    state, left = State(watermark_ms=0), _operator(inner=False, changes=True)
    # ann from 1 s; anne from 4 s (ann ended at 4 s in the same commit)
    assert changes(left, state, [("+I", 1, 1, None, "ann"), ("o", 2, "o2"), ("o", 5, "o5")]) == []
    ended = [("-U", 2, 1, None, "ann"), ("+U", 2, 1, 4, "ann"), ("+I", 2, 4, None, "anne")]
    assert changes(left, state, ended) == []
    state.watermark_ms = 6000
    assert changes(left, state, [("o", 9, "o9"), ("o", 12, "o12")]) == [
        ("o2", "ann"),
        ("o5", "anne"),
    ]
    # a delete at 10 s (anne ends, no next version): its effect is 10 s, after the watermark
    assert changes(left, state, [("-U", 3, 4, None, "anne"), ("+U", 3, 4, 10, "anne")]) == []
    # late: anne's values at 4 s change (effect 4 s); an end change to 5 s (effect 5 s)
    late = [("-U", 4, 4, 10, "anne"), ("+U", 4, 4, 10, "ANNE"), ("+I", 4, 3, 4, "x")]
    assert changes(left, state, late) == []
    state.watermark_ms = 20_000
    # o9 takes anne (not ANNE); o12 is past anne's end (10 s): none
    assert changes(left, state, []) == [("o9", "anne"), ("o12", None)]
    _, versions, _, _ = pickle.loads(state.get[0])
    assert [(v[0] // 1_000_000, v[3] // 1_000_000) for v in versions] == [(4, 10)]


# An upsert_table with unique_key and event_time in its config: the rows it upserts.
LATEST_RATES = {"a.rates": Versioned(("currency",), "rtime", LATEST)}
RATES_CHANGELOG = {
    **SCHEMAS["a.rates"],
    "_op": "string",
    "_batch_id": "bigint",
    "_commit_version": "bigint",
}


def latest_plan(sql, changelogs=(("a.rates", "a.rates_changelog"),)):
    return compile_query(
        sql,
        schemas={**SCHEMAS, "a.rates_changelog": RATES_CHANGELOG},
        watermark_delay="1 minute",
        versioned=LATEST_RATES,
        changelogs=dict(changelogs),
    )


def test_versions_of_an_upsert_table_are_the_rows_its_changelog_upserts():
    plan = latest_plan("SELECT o.id, r.* " + JOIN.format(kind="LEFT") + "o.currency = r.currency")
    spec = plan.temporal
    assert spec.upserts and not spec.changes and spec.changelog == "a.rates_changelog"
    assert sorted(plan.sources) == ["a.orders", "a.rates_changelog"]
    # Spark's watermark and late rule on the version's time; only +I/+U, with their commit
    assert "WATERMARK rtime DELAY OF INTERVAL '60' SECONDS" in spec.right_sql
    assert spec.right_sql.endswith("`r`.`_op` IN ('+I', '+U')"), spec.right_sql
    assert "`r`.`_commit_version` AS __dss_cv, `r`.`currency`, `r`.`rtime`, `r`.`rate` FROM" in (
        spec.right_sql
    )
    assert "_batch_id" not in spec.right_sql + spec.post_sql
    views = {"a.orders": "o_view", "a.rates_changelog": "r_view"}
    oracle = plan.emitted_sql(views, 5)
    assert "FROM r_view WHERE NOT rtime IS NULL" in oracle and "_op IN ('+I', '+U')" in oracle
    # among versions at one time, the last committed is valid
    assert "LEAD(rtime) OVER (PARTITION BY currency ORDER BY rtime NULLS LAST, _commit_version" in (
        oracle
    )
    late = plan.late_rows_sql(views)
    assert "_op IN ('+I', '+U')" in late[1] and "_op" not in late[0]
    with pytest.raises(SqlError) as info:  # no changelog yet
        latest_plan("SELECT o.id " + JOIN.format(kind="") + "o.currency = r.currency", ())
    assert info.value.code == "SSV162" and "Run a.rates first" in str(info.value)


def test_versions_at_one_time_take_the_last_committed_within_a_batch_too():
    state, left = State(watermark_ms=0), _operator(inner=False, upserts=True)
    s = 1_000_000

    def batch(rows):  # (time s, order id or None, version id or None, commit)
        pdf = pd.DataFrame(
            {
                "__dss_us": [r[0] * s for r in rows],
                "__dss_l": [r[1] and {"id": r[1]} for r in rows],
                "__dss_r": [r[2] and {"id": r[2]} for r in rows],
                "__dss_cv": [r[3] for r in rows],
            }
        )
        out = list(left(("EUR",), iter([pdf]), state))
        pairs = zip(out[0]["__dss_l"], out[0]["__dss_r"], strict=True) if out else []
        return [(o["id"], v and v["id"]) for o, v in pairs]

    # c7 (commit 7) arrives before c5 at the same time: c7 is valid from 3 s
    assert (
        batch([(3, None, "c7", 7), (3, None, "c5", 5), (1, None, "c9", 9), (4, "o4", None, None)])
        == []
    )
    state.watermark_ms = 5000
    assert batch([]) == [("o4", "c7")]


DEDUP = (
    "SELECT currency, rtime, rate FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY currency "
    "ORDER BY rtime DESC) AS rn FROM a.rates) WHERE rn = 1"
)


def upsert_plan(sql, **config):
    return compile_query(
        sql,
        **{"schemas": SCHEMAS, **config},
        watermark_delay="1 minute",
        materialization="upsert_table",
        event_time="rtime",
    )


def test_an_upsert_table_with_event_time_never_deletes_a_key():
    dedup = upsert_plan(DEDUP, unique_key=["currency"], constant_domain=["currency"])
    assert dedup.upsert is not None
    applied = {"sequence_by": "rtime", "except_columns": [], "scd_type": 1}
    assert upsert_plan("SELECT * FROM a.rates", unique_key=["currency"], apply_changes=applied)
    # a Top-N's ranks are upserted, never deleted: its rows are versions of (key, rank)
    topn = DEDUP.replace("currency, rtime, rate", "*").replace("rn = 1", "rn <= 2")
    assert upsert_plan(topn, unique_key=["currency", "rn"])


@pytest.mark.parametrize(
    "sql,config,text",
    [
        (DEDUP, {"constant_domain": ["currency"]}, "it has no unique_key in its config"),
        (
            "SELECT currency, MAX(rtime) AS rtime FROM a.rates GROUP BY currency "
            "HAVING COUNT(*) > 1",
            {"unique_key": ["currency"]},
            "its HAVING (or a RANK over an aggregate) deletes the keys",
        ),
        (
            "SELECT * FROM a.rates",
            {
                "unique_key": ["currency"],
                "apply_changes": {"sequence_by": "rtime", "delete_when": "rate < 0"},
            },
            "its apply_changes deletes keys (delete_when)",
        ),
        (
            "SELECT * FROM a.rates",
            {"unique_key": ["currency"], "apply_changes": {"sequence_by": "rtime", "scd_type": 2}},
            "its versions are its rows already",
        ),
        (
            "SELECT currency, SUM(rate) AS rate, MAX(rtime) AS rtime FROM a.latest "
            "GROUP BY currency",
            {
                "unique_key": ["currency"],
                "changelogs": {"a.latest": "a.latest_changelog"},
                "schemas": {**SCHEMAS, "a.latest_changelog": RATES_CHANGELOG},
            },
            "it aggregates an upsert_table's changes",
        ),
    ],
)
def test_an_upsert_table_whose_versions_would_lack_a_time_is_refused(sql, config, text):
    with pytest.raises(SqlError) as info:
        upsert_plan(sql, **config)
    assert info.value.code == "SSV166" and text in str(info.value), str(info.value)
