-- pgq lease-mode queue, 100 items: the claim (with their payloads) commits,
-- asynchronously by design, then complete_many completes them all in one
-- durable statement: pgmq's read(100) + delete, as pgq does it
SELECT array_agg(block_id) AS b, array_agg(attempt) AS a
  FROM pgq.claim('lq', 100) \gset
SELECT cardinality(pgq.complete_many(:b::bigint[], :a::integer[]));
