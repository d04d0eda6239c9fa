"""runtime/inputs.py: streams and tables from the dbt graph, configs overriding."""

import pytest

from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.inputs import classify

SOURCE = {"relation": "s.bids", "resource_type": "source", "materialized": None}
SEED = {"relation": "s.dim_item", "resource_type": "seed", "materialized": "seed"}
TABLE = {"relation": "s.dim", "resource_type": "model", "materialized": "table"}
VIEW = {"relation": "s.agg", "resource_type": "model", "materialized": "streaming_view"}


def test_seeds_and_table_models_are_dimensions():
    config, line = classify({}, [SOURCE, SEED, TABLE])
    assert config["dimensions"] == ["s.dim_item", "s.dim"]
    assert line == "streams: s.bids (source); tables: s.dim_item (seed), s.dim (table)"


def test_streaming_models_are_streams():
    assert classify({}, [VIEW, TABLE])[0]["dimensions"] == ["s.dim"]


def test_no_stream_by_the_graph_reads_its_tables_as_streams():
    config, line = classify({}, [SEED])
    assert config["dimensions"] == [] and line.startswith("streams: s.dim_item (seed)")
    assert classify({}, [SEED, dict(TABLE)])[0]["dimensions"] == []


def test_configs_override_the_graph():
    config, line = classify({"dimensions": ["bids"], "streams": "dim"}, [SOURCE, SEED, TABLE])
    assert config["dimensions"] == ["bids", "s.dim_item"]
    assert "s.dim (config streams)" in line and "s.bids (config dimensions)" in line
    marked = {**SEED, "read_as": "stream"}
    assert classify({}, [SOURCE, marked])[0]["dimensions"] == []
    assert classify({}, [{**SOURCE, "read_as": "table"}, VIEW])[0]["dimensions"] == ["s.bids"]


def test_bad_configs_are_ssc201():
    with pytest.raises(StreamingError, match="SSC201.*streams"):
        classify({"streams": ["nope"]}, [SOURCE])
    with pytest.raises(StreamingError, match="SSC201.*read_as"):
        classify({}, [{**SOURCE, "read_as": "dimension"}])


def test_without_inputs_nothing_changes():
    assert classify({"x": 1}, []) == ({"x": 1}, "")
    ephemeral = {"relation": "s.e", "resource_type": "model", "materialized": "ephemeral"}
    assert classify({"x": 1}, [ephemeral]) == ({"x": 1}, "")


def test_a_source_declaring_a_key_and_an_event_time_is_versioned():
    rates = {**SOURCE, "relation": "s.Rates", "unique_key": "cur", "event_time": "t"}
    pairs = {**SOURCE, "relation": "s.pairs", "unique_key": ["a", "b"], "event_time": "t"}
    half = {**SOURCE, "relation": "s.half", "unique_key": "a"}  # no event_time: not versioned
    versioned = classify({}, [SOURCE, rates, pairs, half, VIEW])[0]["versioned"]
    assert {k: (v["unique_key"], v["event_time"]) for k, v in versioned.items()} == {
        "s.rates": (["cur"], "t"),
        "s.pairs": (["a", "b"], "t"),
    }
