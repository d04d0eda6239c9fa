"""Second scenario: append four more bids to the `bids` Delta table, as one new version.

    python scripts/append_bids.py [warehouse_path]

08:21 G and 08:24 H fill the 08:20 window, 08:33 J moves the watermark to 08:32 (closing the
08:10 and 08:20 windows), and 08:06 I arrives late: its window was emitted in the first run,
so the stream drops it and reports it as a late row. One ask, 08:34 J, is appended to
`asks`: a window join's watermark only advances in a run that reads new rows from both of
its inputs (Spark keeps per-input watermarks only while the query runs; see README).
"""

import sys
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import write_deltalake

warehouse = sys.argv[1] if len(sys.argv) > 1 else "warehouse"
ts = [
    datetime(2020, 4, 15, h, m, tzinfo=timezone.utc) for h, m in [(8, 21), (8, 24), (8, 6), (8, 33)]
]
rows = pa.table(
    {
        "bidtime": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "price": pa.array([7.0, 2.0, 9.0, 3.0]),
        "item": pa.array(["G", "H", "I", "J"]),
    }
)
write_deltalake(f"{warehouse}/analytics/bids", rows, mode="append")
print(f"appended {rows.num_rows} bids to {warehouse}/analytics/bids")
asks = pa.table(
    {
        "asktime": pa.array(
            [datetime(2020, 4, 15, 8, 34, tzinfo=timezone.utc)], pa.timestamp("us", tz="UTC")
        ),
        "price": pa.array([4.0]),
        "item": pa.array(["J"]),
    }
)
write_deltalake(f"{warehouse}/analytics/asks", asks, mode="append")
print(f"appended {asks.num_rows} ask to {warehouse}/analytics/asks")
