-- pgq.notify: a NOTIFY on the group's own channel (pgq.channel()), with the
-- group's name as payload, at the commit of a transaction that makes blocks
-- of a group claimable (creating a group with blocks, a lease or advisory
-- release or fail), one per group per transaction, and nothing when the
-- setting is off.  Nothing goes to channel pgq, where every session would
-- hear every group's name.
--
-- The listener is a second session, opened through dblink: psql would print
-- the notifier's process id, which changes from run to run.  received()
-- lists what the listener got since the last call, after a round trip on its
-- connection: PostgreSQL sends a listener the notifications committed before
-- a command ahead of that command's result, so the list is complete.  The
-- listener listens on channel pgq, and on each group's channel from the
-- transaction that creates the group on (listen()), before its commit.
CREATE EXTENSION dblink;
SELECT dblink_connect('listener',
    format('dbname=%s port=%s host=%s', current_database(),
           current_setting('port'),
           split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('listener', 'LISTEN pgq');
CREATE FUNCTION listen(group_name text) RETURNS void LANGUAGE sql AS $$
    SELECT dblink_exec('listener', format('LISTEN %I', pgq.channel(group_name)));
$$;
CREATE FUNCTION received()
RETURNS TABLE (channel text, payload text, from_this_session boolean)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM * FROM dblink('listener', 'SELECT 1') AS t(x int);
    RETURN QUERY
    SELECT CASE WHEN n.notify_name = 'pgq' THEN 'pgq'
                WHEN n.notify_name = (SELECT g.channel FROM pgq.groups g
                                      WHERE g.group_name = n.extra)
                THEN 'the group''s'
                ELSE n.notify_name END,
           n.extra, n.be_pid = pg_backend_pid()
    FROM dblink_get_notify('listener') n;
END
$$;

-- off by default: nothing is sent
SHOW pgq.notify;
SELECT pgq.create_group('n_off', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'lease');
SELECT listen('n_off');
SELECT attempt FROM pgq.claim('n_off');
SELECT pgq.release(b.block_id, attempt => 1)
FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'n_off' AND b.state = 'c';
SELECT * FROM received();
-- a plain NOTIFY reaches the listener (the check above could see one)
NOTIFY pgq, 'plain';
SELECT * FROM received();

SET pgq.notify = on;

-- creating a group with blocks: one notification, on the group's channel,
-- the group's name
BEGIN;
SELECT pgq.create_group('n_tx', 'SELECT g FROM generate_series(1, 6) g', 2);
SELECT listen('n_tx');
COMMIT;
SELECT * FROM received();
-- every group has a channel of its own
SELECT pgq.channel('n_tx') ~ '^pgq_[0-9a-f]{32}$' AS channel_form,
       pgq.channel('n_tx') <> pgq.channel('n_off') AS channels_differ;
-- joining it, creating a group without blocks, or a creation that rolls
-- back: none
SELECT pgq.create_group('n_tx', 'SELECT g FROM generate_series(1, 6) g', 2);
BEGIN;
SELECT pgq.create_group('n_empty', 'SELECT 1 WHERE false');
SELECT listen('n_empty');
COMMIT;
BEGIN;
SELECT pgq.create_group('n_undone', 'SELECT g FROM generate_series(1, 6) g', 2);
SELECT listen('n_undone');
ROLLBACK;
SELECT * FROM received();
-- the notification comes at COMMIT, not before
BEGIN;
SELECT pgq.create_group('n_later', 'SELECT g FROM generate_series(1, 6) g', 2);
SELECT listen('n_later');
SELECT * FROM received();
COMMIT;
SELECT * FROM received();
-- two groups in one transaction: one notification each, in order
BEGIN;
SELECT pgq.create_group('n_two_b', 'SELECT 1');
SELECT pgq.create_group('n_two_a', 'SELECT 1');
SELECT listen('n_two_a'), listen('n_two_b');
COMMIT;
SELECT * FROM received();
-- the payload is the name exactly as given
BEGIN;
SELECT pgq.create_group('N ''q'' "x"', 'SELECT 1');
SELECT listen('N ''q'' "x"');
COMMIT;
SELECT * FROM received();
-- a group created and given back to in one transaction: one
BEGIN;
SELECT pgq.create_group('n_same', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'lease');
SELECT listen('n_same');
SELECT pgq.release(block_id, attempt => attempt) AS released
FROM pgq.claim('n_same', max_blocks => 2);
COMMIT;
SELECT * FROM received();

-- transaction mode: claims, commits, rollbacks and drops send nothing
BEGIN;
SELECT ids FROM pgq.claim('n_tx');
COMMIT;
BEGIN;
SELECT ids FROM pgq.claim('n_tx');
ROLLBACK;
SELECT pgq.drop_group('n_later');
SELECT * FROM received();

-- lease mode: release and fail send one, claim, extend and complete none
BEGIN;
SELECT pgq.create_group('n_l', 'SELECT g FROM generate_series(1, 8) g', 2,
                        mode => 'lease');
SELECT listen('n_l');
COMMIT;
SELECT * FROM received();
SELECT min(block_id) AS l0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'n_l' \gset
SELECT block_id - :l0 AS rel, attempt FROM pgq.claim('n_l', max_blocks => 4);
SELECT pgq.extend(:l0, '1 hour', attempt => 1);
SELECT pgq.complete(:l0, attempt => 1);
SELECT * FROM received();
SELECT pgq.release(:l0 + 1, attempt => 1);
SELECT * FROM received();
SELECT pgq.fail(:l0 + 2, 'boom', attempt => 1);
SELECT * FROM received();
-- a release or fail that changes nothing (a stale attempt) sends nothing
SELECT pgq.release(:l0 + 3, attempt => 7), pgq.fail(:l0 + 3, 'x', attempt => 7);
SELECT * FROM received();
-- several in one transaction: one notification
BEGIN;
SELECT pgq.release(:l0 + 3, attempt => 1);
SELECT pgq.release(block_id, attempt => attempt) AS released
FROM pgq.claim('n_l', max_blocks => 2);
COMMIT;
SELECT * FROM received();
-- none if that transaction rolls back
BEGIN;
SELECT pgq.release(block_id, attempt => attempt) AS released FROM pgq.claim('n_l');
ROLLBACK;
SELECT * FROM received();
-- none with pgq.notify turned off for the transaction
BEGIN;
SET LOCAL pgq.notify = off;
SELECT pgq.release(block_id, attempt => attempt) AS released FROM pgq.claim('n_l');
COMMIT;
SELECT * FROM received();
SHOW pgq.notify;

-- advisory mode: release and fail send one, claim and complete none
BEGIN;
SELECT pgq.create_group('n_a', 'SELECT g FROM generate_series(1, 8) g', 2,
                        mode => 'advisory');
SELECT listen('n_a');
COMMIT;
SELECT * FROM received();
SELECT min(block_id) AS a0 FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'n_a' \gset
SELECT pgq.register_worker('n') AS w \gset
SELECT block_id - :a0 AS rel, attempt
FROM pgq.claim('n_a', max_blocks => 4, worker_id => :w);
BEGIN;
SELECT pgq.complete(:a0, worker_id => :w);
COMMIT;
SELECT * FROM received();
SELECT pgq.release(:a0 + 1, worker_id => :w);
SELECT * FROM received();
SELECT pgq.fail(:a0 + 2, 'boom', worker_id => :w);
SELECT * FROM received();
-- a block this session does not hold: false, nothing sent
SELECT pgq.release(:a0 + 1, worker_id => :w), pgq.fail(:a0 + 1, 'x', worker_id => :w);
SELECT * FROM received();
-- several in one transaction: one notification
BEGIN;
SELECT pgq.release(block_id, worker_id => :w) AS released
FROM pgq.claim('n_a', max_blocks => 2, worker_id => :w);
SELECT pgq.fail(:a0 + 3, 'boom', worker_id => :w);
COMMIT;
SELECT * FROM received();
-- an advisory release gives the block back at once, even if its transaction
-- then rolls back; the notification is rolled back with the transaction
BEGIN;
SELECT pgq.release(block_id, worker_id => :w) AS released
FROM pgq.claim('n_a', worker_id => :w);
ROLLBACK;
SELECT * FROM received();
SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'n_a';

-- several groups in one transaction: one notification per group, in order
BEGIN;
SELECT pgq.release(block_id, attempt => attempt) AS released FROM pgq.claim('n_l');
SELECT pgq.release(block_id, worker_id => :w) AS released
FROM pgq.claim('n_a', worker_id => :w);
SELECT pgq.create_group('n_last', 'SELECT 1');
SELECT listen('n_last');
SELECT pgq.release(block_id, attempt => attempt) AS released FROM pgq.claim('n_l');
COMMIT;
SELECT * FROM received();

RESET pgq.notify;
SELECT pg_advisory_unlock_all();
SELECT dblink_disconnect('listener');
DROP FUNCTION received();
DROP FUNCTION listen(text);
DROP EXTENSION dblink;
SELECT pgq.drop_group(group_name) FROM pgq.groups ORDER BY group_id;
