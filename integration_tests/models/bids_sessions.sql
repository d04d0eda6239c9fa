{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- Sessions of bids at most 3 minutes apart
SELECT window_start, window_end, COUNT(*) AS bids, SUM(price) AS total
FROM TABLE(SESSION(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '3' MINUTES))
GROUP BY window_start, window_end
