-- plain SQL queue table with a unique key: insert 100 jobs in one statement
INSERT INTO jobs (key, payload)
SELECT nextval('bench.keys')::text, '{"n": 1}' FROM generate_series(1, 100)
ON CONFLICT (key) DO NOTHING;
