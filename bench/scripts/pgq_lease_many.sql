-- pgq lease mode, 100 blocks: the claim commits (asynchronously, by design),
-- then complete_many completes them all in one durable statement
SELECT array_agg(block_id) AS b, array_agg(attempt) AS a FROM pgq.claim('lg', 100) \gset
SELECT cardinality(pgq.complete_many(:b::bigint[], :a::integer[]));
