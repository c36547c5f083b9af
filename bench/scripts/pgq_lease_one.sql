-- pgq lease mode, one statement per block: the claim completes the block
-- the previous one returned (complete =>, attempt =>), then claims the next;
-- its commit is durable.  bench/run starts pgbench with -D block_id=0
-- -D attempt=0: the first claim completes nothing.
SELECT block_id, attempt FROM pgq.claim('lg', complete => nullif(:block_id::bigint, 0),
                                        attempt => nullif(:attempt::integer, 0)) \gset
