/* pgq--0.1--0.2.sql: what 0.2 adds to 0.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgq UPDATE TO '0.2'" to load this file. \quit

-- Whether the current user may consume, produce or administer (own) a
-- group, as the functions that need the privilege decide it: clients can
-- check before they start a worker.
CREATE FUNCTION pgq.has_group_privilege(group_name text, privilege text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_has_group_privilege'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.has_group_privilege(text, text) IS
'may the current user consume, produce or administer the group?';

-- pgq.claim() returns a named row type instead of TABLE (...): the columns
-- are the same, but the executor finds a row type's descriptor in its type
-- cache, where it built the OUT parameters' descriptor again on every call.
-- The function is dropped and created again, as a return type cannot be
-- changed in place.  It also takes complete => (and attempt =>): the block
-- the worker is done with, completed in the same call, so that a worker
-- needs one round trip per block instead of two.
CREATE TYPE pgq.claimed AS (
    block_id bigint,
    attempt  integer,
    ids      bigint[],
    payload  jsonb,
    data     bytea,
    key      text
);

DROP FUNCTION pgq.claim(text, integer, interval, bigint);

CREATE FUNCTION pgq.claim(group_name text, max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL,
                          worker_id bigint DEFAULT NULL,
                          complete bigint DEFAULT NULL,
                          attempt integer DEFAULT NULL)
RETURNS SETOF pgq.claimed
AS 'MODULE_PATHNAME', 'pgq_claim'
LANGUAGE C VOLATILE ROWS 1;

COMMENT ON FUNCTION pgq.claim(text, integer, interval, bigint, bigint, integer) IS
'claim up to max_blocks unclaimed blocks of a group, or items of a queue, after completing the block given as complete';

-- pgq.items loses its CHECK constraints on state and priority.  The
-- executor reads a table's CHECK expressions from their catalog text again
-- in every statement that writes it, which was a sixth of an enqueue's
-- instructions; only pgq's functions write this table, and they check the
-- priority themselves (pgq.enqueue raises 22023 for one out of range).
ALTER TABLE pgq.items DROP CONSTRAINT items_state_check,
                      DROP CONSTRAINT items_priority_check;

-- Items are looked up by id alone (complete, result, retry, complete_many),
-- and item ids are unique across queues (they come from one sequence, as
-- block ids do): the primary key is the item id, through a btree.  0.1 kept
-- a primary key on (group_id, item_id) and a hash index on item_id: every
-- row version of an item had an entry in both, and every insert into a
-- hash index write-locks its metapage to count the tuple, where concurrent
-- enqueues queued.  What read a queue's items by group_id alone (dropping
-- a queue, counting it for pgq.max_queue_items, queue_stats) reads them
-- through the partial indexes, which between them hold every item of a
-- queue once per state.
DROP INDEX pgq.items_item_id_idx;
ALTER TABLE pgq.items DROP CONSTRAINT items_pkey,
                      ADD CONSTRAINT items_pkey PRIMARY KEY (item_id);

-- Blocks too, for the same reason: a lease claim that is not a HOT update
-- (see below) writes a new row version of its block, and with it an entry in
-- this index (lease batches
-- of 100 at 8 clients, in alternating runs: 466 and 517 batches per second
-- with this btree, 426 and 499 with the hash index; claims of 100 then
-- complete_many: 509 and 515 against 400 and 466).  pgq's statements ask
-- for ranges of block ids within a group only, as row comparisons on
-- (group_id, block_id) that the primary key alone can serve.  Lookups work
-- with either kind of index (blockscan.c), so a database still at 0.1 goes
-- on with its hash index until it is updated.
DROP INDEX pgq.blocks_block_id_idx;
CREATE INDEX blocks_block_id_idx ON pgq.blocks (block_id);

-- Lease attempt numbers are fencing tokens: once handed out, a number is
-- never handed out again for that block, across crashes, restarts and
-- promotions, although a transaction that only claims commits
-- asynchronously.  A claim records in epoch the epoch of the server's run
-- in which it was made, taken from epoch_seq once per run and database and
-- made durable before use; a claim of a block whose number comes from an
-- earlier run skips the numbers that a claim lost in a crash may have had
-- (lease.c).  Blocks and items record the epoch in which they were made
-- too.  max_attempts counts claims in tries, since numbers may skip
-- (pgq.retry() sets both back to 0).  A row that was not claimed since the
-- update has tries NULL: its attempt counts the claims.
-- The sequence is dumped: a restored database must go on above the epochs
-- its rows recorded.
CREATE SEQUENCE pgq.epoch_seq AS integer;
SELECT pg_catalog.pg_extension_config_dump('pgq.epoch_seq', '');
ALTER TABLE pgq.blocks ADD COLUMN tries integer, ADD COLUMN epoch integer;
ALTER TABLE pgq.items ADD COLUMN tries integer, ADD COLUMN epoch integer;

-- Lease claims are HOT updates: no index names a column that a claim changes
-- (state, attempt, lease_until), and more than half of each page is kept
-- free for the new row versions of a claim of many blocks (a claimed block's
-- row is 8 bytes longer: lease_until).  Blocks whose lease ran out or
-- whose retry came due are found by walking a group's blocks through the
-- primary key, up to the highest block in flight, which shared memory keeps
-- (blockscan.c).  Lease batches of 100 at 8 clients, in alternating runs
-- (claims of 100, then complete_many): 368 and 419 batches per second with
-- the due index, 623 and 749 without it and with this fillfactor.
DROP INDEX pgq.blocks_due_idx;
ALTER TABLE pgq.blocks SET (fillfactor = 45);

-- SQL that makes blocks claimed under a lease or waiting for a retry
-- (advisory mode's fail, or anyone's by hand) raises that bound when it
-- commits.  Claims of lease and advisory groups do not look for due blocks
-- while shared memory says that nothing is due yet: SQL that makes such a
-- block, or moves its deadline earlier (lease mode's release and fail),
-- makes the claims of its group look again when it commits.  The trigger
-- fires in every session, also under session_replication_role = replica:
-- claims trust the bound only then.  Only the trigger runs the function
-- (its owner's privilege was checked when the trigger was made).
CREATE FUNCTION pgq.blocks_inflight()
RETURNS trigger
AS 'MODULE_PATHNAME', 'pgq_blocks_inflight'
LANGUAGE C;

COMMENT ON FUNCTION pgq.blocks_inflight() IS
'trigger on pgq.blocks: blocks claimed under a lease or waiting for a retry are looked for up to the highest one, and when a deadline comes sooner';

REVOKE EXECUTE ON FUNCTION pgq.blocks_inflight() FROM PUBLIC;

CREATE TRIGGER blocks_inflight BEFORE INSERT OR UPDATE ON pgq.blocks
    FOR EACH ROW WHEN (NEW.state IN ('c', 'r'))
    EXECUTE FUNCTION pgq.blocks_inflight();
ALTER TABLE pgq.blocks ENABLE ALWAYS TRIGGER blocks_inflight;

-- The same for items of lease-mode queues: their claims do not look for
-- items whose lease ran out or whose retry came due while shared memory
-- says that nothing is due yet, and SQL that makes an item claimed or
-- waiting for a retry, or moves its deadline earlier (fail, or anyone's
-- by hand), makes them look again when it commits.
CREATE FUNCTION pgq.items_inflight()
RETURNS trigger
AS 'MODULE_PATHNAME', 'pgq_items_inflight'
LANGUAGE C;

COMMENT ON FUNCTION pgq.items_inflight() IS
'trigger on pgq.items: claims of a lease-mode queue look for due items again when a deadline comes sooner';

REVOKE EXECUTE ON FUNCTION pgq.items_inflight() FROM PUBLIC;

CREATE TRIGGER items_inflight BEFORE INSERT OR UPDATE ON pgq.items
    FOR EACH ROW WHEN (NEW.state IN ('c', 'r'))
    EXECUTE FUNCTION pgq.items_inflight();
ALTER TABLE pgq.items ENABLE ALWAYS TRIGGER items_inflight;

-- Dead-lettered blocks of lease- and advisory-mode groups, with what went
-- wrong: pgq.blocks is closed, and pgq.group_stats only counts them, so
-- this is where a group's owner and consumers find the blocks to pass to
-- pgq.retry().  It shows the groups the caller may use, as pgq.dead_items
-- does.  It reads all of pgq.blocks: for psql, not for a hot path.
CREATE VIEW pgq.dead_blocks WITH (security_barrier) AS
SELECT g.group_name,
       b.block_id,
       b.attempt,
       b.last_error,
       b.ids
FROM pgq.blocks b
JOIN pgq.groups g ON g.group_id = b.group_id
WHERE b.state = 'f'
  AND pgq.may_see(g.owner, g.consumers, g.producers);

COMMENT ON VIEW pgq.dead_blocks IS
'dead-lettered blocks of every group, with their last error: pgq.retry() sets one back to pending';

GRANT SELECT ON pgq.dead_blocks TO PUBLIC;

-- Advisory lock tags carry the installation of the extension: objsubid is
-- 4096 + 8192 * kind + (the extension's OID modulo 8192), kind 0 for a block
-- and 1 for a worker (advisory.c).  Block and worker ids start again from 1
-- after DROP EXTENSION and CREATE EXTENSION, while sessions from before may
-- still hold locks on the old ones; 0.1 used objsubid 20561 and 20562 for
-- every installation.  The two views that read advisory locks from pg_locks
-- follow.
CREATE OR REPLACE VIEW pgq.group_stats WITH (security_barrier) AS
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
                      AND l.objsubid = 4096 + (SELECT e.oid::bigint % 8192
                                               FROM pg_catalog.pg_extension e
                                               WHERE e.extname = 'pgq')
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

-- Advisory-mode workers are registered with the role that registered them,
-- and pgq.workers shows each role only the workers of roles whose
-- privileges it has, as pg_stat_activity shows the details of sessions
-- (superusers and members of pg_read_all_stats see them all).  Workers
-- registered before the update have no role: only those see them.
ALTER TABLE pgq.worker_registry ADD COLUMN owner regrole;

CREATE OR REPLACE VIEW pgq.workers WITH (security_barrier) AS
SELECT w.worker_id,
       w.worker_name,
       w.pid,
       w.registered_at,
       EXISTS (SELECT FROM pg_catalog.pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.database = d.oid AND l.objsubid = d.key + 8192
                 AND l.pid = w.pid
                 AND (l.classid::bigint << 32 | l.objid::bigint) = w.worker_id)
           AS alive,
       (SELECT count(*) FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted
          AND l.database = d.oid AND l.objsubid = d.key
          AND l.pid = w.pid) AS blocks_held,
       w.owner
FROM pgq.worker_registry w
CROSS JOIN (SELECT oid,
                   4096 + (SELECT e.oid::bigint % 8192
                           FROM pg_catalog.pg_extension e
                           WHERE e.extname = 'pgq') AS key
            FROM pg_catalog.pg_database
            WHERE datname = pg_catalog.current_database()) d
WHERE pg_catalog.pg_has_role(w.owner, 'USAGE')
   OR pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE');

-- pgq.register_worker() clears out the registrations of its own process id
-- that its session does not hold (left by a session that is gone), through
-- this index, instead of reading pg_locks, whose cost grows with every lock
-- of the cluster; maintenance passes clear out the rest.
CREATE INDEX worker_registry_pid_idx ON pgq.worker_registry (pid);

-- create_group and create_queue take owner => : a group or queue of another
-- role is joined only when owner names that role (or a role its owner is a
-- member of), so that a role that took a name first cannot have others join
-- its look-alike group.  The functions are dropped and created again, as an
-- argument cannot be added in place.
DROP FUNCTION pgq.create_group(text, text, integer, text, boolean, interval,
                               integer, interval);

CREATE FUNCTION pgq.create_group(group_name text, query text,
                                 block_size integer DEFAULT 5000,
                                 mode text DEFAULT 'transaction',
                                 async boolean DEFAULT false,
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 timeout interval DEFAULT NULL,
                                 owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_group(text, text, integer, text, boolean,
                                     interval, integer, interval, regrole) IS
'create a group of blocks from a query''s ids; true for the caller that created it';

DROP FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                               interval);

CREATE FUNCTION pgq.create_queue(group_name text,
                                 mode text DEFAULT 'lease',
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 backoff interval DEFAULT '10 seconds',
                                 max_backoff interval DEFAULT '1 hour',
                                 owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_queue'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                                     interval, regrole) IS
'create a queue that producers fill with pgq.enqueue; true for the caller that created it';

-- Every group has a NOTIFY channel of its own, a random name that
-- pgq.channel() tells only the roles that may consume or produce the group.
-- With pgq.notify on, notifications go there instead of to channel pgq,
-- where every session heard every group's name, and any session could send
-- fake ones.  The default gives each existing group its own.
ALTER TABLE pgq.groups ADD COLUMN channel text NOT NULL
    DEFAULT ('pgq_' || pg_catalog.translate(pg_catalog.gen_random_uuid()::text, '-', ''));

CREATE FUNCTION pgq.channel(group_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'pgq_channel'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.channel(text) IS
'the channel to LISTEN on for the group''s notifications (pgq.notify); for roles that may consume or produce it';

-- A group's query as PostgreSQL reads it: parsed and analysed as its
-- creator, written back as text with every table, function and type named
-- with its schema (group.c).  create_group joins a group whose query reads
-- the same, however its text is laid out, and refuses one whose text is
-- the same but reads other tables (under another search_path, say).
-- Groups made before the update have none: their query text must match
-- exactly, as in 0.1.
ALTER TABLE pgq.groups ADD COLUMN canonical_query text;

-- Schema pgq belongs to the extension, so that DROP EXTENSION removes it
-- instead of leaving it empty.  0.1's files had CREATE EXTENSION make the
-- schema (pgq.control's "schema"), outside the extension, and the extension
-- lived in it; a schema cannot join the extension that lives in it.  A
-- database installed that way gets the layout that pgq--0.1.sql makes now:
-- the extension moves to pg_catalog (as pgq.control says now: a dump names
-- that schema in CREATE EXTENSION), drops its dependency on schema pgq, and
-- takes the schema in.  The schema keeps its owner and grants; the grants
-- are not recorded as the extension's initial privileges, so that pg_dump
-- dumps those that someone made, as for any schema.  Only a superuser runs
-- this script (pgq is not a trusted extension).
DO $$
DECLARE
    ext oid := (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'pgq');
    nsp oid := (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'pgq');
BEGIN
    IF (SELECT extnamespace FROM pg_catalog.pg_extension WHERE oid = ext) = nsp THEN
        DELETE FROM pg_catalog.pg_depend
        WHERE classid = 'pg_catalog.pg_extension'::pg_catalog.regclass
          AND objid = ext
          AND refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
          AND refobjid = nsp;
        UPDATE pg_catalog.pg_extension
        SET extnamespace = 'pg_catalog'::pg_catalog.regnamespace
        WHERE oid = ext;
        ALTER EXTENSION pgq ADD SCHEMA pgq;
        DELETE FROM pg_catalog.pg_init_privs
        WHERE objoid = nsp
          AND classoid = 'pg_catalog.pg_namespace'::pg_catalog.regclass;
    END IF;
END
$$;

-- pgq.fail takes a binary error, error_data, as pgq.complete takes
-- result_data: a task system that pickles its exceptions keeps them as
-- bytes.  A queue item's error history (pgq.items.errors) keeps it, in
-- base64 under "data", with the text error of the same failure; pgq.result
-- and pgq.dead_items return the one of the last failure as last_error_data
-- (NULL when the last failure had none, a lease that ran out say).  Blocks
-- of query groups keep a text error only.  The functions are dropped and
-- created again, as an argument or an OUT argument cannot be added in place.
DROP FUNCTION pgq.fail(bigint, text, interval, integer, bigint);

CREATE FUNCTION pgq.fail(block_id bigint, error text DEFAULT NULL,
                         retry_after interval DEFAULT NULL,
                         attempt integer DEFAULT NULL,
                         worker_id bigint DEFAULT NULL,
                         error_data bytea DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_fail'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.fail(bigint, text, interval, integer, bigint, bytea) IS
'record a failed attempt: retry later, or dead-letter after max_attempts';

DROP FUNCTION pgq.result(bigint, interval);

CREATE FUNCTION pgq.result(block_id bigint, wait interval DEFAULT NULL,
                           OUT state text, OUT result jsonb,
                           OUT result_data bytea, OUT attempt integer,
                           OUT last_error text, OUT last_error_data bytea)
AS 'MODULE_PATHNAME', 'pgq_result'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.result(bigint, interval) IS
'an item''s state and result, waiting up to "wait" for it to be done or dead';

CREATE OR REPLACE VIEW pgq.dead_items WITH (security_barrier) AS
SELECT g.group_name AS queue_name,
       i.item_id,
       i.key,
       i.attempt,
       i.last_error,
       i.errors,
       i.payload,
       i.enqueued_at,
       i.finished_at AS failed_at,
       pg_catalog.decode(i.errors -> (-1) ->> 'data', 'base64')
           AS last_error_data
FROM pgq.items i
JOIN pgq.groups g ON g.group_id = i.group_id
WHERE i.state = 'f'
  AND pgq.may_see(g.owner, g.consumers, g.producers);

-- create_group takes params => : the values of the query's parameters $1..$n,
-- as text, read as the types that the query gives its parameters (as
-- PREPARE infers them).  A group keeps them written back as text under
-- fixed settings (group.c), with their types, for its asynchronous
-- materialization to bind, and for joining callers to compare: the same
-- query with other values is another group.  The function is dropped and
-- created again, as an argument cannot be added in place.
ALTER TABLE pgq.groups ADD COLUMN params text[],
                       ADD COLUMN param_types regtype[];

DROP FUNCTION pgq.create_group(text, text, integer, text, boolean, interval,
                               integer, interval, regrole);

CREATE FUNCTION pgq.create_group(group_name text, query text,
                                 block_size integer DEFAULT 5000,
                                 mode text DEFAULT 'transaction',
                                 async boolean DEFAULT false,
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 timeout interval DEFAULT NULL,
                                 owner regrole DEFAULT NULL,
                                 params text[] DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_group(text, text, integer, text, boolean,
                                     interval, integer, interval, regrole,
                                     text[]) IS
'create a group of blocks from a query''s ids; true for the caller that created it';

CREATE FUNCTION pgq.item(queue_name text, key text,
                         OUT block_id bigint, OUT state text,
                         OUT attempt integer, OUT result jsonb,
                         OUT result_data bytea, OUT last_error text,
                         OUT last_error_data bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgq_item'
LANGUAGE C VOLATILE STRICT ROWS 1;

COMMENT ON FUNCTION pgq.item(text, text) IS
'the item of a key: its id, state and result, or no row; enqueues nothing';

CREATE FUNCTION pgq.release_many(block_ids bigint[],
                                 attempts integer[] DEFAULT NULL,
                                 worker_id bigint DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_release_many'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.release_many(bigint[], integer[], bigint) IS
'give claimed blocks and items back in one call; returns the ids the caller held';

CREATE FUNCTION pgq.fail_many(block_ids bigint[],
                              errors text[] DEFAULT NULL,
                              retry_after interval DEFAULT NULL,
                              attempts integer[] DEFAULT NULL,
                              worker_id bigint DEFAULT NULL,
                              error_data bytea[] DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_fail_many'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.fail_many(bigint[], text[], interval, integer[], bigint, bytea[]) IS
'record failed attempts of claimed blocks and items in one call; returns the ids the caller held';

-- Hearing when work is finished.  pgq.results waits for any or all of a set
-- of a queue's items in one call.  A queue whose owner turns on
-- pgq.notify_finished announces the items that each commit leaves done or
-- dead on its finished channel, which pgq.channel(queue, finished => true)
-- tells the roles that may use the queue.  Off for every queue, and for
-- those that existed before the update.  pgq.channel is dropped and created
-- again, as an argument cannot be added in place.
ALTER TABLE pgq.groups ADD COLUMN notify_finished boolean NOT NULL DEFAULT false;

DROP FUNCTION pgq.channel(text);

CREATE FUNCTION pgq.channel(group_name text, finished boolean DEFAULT false)
RETURNS text
AS 'MODULE_PATHNAME', 'pgq_channel'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.channel(text, boolean) IS
'the channel to LISTEN on for the group''s notifications (pgq.notify), or for the queue''s finished items; for roles that may consume or produce it';

CREATE FUNCTION pgq.notify_finished(queue_name text,
                                    enabled boolean DEFAULT true)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_notify_finished'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.notify_finished(text, boolean) IS
'turn the NOTIFY of the queue''s done and dead items on or off; true if that changed it';

CREATE FUNCTION pgq.results(queue_name text, block_ids bigint[],
                            wait interval DEFAULT NULL,
                            wait_for text DEFAULT 'all',
                            OUT block_id bigint, OUT state text,
                            OUT result jsonb, OUT result_data bytea,
                            OUT attempt integer, OUT last_error text,
                            OUT last_error_data bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgq_results'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.results(text, bigint[], interval, text) IS
'the state and result of each of a queue''s items, waiting up to "wait" for all or any of them to be done or dead';
-- Per-queue retention.  A queue keeps a finished (done or dead) item's
-- payload, data, result and errors for "retention", and its key taken for
-- "key_retention" (never less than retention), counted from finished_at;
-- NULL takes the cluster's pgq.retention, 'infinity' keeps for ever.  Past
-- retention a maintenance pass sets the row's payload, data, result,
-- result_data, last_error and errors to NULL, in place: the row keeps its
-- key in items_key_idx, so an enqueue of the key meets it there as before,
-- and only its fixed-size columns stay (237 bytes with its index entries
-- for a 13-byte key, whatever the payload was; docs/queues.md has the
-- numbers).
-- Enqueues refuse an item without payload and data, so such a row is one
-- that retention stripped.  Past key_retention the pass removes the row.
--
-- The settings are of type pgq.retention_interval: an interval, or
-- 'infinity', which interval itself reads only from PostgreSQL 17 on.  It
-- is stored as interval is (17 stores its infinity so too), and an
-- interval converts to it implicitly, so that retention => interval '30
-- days', a driver's interval parameter and retention => 'infinity' all
-- work.
CREATE TYPE pgq.retention_interval;

CREATE FUNCTION pgq.retention_interval_in(input cstring)
RETURNS pgq.retention_interval
AS 'MODULE_PATHNAME', 'pgq_retention_interval_in'
LANGUAGE C IMMUTABLE STRICT;

CREATE FUNCTION pgq.retention_interval_out(value pgq.retention_interval)
RETURNS cstring
AS 'MODULE_PATHNAME', 'pgq_retention_interval_out'
LANGUAGE C IMMUTABLE STRICT;

CREATE FUNCTION pgq.retention_interval_recv(buf internal)
RETURNS pgq.retention_interval
AS 'MODULE_PATHNAME', 'pgq_retention_interval_recv'
LANGUAGE C IMMUTABLE STRICT;

CREATE FUNCTION pgq.retention_interval_send(value pgq.retention_interval)
RETURNS bytea
AS 'MODULE_PATHNAME', 'pgq_retention_interval_send'
LANGUAGE C IMMUTABLE STRICT;

CREATE TYPE pgq.retention_interval (
    INPUT = pgq.retention_interval_in,
    OUTPUT = pgq.retention_interval_out,
    RECEIVE = pgq.retention_interval_recv,
    SEND = pgq.retention_interval_send,
    LIKE = pg_catalog.interval
);

COMMENT ON TYPE pgq.retention_interval IS
'how long a queue keeps finished items: an interval, or infinity';

CREATE CAST (pg_catalog.interval AS pgq.retention_interval)
    WITHOUT FUNCTION AS IMPLICIT;

ALTER TABLE pgq.groups ADD COLUMN retention pgq.retention_interval,
                       ADD COLUMN key_retention pgq.retention_interval;

-- Retention looks for a queue's finished items by finish time, through one
-- of two indexes: the rows that still have their payloads (to strip or
-- remove), and those that keep only their keys (to remove).  A pass reads
-- only what it changes, however many keys are kept.
DROP INDEX pgq.items_finished_idx;
CREATE INDEX items_finished_idx ON pgq.items (group_id, finished_at)
    WHERE state IN ('d', 'f') AND (payload IS NOT NULL OR data IS NOT NULL);
CREATE INDEX items_kept_keys_idx ON pgq.items (group_id, finished_at)
    WHERE state IN ('d', 'f') AND payload IS NULL AND data IS NULL;

DROP FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                               interval, regrole);

CREATE FUNCTION pgq.create_queue(group_name text,
                                 mode text DEFAULT 'lease',
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 backoff interval DEFAULT '10 seconds',
                                 max_backoff interval DEFAULT '1 hour',
                                 owner regrole DEFAULT NULL,
                                 retention pgq.retention_interval DEFAULT NULL,
                                 key_retention pgq.retention_interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_queue'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                                     interval, regrole, pgq.retention_interval,
                                     pgq.retention_interval) IS
'create a queue that producers fill with pgq.enqueue; true for the caller that created it';

CREATE FUNCTION pgq.set_retention(queue_name text,
                                  retention pgq.retention_interval,
                                  key_retention pgq.retention_interval)
RETURNS void
AS 'MODULE_PATHNAME', 'pgq_set_retention'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.set_retention(text, pgq.retention_interval,
                                      pgq.retention_interval) IS
'change how long a queue keeps finished items and their keys; for its owner';

-- pgq.claim over a list of groups: a worker that serves several queues (one
-- per tenant, say) claims from all of them in one call, and waits on all of
-- them at once, instead of polling each.  The rows are those of the
-- one-name form plus the name of the group each came from.  A named row
-- type, as pgq.claimed is, for the same reason.
CREATE TYPE pgq.claimed_from AS (
    block_id   bigint,
    attempt    integer,
    ids        bigint[],
    payload    jsonb,
    data       bytea,
    key        text,
    group_name text
);

CREATE FUNCTION pgq.claim(group_names text[], max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL,
                          worker_id bigint DEFAULT NULL,
                          complete bigint DEFAULT NULL,
                          attempt integer DEFAULT NULL)
RETURNS SETOF pgq.claimed_from
AS 'MODULE_PATHNAME', 'pgq_claim_list'
LANGUAGE C VOLATILE ROWS 1;

COMMENT ON FUNCTION pgq.claim(text[], integer, interval, bigint, bigint, integer) IS
'claim up to max_blocks blocks or items from the groups and queues of a list, fairly, after completing the block given as complete';

-- Ordering keys: items of a queue that share an ordering key are handed out
-- one at a time, in the order they were enqueued, while other keys go on in
-- parallel.  Only the head of a key is claimable: an item enqueued while its
-- key has an unfinished item waits in state 'w', outside items_pending_idx,
-- so claims stay what they were.  When the head is done or dead-lettered,
-- the next waiting item of its key (the lowest item_id) becomes pending in
-- the same transaction (ordering.c).  This index finds a key's unfinished
-- items; finished ones leave it, so it holds only the keys in use.
ALTER TABLE pgq.items ADD COLUMN ordering_key text;
CREATE INDEX items_ordering_idx ON pgq.items (group_id, ordering_key, item_id)
    WHERE ordering_key IS NOT NULL AND state <> 'd' AND state <> 'f';

-- pgq.enqueue and pgq.enqueue_many take ordering_key(s) => : dropped and
-- created again, as an argument cannot be added in place.
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, bytea);

CREATE FUNCTION pgq.enqueue(group_name text, payload jsonb DEFAULT NULL,
                            key text DEFAULT NULL, priority integer DEFAULT 0,
                            run_at timestamptz DEFAULT NULL,
                            data bytea DEFAULT NULL,
                            ordering_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'pgq_enqueue'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, bytea, text) IS
'add an item to a queue; for a key the queue holds already, the existing item''s id';

DROP FUNCTION pgq.enqueue_many(text, jsonb[], text[], integer, timestamptz, bytea[]);

CREATE FUNCTION pgq.enqueue_many(group_name text, payloads jsonb[] DEFAULT NULL,
                                 keys text[] DEFAULT NULL,
                                 priority integer DEFAULT 0,
                                 run_at timestamptz DEFAULT NULL,
                                 data bytea[] DEFAULT NULL,
                                 ordering_keys text[] DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'pgq_enqueue_many'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], text[], integer, timestamptz, bytea[], text[]) IS
'add many items to a queue in one call; returns their ids in the order given';

-- queue_stats: done and dead count the items that have their payloads,
-- kept_keys those past retention that keep only their keys, and retention
-- and key_retention are the queue's own settings (NULL: pgq.retention);
-- items waiting behind the head of their ordering key count as waiting,
-- not pending.  In advisory mode a claim writes nothing: the items whose
-- advisory locks are held (read from pg_locks, as group_stats does) count
-- as running.  dead_items lists the dead-lettered items that still have
-- their payloads and errors (past retention there is nothing left to look
-- at), with their ordering keys.  queue_stats reads a queue's items state
-- by state, each through the partial index that holds that state, since the
-- primary key of pgq.items no longer begins with group_id.
CREATE OR REPLACE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT g.group_name AS queue_name,
       g.mode,
       count(i.item_id) FILTER (WHERE (i.state = 'p'
                                       OR (i.state IN ('c', 'r')
                                           AND i.due_at <= now()))
                                  AND h.id IS NULL) AS pending,
       count(i.item_id) FILTER (WHERE i.state = 'r' AND i.due_at > now()
                                  AND h.id IS NULL)
           AS scheduled,
       count(i.item_id) FILTER (WHERE (i.state = 'c' AND i.due_at > now())
                                   OR h.id IS NOT NULL)
           AS running,
       count(i.item_id) FILTER (WHERE i.state = 'd' AND i.has_payload) AS done,
       count(i.item_id) FILTER (WHERE i.state = 'f' AND i.has_payload) AS dead,
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
       g.paused,
       count(i.item_id) FILTER (WHERE i.state IN ('d', 'f')
                                  AND NOT i.has_payload) AS kept_keys,
       g.retention,
       g.key_retention,
       count(i.item_id) FILTER (WHERE i.state = 'w') AS waiting
FROM pgq.groups g
LEFT JOIN LATERAL (
    -- state by state, each through the partial index that holds it
    SELECT item_id, state, due_at, enqueued_at, true AS has_payload
    FROM pgq.items WHERE group_id = g.group_id AND state = 'p'
    UNION ALL
    SELECT item_id, state, due_at, enqueued_at, true
    FROM pgq.items WHERE group_id = g.group_id AND state IN ('c', 'r')
    UNION ALL
    SELECT item_id, state, due_at, enqueued_at, true
    FROM pgq.items WHERE group_id = g.group_id AND state = 'w'
                     AND ordering_key IS NOT NULL
    UNION ALL
    SELECT item_id, state, due_at, enqueued_at, true
    FROM pgq.items WHERE group_id = g.group_id AND state IN ('d', 'f')
                     AND (payload IS NOT NULL OR data IS NOT NULL)
    UNION ALL
    SELECT item_id, state, due_at, enqueued_at, false
    FROM pgq.items WHERE group_id = g.group_id AND state IN ('d', 'f')
                     AND payload IS NULL AND data IS NULL) i ON true
LEFT JOIN (SELECT l.classid::bigint << 32 | l.objid::bigint AS id
           FROM pg_catalog.pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted
             AND l.objsubid = 4096 + (SELECT e.oid::bigint % 8192
                                      FROM pg_catalog.pg_extension e
                                      WHERE e.extname = 'pgq')
             AND l.database = (SELECT oid FROM pg_catalog.pg_database
                               WHERE datname = pg_catalog.current_database())) h
       ON g.mode = 'advisory' AND i.state IN ('p', 'r') AND h.id = i.item_id
WHERE g.kind = 'queue'
  AND pgq.may_see(g.owner, g.consumers, g.producers)
GROUP BY g.group_id;

CREATE OR REPLACE VIEW pgq.dead_items WITH (security_barrier) AS
SELECT g.group_name AS queue_name,
       i.item_id,
       i.key,
       i.attempt,
       i.last_error,
       i.errors,
       i.payload,
       i.enqueued_at,
       i.finished_at AS failed_at,
       pg_catalog.decode(i.errors -> (-1) ->> 'data', 'base64')
           AS last_error_data,
       i.ordering_key
FROM pgq.items i
JOIN pgq.groups g ON g.group_id = i.group_id
WHERE i.state = 'f'
  AND (i.payload IS NOT NULL OR i.data IS NOT NULL)
  AND pgq.may_see(g.owner, g.consumers, g.producers);

-- Partition databases of a cluster behind pgq's router (proxy/, see
-- docs/scaling.md): each hands out block and item ids from a range of its
-- own, partition * 2^42 + 1 up to (partition + 1) * 2^42 - 1, so that the
-- router sends a call on an id to partition id >> 42.  Item ids stay below
-- 2^48 - 1, where a claim position keeps them (pgq_item_position()).  The
-- range lives in the sequence's value, which a dump keeps; its bounds,
-- which a dump does not keep, guard it and tell the router's
-- pgq_proxy.check() that this was run.  Run again after a restore.
CREATE FUNCTION pgq.set_partition(partition integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    first_id bigint;
    last_id bigint;
    stray bigint;
    seq record;
BEGIN
    IF partition IS NULL OR partition < 0 OR partition > 63 THEN
        RAISE EXCEPTION 'partition must be between 0 and 63'
            USING ERRCODE = '22023';
    END IF;
    first_id := (partition::bigint << 42) + 1;
    last_id := least(((partition::bigint + 1) << 42) - 1, (1::bigint << 48) - 2);
    SELECT b.block_id INTO stray FROM pgq.blocks b
    WHERE b.block_id < first_id OR b.block_id > last_id LIMIT 1;
    IF stray IS NULL THEN
        SELECT i.item_id INTO stray FROM pgq.items i
        WHERE i.item_id < first_id OR i.item_id > last_id LIMIT 1;
    END IF;
    IF stray IS NOT NULL THEN
        RAISE EXCEPTION 'block or item % is outside the id range of partition %', stray, partition
            USING ERRCODE = '55000',
                  HINT = 'Set up partition databases before they get groups or queues, or drop those first.';
    END IF;
    SELECT s.last_value, s.is_called INTO seq FROM pgq.block_id_seq s;
    IF seq.last_value > last_id THEN
        RAISE EXCEPTION 'pgq.block_id_seq is past the id range of partition %', partition
            USING ERRCODE = '55000';
    END IF;
    IF seq.last_value < first_id THEN
        EXECUTE format('ALTER SEQUENCE pgq.block_id_seq MINVALUE %s MAXVALUE %s START %s RESTART %s',
                       first_id, last_id, first_id, first_id);
        RETURN first_id;
    END IF;
    EXECUTE format('ALTER SEQUENCE pgq.block_id_seq MINVALUE %s MAXVALUE %s START %s',
                   first_id, last_id, first_id);
    RETURN CASE WHEN seq.is_called THEN seq.last_value + 1 ELSE seq.last_value END;
END
$$;

COMMENT ON FUNCTION pgq.set_partition(integer) IS
'make this database partition N of a cluster behind pgq''s router: ids from its own range; returns the next id';

REVOKE EXECUTE ON FUNCTION pgq.set_partition(integer) FROM PUBLIC;
