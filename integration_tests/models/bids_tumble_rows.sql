{{ config(materialized='streaming_view') }}
-- FLIP-145 TUMBLE output, named arguments: every bid with its window (append-only, no state)
SELECT *
FROM TABLE(TUMBLE(DATA => TABLE {{ ref('bids') }}, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL '10' MINUTES))
