-- bench/ordering: enqueue one item without an ordering key
SELECT pgq.enqueue(:q, '{"n": 1}');
