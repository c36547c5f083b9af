-- Advisory-mode claims: a session advisory lock per block, nothing written;
-- workers register so that they can tell when their locks are gone.  Block
-- ids are shown relative to the group's first block (:b0), and worker ids,
-- which come from a sequence, are not shown.
CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
-- pgq's advisory lock tags (advisory.c): objsubid is 4096 + 8192 * kind +
-- (the extension's OID modulo 8192), kind 0 for a block, 1 for a worker
CREATE FUNCTION lock_kind(objsubid smallint) RETURNS text LANGUAGE sql AS $$
SELECT CASE objsubid - 4096 - (SELECT oid::bigint % 8192 FROM pg_extension
                               WHERE extname = 'pgq')
           WHEN 0 THEN 'block'
           WHEN 8192 THEN 'worker'
           ELSE objsubid::text
       END
$$;
SELECT pgq.create_group('a', 'SELECT g FROM generate_series(1, 16) g', 2,
                        mode => 'advisory', max_attempts => 2);
SELECT mode, state, max_attempts, total_blocks, pending, claimed, done, failed
FROM pgq.group_stats WHERE group_name = 'a';
SELECT min(block_id) AS b0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'a' \gset

SELECT pgq.register_worker('w1') AS w \gset
SELECT pgq.check_worker(:w);
SELECT worker_name, pid = pg_backend_pid() AS this_session, alive, blocks_held
FROM pgq.workers WHERE worker_id = :w;

-- claims write nothing: no transaction id, no row changed
BEGIN;
SELECT block_id - :b0 AS rel, attempt, ids, payload
FROM pgq.claim('a', 2, worker_id => :w);
SELECT block_id - :b0 AS rel, attempt, ids FROM pgq.claim('a', worker_id => :w);
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
COMMIT;
-- the locks are the session's: they outlive the transaction
SELECT block_id - :b0 AS rel, attempt, ids FROM pgq.claim('a', worker_id => :w);
SELECT block_id - :b0 AS rel, state, attempt, lease_until, last_error
FROM pgq.blocks WHERE block_id < :b0 + 4 ORDER BY block_id;
SELECT worker_name, alive, blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';

-- complete deletes the block; its lock goes when the transaction commits.
-- Within that transaction the block is no longer held for anything else.
BEGIN;
SELECT pgq.complete(:b0, worker_id => :w);
SELECT pgq.complete(:b0, worker_id => :w) AS again,
       pgq.release(:b0, worker_id => :w) AS release,
       pgq.fail(:b0, 'x', worker_id => :w) AS fail;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
COMMIT;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT count(*) AS left_behind FROM pgq.blocks WHERE block_id = :b0;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';
SELECT pgq.complete(:b0, worker_id => :w);

-- a complete that rolls back keeps the block held, and it can be completed
-- again; likewise in a savepoint
BEGIN;
SELECT pgq.complete(:b0 + 1, worker_id => :w);
ROLLBACK;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT block_id - :b0 AS rel, state FROM pgq.blocks WHERE block_id = :b0 + 1;
SELECT pgq.complete(:b0 + 1, worker_id => :w);
BEGIN;
SAVEPOINT s;
SELECT pgq.complete(:b0 + 2, worker_id => :w);
ROLLBACK TO SAVEPOINT s;
SELECT pgq.complete(:b0 + 2, worker_id => :w);
COMMIT;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';

-- release unlocks at once; the block is offered again, first
SELECT pgq.release(:b0 + 3, worker_id => :w);
SELECT pgq.release(:b0 + 3, worker_id => :w);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w);

-- fail records the failure: retried after retry_after (state 'r', not
-- claimable before), dead-lettered once max_attempts failures are counted
SELECT pgq.fail(:b0 + 3, 'try later', retry_after => '1 hour', worker_id => :w);
SELECT block_id - :b0 AS rel, state, attempt, last_error,
       lease_until > now() + interval '59 minutes' AS retry_in_1_hour
