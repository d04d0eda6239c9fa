{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 cumulating windows: every 2 minutes within each 10-minute window
-- (each cumulative window is emitted when the watermark passes its own end)
SELECT window_start, window_end, SUM(price) AS total
FROM TABLE(CUMULATE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
