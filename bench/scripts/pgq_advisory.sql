-- pgq advisory mode: the claim writes nothing; complete deletes the block
-- and commits.  Each client registers its worker in its first transaction
-- (bench/run starts pgbench with -D w=0).
\if :w = 0
SELECT pgq.register_worker('bench') AS w \gset
\endif
SELECT block_id FROM pgq.claim('ag', worker_id => :w) \gset
SELECT pgq.complete(:block_id, worker_id => :w);
