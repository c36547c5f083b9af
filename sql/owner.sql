-- What a group's owner who is not a superuser can do, and what other roles
-- are told when they try.
CREATE ROLE regress_ow_owner;
CREATE ROLE regress_ow_worker;
GRANT USAGE ON SCHEMA pgq TO regress_ow_owner, regress_ow_worker;
SET ROLE regress_ow_owner;
SELECT pgq.create_group('ow', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease', max_attempts => 1);
SELECT pgq.grant('ow', 'regress_ow_worker');
RESET ROLE;

-- Dropping, pausing and granting are the owner's: pgq.grant() gives no
-- privilege for them.  The hint says who may, and how to become one.
SET ROLE regress_ow_worker;
SELECT pgq.drop_group('ow');
SELECT pgq.pause('ow');
SELECT pgq.grant('ow', 'regress_ow_worker', 'produce');
RESET ROLE;
-- a role without the consume privilege is told that the owner can grant it
-- (here, it may not use the group at all: it is told nothing more)
SET ROLE regress_ow_owner;
SELECT pgq.revoke('ow', 'regress_ow_worker');
RESET ROLE;
SET ROLE regress_ow_worker;
SELECT * FROM pgq.claim('ow');
RESET ROLE;
SET ROLE regress_ow_owner;
SELECT pgq.grant('ow', 'regress_ow_worker');
RESET ROLE;

-- A block that failed its last attempt is dead-lettered.  Its owner finds
-- it in pgq.dead_blocks (pgq.blocks stays closed), with why it failed, and
-- retries it; so can its consumers.  Other roles see nothing of it.
CREATE ROLE regress_ow_stranger;
GRANT USAGE ON SCHEMA pgq TO regress_ow_stranger;
SET ROLE regress_ow_worker;
SELECT block_id AS dead, attempt FROM pgq.claim('ow') \gset
SELECT pgq.fail(:dead, 'no such object', attempt => :attempt);
RESET ROLE;
SET ROLE regress_ow_owner;
SELECT count(*) FROM pgq.blocks;
SELECT pending, claimed, failed FROM pgq.group_stats WHERE group_name = 'ow';
SELECT group_name, block_id = :dead AS is_dead, attempt, last_error, ids
FROM pgq.dead_blocks;
RESET ROLE;
SET ROLE regress_ow_stranger;
SELECT count(*) FROM pgq.dead_blocks;
-- as for an id that does not exist (42704; roles.sql)
\set VERBOSITY sqlstate
SELECT pgq.retry(:dead);
\set VERBOSITY default
RESET ROLE;
SET ROLE regress_ow_worker;
SELECT group_name, block_id = :dead AS is_dead FROM pgq.dead_blocks;
RESET ROLE;
SET ROLE regress_ow_owner;
SELECT pgq.retry(:dead);
SELECT count(*) FROM pgq.dead_blocks;
SELECT pending, claimed, failed FROM pgq.group_stats WHERE group_name = 'ow';
RESET ROLE;
-- the block is claimable again, with its attempts counted from 0
SET ROLE regress_ow_worker;
SELECT block_id = :dead AS is_dead, attempt, ids FROM pgq.claim('ow');
RESET ROLE;

-- members of the owner role may drop the group
GRANT regress_ow_owner TO regress_ow_worker;
SET ROLE regress_ow_worker;
SELECT pgq.drop_group('ow');
RESET ROLE;

REVOKE ALL ON SCHEMA pgq
    FROM regress_ow_owner, regress_ow_worker, regress_ow_stranger;
DROP ROLE regress_ow_owner, regress_ow_worker, regress_ow_stranger;
