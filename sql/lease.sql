-- Lease-mode claims: committed, with a deadline and an attempt number that
-- every later call on the block must name.  Block ids are shown relative to
-- the group's first block (:b0), so the output does not depend on them.
SELECT pgq.create_group('l', 'SELECT g FROM generate_series(1, 10) g', 2,
                        mode => 'lease', lease => '10 minutes',
                        max_attempts => 3);
SELECT mode, state, lease, max_attempts, total_blocks, pending, claimed, done, failed
FROM pgq.group_stats WHERE group_name = 'l';
SELECT min(block_id) AS b0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'l' \gset

-- a claim outside a transaction block commits at once (asynchronously,
-- without changing the session's setting); the first attempt is 1
SELECT block_id - :b0 AS rel, attempt, ids, payload FROM pgq.claim('l');
SHOW synchronous_commit;
SELECT block_id - :b0 AS rel, state, attempt,
       lease_until > now() + interval '9 minutes' AS leased_10_min
FROM pgq.blocks WHERE block_id = :b0;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'l';

-- complete needs the attempt the claim returned: a wrong one changes nothing
SELECT pgq.complete(:b0, attempt => 2);
SELECT pgq.complete(:b0, attempt => 0);
SELECT block_id - :b0 AS rel, state, attempt FROM pgq.blocks WHERE block_id = :b0;
SELECT pgq.complete(:b0, attempt => 1);
SELECT count(*) AS left_behind FROM pgq.blocks WHERE block_id = :b0;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'l';
-- a consumed block, and one that never existed: false for every call
SELECT pgq.complete(:b0, attempt => 1) AS complete,
       pgq.release(:b0, attempt => 1) AS release,
       pgq.fail(:b0, 'x', attempt => 1) AS fail,
       pgq.extend(:b0, '1 minute', attempt => 1) AS extend;
SELECT pgq.complete(-1, attempt => 1) AS complete,
       pgq.release(-1, attempt => 1) AS release,
       pgq.fail(-1, 'x', attempt => 1) AS fail,
       pgq.extend(-1, '1 minute', attempt => 1) AS extend;

-- release gives the block back at once; the next claim counts attempt 2,
-- and attempt 1 is no longer valid for anything
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');
SELECT pgq.release(:b0 + 1, attempt => 2);
SELECT pgq.release(:b0 + 1, attempt => 1);
SELECT pgq.release(:b0 + 1, attempt => 1);
SELECT block_id - :b0 AS rel, state, attempt FROM pgq.blocks WHERE block_id = :b0 + 1;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'l';
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');
SELECT pgq.complete(:b0 + 1, attempt => 1) AS complete,
       pgq.extend(:b0 + 1, '1 hour', attempt => 1) AS extend,
       pgq.fail(:b0 + 1, 'stale', attempt => 1) AS fail,
       pgq.release(:b0 + 1, attempt => 1) AS release;
SELECT block_id - :b0 AS rel, state, attempt, last_error,
       lease_until < now() + interval '11 minutes' AS not_extended
FROM pgq.blocks WHERE block_id = :b0 + 1;

-- extend moves the deadline to now() + lease, for the holder only
SELECT lease_until AS before FROM pgq.blocks WHERE block_id = :b0 + 1 \gset
SELECT pgq.extend(:b0 + 1, '2 hours', attempt => 2);
SELECT lease_until > :'before'::timestamptz + interval '1 hour' AS moved_forward,
       lease_until > now() + interval '119 minutes' AS about_2_hours
FROM pgq.blocks WHERE block_id = :b0 + 1;
SELECT pgq.extend(:b0 + 1, '1 minute', attempt => 3);
SELECT lease_until > now() + interval '119 minutes' AS unchanged
FROM pgq.blocks WHERE block_id = :b0 + 1;
-- a shorter lease moves it back: extend sets now() + lease
SELECT pgq.extend(:b0 + 1, '1 minute', attempt => 2);
SELECT lease_until < now() + interval '2 minutes' AS one_minute
FROM pgq.blocks WHERE block_id = :b0 + 1;
SELECT pgq.complete(:b0 + 1, attempt => 2);

-- fail with retry_after: state 'r', not claimable until then
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');
SELECT pgq.fail(:b0 + 2, 'try later', retry_after => '1 hour', attempt => 2);
SELECT pgq.fail(:b0 + 2, 'try later', retry_after => '1 hour', attempt => 1);
SELECT block_id - :b0 AS rel, state, attempt, last_error,
       lease_until > now() + interval '59 minutes' AS retry_in_1_hour
FROM pgq.blocks WHERE block_id = :b0 + 2;
SELECT pgq.complete(:b0 + 2, attempt => 1);
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'l';
-- the next claim takes the next pending block, not the one waiting
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');

-- fail without retry_after: claimable again at once, with attempt 2
SELECT pgq.fail(:b0 + 3, 'at once', attempt => 1);
SELECT block_id - :b0 AS rel, state, attempt, last_error FROM pgq.blocks
WHERE block_id = :b0 + 3;
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');
-- the retry's due time comes (simulated: no sleeping), and it is offered
-- before pending blocks
UPDATE pgq.blocks SET lease_until = now() - interval '1 second'
WHERE block_id = :b0 + 2;
SELECT block_id - :b0 AS rel, attempt, ids FROM pgq.claim('l', 3);

-- block 3 fails again on attempt 2, is claimed for attempt 3, and fails
-- on that last attempt: dead-lettered, with its error kept
SELECT pgq.fail(:b0 + 3, 'again', attempt => 2);
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('l');
SELECT pgq.fail(:b0 + 3, 'for good', attempt => 3);
SELECT block_id - :b0 AS rel, state, attempt, last_error, lease_until
FROM pgq.blocks WHERE block_id = :b0 + 3;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'l';
-- a dead-lettered block is not claimable, and nothing holds it any more
SELECT pgq.complete(:b0 + 3, attempt => 3) AS complete,
       pgq.release(:b0 + 3, attempt => 3) AS release,
       pgq.fail(:b0 + 3, 'x', attempt => 3) AS fail,
       pgq.extend(:b0 + 3, '1 minute', attempt => 3) AS extend;
SELECT block_id - :b0 AS rel, state, attempt, last_error
FROM pgq.blocks WHERE block_id = :b0 + 3;
SELECT pgq.complete(:b0 + 2, attempt => 2);
SELECT pgq.complete(:b0 + 4, attempt => 1);
SELECT state, pending, claimed, done, failed, percent_done
FROM pgq.group_stats WHERE group_name = 'l';
SELECT count(*) FROM pgq.claim('l');

-- Leases that run out.  Expiry is simulated by moving lease_until into the
-- past, as time passing would.
SELECT pgq.create_group('e', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease', lease => '1 hour', max_attempts => 2);
SELECT min(block_id) AS e0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'e' \gset
SELECT block_id - :e0 AS rel, attempt, ids FROM pgq.claim('e');
UPDATE pgq.blocks SET lease_until = now() - interval '1 second'
WHERE block_id = :e0;
-- an expired lease counts as pending, not claimed
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'e';
-- while nobody took the block, its holder may still finish: complete is
-- refused only once the block went to someone else
SELECT pgq.extend(:e0, '1 hour', attempt => 1);
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'e';
UPDATE pgq.blocks SET lease_until = now() - interval '1 second'
WHERE block_id = :e0;
-- the next claim re-offers it, with attempt 2
SELECT block_id - :e0 AS rel, attempt, ids FROM pgq.claim('e');
SELECT pgq.complete(:e0, attempt => 1) AS old_complete,
       pgq.extend(:e0, '1 hour', attempt => 1) AS old_extend,
       pgq.release(:e0, attempt => 1) AS old_release,
       pgq.fail(:e0, 'late', attempt => 1) AS old_fail;
SELECT block_id - :e0 AS rel, state, attempt, last_error FROM pgq.blocks
WHERE block_id = :e0;
-- the lease of the last attempt runs out: the next claim dead-letters the
-- block ('lease expired') and goes on to the next one
UPDATE pgq.blocks SET lease_until = now() - interval '1 second'
WHERE block_id = :e0;
SELECT block_id - :e0 AS rel, attempt, ids FROM pgq.claim('e');
SELECT block_id - :e0 AS rel, state, attempt, last_error,
       lease_until > now() AS leased
FROM pgq.blocks WHERE group_id = (SELECT group_id FROM pgq.groups
                                  WHERE group_name = 'e')
ORDER BY block_id;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'e';
SELECT pgq.complete(:e0, attempt => 2);

-- A claim whose transaction rolls back leaves the block pending, claimable
-- again with the same attempt number; one in a savepoint likewise.
BEGIN;
SELECT block_id - :e0 AS rel, attempt FROM pgq.claim('e');
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'e';
ROLLBACK;
SELECT block_id - :e0 AS rel, state, attempt FROM pgq.blocks WHERE block_id = :e0 + 2;
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'e';
BEGIN;
SAVEPOINT s;
SELECT block_id - :e0 AS rel, attempt FROM pgq.claim('e');
ROLLBACK TO SAVEPOINT s;
SELECT block_id - :e0 AS rel, attempt FROM pgq.claim('e');
-- claim, process and complete in one transaction
SELECT pgq.complete(:e0 + 2, attempt => 1);
COMMIT;
SELECT pgq.complete(:e0 + 1, attempt => 1);
SELECT block_id - :e0 AS rel, state, attempt, last_error FROM pgq.blocks
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'e');
SELECT state, pending, claimed, done, failed FROM pgq.group_stats
WHERE group_name = 'e';

-- Claims need READ COMMITTED in lease mode too.
SELECT pgq.create_group('r', 'SELECT 1', 1, mode => 'lease');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM pgq.claim('r');
ROLLBACK;

-- Blocks of transaction-mode groups have no complete, release, fail or
-- extend: COMMIT and ROLLBACK do that work.
SELECT pgq.create_group('t', 'SELECT 1', 1);
SELECT min(block_id) AS t0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 't' \gset
SELECT pgq.complete(:t0, attempt => 1);
SELECT pgq.release(:t0, attempt => 1);
SELECT pgq.fail(:t0, 'x', attempt => 1);
SELECT pgq.extend(:t0, '1 minute', attempt => 1);
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 't';

-- a claim outside a transaction block commits asynchronously, but a
-- complete in the same transaction makes the commit durable again.  The
-- setting changes at commit only: statements see the session's
-- (test/t/040_lease_durability.pl crashes the server to check the commits)
SELECT pgq.create_group('d', 'SELECT g FROM generate_series(1, 2) g', 1,
                        mode => 'lease');
SELECT current_setting('synchronous_commit') AS claim_alone
FROM pgq.claim('d');
SELECT pgq.complete(c.block_id, attempt => c.attempt) AS completed,
       current_setting('synchronous_commit') AS with_complete
FROM pgq.claim('d') c;
SELECT current_setting('synchronous_commit') AS afterwards;

-- complete => hands the last block in and claims the next in one call, in
-- one transaction, whose commit stays durable (block ids from a fixed
-- start, for the warning below)
SELECT setval('pgq.block_id_seq', 1000000) AS block_ids_after;
SELECT pgq.create_group('k', 'SELECT g FROM generate_series(1, 4) g', 1,
                        mode => 'lease');
SELECT block_id AS k0, attempt AS a0 FROM pgq.claim('k') \gset
SELECT block_id - :k0 AS rel, attempt, ids,
       current_setting('synchronous_commit') AS sync
FROM pgq.claim('k', complete => :k0, attempt => :a0);
SELECT block_id - :k0 AS rel, state, attempt FROM pgq.blocks
WHERE block_id BETWEEN :k0 AND :k0 + 3 ORDER BY block_id;
-- a block the caller does not hold (a wrong attempt): a warning, nothing
-- changes, and the claim goes on (to commit asynchronously again: nothing
-- was written)
SELECT block_id - :k0 AS rel, attempt,
       current_setting('synchronous_commit') AS sync
FROM pgq.claim('k', complete => :k0 + 1, attempt => 7);
SELECT block_id - :k0 AS rel, state, attempt FROM pgq.blocks
WHERE block_id BETWEEN :k0 AND :k0 + 3 ORDER BY block_id;
-- an attempt without a block, a lease-mode block without its attempt, and a
-- claim that fails after its complete, which is undone with it
SELECT * FROM pgq.claim('k', attempt => 1);
SELECT * FROM pgq.claim('k', complete => :k0 + 1);
SELECT * FROM pgq.claim('nope', complete => :k0 + 1, attempt => 1);
SELECT block_id - :k0 AS rel, state, attempt FROM pgq.blocks
WHERE block_id BETWEEN :k0 AND :k0 + 3 ORDER BY block_id;
-- the last block: complete => with nothing left to claim
SELECT block_id - :k0 AS rel FROM pgq.claim('k', complete => :k0 + 1, attempt => 1);
SELECT block_id - :k0 AS rel, attempt
FROM pgq.claim('k', complete => :k0 + 2, attempt => 1);
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'k';

-- A claim's lease runs out with no UPDATE of pgq.blocks (a lease of one
-- microsecond ends before the next statement): the claim that set it told
-- shared memory, so the next claim looks for due blocks and takes the
-- block again instead of passing over it to the next one.
SELECT pgq.create_group('m', 'SELECT g FROM generate_series(1, 2) g', 1,
                        mode => 'lease', lease => '1 microsecond');
