-- pgq advisory mode: the claim writes nothing; complete deletes the block
-- and commits.  bench.worker() registers one worker per session.
SELECT block_id FROM pgq.claim('ag', worker_id => bench.worker()) \gset
SELECT pgq.complete(:block_id, worker_id => bench.worker());
