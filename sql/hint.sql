-- A claim starts at the group's hint, not at the head of the index, where the
-- dead entries of consumed blocks pile up while an old snapshot keeps them.
SELECT pgq.create_group('hint', 'SELECT g FROM generate_series(1, 300) g', 1);

-- a prepared transaction with an xid holds back the xmin horizon, so nothing
-- consumed from here on can be cleaned up, not even by index entry killing
BEGIN;
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
PREPARE TRANSACTION 'hold_xmin';

\set ECHO none
\o /dev/null
SELECT 'BEGIN; SELECT * FROM pgq.claim(''hint''); COMMIT;' FROM generate_series(1, 200) \gexec
\o
\set ECHO all

SELECT pending, done FROM pgq.group_stats WHERE group_name = 'hint';

-- the 201st claim reads a couple of index entries, not the 200 dead ones
-- (the counter also holds earlier transactions' reads until the statistics
-- are flushed, hence the difference)
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) AS before \gset
SELECT ids FROM pgq.claim('hint');
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) - :before
       BETWEEN 1 AND 4 AS from_hint;
ROLLBACK;

-- the rolled-back block is found again: the abort lowered the hint
BEGIN;
SELECT ids FROM pgq.claim('hint');
COMMIT;

ROLLBACK PREPARED 'hold_xmin';
SELECT pgq.drop_group('hint');

-- The hint never hides a block: a row lock taken on pgq.blocks by hand and
-- released by a commit (so no pgq abort lowers the hint) strands the locked
-- block below the hint, and claims still find it once the rest is taken.
SELECT pgq.create_group('stranded', 'SELECT g FROM generate_series(1, 4) g', 1);
BEGIN;
SELECT b.ids FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'stranded' ORDER BY b.block_id LIMIT 1 FOR SHARE OF b;
PREPARE TRANSACTION 'by_hand';
BEGIN;
SELECT ids FROM pgq.claim('stranded');
COMMIT;
COMMIT PREPARED 'by_hand';
BEGIN;
SELECT ids FROM pgq.claim('stranded', 10);
COMMIT;
SELECT state, pending, done FROM pgq.group_stats WHERE group_name = 'stranded';
SELECT pgq.drop_group('stranded');
