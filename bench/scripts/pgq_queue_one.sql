-- pgq lease-mode queue, one statement per item: the claim completes the
-- item the previous one returned (complete =>, attempt =>), then claims the
-- next, with its payload; its commit is durable.  bench/run starts pgbench
-- with -D block_id=0 -D attempt=0: the first claim completes nothing.
SELECT block_id, attempt, payload FROM pgq.claim('lq', complete => nullif(:block_id::bigint, 0),
                                                 attempt => nullif(:attempt::integer, 0)) \gset
