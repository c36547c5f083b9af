-- Transaction-mode claims: consumed at COMMIT, back at ROLLBACK.
SELECT pgq.create_group('g', 'SELECT g FROM generate_series(1, 10) g', 3);

BEGIN;
SELECT block_id - min(block_id) OVER () AS rel, attempt, ids, payload FROM pgq.claim('g');
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g';
ROLLBACK;

-- the rolled-back block is offered again, first
BEGIN;
SELECT attempt, ids FROM pgq.claim('g');
COMMIT;
SELECT state, pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g';

-- max_blocks returns several blocks in order; later claims skip what is gone
BEGIN;
SELECT ids FROM pgq.claim('g', max_blocks => 2);
SAVEPOINT s;
SELECT ids FROM pgq.claim('g', 5);
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g';
ROLLBACK TO SAVEPOINT s;
-- the subtransaction's block came back
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g';
COMMIT;
SELECT state, pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g';

BEGIN;
SELECT ids FROM pgq.claim('g', 5);
-- nothing left for anyone else: zero rows, not an error
SELECT count(*) FROM pgq.claim('g');
COMMIT;
SELECT state, pending, claimed, done, percent_done FROM pgq.group_stats WHERE group_name = 'g';
BEGIN;
SELECT count(*) FROM pgq.claim('g');
COMMIT;

-- claims of a released savepoint belong to the enclosing one
SELECT pgq.create_group('n', 'SELECT g FROM generate_series(1, 3) g', 1);
BEGIN;
SAVEPOINT a;
SAVEPOINT b;
SELECT ids FROM pgq.claim('n');
RELEASE SAVEPOINT b;
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'n';
ROLLBACK TO SAVEPOINT a;
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'n';
SELECT ids FROM pgq.claim('n');
COMMIT;
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'n';

-- a claim writes its transaction's work: results can go in the same commit
CREATE TABLE processed (id bigint PRIMARY KEY);
SELECT pgq.create_group('h', 'SELECT g FROM generate_series(1, 6) g', 2);
BEGIN;
INSERT INTO processed SELECT unnest(ids) FROM pgq.claim('h');
COMMIT;
BEGIN;
INSERT INTO processed SELECT unnest(ids) FROM pgq.claim('h', 10);
COMMIT;
SELECT count(*), min(id), max(id) FROM processed;

-- an error after the claim gives the block back
SELECT pgq.create_group('k', 'SELECT 42', 1);
BEGIN;
SELECT ids FROM pgq.claim('k');
SELECT 1 / 0;
ROLLBACK;
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'k';

-- claims need a transaction block, READ COMMITTED, and no PREPARE
SELECT * FROM pgq.claim('k');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM pgq.claim('k');
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM pgq.claim('k');
ROLLBACK;
BEGIN;
SELECT ids FROM pgq.claim('k');
PREPARE TRANSACTION 'holds_a_claim';
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'k';
-- nor one that dropped a group: rolling back the prepared drop would need
-- this session's help to make the group's blocks reachable again
SELECT pgq.create_group('p', 'SELECT 1', 1);
BEGIN;
SELECT pgq.drop_group('p');
PREPARE TRANSACTION 'dropped';
SELECT count(*) FROM pgq.groups WHERE group_name = 'p';
-- a transaction without claims still prepares
BEGIN;
SELECT count(*) FROM pgq.group_stats;
PREPARE TRANSACTION 'no_claims';
COMMIT PREPARED 'no_claims';

-- dropping a group inside the claiming transaction
BEGIN;
SELECT ids FROM pgq.claim('k');
SELECT pgq.drop_group('k');
COMMIT;
SELECT count(*) FROM pgq.groups WHERE group_name = 'k';

-- unknown groups; waiting on a group that can yield nothing more returns at once
BEGIN;
SELECT * FROM pgq.claim('nope');
ROLLBACK;
BEGIN;
SELECT * FROM pgq.claim('h', wait => '1 second');
ROLLBACK;

SELECT pgq.drop_group(group_name) FROM pgq.groups ORDER BY group_id;
DROP TABLE processed;
