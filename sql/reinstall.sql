-- DROP EXTENSION and CREATE EXTENSION restart pgq's sequences, so a new
-- group reuses an old group's id and block ids.  The old group's shared
-- state (a hint past those block ids) must not apply to the new one, and
-- plans cached in this session must follow the new tables.
DROP EXTENSION pgq;
CREATE EXTENSION pgq;
SELECT pgq.create_group('r', 'SELECT g FROM generate_series(1, 5) g', 1);
BEGIN;
SELECT ids FROM pgq.claim('r', 3);
COMMIT;
DROP EXTENSION pgq;
CREATE EXTENSION pgq;
SELECT pgq.create_group('r', 'SELECT g FROM generate_series(11, 15) g', 1);
SELECT group_id, min(block_id) FROM pgq.blocks GROUP BY group_id;
BEGIN;
SELECT ids FROM pgq.claim('r');
COMMIT;
SELECT pending, claimed, done FROM pgq.group_stats;
SELECT pgq.drop_group('r');

-- DROP EXTENSION removes schema pgq: the extension's script creates it, so
-- it belongs to the extension (the extension itself is in pg_catalog)
CREATE VIEW pgq_schema AS
SELECT n.nspname,
       pg_describe_object(d.refclassid, d.refobjid, 0) AS belongs_to,
       e.extnamespace::regnamespace AS extension_schema,
       (SELECT count(*) FROM pg_init_privs p
        WHERE p.objoid = n.oid AND p.classoid = 'pg_namespace'::regclass)
           AS initial_privileges
FROM pg_namespace n
LEFT JOIN pg_depend d ON d.classid = 'pg_namespace'::regclass
                     AND d.objid = n.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.extname = 'pgq'
WHERE n.nspname = 'pgq';
SELECT * FROM pgq_schema;
DROP EXTENSION pgq;
SELECT count(*) AS schemas_left FROM pg_namespace WHERE nspname = 'pgq';

-- 0.1 installed from these files, then updated: the same
CREATE EXTENSION pgq VERSION '0.1';
SELECT * FROM pgq_schema;
ALTER EXTENSION pgq UPDATE;
SELECT * FROM pgq_schema;
DROP EXTENSION pgq;
SELECT count(*) AS schemas_left FROM pg_namespace WHERE nspname = 'pgq';

-- 0.1 as 0.1's own files installed it: CREATE EXTENSION made schema pgq,
-- outside the extension, and put the extension in it (pgq.control said
-- "schema = pgq")
CREATE EXTENSION pgq VERSION '0.1';
ALTER EXTENSION pgq DROP SCHEMA pgq;
UPDATE pg_extension SET extnamespace = 'pgq'::regnamespace WHERE extname = 'pgq';
INSERT INTO pg_depend
VALUES ('pg_extension'::regclass, (SELECT oid FROM pg_extension WHERE extname = 'pgq'), 0,
        'pg_namespace'::regclass, 'pgq'::regnamespace, 0, 'n');
SELECT * FROM pgq_schema;
GRANT USAGE ON SCHEMA pgq TO PUBLIC;
SELECT pgq.create_queue('r_kept');
SELECT pgq.enqueue('r_kept', '{"kept": true}') > 0 AS enqueued;
-- the update takes the schema in, with its grants, which stay the
-- database's own (not initial privileges of the extension: pg_dump dumps
-- them)
ALTER EXTENSION pgq UPDATE;
SELECT * FROM pgq_schema;
SELECT has_schema_privilege('public', 'pgq', 'USAGE') AS public_usage;
SELECT queue_name, pending FROM pgq.queue_stats;
DROP EXTENSION pgq;
SELECT count(*) AS schemas_left FROM pg_namespace WHERE nspname = 'pgq';

DROP VIEW pgq_schema;

-- The count of a queue's items for pgq.max_queue_items (quota.c) is a plan
-- kept for the session, whose statement depends on the schema's version:
-- at 0.1 through the primary key on (group_id, item_id), from 0.2 state by
-- state through the partial indexes.  One made at 0.2 must not name, at
-- 0.1, the column ordering_key, which 0.1 lacks; one made at 0.1 must not
-- read, once the update made the item id alone the primary key, every item
-- of every queue.
CREATE EXTENSION pgq;
SET pgq.max_queue_items = 100;
SELECT pgq.create_queue('r_count');
SELECT pgq.enqueue('r_count', '{}') > 0 AS counted_at_0_2;
DROP EXTENSION pgq;
CREATE EXTENSION pgq VERSION '0.1';
SELECT pgq.create_queue('r_count');
SELECT pgq.enqueue('r_count', '{}') > 0 AS counted_at_0_1;
RESET pgq.max_queue_items;
DROP EXTENSION pgq;
-- a new session, whose first count is at 0.1
\c
CREATE EXTENSION pgq VERSION '0.1';
SET pgq.max_queue_items = 100;
SELECT pgq.create_queue('r_count');
SELECT pgq.enqueue('r_count', '{}') > 0 AS counted_at_0_1;
ALTER EXTENSION pgq UPDATE;
RESET pgq.max_queue_items;
SELECT pgq.create_queue('r_big');
SELECT cardinality(pgq.enqueue_many('r_big', array_agg('{}'::jsonb)))
FROM generate_series(1, 3000);
SET pgq.max_queue_items = 100;
SELECT pgq.create_queue('r_small');
BEGIN;
SELECT idx_tup_fetch + seq_tup_read AS before FROM pg_stat_xact_user_tables
WHERE relid = 'pgq.items'::regclass \gset
SELECT pgq.enqueue('r_small', '{}') > 0 AS counted_at_0_2;
SELECT idx_tup_fetch + seq_tup_read - :before < 1000 AS read_few
FROM pg_stat_xact_user_tables WHERE relid = 'pgq.items'::regclass;
COMMIT;
RESET pgq.max_queue_items;
DROP EXTENSION pgq;
CREATE EXTENSION pgq;
