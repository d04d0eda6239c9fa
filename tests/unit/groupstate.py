"""A stand-in for Spark's GroupState, to drive the applyInPandasWithState operators
(runtime/over.py, runtime/temporaljoin.py) without Spark."""


class State:
    """Spark's GroupState, as much of it as the operator uses."""

    def __init__(self, watermark_ms: int):
        self.watermark_ms, self.value, self.timeout = watermark_ms, None, None

    def getCurrentWatermarkMs(self):
        return self.watermark_ms

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value):
        self.value = value

    def remove(self):
        self.value = None

    def setTimeoutTimestamp(self, ms):
        self.timeout = ms
