-- plain SQL queue table with a unique key: insert one job
INSERT INTO jobs (key, payload) VALUES (nextval('bench.keys')::text, '{"n": 1}')
ON CONFLICT (key) DO NOTHING RETURNING id;
