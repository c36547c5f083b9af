-- bench/ordering (pgbench -M prepared: :q is a parameter): claim one item
-- of queue :q (lease mode), then complete it;
-- with ordering keys, the completion hands the key on to its next item
SELECT block_id, attempt FROM pgq.claim(:q) \gset
SELECT pgq.complete(:block_id, attempt => :attempt);
