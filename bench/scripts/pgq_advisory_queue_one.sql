-- pgq advisory-mode queue, one statement per item: the claim completes the
-- item the previous one returned (complete =>), then claims the next, with
-- its payload.  bench/run starts pgbench with -D block_id=0 (the first claim
-- completes nothing) and -D w=0 (each client registers its worker in its
-- first transaction).
\if :w = 0
SELECT pgq.register_worker('bench') AS w \gset
\endif
SELECT block_id, payload FROM pgq.claim('aqi', worker_id => :w,
                                        complete => nullif(:block_id::bigint, 0)) \gset
