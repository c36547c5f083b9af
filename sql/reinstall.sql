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
