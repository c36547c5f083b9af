-- Claims, completes and block lookups go through pgq's indexes without SQL
-- (blockscan.c).  What a statement did for them, they must still do.

-- The index on block_id is a btree since 0.2; a database not yet updated
-- from 0.1 has a hash index there, and lookups go through it: a hash index
-- matches hash codes, so two blocks whose ids hash alike must each be found
-- as themselves.  77964 and 131003 collide under hashint8 (checked here, so
-- that the test says so if that ever changes).
SELECT amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam
WHERE c.oid = 'pgq.blocks_block_id_idx'::regclass;
DROP INDEX pgq.blocks_block_id_idx;
CREATE INDEX blocks_block_id_idx ON pgq.blocks USING hash (block_id);
SELECT hashint8(77964) = hashint8(131003) AS ids_collide;
SELECT setval('pgq.block_id_seq', 77963);
SELECT pgq.create_group('dl', 'SELECT 1', 1, mode => 'lease');
SELECT setval('pgq.block_id_seq', 131002);
SELECT pgq.create_group('da', 'SELECT 2', 1, mode => 'advisory');
SELECT group_name, block_id FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name IN ('dl', 'da') ORDER BY block_id;
SELECT pgq.register_worker() AS w \gset
SELECT block_id AS ab FROM pgq.claim('da', worker_id => :w) \gset
SELECT block_id AS lb, attempt AS la FROM pgq.claim('dl') \gset
-- each complete finds its own block's group and mode
SELECT pgq.complete(:ab, worker_id => :w) AS advisory_done;
SELECT pgq.complete(:lb, attempt => :la) AS lease_done;
SELECT count(*) FROM pgq.blocks WHERE block_id IN (77964, 131003);
-- the btree again, in the same session: lookups follow the new index
DROP INDEX pgq.blocks_block_id_idx;
CREATE INDEX blocks_block_id_idx ON pgq.blocks (block_id);
SELECT setval('pgq.block_id_seq', 77963);
SELECT pgq.create_group('dl3', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease');
SELECT array_agg(block_id ORDER BY block_id) AS dl3_blocks,
       max(attempt) AS la, max(block_id) AS lb
FROM pgq.claim('dl3', 3) \gset
SELECT :'dl3_blocks' AS claimed, pgq.complete(:lb, attempt => :la) AS lease_done;
SELECT pgq.complete(:lb, attempt => :la) AS done_twice;

-- nothing is claimed or consumed in a read-only transaction
SELECT pgq.create_group('dt', 'SELECT g FROM generate_series(1, 3) g', 1);
SELECT pgq.create_group('dl2', 'SELECT 3', 1, mode => 'lease');
BEGIN READ ONLY;
SELECT pgq.claim('dt');
ROLLBACK;
BEGIN READ ONLY;
SELECT pgq.claim('dl2');
ROLLBACK;
SELECT block_id AS lb, attempt AS la FROM pgq.claim('dl2') \gset
BEGIN READ ONLY;
SELECT pgq.complete(:lb, attempt => :la);
ROLLBACK;
SELECT pgq.complete(:lb, attempt => :la) AS lease_done;
SELECT group_name, pending, claimed, done FROM pgq.group_stats
WHERE group_name IN ('dt', 'dl2') ORDER BY group_name;

-- enqueues insert without SQL (iteminsert.c): not in a read-only transaction
-- either, and nothing is left of the attempt
SELECT pgq.create_queue('dq');
BEGIN READ ONLY;
SELECT pgq.enqueue('dq', '{"n": 1}');
ROLLBACK;
BEGIN READ ONLY;
SELECT pgq.enqueue_many('dq', ARRAY['{"n": 1}']::jsonb[]);
ROLLBACK;
SELECT clock_timestamp() AS before_enqueue \gset
SELECT pgq.enqueue('dq', '{"n": 2}', key => 'a', priority => 3) > 0 AS enqueued;
SELECT i.payload, i.key, i.state, i.attempt, i.priority, i.due_at,
       i.enqueued_at BETWEEN :'before_enqueue' AND clock_timestamp() AS enqueued_then
FROM pgq.items i JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'dq';
SELECT pgq.drop_group('dq');

SELECT pgq.drop_group('dl'), pgq.drop_group('da'), pgq.drop_group('dt'),
       pgq.drop_group('dl2'), pgq.drop_group('dl3');
