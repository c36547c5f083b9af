-- pgq lease mode, one block: claim (commits), then complete (commits)
SELECT block_id, attempt FROM pgq.claim('lg') \gset
SELECT pgq.complete(:block_id, attempt => :attempt);