FROM pgq.blocks WHERE block_id = :b0 + 3;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT pgq.complete(:b0 + 3, worker_id => :w);
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w);
-- the retry comes due (simulated: no sleeping) and is offered first, its
-- attempt counting the failure
UPDATE pgq.blocks SET lease_until = now() - interval '1 second'
WHERE block_id = :b0 + 3;
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w);
SELECT pgq.fail(:b0 + 3, 'for good', worker_id => :w);
SELECT block_id - :b0 AS rel, state, attempt, last_error, lease_until
FROM pgq.blocks WHERE block_id = :b0 + 3;
-- without retry_after, claimable again at once
SELECT pgq.fail(:b0 + 4, 'at once', worker_id => :w);
SELECT block_id - :b0 AS rel, state, attempt, last_error FROM pgq.blocks
WHERE block_id = :b0 + 4;
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w);
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';
SELECT worker_name, alive, blocks_held FROM pgq.workers WHERE worker_id = :w;

-- a claim needs a worker id that this session registered
SELECT * FROM pgq.claim('a');
SELECT * FROM pgq.claim('a', worker_id => -1);
SELECT pgq.check_worker(-1);

-- an application's advisory locks on plain keys are another key space: a
-- lock on the number of a block id does not keep pgq from claiming it
SELECT pg_advisory_lock(:b0 + 5);
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w);
SELECT lock_kind(objsubid), count(*) FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid()
GROUP BY 1 ORDER BY 1;
SELECT pg_advisory_unlock(:b0 + 5);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;

-- pg_advisory_unlock_all() drops pgq's locks too: the worker notices, the
-- old id is refused, and a new registration takes back what is still
-- claimable (not the consumed block 0, the dead-lettered block 3, or a
-- block that never existed), in the order given
SELECT pg_advisory_unlock_all();
SELECT pgq.check_worker(:w);
SELECT alive, blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT replace(try(format('SELECT * FROM pgq.claim(%L, worker_id => %s)', 'a', :w)),
               :'w', '<w>') AS claim;
SELECT replace(try(format('SELECT pgq.complete(%s, worker_id => %s)', :b0 + 4, :w)),
               :'w', '<w>') AS complete;
SELECT replace(try(format('SELECT pgq.relock(ARRAY[%s], %s)', :b0 + 4, :w)),
               :'w', '<w>') AS relock;
SELECT pgq.register_worker('w2') AS w2 \gset
SELECT pgq.check_worker(:w2) AS new_worker, pgq.check_worker(:w) AS old_worker;
SELECT array(SELECT r - :b0 FROM unnest(pgq.relock(
           ARRAY[:b0 + 5, :b0, :b0 + 3, NULL, -1, :b0 + 4], :w2)) r) AS regained;
-- relocking what is held already is a no-op that returns it
SELECT array(SELECT r - :b0 FROM unnest(pgq.relock(ARRAY[:b0 + 4, :b0 + 5], :w2)) r)
       AS regained;
SELECT pgq.relock('{}', :w2);
SELECT alive, blocks_held FROM pgq.workers WHERE worker_id = :w2;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';
-- the new id works for the regained blocks, the old one does not
SELECT replace(try(format('SELECT pgq.release(%s, worker_id => %s)', :b0 + 5, :w)),
               :'w', '<w>') AS old_release;
SELECT pgq.release(:b0 + 5, worker_id => :w2);
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w2);

-- DISCARD ALL, as a connection pooler runs it, does the same
DISCARD ALL;
SELECT pgq.check_worker(:w2);
SELECT pgq.register_worker('w3') AS w3 \gset
SELECT array(SELECT r - :b0 FROM unnest(pgq.relock(ARRAY[:b0 + 4, :b0 + 5], :w3)) r)
       AS regained;
SELECT pending, claimed, done, failed FROM pgq.group_stats WHERE group_name = 'a';

-- relock takes only advisory-mode blocks
SELECT pgq.create_group('al', 'SELECT 1', 1, mode => 'lease');
SELECT pgq.create_group('at', 'SELECT 1', 1);
SELECT pgq.relock(array_agg(block_id), :w3) FROM pgq.blocks
WHERE group_id IN (SELECT group_id FROM pgq.groups WHERE group_name IN ('al', 'at'));

