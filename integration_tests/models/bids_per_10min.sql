{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 tumbling window aggregate: one final row per closed 10-minute window
SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
