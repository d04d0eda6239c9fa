"""Config `tblproperties` (runtime/sink.py): Delta table properties of a model's table, checked
before any stream starts."""

import pytest

from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.maintenance import auto_compact
from dbt.adapters.spark_streaming.runtime.sink import table_properties


def test_values_become_delta_strings():
    config = {
        "tblproperties": {
            "delta.logRetentionDuration": "interval 60 days",
            "delta.checkpointInterval": 50,
            "delta.enableExpiredLogCleanup": False,
        }
    }
    assert table_properties(config) == {
        "delta.logRetentionDuration": "interval 60 days",
        "delta.checkpointInterval": "50",
        "delta.enableExpiredLogCleanup": "false",
    }
    assert table_properties({}) == {"delta.checkpointInterval": "10"}  # Delta's own default


@pytest.mark.parametrize(
    "value",
    [
        {"delta.nope": "1"},  # delta-rs does not know it
        {"owner": "me"},
        {"delta.logRetentionDuration": "60 days"},
        {"delta.deletedFileRetentionDuration": "interval a week"},
        {"delta.checkpointInterval": 0},
        {"delta.logRetentionDuration": "INTERVAL 60 DAYS"},  # delta-rs ignores it: its default
        {"delta.enableChangeDataFeed": "false"},  # config change_data_feed
        {"delta.appendOnly": "true"},
        ["delta.checkpointInterval"],
    ],
)
def test_what_delta_would_refuse_or_misread_is_ssc201(value):
    with pytest.raises(StreamingError) as error:
        table_properties({"tblproperties": value})
    assert error.value.code == "SSC201" and "tblproperties" in str(error.value)


def test_auto_compact_config():
    assert auto_compact({"auto_compact": False}) is None
    assert auto_compact({}) == auto_compact({"auto_compact": True})
    assert auto_compact({"auto_compact": True}) == (50, 128 * 1024 * 1024)
    assert auto_compact({"auto_compact": {"min_files": 4, "target_file_size": "1m"}}) == (
        4,
        1 << 20,
    )
    for bad in ({"min_files": 1}, {"min_files": "many"}, {"size": "1m"}, "yes"):
        with pytest.raises(StreamingError, match="auto_compact"):
            auto_compact({"auto_compact": bad})
