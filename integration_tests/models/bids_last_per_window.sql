{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 window deduplication (a window Top-N with N = 1 over the TVF rows): the last bid
-- of each closed 10-minute tumbling window
SELECT bidtime, price, item, window_start, window_end FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY bidtime DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
) WHERE rownum = 1
