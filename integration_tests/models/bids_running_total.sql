-- An updating query (upsert_table): one row per day, updated by every run. No window, so no
-- row is late: the 08:06 bid that the windowed models drop still counts here. Days keep
-- coming, so the per-day aggregates are kept as partials in Delta, and a day idle for
-- 30 days is dropped from them (state_ttl).
{{ config(materialized='upsert_table', state_ttl='30 days') }}
SELECT CAST(bidtime AS DATE) AS day, COUNT(*) AS bids, SUM(price) AS total, MAX(bidtime) AS last_bid
FROM {{ ref('bids') }}
GROUP BY CAST(bidtime AS DATE)
