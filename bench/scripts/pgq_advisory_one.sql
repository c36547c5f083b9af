-- pgq advisory mode, one statement per block: the claim completes the block
-- the previous one returned (complete =>), then claims the next.  bench/run
-- starts pgbench with -D block_id=0: the first claim completes nothing.
SELECT block_id FROM pgq.claim('ag', worker_id => bench.worker(),
                               complete => nullif(:block_id::bigint, 0)) \gset
