-- pgq: enqueue 100 items without keys, in one call (pgmq's send_batch)
SELECT cardinality(pgq.enqueue_many('eq', array_agg('{"n": 1}'::jsonb)))
FROM generate_series(1, 100);
