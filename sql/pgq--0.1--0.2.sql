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

-- Items are looked up by id alone (complete, result, retry, complete_many)
-- through a btree, not a hash index: every insert into a hash index
-- write-locks its metapage to count the tuple, and concurrent enqueues
-- queued there (enqueue_many of 100 at 8 clients: 595 to 654 batches per
-- second with the hash index, 763 to 908 with this btree).
DROP INDEX pgq.items_item_id_idx;
CREATE INDEX items_item_id_idx ON pgq.items (item_id);

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

-- Claims of lease and advisory groups do not look for due blocks while
-- shared memory says that nothing is due yet.  The commit of an UPDATE of pgq.blocks (pgq's
-- own release, fail and extend, or anyone's by hand) may have moved a
-- deadline: this trigger has every group of the database look again.  Only
-- the trigger runs the function (its owner's privilege was checked when the
-- trigger was made).
CREATE FUNCTION pgq.blocks_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'pgq_blocks_changed'
LANGUAGE C;

COMMENT ON FUNCTION pgq.blocks_changed() IS
'trigger on pgq.blocks: an UPDATE makes claims look for due blocks again';

REVOKE EXECUTE ON FUNCTION pgq.blocks_changed() FROM PUBLIC;

CREATE TRIGGER blocks_changed AFTER UPDATE ON pgq.blocks
    FOR EACH STATEMENT EXECUTE FUNCTION pgq.blocks_changed();

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
-- commits.  The trigger fires in every session, also under
-- session_replication_role = replica: claims trust the bound only then.
CREATE FUNCTION pgq.blocks_inflight()
RETURNS trigger
AS 'MODULE_PATHNAME', 'pgq_blocks_inflight'
LANGUAGE C;

COMMENT ON FUNCTION pgq.blocks_inflight() IS
'trigger on pgq.blocks: blocks claimed under a lease or waiting for a retry are looked for up to the highest one';

REVOKE EXECUTE ON FUNCTION pgq.blocks_inflight() FROM PUBLIC;

CREATE TRIGGER blocks_inflight BEFORE INSERT OR UPDATE ON pgq.blocks
    FOR EACH ROW WHEN (NEW.state IN ('c', 'r'))
    EXECUTE FUNCTION pgq.blocks_inflight();
ALTER TABLE pgq.blocks ENABLE ALWAYS TRIGGER blocks_inflight;

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
