/* pgq--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pgq" to load this file. \quit

-- The schema of every object below.  Created here, it belongs to the
-- extension, and DROP EXTENSION removes it; a schema that pgq.control's
-- "schema" made would be left behind.  (Installations made by 0.1's own
-- files have it outside the extension: the update to 0.2 takes it in.)
CREATE SCHEMA pgq;

-- Groups: one row each, written at creation and when materialization ends;
-- never per claim.  A group of kind 'query' holds a query's ids in blocks; a
-- group of kind 'queue' (pgq.create_queue) holds items that producers
-- enqueue, in pgq.items.
CREATE TABLE pgq.groups (
    group_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_name   text NOT NULL UNIQUE,
    kind         text NOT NULL DEFAULT 'query'
                 CHECK (kind IN ('query', 'queue')),
    mode         text NOT NULL
                 CHECK (mode IN ('transaction', 'lease', 'advisory')),
    query        text CHECK ((query IS NOT NULL) = (kind = 'query')),
    block_size   integer NOT NULL CHECK (block_size > 0),
    state        text NOT NULL DEFAULT 'materializing'
                 CHECK (state IN ('materializing', 'ready', 'failed')),
    lease        interval NOT NULL DEFAULT '5 minutes'
                 CHECK (lease > '0'),
    max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    -- queues: a failed item's retry waits backoff * 2^(attempt - 1), at most
    -- max_backoff, less a random part of up to half (see queue.c)
    backoff      interval NOT NULL DEFAULT '10 seconds'
                 CHECK (backoff >= '0'),
    max_backoff  interval NOT NULL DEFAULT '1 hour'
                 CHECK (max_backoff >= '0'),
    owner        regrole NOT NULL,
    -- roles granted consume and produce by pgq.grant(); '-' is PUBLIC
    consumers    regrole[] NOT NULL DEFAULT '{}',
    producers    regrole[] NOT NULL DEFAULT '{}',
    -- pgq.pause(): claims hand out nothing until pgq.resume()
    paused       boolean NOT NULL DEFAULT false,
    -- how the query was read when the group was created: an asynchronous
    -- materialization runs it with these settings, {name, value, ...}
    search_path  text NOT NULL,
    settings     text[] NOT NULL,
    -- an asynchronous materialization's time limit (NULL: none)
    materialize_timeout interval
                 CHECK (materialize_timeout > '0'),
    total_ids    bigint,
    total_blocks bigint,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ready_at     timestamptz,
    -- when the group failed, or when a maintenance pass first found it
    -- drained; pgq.retention counts from here
    finished_at  timestamptz
);

-- Blocks not consumed yet.  Block ids come from one sequence, so their order
-- within a group is the query's.
--
-- A transaction-mode claim locks and deletes its block, so COMMIT consumes
-- it and ROLLBACK gives it back.  An advisory-mode claim writes nothing: it
-- takes an advisory lock, and pgq.complete() deletes the block.  A lease-mode
-- claim commits state 'c' with a deadline; pgq.complete() deletes the block.
--
-- state: 'p' pending; 'c' claimed under a lease until lease_until; 'r'
-- waiting to be retried, claimable from lease_until on; 'f' failed for good
-- (dead-lettered), with its last error.  attempt counts the claims of lease
-- mode and the failures of advisory mode.
CREATE SEQUENCE pgq.block_id_seq AS bigint;

CREATE TABLE pgq.blocks (
    group_id    bigint NOT NULL,
    block_id    bigint NOT NULL,
    ids         bigint[] NOT NULL,
    state       "char" NOT NULL DEFAULT 'p'
                CHECK (state IN ('p', 'c', 'r', 'f')),
    attempt     integer NOT NULL DEFAULT 0,
    lease_until timestamptz,
    last_error  text,
    PRIMARY KEY (group_id, block_id)
);
-- Lookups by block id alone (complete, release, fail, extend) use a hash
-- index: it serves only equality, so a claim's range scan of one group from
-- its hint can only be planned on the primary key.
CREATE INDEX blocks_block_id_idx ON pgq.blocks USING hash (block_id);
-- Leases that run out and retries that come due, oldest first.  Its
-- predicate names lease_until, so that only statements about due times can
-- use it: a lookup of one claimed block by key must not be planned on it.
CREATE INDEX blocks_due_idx ON pgq.blocks (group_id, lease_until)
    WHERE state IN ('c', 'r') AND lease_until IS NOT NULL;
-- Id arrays are large and barely compressible: store them out of line
-- without spending CPU on compression.
ALTER TABLE pgq.blocks ALTER COLUMN ids SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('pgq.groups', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.blocks', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.block_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.groups_group_id_seq', '');

-- Items of queues.  Item ids come from the blocks' sequence, so that an id
-- names a block or an item, never both, and pgq.complete() and the other
-- calls that take an id serve both.
--
-- state: 'p' pending; 'c' claimed under a lease until due_at; 'r' waiting
-- until due_at (a delayed item, or a retry); 'd' done, with its result; 'f'
-- failed for good (dead-lettered), with its errors.  Done and dead items
-- stay, with their keys, until pgq.retention has passed since finished_at.
CREATE TABLE pgq.items (
    group_id    bigint NOT NULL,
    item_id     bigint NOT NULL,
    key         text,
    priority    integer NOT NULL DEFAULT 0 CHECK (priority >= 0),
    state       "char" NOT NULL DEFAULT 'p'
                CHECK (state IN ('p', 'c', 'r', 'd', 'f')),
    attempt     integer NOT NULL DEFAULT 0,
    due_at      timestamptz,
    payload     jsonb,
    data        bytea,
    result      jsonb,
    result_data bytea,
    last_error  text,
    errors      jsonb,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    PRIMARY KEY (group_id, item_id)
);
-- one item per key and queue: concurrent enqueues of a key meet here
CREATE UNIQUE INDEX items_key_idx ON pgq.items (group_id, key)
    WHERE key IS NOT NULL;
-- what a claim takes: higher priority first, then first in, first out
CREATE INDEX items_pending_idx ON pgq.items (group_id, priority DESC, item_id)
    WHERE state = 'p';
-- leases that run out, delayed items and retries that come due
CREATE INDEX items_due_idx ON pgq.items (group_id, due_at)
    WHERE state IN ('c', 'r');
CREATE INDEX items_item_id_idx ON pgq.items USING hash (item_id);
-- finished items, for retention
CREATE INDEX items_finished_idx ON pgq.items (finished_at)
    WHERE state IN ('d', 'f');
ALTER TABLE pgq.items ALTER COLUMN data SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('pgq.items', '');

-- Advisory-mode workers.  UNLOGGED: crash recovery empties it and a standby
-- has none of it, which is how a worker learns that its locks are gone.  Ids
-- come from a logged sequence, so they never repeat, not even after a crash.
CREATE SEQUENCE pgq.worker_id_seq AS bigint;
-- dumped, so that ids keep not repeating after a restore (the registry is not)
SELECT pg_catalog.pg_extension_config_dump('pgq.worker_id_seq', '');

CREATE UNLOGGED TABLE pgq.worker_registry (
    worker_id     bigint PRIMARY KEY,
    worker_name   text,
    pid           integer NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION pgq.create_group(group_name text, query text,
                                 block_size integer DEFAULT 5000,
                                 mode text DEFAULT 'transaction',
                                 async boolean DEFAULT false,
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_group(text, text, integer, text, boolean,
                                     interval, integer, interval) IS
'create a group of blocks from a query''s ids; true for the caller that created it';

CREATE FUNCTION pgq.drop_group(group_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_drop_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.drop_group(text) IS
'drop a group and its blocks; false if it did not exist';

CREATE FUNCTION pgq.claim(group_name text, max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL,
                          worker_id bigint DEFAULT NULL)
RETURNS TABLE (block_id bigint, attempt integer, ids bigint[], payload jsonb,
               data bytea, key text)
AS 'MODULE_PATHNAME', 'pgq_claim'
LANGUAGE C VOLATILE ROWS 1;

COMMENT ON FUNCTION pgq.claim(text, integer, interval, bigint) IS
'claim up to max_blocks unclaimed blocks of a group, or items of a queue';

CREATE FUNCTION pgq.complete(block_id bigint, result jsonb DEFAULT NULL,
                             attempt integer DEFAULT NULL,
                             worker_id bigint DEFAULT NULL,
                             result_data bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_complete'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.complete(bigint, jsonb, integer, bigint, bytea) IS
'consume a claimed block or item, storing an item''s result; false if the caller does not hold it';

CREATE FUNCTION pgq.complete_many(block_ids bigint[], attempts integer[] DEFAULT NULL,
                                  results jsonb[] DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_complete_many'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.complete_many(bigint[], integer[], jsonb[]) IS
'complete lease-mode claims (items and blocks) in one call; returns the ids the caller held';

CREATE FUNCTION pgq.release(block_id bigint, attempt integer DEFAULT NULL,
                            worker_id bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_release'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.release(bigint, integer, bigint) IS
'give a claimed block back to the group; false if the caller does not hold it';

CREATE FUNCTION pgq.fail(block_id bigint, error text DEFAULT NULL,
                         retry_after interval DEFAULT NULL,
                         attempt integer DEFAULT NULL,
                         worker_id bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_fail'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.fail(bigint, text, interval, integer, bigint) IS
'record a failed attempt: retry later, or dead-letter after max_attempts';

CREATE FUNCTION pgq.extend(block_id bigint, lease interval,
                           attempt integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_extend'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.extend(bigint, interval, integer) IS
'extend a lease-mode claim to now() + lease; false if the caller does not hold it';

CREATE FUNCTION pgq.create_queue(group_name text,
                                 mode text DEFAULT 'lease',
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 backoff interval DEFAULT '10 seconds',
                                 max_backoff interval DEFAULT '1 hour')
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_queue'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                                     interval) IS
'create a queue that producers fill with pgq.enqueue; true for the caller that created it';

CREATE FUNCTION pgq.enqueue(group_name text, payload jsonb DEFAULT NULL,
                            key text DEFAULT NULL, priority integer DEFAULT 0,
                            run_at timestamptz DEFAULT NULL,
                            data bytea DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'pgq_enqueue'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, bytea) IS
'add an item to a queue; for a key the queue holds already, the existing item''s id';

CREATE FUNCTION pgq.enqueue_many(group_name text, payloads jsonb[] DEFAULT NULL,
                                 keys text[] DEFAULT NULL,
                                 priority integer DEFAULT 0,
                                 run_at timestamptz DEFAULT NULL,
                                 data bytea[] DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_enqueue_many'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], text[], integer, timestamptz, bytea[]) IS
'add many items to a queue in one call; returns their ids in the order given';

CREATE FUNCTION pgq.retry(block_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_retry'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.retry(bigint) IS
'set a done or dead-lettered item back to pending';

CREATE FUNCTION pgq.retry(group_name text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_retry_key'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.retry(text, text) IS
'set the done or dead-lettered item of a key back to pending';

CREATE FUNCTION pgq.result(block_id bigint, wait interval DEFAULT NULL,
                           OUT state text, OUT result jsonb,
                           OUT result_data bytea, OUT attempt integer,
                           OUT last_error text)
AS 'MODULE_PATHNAME', 'pgq_result'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.result(bigint, interval) IS
'an item''s state and result, waiting up to "wait" for it to be done or dead';

CREATE FUNCTION pgq.grant(group_name text, role text,
                          privilege text DEFAULT 'consume')
RETURNS void
AS 'MODULE_PATHNAME', 'pgq_grant'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.grant(text, text, text) IS
'let a role (or PUBLIC) consume or produce on a group; for its owner';

CREATE FUNCTION pgq.revoke(group_name text, role text,
                           privilege text DEFAULT 'consume')
RETURNS void
AS 'MODULE_PATHNAME', 'pgq_revoke'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.revoke(text, text, text) IS
'take back what pgq.grant() gave';

-- May the current user do anything with a group of this owner and these
-- grantees?  The views show only such groups.
CREATE FUNCTION pgq.may_see(owner regrole, consumers regrole[],
                            producers regrole[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_may_see'
LANGUAGE C STABLE;

CREATE FUNCTION pgq.pause(group_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_pause'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.pause(text) IS
'stop handing out the work of a group or queue; false if it was paused';

CREATE FUNCTION pgq.resume(group_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_resume'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.resume(text) IS
'hand out the work of a paused group or queue again; false if it was not paused';

CREATE FUNCTION pgq.purge(group_name text, older_than interval DEFAULT '0',
                          dead boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'pgq_purge'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.purge(text, interval, boolean) IS
'remove a queue''s done (and, with dead, dead-lettered) items, or a group''s dead-lettered blocks';

CREATE FUNCTION pgq.rematerialize(group_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_rematerialize'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.rematerialize(text) IS
'run a failed group''s query again, asynchronously, as its owner';

CREATE FUNCTION pgq.wake_maintenance()
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_wake_maintenance'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.wake_maintenance() IS
'have a maintenance pass over every database start when this transaction commits; false without a launcher';

CREATE FUNCTION pgq.register_worker(worker_name text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'pgq_register_worker'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.register_worker(text) IS
'register this session as an advisory-mode worker; returns its id';

CREATE FUNCTION pgq.check_worker(worker_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_check_worker'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.check_worker(bigint) IS
'true if the worker is registered and this session still holds its locks';

CREATE FUNCTION pgq.relock(block_ids bigint[], worker_id bigint)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_relock'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.relock(bigint[], bigint) IS
'take advisory blocks back after the locks were lost; returns those regained';

-- Blocks of a group held by open transactions: claimed, from shared memory
-- (NULL when pgq is not preloaded), and own, held by the calling transaction.
CREATE FUNCTION pgq.inflight(group_id bigint, created_at timestamptz,
                             OUT claimed bigint, OUT own bigint)
AS 'MODULE_PATHNAME', 'pgq_inflight'
LANGUAGE C VOLATILE STRICT;

-- Counting blocks by mode:
-- * lease: claims are committed rows, state 'c' until their lease runs out;
--   a claim whose lease ran out counts as pending again.
-- * advisory: claims are advisory locks, counted from pg_locks, so that the
--   count is right even after pg_advisory_unlock_all() or DISCARD ALL (the
--   claim path counts in shared memory instead).
-- * transaction: claims are held by open transactions, so the claimed count
--   comes from shared memory (NULL when pgq is not preloaded; blocks held by
--   others then count as pending).  A block claimed by another open
--   transaction is still visible to this snapshot, one claimed by this
--   transaction is not ("own").
CREATE VIEW pgq.group_stats WITH (security_barrier) AS
SELECT g.group_name,
       g.mode,
       CASE WHEN g.state = 'ready' AND s.pending = 0
                 AND coalesce(s.claimed, f.own) = 0 THEN 'drained'
            WHEN g.paused THEN 'paused'
            ELSE g.state END AS state,
       g.block_size,
       g.total_ids,
       g.total_blocks,
       s.pending,
       s.claimed,
       g.total_blocks - r.remaining - f.own AS done,
       r.failed,
       g.created_at,
       g.ready_at,
       g.owner,
       CASE WHEN g.total_blocks > 0
            THEN round(100.0 * (g.total_blocks - r.remaining - f.own)
                       / g.total_blocks, 1)
       END AS percent_done,
       g.lease,
       g.max_attempts,
       g.error
FROM pgq.groups g
CROSS JOIN LATERAL (SELECT count(*) AS remaining,
                           count(*) FILTER (WHERE b.state = 'f') AS failed,
                           count(*) FILTER (WHERE b.state = 'c'
                                              AND b.lease_until > now())
                               AS leased
                    FROM pgq.blocks b
                    WHERE b.group_id = g.group_id) r
CROSS JOIN LATERAL pgq.inflight(g.group_id, g.created_at) f
CROSS JOIN LATERAL (
    SELECT CASE g.mode
               WHEN 'lease' THEN r.leased
               WHEN 'advisory' THEN
                   (SELECT count(*)
                    FROM pg_catalog.pg_locks l
                    JOIN pgq.blocks b
                      ON b.block_id = (l.classid::bigint << 32 | l.objid::bigint)
                    WHERE l.locktype = 'advisory' AND l.granted
                      AND l.objsubid = 20561
                      AND l.database = (SELECT oid FROM pg_catalog.pg_database
                                        WHERE datname = pg_catalog.current_database())
                      AND b.group_id = g.group_id)
               ELSE f.claimed
           END AS claimed) c
CROSS JOIN LATERAL (
    SELECT c.claimed,
           CASE g.mode
               WHEN 'transaction'
               THEN greatest(r.remaining - r.failed + f.own
                             - coalesce(c.claimed, f.own), 0)
               ELSE r.remaining - r.failed - c.claimed
           END AS pending) s
WHERE g.kind = 'query'
  AND pgq.may_see(g.owner, g.consumers, g.producers);

COMMENT ON VIEW pgq.group_stats IS
'progress of every group: blocks pending, claimed, done and failed';

-- Queues: items by state.  "running" counts lease-mode claims whose lease
-- has not run out; an item claimed in transaction mode counts as pending
-- until the claiming transaction commits.  oldest_pending_age is how long
-- the oldest claimable item has waited since it was enqueued (or came due).
CREATE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT g.group_name AS queue_name,
       g.mode,
       count(i.item_id) FILTER (WHERE i.state = 'p'
                                   OR (i.state IN ('c', 'r')
                                       AND i.due_at <= now())) AS pending,
       count(i.item_id) FILTER (WHERE i.state = 'r' AND i.due_at > now())
           AS scheduled,
       count(i.item_id) FILTER (WHERE i.state = 'c' AND i.due_at > now())
           AS running,
       count(i.item_id) FILTER (WHERE i.state = 'd') AS done,
       count(i.item_id) FILTER (WHERE i.state = 'f') AS dead,
       now() - min(CASE WHEN i.state = 'p' THEN i.enqueued_at
                        WHEN i.state IN ('c', 'r') AND i.due_at <= now()
                        THEN greatest(i.enqueued_at, i.due_at)
                   END) AS oldest_pending_age,
       g.lease,
       g.max_attempts,
       g.backoff,
       g.max_backoff,
       g.owner,
       g.created_at,
       g.paused
FROM pgq.groups g
LEFT JOIN pgq.items i ON i.group_id = g.group_id
WHERE g.kind = 'queue'
  AND pgq.may_see(g.owner, g.consumers, g.producers)
GROUP BY g.group_id;

COMMENT ON VIEW pgq.queue_stats IS
'every queue: items pending, scheduled, running, done and dead, and the oldest pending item''s age';

-- Dead-lettered items, with what went wrong.
CREATE VIEW pgq.dead_items WITH (security_barrier) AS
SELECT g.group_name AS queue_name,
       i.item_id,
       i.key,
       i.attempt,
       i.last_error,
       i.errors,
       i.payload,
       i.enqueued_at,
       i.finished_at AS failed_at
FROM pgq.items i
JOIN pgq.groups g ON g.group_id = i.group_id
WHERE i.state = 'f'
  AND pgq.may_see(g.owner, g.consumers, g.producers);

COMMENT ON VIEW pgq.dead_items IS
'dead-lettered items of every queue, with their last error and all their errors';

-- Advisory-mode workers, whether their session still holds its placeholder
-- lock, and how many blocks that session holds (locks name blocks, not
-- workers).  Reads pg_locks: for psql, not for a hot path.  On a standby it
-- fails, as reading any unlogged table does during recovery.
CREATE VIEW pgq.workers AS
SELECT w.worker_id,
       w.worker_name,
       w.pid,
       w.registered_at,
       EXISTS (SELECT FROM pg_catalog.pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.database = d.oid AND l.objsubid = 20562
                 AND l.pid = w.pid
                 AND (l.classid::bigint << 32 | l.objid::bigint) = w.worker_id)
           AS alive,
       (SELECT count(*) FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted
          AND l.database = d.oid AND l.objsubid = 20561
          AND l.pid = w.pid) AS blocks_held
FROM pgq.worker_registry w
CROSS JOIN (SELECT oid FROM pg_catalog.pg_database
            WHERE datname = pg_catalog.current_database()) d;

COMMENT ON VIEW pgq.workers IS
'advisory-mode workers: alive while their session holds its locks';

-- A maintenance pass in this database, soon after CREATE EXTENSION commits.
SELECT pgq.wake_maintenance();

-- Privileges (see privilege.c): pgq's tables belong to the extension's
-- owner and are granted to nobody; its functions check what their caller
-- may do with each group.  Using pgq takes USAGE on the schema, and the
-- views show each user the groups it may use; they are security barriers,
-- so that a caller's function in a WHERE clause never sees other rows.
REVOKE ALL ON ALL TABLES IN SCHEMA pgq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgq FROM PUBLIC;
-- a pass over every database is for the extension's owner to ask for
REVOKE EXECUTE ON FUNCTION pgq.wake_maintenance() FROM PUBLIC;
GRANT SELECT ON pgq.group_stats, pgq.queue_stats, pgq.dead_items,
      pgq.workers TO PUBLIC;
