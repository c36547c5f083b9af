-- pgq: enqueue 100 items with keys, in one call
SELECT cardinality(pgq.enqueue_many('eq', array_agg('{"n": 1}'::jsonb),
                                    array_agg(nextval('bench.keys')::text)))
FROM generate_series(1, 100);
