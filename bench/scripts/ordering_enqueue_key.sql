-- bench/ordering: enqueue one item with one of :keys ordering keys
\set k random(1, :keys)
SELECT pgq.enqueue(:q, '{"n": 1}', ordering_key => 'k' || :k);
