"""upsert_table queries in sql/ (no Spark): inferred keys, output modes, the HAVING and
deduplication rewrites, and the shapes refused with a code."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query

SCHEMAS = {"a.clicks": {"user": "string", "cTime": "timestamp", "url": "string"}}
DEDUP = (
    "SELECT {out} FROM (SELECT {cols}, ROW_NUMBER() OVER (PARTITION BY user ORDER BY {order}) AS "
    "rn FROM a.clicks{where}) WHERE {w}"
)
TUMBLE = "TABLE(TUMBLE(TABLE a.clicks, DESCRIPTOR(cTime), INTERVAL '1' HOUR))"
WINDOWED = (
    f"SELECT window_start, window_end, user, COUNT(url) AS n FROM {TUMBLE} GROUP BY window_start, "
    "window_end, user"
)


def upsert(sql: str, **kw):
    kw.setdefault(
        "constant_domain", ["user", "who", "url", "cnt"]
    )  # Spark's state kept; tests of bounds below
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay=kw.pop("delay", "1 minute"),
        materialization="upsert_table",
        **kw,
    )


GOOD = [
    # (sql, config, unique key, output mode, rewritten Spark SQL)
    (
        "SELECT user, COUNT(url) AS cnt FROM a.clicks GROUP BY user",
        {},
        ("user",),
        "update",
        "SELECT user, COUNT(url) AS cnt FROM a.clicks GROUP BY user",
    ),
    (
        "SELECT user AS who, COUNT(url) AS cnt FROM a.clicks GROUP BY user HAVING COUNT(url) > 1",
        {},
        ("who",),
        "update",
        "SELECT user AS who, COUNT(url) AS cnt, (COUNT(url) > 1) AS __keep FROM a.clicks "
        "GROUP BY user",
    ),
    (
        "SELECT user, url, COUNT(*) AS n FROM a.clicks GROUP BY 1, url",
        {},
        ("user", "url"),
        "update",
        "SELECT user, url, COUNT(*) AS n FROM a.clicks GROUP BY 1, url",
    ),
    (
        "SELECT user, COUNT(DISTINCT url) AS urls FROM a.clicks GROUP BY user",
        {"unique_key": ["user"]},
        ("user",),
        "update",
        "SELECT user, SIZE(COLLECT_SET(url)) AS urls FROM a.clicks GROUP BY user",
    ),
    (
        DEDUP.format(out="*", cols="*", order="cTime DESC", where="", w="rn = 1"),
        {},
        ("user",),
        "update",
        "SELECT * FROM (SELECT __d.user AS user, __d.cTime AS cTime, __d.url AS url, 1 AS rn FROM "
        "(SELECT MAX(STRUCT(cTime AS __o0, user AS user, cTime AS cTime, url AS url)) AS __d FROM "
        "a.clicks GROUP BY user) AS __d) WHERE rn = 1",
    ),
    (
        DEDUP.format(
            out="user, url", cols="user, url", order="cTime", where=" WHERE url <> ''", w="rn <= 1"
        ),
        {},
        ("user",),
        "update",
        "SELECT user, url FROM (SELECT __d.user AS user, __d.url AS url, 1 AS rn FROM (SELECT "
        "MIN(STRUCT(cTime AS __o0, user AS user, cTime AS cTime, url AS url)) AS __d FROM a.clicks "
        "WHERE url <> '' GROUP BY user) AS __d) WHERE rn <= 1",
    ),
    # NULLs where MAX / MIN would not put them: a flag orders them first
    (
        DEDUP.format(out="*", cols="*", order="cTime DESC NULLS FIRST", where="", w="rn = 1"),
        {},
        ("user",),
        "update",
        "SELECT * FROM (SELECT __d.user AS user, __d.cTime AS cTime, __d.url AS url, 1 AS rn FROM "
        "(SELECT MAX(STRUCT(cTime IS NULL AS __n0, cTime AS __o0, user AS user, cTime AS cTime, "
        "url AS url)) AS __d FROM a.clicks GROUP BY user) AS __d) WHERE rn = 1",
    ),
    (
        WINDOWED,
        {},
        ("window_start", "window_end", "user"),
        "append",
        "SELECT __w.start AS window_start, __w.end AS window_end, user, COUNT(url) AS n FROM "
        "(SELECT *, WINDOW(cTime, '3600 seconds', '3600 seconds', '0 seconds') AS __w FROM "
        "a.clicks WATERMARK cTime DELAY OF INTERVAL '60' SECONDS) AS clicks GROUP BY __w, user",
    ),
    (
        WINDOWED + " HAVING COUNT(url) > 2",
        {"emit_early": True},
        ("window_start", "window_end", "user"),
        "update",
        "SELECT __w.start AS window_start, __w.end AS window_end, user, COUNT(url) AS n, "
        "(COUNT(url) > 2) AS __keep FROM (SELECT *, WINDOW(cTime, '3600 seconds', '3600 seconds', "
        "'0 seconds') AS __w FROM a.clicks WATERMARK cTime DELAY OF INTERVAL '60' SECONDS) AS "
        "clicks GROUP BY __w, user",
    ),
    (
        "SELECT user, url FROM a.clicks WHERE url <> ''",
        {"unique_key": ["user"], "delay": None},
        ("user",),
        "append",
        "SELECT user, url FROM a.clicks WHERE url <> ''",
    ),
]


@pytest.mark.parametrize("sql,config,key,mode,expected", GOOD)
def test_upsert_plans(sql, config, key, mode, expected):
    plan = upsert(sql, **config)
    assert (plan.upsert.unique_key, plan.output_mode, plan.spark_sql) == (key, mode, expected)
    assert plan.kind == ("updating" if mode == "update" else "append")


def test_topn_without_window_streams_rows_and_reranks_them_with_the_table():
    plan = upsert(
        DEDUP.format(out="*", cols="*", order="cTime DESC", where=" WHERE url <> ''", w="rn <= 3")
    )
    assert (plan.upsert.unique_key, plan.output_mode) == (("user", "rn"), "append")
    assert plan.spark_sql == "SELECT user, cTime, url FROM a.clicks WHERE url <> ''"  # stateless
    ranked = (
        "SELECT * FROM (SELECT user, cTime, url, ROW_NUMBER() OVER (PARTITION BY user ORDER BY "
        "cTime DESC, user, url) AS rn FROM {}) WHERE rn <= 3"
    )  # every column breaks ties
    assert plan.rank_sql_for("v") == ranked.format("v AS __rank_input")
    assert plan.emitted_sql({"a.clicks": "src"}, 0) == ranked.format(
        "src AS clicks WHERE url <> ''"
    )


def test_key_and_mode_are_part_of_the_fingerprint():
    sql = "SELECT user, url FROM a.clicks"
    assert (
        upsert(sql, unique_key=["user"]).fingerprint
        != upsert(sql, unique_key=["user", "url"]).fingerprint
    )
    assert upsert(WINDOWED).fingerprint != upsert(WINDOWED, emit_early=True).fingerprint


def test_oracle_keeps_having_rows_and_open_windows_in_update_mode():
    plan = upsert(WINDOWED + " HAVING COUNT(url) > 2", emit_early=True)
    sql = plan.emitted_sql({"a.clicks": "v"}, 10**6)
    assert sql.startswith("SELECT * EXCEPT (__keep) FROM (") and sql.endswith(
        ") AS __kept WHERE __keep"
    )
    assert (
        "__w.end > __dss_late_wm" in sql and "HAVING" not in sql
    )  # late rows out; no closed-window filter
    assert "HAVING MAX(__w.end) <= TIMESTAMP_MICROS(1000000)" in upsert(WINDOWED).emitted_sql(
        {"a.clicks": "v"}, 10**6
    )


BAD = [
    # (sql, config, code, substring of the message)
    ("SELECT user, url FROM a.clicks", {}, "SSV130", "neither groups nor deduplicates"),
    ("SELECT COUNT(*) FROM a.clicks", {}, "SSV130", "no GROUP BY"),
    (
        "SELECT url, COUNT(*) FROM a.clicks GROUP BY user, url",
        {},
        "SSV130",
        "GROUP BY key user is not a column",
    ),
    (
        DEDUP.format(out="url", cols="*", order="cTime DESC", where="", w="rn = 1"),
        {},
        "SSV130",
        "PARTITION BY key user",
    ),
    (
        DEDUP.format(out="user, rn", cols="*", order="cTime DESC", where="", w="rn <= 3"),
        {},
        "SSV131",
        "outer SELECT is not SELECT *",
    ),
    (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user ORDER BY cTime) AS rn "
        "FROM a.clicks)",
        {},
        "SSV131",
        "without a filter",
    ),
    (
        DEDUP.format(out="*", cols="*", order="cTime DESC, url", where="", w="rn = 1"),
        {},
        "SSV131",
        "both ascending and descending",
    ),
    (
        DEDUP.format(out="*", cols="upper(url) AS u", order="cTime DESC", where="", w="rn = 1"),
        {},
        "SSV131",
        "computed columns",
    ),
    (
        "SELECT n, COUNT(*) FROM (SELECT user, COUNT(*) AS n FROM a.clicks GROUP BY "
        "user) GROUP BY n",
        {},
        "SSV131",
        "nested below the top-level",
    ),
    (
        "SELECT * FROM (SELECT user, COUNT(*) AS n FROM a.clicks GROUP BY user) WHERE n > 2",
        {},
        "SSV131",
        "nested below the top-level",
    ),
    ("SELECT user FROM a.clicks UNION SELECT url FROM a.clicks", {}, "SSV131", "set operation"),
    (
        "SELECT user, COUNT(*) FROM a.clicks GROUP BY user",
        {"emit_early": True},
        "SSV132",
        "window aggregates only",
    ),
    (WINDOWED, {"delay": None}, "SSV105", "watermark"),
]


@pytest.mark.parametrize("sql,config,code,message", BAD)
def test_refused_shapes(sql, config, code, message):
    with pytest.raises(SqlError) as info:
        upsert(sql, **config)
    assert info.value.code == code and message in str(info.value), str(info.value)
    assert info.value.position is not None


def test_streaming_view_still_refuses_deduplication():
    with pytest.raises(SqlError) as info:
        compile_query(
            DEDUP.format(out="*", cols="*", order="cTime DESC", where="", w="rn = 1"),
            schemas=SCHEMAS,
            watermark_delay=None,
        )
    assert info.value.code == "SSV108"


# An upsert_table over an upsert_table: aggregated from its changelog, retractions applied.
CHANGELOGS = {"a.cpu": "a.cpu_changelog"}
CPU = {
    "a.cpu": {"user": "string", "cnt": "bigint"},
    "a.cpu_changelog": {"user": "string", "cnt": "bigint", "_op": "string"},
}


def downstream(sql, materialization="upsert_table", **kw):
    return compile_query(
        sql,
        schemas=CPU,
        watermark_delay=None,
        materialization=materialization,
        changelogs=CHANGELOGS,
        **{"constant_domain": ["cnt"], **kw},
    )


def test_aggregate_over_an_upsert_table_counts_changes_with_a_sign():
    plan = downstream(
        "SELECT cnt, COUNT(*) AS users, SUM(cnt) AS s, AVG(cnt) AS a, COUNT(user) AS u FROM a.cpu "
        "WHERE cnt > 0 GROUP BY cnt HAVING COUNT(*) > 1"
    )
    present = "SUM(IF(NOT cnt IS NULL, __s, 0))"
    assert plan.sources == ("a.cpu_changelog",)
    assert (plan.upsert.unique_key, plan.output_mode, plan.upsert.keep_column) == (
        ("cnt",),
        "update",
        "__keep",
    )
    assert plan.spark_sql == (
        f"SELECT cnt, SUM(__s) AS users, CASE WHEN {present} > 0 THEN SUM((cnt) * __s) END AS s, "
        f"CASE WHEN {present} > 0 THEN SUM((cnt) * __s) / {present} END AS a, SUM(IF(NOT user IS "
        "NULL, __s, 0)) AS u, (SUM(__s) > 0 AND SUM(__s) > 1) AS __keep FROM (SELECT *, IF(_op IN "
        "('+I', '+U'), 1, -1) AS __s FROM a.cpu_changelog) AS cpu WHERE cnt > 0 GROUP BY cnt"
    )


@pytest.mark.parametrize(
    "sql,materialization,code,message",
    [
        (
            "SELECT user, cnt FROM a.cpu",
            "streaming_view",
            "SSV140",
            "streaming_view cannot read upsert_table a.cpu",
        ),
        (
            "SELECT cnt, SUM(DISTINCT cnt) AS s FROM a.cpu GROUP BY cnt",
            "upsert_table",
            "SSV141",
            "SUM(DISTINCT cnt) cannot be retracted",
        ),
        (
            "SELECT cnt, COUNT(DISTINCT user, cnt) AS n FROM a.cpu GROUP BY cnt",
            "upsert_table",
            "SSV141",
            "cannot be retracted",
        ),
        (
            "SELECT cnt, MAX(user) FROM a.cpu GROUP BY cnt HAVING COLLECT_LIST(user) IS NOT NULL",
            "upsert_table",
            "SSV141",
            "cannot be retracted",
        ),
        (
            "SELECT cnt, COUNT(*) + 1 FROM a.cpu GROUP BY cnt",
            "upsert_table",
            "SSV141",
            "COUNT(*) + 1 has no name",
        ),
        ("SELECT user FROM a.cpu", "upsert_table", "SSV141", "does not aggregate it with GROUP BY"),
        (
            "SELECT c.cnt, COUNT(*) FROM a.cpu AS c JOIN a.cpu AS d ON c.user = d.user "
            "GROUP BY c.cnt",
            "upsert_table",
            "SSV141",
            "no joins",
        ),
        (
            "SELECT n, COUNT(*) FROM (SELECT cnt AS n FROM a.cpu) GROUP BY n",
            "upsert_table",
            "SSV141",
            "directly",
        ),
    ],
)
def test_queries_that_cannot_consume_updates_name_the_upstream(sql, materialization, code, message):
    with pytest.raises(SqlError) as info:
        downstream(sql, materialization)
    assert (
        info.value.code == code
        and message in str(info.value)
        and "a.cpu_changelog" in str(info.value)
    )


# Bounded state (sql/state.py): unbounded Spark state is refused unless the keys are declared
# constant_domain or state_ttl keeps the partial aggregates in Delta.
UNBOUNDED = [
    (
        "SELECT user, COUNT(url) AS cnt FROM a.clicks GROUP BY user",
        {},
        "GROUP BY user",
        "constant_domain: [user]",
    ),
    (
        "SELECT user AS who, COUNT(*) AS n FROM a.clicks GROUP BY user",
        {"constant_domain": ["user"]},
        "GROUP BY user",
        "constant_domain: [who]",
    ),  # the key is named by its output column
    (
        "SELECT user, url, COUNT(*) AS n FROM a.clicks GROUP BY user, url",
        {"constant_domain": ["user"]},
        "one aggregate per url forever",
        "constant_domain: [url]",
    ),
    ("SELECT DISTINCT user FROM a.clicks", {}, "SELECT DISTINCT", "state_ttl: '7 days'"),
    (
        DEDUP.format(out="*", cols="*", order="cTime DESC", where="", w="rn = 1"),
        {},
        "GROUP BY user",
        "user",
    ),
]


@pytest.mark.parametrize("sql,config,what,fix", UNBOUNDED)
def test_unbounded_state_is_refused(sql, config, what, fix):
    with pytest.raises(SqlError) as info:
        upsert(sql, **{"constant_domain": [], **config})
    assert info.value.code == "SSV150" and what in str(info.value) and fix in str(info.value)


def test_bounded_state_is_accepted():
    assert upsert(WINDOWED, constant_domain=[]).output_mode == "append"  # the watermark bounds it
    assert (
        upsert(WINDOWED + " HAVING COUNT(url) > 2", emit_early=True, constant_domain=[]).output_mode
        == "update"
    )
    topn = upsert(
        DEDUP.format(out="*", cols="*", order="cTime DESC", where="", w="rn <= 3"),
        constant_domain=[],
    )
    assert topn.output_mode == "append"  # the table holds its state
    plan = upsert(
        "SELECT user, url, COUNT(*) AS n FROM a.clicks GROUP BY user, url",
        constant_domain=["USER", "url"],
    )
    assert plan.output_mode == "update" and plan.upsert.partials is None


def test_join_of_two_streams_without_window_is_refused():
    sql = "SELECT c.user, d.url FROM a.clicks c JOIN a.clicks d ON c.user = d.user"
    for config in ({"unique_key": ["user"]}, {"unique_key": ["user"], "state_ttl": "1 day"}):
        with pytest.raises(SqlError) as info:
            upsert(sql, **config)
        assert info.value.code == "SSV150" and "dimensions" in str(info.value)
    assert upsert(sql, unique_key=["user"], dimensions=["a.clicks"]).output_mode == "append"
    with pytest.raises(SqlError) as info:  # a misspelled dimension is named, not taken for a stream
        upsert(sql, unique_key=["user"], dimensions=["clics"])
    assert (
        info.value.code == "SSC201" and "clics" in str(info.value) and "a.clicks" in str(info.value)
    )


def test_state_ttl_keeps_partials_in_delta():
    plan = upsert(
        "SELECT user, COUNT(url) AS clicks, MAX(cTime) AS last, AVG(LENGTH(url)) AS len, "
        "COUNT(DISTINCT url) AS urls FROM a.clicks WHERE url <> '' GROUP BY user HAVING "
        "COUNT(*) > 1",
        state_ttl="12 hours",
        constant_domain=[],
    )
    spec = plan.upsert.partials
    assert (plan.output_mode, plan.kind, plan.upsert.keep_column, spec.ttl_ms) == (
        "append",
        "updating",
        "__keep",
        12 * 3600 * 1000,
    )
    assert plan.spark_sql == (
        "SELECT user AS __k0, url AS __a0, cTime AS __a1, LENGTH(url) AS __a2, url AS __a4 "
        "FROM a.clicks WHERE url <> ''"
    )  # stateless: no Spark state at all
    assert plan.partials_sql_for("partial", "b") == (
        "SELECT __k0, COUNT(__a0) AS __p0, MAX(__a1) AS __p1, SUM(__a2) AS __p2s, COUNT(__a2) AS "
        "__p2c, COLLECT_SET(__a4) AS __p4, COUNT(*) AS __p5 FROM b AS __dss_batch GROUP BY __k0"
    )
    assert plan.partials_sql_for("merge", "p") == (
        "SELECT __k0, SUM(__p0) AS __p0, MAX(__p1) AS __p1, SUM(__p2s) AS __p2s, SUM(__p2c) AS "
        "__p2c, ARRAY_DISTINCT(FLATTEN(COLLECT_LIST(__p4))) AS __p4, SUM(__p5) AS __p5 FROM p AS "
        "__dss_partials GROUP BY __k0"
    )
    assert plan.partials_sql_for("final", "m") == (
        "SELECT __k0 AS user, __p0 AS clicks, __p1 AS last, CAST(__p2s AS DOUBLE) / NULLIF(__p2c, "
        "0) AS len, SIZE(__p4) AS urls, (__p5 > 1) AS __keep FROM m AS __dss_merged"
    )
    # the oracle is still the query as written
    assert "GROUP BY user" in plan.emitted_sql({}, 0) and "__keep" in plan.emitted_sql({}, 0)


def test_min_max_and_count_distinct_under_retraction_keep_a_count_per_value_in_delta():
    plan = downstream(
        "SELECT cnt, MIN(user) AS lo, MAX(user), COUNT(DISTINCT user) AS n, MIN(c.cnt) AS m, "
        "COUNT(*) FROM a.cpu AS c GROUP BY cnt HAVING MAX(user) > 'a'"
    )
    spec = plan.upsert.partials
    assert (plan.output_mode, spec.ttl_ms) == ("append", 100 * 365 * 86_400 * 1000)  # no expiry
    # one map of counts per argument, for all three aggregates of it
    assert plan.spark_sql == (
        "SELECT cnt AS __k0, STRUCT(user AS v, __s AS s) AS __a0, STRUCT(c.cnt AS v, __s AS s) "
        "AS __a1, __s AS __a2 FROM (SELECT *, IF(_op IN ('+I', '+U'), 1, -1) AS __s FROM "
        "a.cpu_changelog) AS c"
    )
    present = "MAP_KEYS(MAP_FILTER(__p{}, (__v, __n) -> __n > 0))"
    assert plan.partials_sql_for("final", "m") == (
        f"SELECT __k0 AS cnt, ARRAY_MIN({present.format(0)}) AS lo, ARRAY_MAX("
        f"{present.format(0)}) AS `max(user)`, CAST(SIZE({present.format(0)}) AS BIGINT) AS n, "
        f"ARRAY_MIN({present.format(1)}) AS m, __p2 AS `count(1)`, (__p2 > 0 AND ARRAY_MAX("
        f"{present.format(0)}) > 'a') AS __keep FROM m AS __dss_merged"
    )
    # a batch's count per key and value: a window column, one row per pair into the map
    assert plan.partials_sql_for("partial", "b").startswith(
        "SELECT __k0, MAP_FROM_ENTRIES(COLLECT_LIST(IF(__a0_first AND NOT __a0.v IS NULL, "
        "STRUCT(__a0.v AS k, __a0_n AS n), NULL))) AS __p0, MAP_FROM_ENTRIES("
    )
    assert plan.partials_sql_for("partial", "b").endswith(
        "FROM (SELECT *, SUM(__a0.s) OVER (PARTITION BY __k0, __a0.v) AS __a0_n, ROW_NUMBER() "
        "OVER (PARTITION BY __k0, __a0.v ORDER BY __a0.s) = 1 AS __a0_first, SUM(__a1.s) OVER "
        "(PARTITION BY __k0, __a1.v) AS __a1_n, ROW_NUMBER() OVER (PARTITION BY __k0, __a1.v "
        "ORDER BY __a1.s) = 1 AS __a1_first FROM b AS __dss_batch) AS __dss_batch GROUP BY __k0"
    )
    assert "MAP_ZIP_WITH(__m, __x" in plan.partials_sql_for("merge", "p")
    # the oracle computes it another way: a scan of each group's changes sorted by value
    assert (
        "(ELEMENT_AT(TRANSFORM(ARRAY(ARRAY_SORT(FILTER(COLLECT_LIST(STRUCT(user AS v, __s AS s))"
        in (plan.emitted_sql({}, 0))
    )
    # without constant_domain, a state_ttl: the counts expire with their key
    ttl = downstream(
        "SELECT cnt, MIN(user) AS lo FROM a.cpu GROUP BY cnt", constant_domain=[], state_ttl="1 day"
    )
    assert ttl.upsert.partials.ttl_ms == 86_400_000
    with pytest.raises(SqlError, match="SSV150"):
        downstream("SELECT cnt, MIN(user) AS lo FROM a.cpu GROUP BY cnt", constant_domain=[])


def test_counted_aggregates_under_retraction_filter_distinct_and_names():
    plan = downstream(
        "SELECT cnt, MIN(DISTINCT user) AS lo, MAX(user) FILTER (WHERE cnt > 1) AS hi, "
        "SUM(cnt) FILTER (WHERE user > 'b') AS s, COUNT(*) FILTER (WHERE user > 'b') AS n "
        "FROM a.cpu GROUP BY cnt"
    )
    assert plan.spark_sql.startswith(
        "SELECT cnt AS __k0, STRUCT(user AS v, __s AS s) AS __a0, STRUCT(IF(cnt > 1, user, NULL) "
        "AS v, __s AS s) AS __a1, IF(NOT IF(user > 'b', cnt, NULL) IS NULL, __s, 0) AS __a2, "
        "(IF(user > 'b', cnt, NULL)) * __s AS __a3, IF(user > 'b', __s, 0) AS __a4"
    )  # MIN(DISTINCT x) is MIN(x); FILTER folded into the argument (partials keep no FILTER)
    # without counted aggregates, COUNT(*) FILTER keeps its form; SUM's is folded (its CASE
    # cannot take a FILTER)
    plain = downstream(
        "SELECT cnt, COUNT(*) FILTER (WHERE user > 'b') AS n, SUM(cnt) FILTER (WHERE user > 'b') "
        "AS s FROM a.cpu GROUP BY cnt"
    )
    assert "SUM(__s) FILTER(WHERE user > 'b') AS n" in plain.spark_sql
    assert "SUM((IF(user > 'b', cnt, NULL)) * __s) END AS s" in plain.spark_sql
    # a computed column without a name: left alone over Spark's state, refused with partials
    assert downstream("SELECT cnt, cnt * 2, COUNT(*) AS n FROM a.cpu GROUP BY cnt").spark_sql
    with pytest.raises(SqlError, match="SSV141") as info:
        downstream("SELECT cnt, cnt * 2, MIN(user) AS lo FROM a.cpu GROUP BY cnt")
    assert "cnt * 2 has no name" in str(info.value)
    # values a count per value cannot be keyed by
    schemas = {
        "a.cpu": {"cnt": "bigint", "tags": "map<string,int>", "at": "timestamp_ntz"},
        "a.cpu_changelog": {"cnt": "bigint", "tags": "map<string,int>", "at": "timestamp_ntz"},
    }
    for agg in ("COUNT(DISTINCT tags)", "MAX(at)", "MIN(c.at)"):
        with pytest.raises(SqlError, match="SSV141") as info:
            compile_query(
                f"SELECT cnt, {agg} AS x FROM a.cpu AS c GROUP BY cnt",
                schemas=schemas,
                watermark_delay=None,
                materialization="upsert_table",
                changelogs=CHANGELOGS,
                constant_domain=["cnt"],
            )
        assert "keeps a count per value" in str(info.value), agg


def test_spark_names_of_unaliased_aggregates():
    import sqlglot

    from dbt.adapters.spark_streaming.sql.columns import spark_name

    def name(sql, relations=("c",)):
        return spark_name(sqlglot.parse_one(sql, read="spark"), relations)

    assert [
        name(q)
        for q in ("COUNT(*)", "COUNT(1)", "MIN(c.x)", "MIN(s.f)", "COUNT(DISTINCT (u))", "x")
    ] == ["count(1)", "count(1)", "min(x)", "min(s.f)", "count(DISTINCT u)", "x"]
    assert name("MAX(x + 1)") is None  # Spark prints it its own way: the rewrites ask for a name


def test_unaliased_aggregates_kept_as_partials_are_named_as_spark_names_them():
    plan = upsert(
        "SELECT user, COUNT(*), MAX(c.cTime), COUNT(url) FROM a.clicks AS c GROUP BY user",
        state_ttl="1 day",
        constant_domain=[],
    )
    assert plan.partials_sql_for("final", "m").startswith(
        "SELECT __k0 AS user, __p0 AS `count(1)`, __p1 AS `max(cTime)`, __p2 AS `count(url)` FROM"
    )
    for unnamed in ("MAX(cTime) + INTERVAL 1 DAY", "UPPER(user)", "COUNT(DISTINCT url)"):
        with pytest.raises(SqlError, match="SSV151") as info:
            upsert(
                f"SELECT user, {unnamed} FROM a.clicks GROUP BY user",
                state_ttl="1 day",
                constant_domain=[],
            )
        assert "without a name" in str(info.value)


def test_state_ttl_on_dedup_and_pipelines():
    dedup = upsert(
        DEDUP.format(out="user, url", cols="*", order="cTime DESC", where="", w="rn = 1"),
        state_ttl="1 day",
        constant_domain=[],
    )
    assert dedup.spark_sql == (
        "SELECT user AS __k0, STRUCT(cTime AS __o0, user AS user, cTime AS cTime, url AS url) "
        "AS __a0 FROM a.clicks"
    )
    assert dedup.partials_sql_for("final", "m") == (
        "SELECT user, url FROM (SELECT __d.user AS user, __d.cTime AS cTime, __d.url AS url, 1 AS "
        "rn FROM (SELECT __p0 AS __d FROM m AS __dss_merged) AS __d) WHERE rn = 1"
    )
    pipeline = downstream(
        "SELECT cnt, COUNT(*) AS users FROM a.cpu GROUP BY cnt",
        state_ttl="1 day",
        constant_domain=[],
    )
    assert pipeline.spark_sql == (
        "SELECT cnt AS __k0, __s AS __a0 FROM (SELECT *, IF(_op IN ('+I', '+U'), 1, -1) "
        "AS __s FROM a.cpu_changelog) AS cpu"
    )
    assert pipeline.partials_sql_for("final", "m") == (
        "SELECT __k0 AS cnt, __p0 AS users, (__p0 > 0) AS __keep FROM m AS __dss_merged"
    )


@pytest.mark.parametrize(
    "sql,config,code,text",
    [
        (
            "SELECT user, STDDEV(LENGTH(url)) AS s FROM a.clicks GROUP BY user",
            {"state_ttl": "1 day"},
            "SSV151",
            "aggregate STDDEV",
        ),
        (
            "SELECT user, COUNT(*) FILTER (WHERE url <> '') AS n FROM a.clicks GROUP BY user",
            {"state_ttl": "1 day"},
            "SSV151",
            "aggregate COUNT(*)",
        ),
        (
            "SELECT user, COUNT(*) AS n FROM a.clicks GROUP BY user",
            {"state_ttl": "soon"},
            "SSV152",
            "state_ttl 'soon'",
        ),
        (
            "SELECT user, COUNT(*) AS n FROM a.clicks GROUP BY user",
            {"state_ttl": "0 seconds"},
            "SSV152",
            "positive",
        ),
    ],
)
def test_state_ttl_errors(sql, config, code, text):
    with pytest.raises(SqlError) as info:
        upsert(sql, **{"constant_domain": [], **config})
    assert info.value.code == code and text in str(info.value)
