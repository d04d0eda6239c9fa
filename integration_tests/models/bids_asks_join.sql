{{ config(materialized='streaming_view', watermark_delay='1 minute') }}
-- FLIP-145 window join: each bid with the asks for its item in the same 10-minute window;
-- LEFT: a bid without an ask appears with a NULL ask once its window has closed
SELECT B.item, B.bidtime, B.price AS bid, A.price AS ask, B.window_start, B.window_end
FROM TABLE(TUMBLE(TABLE {{ ref('bids') }}, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) B
LEFT JOIN TABLE(TUMBLE(TABLE {{ ref('asks') }}, DESCRIPTOR(asktime), INTERVAL '10' MINUTES)) A
ON B.item = A.item AND B.window_start = A.window_start AND B.window_end = A.window_end