-- the per-session cap, counting the worker's placeholder: a claim returns the
-- blocks it could take; with none taken, it is an error
SELECT pgq.release(:b0 + 4, worker_id => :w3), pgq.release(:b0 + 5, worker_id => :w3);
SET pgq.max_locks_per_session = 3;
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', 5, worker_id => :w3);
SELECT block_id - :b0 AS rel, attempt FROM pgq.claim('a', worker_id => :w3);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w3;
SELECT pgq.release(:b0 + 4, worker_id => :w3), pgq.release(:b0 + 5, worker_id => :w3);
RESET pgq.max_locks_per_session;

-- drain the group: everything but the dead-lettered block is done
SELECT count(*) FILTER (WHERE pgq.complete(block_id, worker_id => :w3)) AS completed
FROM pgq.claim('a', 10, worker_id => :w3);
SELECT state, pending, claimed, done, failed, percent_done
FROM pgq.group_stats WHERE group_name = 'a';
SELECT block_id - :b0 AS rel, state, attempt, last_error FROM pgq.blocks
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'a');
SELECT count(*) FROM pgq.claim('a', worker_id => :w3);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w3;
SELECT lock_kind(objsubid), count(*) FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid()
GROUP BY 1 ORDER BY 1;

SELECT pgq.drop_group('a'), pgq.drop_group('al'), pgq.drop_group('at');

-- complete => hands the last block in and claims the next in one call: the
-- completed block's lock goes at commit, the new one's stays (block ids
-- from a fixed start, for the warning below)
SELECT setval('pgq.block_id_seq', 2000000) AS block_ids_after;
SELECT pgq.create_group('ak', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'advisory');
SELECT min(block_id) AS k0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'ak' \gset
SELECT block_id - :k0 AS rel FROM pgq.claim('ak', worker_id => :w3);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w3;
BEGIN;
SELECT block_id - :k0 AS rel, ids
FROM pgq.claim('ak', worker_id => :w3, complete => :k0);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w3;
COMMIT;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w3;
SELECT block_id - :k0 AS rel FROM pgq.blocks
WHERE block_id BETWEEN :k0 AND :k0 + 2 ORDER BY block_id;
-- a block the worker does not hold: a warning, and the claim goes on
SELECT block_id - :k0 AS rel
FROM pgq.claim('ak', worker_id => :w3, complete => :k0);
-- an advisory claim needs its worker, with complete as without
SELECT * FROM pgq.claim('ak', complete => :k0 + 1);
-- a lease claim that completed an advisory block commits durably
SELECT pgq.create_group('akl', 'SELECT 1', 1, mode => 'lease');
SELECT block_id IS NOT NULL AS claimed,
       current_setting('synchronous_commit') AS sync
FROM pgq.claim('akl', worker_id => :w3, complete => :k0 + 1);
SELECT count(*) AS completed_left FROM pgq.blocks WHERE block_id = :k0 + 1;
SELECT pgq.drop_group('ak'), pgq.drop_group('akl');

-- a transaction that claimed advisory blocks cannot be prepared: the lock
-- would stay with this session, and the undo at rollback would be lost
SELECT pgq.create_group('ap', 'SELECT g FROM generate_series(1, 4) g', 1,
                        mode => 'advisory');
BEGIN;
SELECT count(*) FROM pgq.claim('ap', worker_id => :w3);
PREPARE TRANSACTION 'advisory_claim';
SELECT claimed, pending FROM pgq.group_stats WHERE group_name = 'ap';

-- a held block that vanished (as when another session drops its group;
-- here it is deleted by hand): complete says false and lets the lock go
SELECT block_id AS held FROM pgq.claim('ap', worker_id => :w3) \gset
BEGIN;
DELETE FROM pgq.blocks WHERE block_id = :held;
COMMIT;
SELECT pgq.complete(:held, worker_id => :w3);
SELECT count(*) AS lock_left FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid()
  AND lock_kind(objsubid) = 'block';
SELECT pgq.drop_group('ap');

-- the registry has no unregister call yet: clear this session's entries
DELETE FROM pgq.worker_registry WHERE pid = pg_backend_pid();
DROP FUNCTION try(text);
DROP FUNCTION lock_kind(smallint);
