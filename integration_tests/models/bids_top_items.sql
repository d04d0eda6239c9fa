{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 window Top-N over a window aggregate: the two items with the highest sales in
-- each closed 10-minute tumbling window
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC, item) AS rownum
  FROM (
    SELECT window_start, window_end, item, SUM(price) AS total, COUNT(*) AS bids
    FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
    GROUP BY window_start, window_end, item
  )
) WHERE rownum <= 2