SELECT min(block_id) AS m0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'm' \gset
SELECT block_id - :m0 AS rel, attempt FROM pgq.claim('m');
SELECT block_id - :m0 AS rel, attempt FROM pgq.claim('m');
SELECT block_id - :m0 AS rel, attempt FROM pgq.claim('m');

-- a claim sees a release of its own transaction at once, whatever shared
-- memory learned from other claims about when blocks come due
SELECT pgq.create_group('o', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease');
SELECT min(block_id) AS o0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'o' \gset
SELECT block_id - :o0 AS rel, attempt FROM pgq.claim('o');
BEGIN;
SELECT pgq.release(:o0, attempt => 1);
SELECT block_id - :o0 AS rel, attempt FROM pgq.claim('o');
COMMIT;

-- Claims are HOT updates: no index names a column that a claim changes, and
-- pgq.blocks keeps room on its pages for the claimed blocks' new versions.
SELECT pgq.create_group('h', 'SELECT g FROM generate_series(1, 300) g', 1,
                        mode => 'lease');
BEGIN;
SELECT pg_stat_get_xact_tuples_updated('pgq.blocks'::regclass) AS upd0,
       pg_stat_get_xact_tuples_hot_updated('pgq.blocks'::regclass) AS hot0 \gset
SELECT count(*) AS claimed FROM pgq.claim('h', 100);
SELECT pg_stat_get_xact_tuples_updated('pgq.blocks'::regclass) - :upd0 AS updated,
       pg_stat_get_xact_tuples_hot_updated('pgq.blocks'::regclass) - :hot0 AS hot;
COMMIT;

-- A look for due blocks walks a group up to the highest block in flight
-- that shared memory knows of.  SQL that makes a block claimed or due
-- raises it at commit (the blocks_inflight trigger): a lease that ran out
-- beyond the blocks claimed so far is found, and taken first.
SELECT pgq.create_group('u', 'SELECT g FROM generate_series(1, 6) g', 1,
                        mode => 'lease');
SELECT min(block_id) AS u0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'u' \gset
SELECT block_id - :u0 AS rel, attempt FROM pgq.claim('u');
UPDATE pgq.blocks SET state = 'c', attempt = 1, tries = 1,
                      epoch = (SELECT epoch FROM pgq.blocks WHERE block_id = :u0),
                      lease_until = now() - interval '1 second'
WHERE block_id = :u0 + 4;
SELECT block_id - :u0 AS rel, attempt FROM pgq.claim('u');
-- a retry made due by hand beyond it, in a transaction that then claims:
-- its own look walks that far before the commit
BEGIN;
UPDATE pgq.blocks SET state = 'r', attempt = 1, tries = 1,
                      epoch = (SELECT epoch FROM pgq.blocks WHERE block_id = :u0),
                      lease_until = now() - interval '1 second'
WHERE block_id = :u0 + 5;
SELECT block_id - :u0 AS rel, attempt FROM pgq.claim('u');
COMMIT;
-- such a transaction cannot be prepared: shared memory learns of the block
-- when it commits; the block stays pending
BEGIN;
UPDATE pgq.blocks SET state = 'r', attempt = 1, lease_until = now()
WHERE block_id = :u0 + 2;
PREPARE TRANSACTION 'lease_inflight';
SELECT state FROM pgq.blocks WHERE block_id = :u0 + 2;
-- nor can a transaction that retried a dead-lettered block: the claim hint
-- moves back to the block when the retry commits
SELECT pgq.create_group('v', 'SELECT g FROM generate_series(1, 2) g', 1,
                        mode => 'lease', max_attempts => 1);
SELECT min(block_id) AS v0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'v' \gset
SELECT pgq.fail(block_id, 'boom', attempt => attempt) FROM pgq.claim('v');
BEGIN;
SELECT pgq.retry(:v0);
PREPARE TRANSACTION 'lease_retry';
SELECT state, attempt FROM pgq.blocks WHERE block_id = :v0;
-- retried, in the transaction that claims next: its claim sees the retry
BEGIN;
SELECT pgq.retry(:v0);
SELECT block_id - :v0 AS rel, attempt FROM pgq.claim('v');
COMMIT;
-- its attempt numbers went on: the holder from before the retry is refused
SELECT pgq.complete(:v0, attempt => 1) AS stale_complete;
-- in REPEATABLE READ too, a block the caller does not hold is left alone:
-- no serialization failure, as nothing changed it since the snapshot
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pgq.complete(:u0 + 1, attempt => 7) AS complete,
       pgq.complete_many(ARRAY[:u0 + 1, :u0 + 2], ARRAY[7, 7]) AS complete_many;
COMMIT;

-- transaction mode has no complete, with claim as without
BEGIN;
SELECT * FROM pgq.claim('t', complete => :t0);
ROLLBACK;

SELECT pgq.drop_group('l'), pgq.drop_group('e'), pgq.drop_group('r'),
       pgq.drop_group('t'), pgq.drop_group('d'), pgq.drop_group('k'),
       pgq.drop_group('m'), pgq.drop_group('o'), pgq.drop_group('h'),
       pgq.drop_group('u'), pgq.drop_group('v');
SELECT count(*) AS blocks FROM pgq.blocks;
