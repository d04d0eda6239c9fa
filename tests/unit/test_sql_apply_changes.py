"""apply_changes (SCD type 1) in sql/ (no Spark): the rewrite to the last change row per key,
its partials (tombstones expire, live keys do not), and what is refused with a code."""

import pytest

from dbt.adapters.spark_streaming.sql import SqlError, compile_query
from dbt.adapters.spark_streaming.sql.state import TOMBSTONE

SCHEMAS = {
    "a.feed": {"Id": "bigint", "seq": "bigint", "op": "string", "name": "string"},
    "a.dim": {"name": "string", "region": "string"},
    "a.typed": {
        "Id": "bigint",
        "seq": "bigint",
        "op": "string",
        "pos": "struct<ts:timestamp,n:bigint>",
        "path": "array<bigint>",
        "tags": "map<string,int>",
        "doc": "variant",
        "info": "struct<m:map<string,int>>",
    },
}
APPLY = {"sequence_by": "seq", "delete_when": "op = 'd'", "except_columns": ["op"]}


def plan(sql="SELECT * FROM a.feed", apply=APPLY, key=("id",), **kw):
    return compile_query(
        sql,
        schemas=SCHEMAS,
        watermark_delay=None,
        materialization=kw.pop("materialization", "upsert_table"),
        unique_key=key,
        apply_changes=apply,
        **kw,
    )


def test_the_last_change_per_key():
    p = plan()
    assert p.upsert.unique_key == ("Id",) and p.upsert.keep_column == "__keep"
    assert p.kind == "updating"
    assert p._tree.sql(dialect="spark") == (
        "SELECT __d.Id AS Id, __d.seq AS seq, __d.name AS name, NOT __d.__deleted AS __keep "
        "FROM (SELECT MAX(STRUCT(seq AS __seq, COALESCE((op = 'd'), FALSE) AS __deleted, "
        "Id AS Id, seq AS seq, op AS op, name AS name)) AS __d "
        "FROM (SELECT * FROM a.feed) AS __changes WHERE NOT seq IS NULL GROUP BY Id) AS __d"
    )
    # the stream only projects; the aggregate is kept as partials in Delta
    assert "MAX" not in p.spark_sql and p.output_mode == "append"
    partials = p.upsert.partials
    assert partials.ttl_ms == 2 * 86_400_000 and partials.expiry == "tombstone_ttl"
    assert f"__p0.__deleted AS {TOMBSTONE}" in partials.merge_sql


def test_without_deletes_projections_and_ctes():
    p = plan(
        "WITH f AS (SELECT Id, seq, upper(name) AS who FROM a.feed WHERE seq > 0) SELECT * FROM f",
        {"sequence_by": "seq", "tombstone_ttl": "1 hour"},
    )
    sql = p._tree.sql(dialect="spark")
    assert sql.startswith("WITH f AS (") and "COALESCE((FALSE), FALSE)" in sql
    assert "__d.who AS who" in sql and p.upsert.partials.ttl_ms == 3_600_000
    joined = plan(
        "SELECT f.*, d.region FROM a.feed AS f JOIN a.dim AS d ON f.name = d.name",
        dimensions=["a.dim"],
    )
    assert "__d.region AS region" in joined._tree.sql(dialect="spark")


def test_scd2_versions():
    p = plan(apply={**APPLY, "scd_type": 2})
    assert p.upsert.unique_key == ("Id", "__start_at") and p.upsert.rank_keys == ("__k0",)
    # partials per key and sequence, never expiring; the versions of the touched keys
    assert p.upsert.partials.keys == ("__k0", "__k1") and p.upsert.partials.ttl_ms > 10**12
    assert TOMBSTONE not in p.upsert.partials.merge_sql
    assert p.rank_sql_for("R") == (
        "SELECT Id AS Id, seq AS seq, name AS name, __start_at AS __start_at, "
        "LEAD(__start_at) OVER (PARTITION BY Id ORDER BY __start_at NULLS LAST) AS __end_at, "
        "NOT __deleted AS __keep FROM R AS __rank_input"
    )
    oracle = p.emitted_sql({"a.feed": "X"}, 0)
    assert oracle.startswith("SELECT * EXCEPT (__keep) FROM (SELECT Id AS Id")
    assert oracle.endswith("GROUP BY Id, seq) AS __rank_input) AS __kept WHERE __keep")


