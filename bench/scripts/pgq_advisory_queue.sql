-- pgq advisory-mode queue, two statements per item: claim one (with its
-- payload), then complete it.  -D w=0: see pgq_advisory_queue_one.sql.
\if :w = 0
SELECT pgq.register_worker('bench') AS w \gset
\endif
SELECT block_id, payload FROM pgq.claim('aqi', worker_id => :w) \gset
SELECT pgq.complete(:block_id, worker_id => :w);
