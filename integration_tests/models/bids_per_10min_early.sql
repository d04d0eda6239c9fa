-- Early results (upsert_table, emit early): open windows appear after the first run with
-- what they hold so far, and are updated until the watermark closes them.
{{ config(materialized='upsert_table', watermark_delay='1 minute', emit={'early': true}) }}
SELECT window_start, window_end, SUM(price) AS total, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end
