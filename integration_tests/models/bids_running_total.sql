-- An updating query (upsert_table): one row per day, updated by every run. No window, so no
-- row is late: the 08:06 bid that the windowed models drop still counts here.
{{ config(materialized='upsert_table') }}
SELECT CAST(bidtime AS DATE) AS day, COUNT(*) AS bids, SUM(price) AS total, MAX(bidtime) AS last_bid
FROM {{ ref('bids') }}
GROUP BY CAST(bidtime AS DATE)