def test_the_fingerprint_follows_the_config():
    prints = {
        plan().fingerprint,
        plan(apply={**APPLY, "delete_when": "op IN ('d', 'x')"}).fingerprint,
        plan(apply={**APPLY, "except_columns": []}).fingerprint,
        plan(apply={**APPLY, "tombstone_ttl": "1 day"}).fingerprint,
        plan(apply={**APPLY, "scd_type": 2}).fingerprint,
    }
    assert len(prints) == 5


@pytest.mark.parametrize(
    "apply,key,sql,code,words",
    [
        ({"delete_when": "op = 'd'"}, ("id",), None, "SSV180", "sequence_by"),
        ({**APPLY, "sequence": "seq"}, ("id",), None, "SSV180", "unknown keys sequence"),
        ({**APPLY, "sequence_by": "version"}, ("id",), None, "SSV180", "'version' is not a column"),
        ({**APPLY, "sequence_by": ["seq", "op"]}, ("id",), None, "SSV180", "one column"),
        ({**APPLY, "except_columns": ["id"]}, ("id",), None, "SSV180", "names a unique_key"),
        ({**APPLY, "except_columns": ["nope"]}, ("id",), None, "SSV180", "'nope' is not a column"),
        ({**APPLY, "delete_when": "kind = 'd'"}, ("id",), None, "SSV180", "kind is not one"),
        ({**APPLY, "delete_when": "op = "}, ("id",), None, "SSV180", "does not parse"),
        ({**APPLY, "tombstone_ttl": "soon"}, ("id",), None, "SSV180", "tombstone_ttl"),
        ({**APPLY, "scd_type": 3}, ("id",), None, "SSV180", "scd_type"),
        ({**APPLY, "track_history_columns": ["name"]}, ("id",), None, "SSV182", "not supported"),
        ({**APPLY, "scd_type": 2, "tombstone_ttl": "1 day"}, ("id",), None, "SSV180", "expires"),
        (APPLY, None, None, "SSV130", "without a unique_key"),
        (APPLY, ("nope",), None, "SSV180", "unique_key 'nope'"),
        (
            APPLY,
            ("id",),
            "SELECT id, MAX(seq) AS seq, 'u' AS op FROM a.feed GROUP BY id",
            "SSV181",
            "not a stream of change rows",
        ),
        (
            APPLY,
            ("id",),
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq DESC) "
            "AS rn FROM a.feed) WHERE rn = 1",
            "SSV181",
            "not a stream of change rows",
        ),
        ("seq", ("id",), None, "SSV180", "must be a mapping"),
        # scd_type 2 keys versions by the sequence: a scalar (a STRUCT is for scd_type 1)
        *[
            ({**APPLY, "scd_type": 2, "sequence_by": "v"}, ("id",), sql, "SSV180", "scalar")
            for sql in (
                "SELECT *, STRUCT(seq, name) AS v FROM a.feed",
                "SELECT *, named_struct('s', seq, 'n', name) AS v FROM a.feed",
                "SELECT *, CAST(STRUCT(seq) AS STRUCT<s: BIGINT>) AS v FROM a.feed",
                "SELECT *, array(seq) AS v FROM a.feed",
                "SELECT Id, op, pos AS v FROM a.typed",
                "SELECT Id, op, path AS v FROM a.typed",
                "SELECT * FROM (SELECT Id, op, STRUCT(seq) AS v FROM a.feed) AS c",
            )
        ],
        # a computed column needs an alias: Spark names it after its expression
        *[
            (APPLY, ("id",), sql, "SSV180", f"column {words} has no alias")
            for sql, words in (
                (
                    "SELECT Id, seq, op, CAST(seq + 1 AS STRING) FROM a.feed",
                    "CAST(seq + 1 AS STRING)",
                ),
                ("SELECT Id, seq, op, seq + 1 FROM a.feed", "seq + 1"),
                (
                    "SELECT Id, seq, op, named_struct('n', name).n FROM a.feed",
                    "STRUCT(name AS n).n",
                ),
                ("SELECT *, upper(name) FROM a.feed", "UPPER(name)"),
                ("WITH f AS (SELECT *, 1 + 1 FROM a.feed) SELECT * FROM f", "1 + 1"),
            )
        ],
        (APPLY, ("id",), "SELECT * REPLACE (1 AS seq) FROM a.feed", "SSV180", "not known"),
        # Spark names a column's CAST after the column: twice the same name
        (APPLY, ("id",), "SELECT Id, seq, op, CAST(seq AS STRING) FROM a.feed", "SSV180", "two"),
        # delete_when: the query's columns unqualified, per change row
        *[
            ({**APPLY, "delete_when": when}, ("id",), sql, "SSV180", words)
            for when, sql, words in (
                ("c.op = 'd'", "SELECT c.* FROM a.feed AS c", "qualifies the column c.op"),
                ("__changes.op = 'd'", None, "qualifies"),
                ("count(*) > 1", None, "aggregates (COUNT(*))"),
                ("max(seq) OVER (PARTITION BY Id) > seq", None, "aggregates"),
            )
        ],
        # maps and variants cannot be compared, in MAX(STRUCT(...)): nor in except_columns
        *[
            (apply, ("id",), sql, "SSV180", f"column {words} has type")
            for apply, sql, words in (
                (APPLY, "SELECT Id, seq, op, tags FROM a.typed", "'tags'"),
                (
                    {**APPLY, "except_columns": ["tags"]},
                    "SELECT Id, seq, op, tags FROM a.typed",
                    "'tags'",
                ),
                (APPLY, "SELECT t.Id, seq, op, t.doc AS d FROM a.typed AS t", "'d'"),
                (APPLY, "SELECT * EXCEPT (tags) FROM a.typed", "'doc'"),
                (APPLY, "SELECT * EXCEPT (tags, doc) FROM a.typed", "'info'"),
                (APPLY, "SELECT *, map('k', name) AS m FROM a.feed", "'m'"),
                (APPLY, "SELECT *, parse_json(name) AS j FROM a.feed", "'j'"),
            )
        ],
    ],
)
def test_refused(apply, key, sql, code, words):
    with pytest.raises(SqlError) as e:
        plan(sql or "SELECT * FROM a.feed", apply, key)
    assert e.value.code == code and words in str(e.value), str(e.value)


