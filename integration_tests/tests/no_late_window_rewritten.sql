-- Singular test with a plain schema.identifier name: the window closed in the first run keeps
-- its original total even after a late bid (08:06, $9) arrives in the second scenario.
-- depends_on: {{ ref('bids_per_10min') }}  (so that `dbt build` tests it after the model)
SELECT * FROM analytics.bids_per_10min
WHERE window_start = TIMESTAMP '2020-04-15 08:00:00' AND total <> 11
