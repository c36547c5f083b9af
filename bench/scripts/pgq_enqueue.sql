-- pgq: enqueue one item with a key
SELECT pgq.enqueue('eq', '{"n": 1}', key => nextval('bench.keys')::text);