def test_only_an_upsert_table():
    with pytest.raises(SqlError) as e:
        plan(materialization="streaming_view")
    assert e.value.code == "SSV180" and "upsert_table" in str(e.value)


def test_not_with_state_ttl():
    with pytest.raises(SqlError) as e:
        plan(state_ttl="1 day")
    assert e.value.code == "SSV180" and "tombstone_ttl" in str(e.value)


def test_accepted_columns():
    """What the refusals above leave alone: a STRUCT sequence with scd_type 1, maps converted
    or left out of the query, unnamed columns of a subquery the query does not select."""
    struct_seq = {**APPLY, "sequence_by": "pos"}
    struct = plan("SELECT Id, op, pos FROM a.typed", struct_seq)._tree.sql(dialect="spark")
    assert "MAX(STRUCT(pos AS __seq" in struct
    computed = plan("SELECT *, STRUCT(seq, name) AS v FROM a.feed", {**APPLY, "sequence_by": "v"})
    assert "MAX(STRUCT(v AS __seq" in computed._tree.sql(dialect="spark")
    converted = plan("SELECT Id, seq, op, to_json(tags) AS tags FROM a.typed")
    assert "__d.tags AS tags" in converted._tree.sql(dialect="spark")
    cast = plan("SELECT Id, CAST(seq AS BIGINT), op FROM a.feed")._tree.sql(dialect="spark")
    assert "MAX(STRUCT(seq AS __seq" in cast and "op AS op)) AS __d" in cast
    inner = plan("SELECT Id, seq, op FROM (SELECT Id, seq, op, upper(name) FROM a.feed) AS c")
    assert "op AS op)) AS __d" in inner._tree.sql(dialect="spark")


def test_a_column_twice():
    with pytest.raises(SqlError) as e:
        plan(
            "SELECT f.*, d.name FROM a.feed AS f JOIN a.dim AS d ON f.name = d.name",
            dimensions=["a.dim"],
        )
    assert e.value.code == "SSV180" and "two columns named 'name'" in str(e.value)


def test_star_except():
    """``* EXCEPT`` leaves its columns out of the kept row (Spark's columns, not the table's)."""
    sql = plan("SELECT * EXCEPT (name) FROM a.feed")._tree.sql(dialect="spark")
    assert "Id AS Id, seq AS seq, op AS op)) AS __d" in sql and "name AS name" not in sql
    typed = plan("SELECT * EXCEPT (pos, path, tags, doc, info) FROM a.typed")
    assert "Id AS Id, seq AS seq, op AS op)) AS __d" in typed._tree.sql(dialect="spark")
    joined = plan(
        "SELECT f.* EXCEPT (op), d.region FROM a.feed AS f JOIN a.dim AS d ON f.name = d.name",
        {"sequence_by": "seq"},
        dimensions=["a.dim"],
    )
    assert "seq AS seq, name AS name, region AS region)) AS __d" in joined._tree.sql("spark")
