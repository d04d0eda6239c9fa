"""What runtime/streaming.py refuses before a stream starts, on the table and checkpoint alone."""

import pytest

from dbt.adapters.spark_streaming.errors import StreamingError
from dbt.adapters.spark_streaming.runtime.model import StreamingModel
from dbt.adapters.spark_streaming.runtime.preflight import check_state

MODEL = StreamingModel("s", "m", "SELECT 1", {}, False, "streaming_view")


def test_a_checkpoint_without_its_table_is_refused(tmp_path):
    """A checkpoint that has planned batches resumes after them: into a missing table, those
    batches' rows would be lost (a table deleted by hand, or a crash between the deletions of a
    drop). A new model (no table, no checkpoint) starts."""
    table, checkpoint = str(tmp_path / "table"), tmp_path / "checkpoint"
    assert check_state(MODEL, None, table, str(checkpoint)) is None
    (checkpoint / "offsets").mkdir(parents=True)
    assert check_state(MODEL, None, table, str(checkpoint)) is None  # nothing planned yet
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    with pytest.raises(StreamingError) as err:
        check_state(MODEL, None, table, str(checkpoint))
    assert err.value.code == "SSR308" and "--full-refresh -s m" in str(err.value)
