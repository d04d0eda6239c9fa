{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 hopping windows: 10 minutes long, every 5 minutes (slide before size, as in Flink)
SELECT window_start, window_end, SUM(price) AS total
FROM TABLE(HOP(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
