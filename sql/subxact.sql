-- Claims inside PL/pgSQL exception blocks, as a worker loop written in
-- PL/pgSQL makes them.  Whatever a claim raises, wherever it can fail, the
-- handler rolls back the block's own subtransaction: the block's writes are
-- undone, the rest of the transaction goes on and commits, and so does the
-- session.  Waiting lease-mode and queue claims make each attempt in a
-- subtransaction of their own: an error in one is rolled back there first.
CREATE TABLE sx_log (step text);

-- Log a row, make the transaction read-only if asked, run sql; the error it
-- raised, caught by an exception block.
CREATE FUNCTION sx_block(sql text, read_only boolean) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sx_log VALUES ('in the block');
    IF read_only THEN
        SET LOCAL transaction_read_only = on;
    END IF;
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS OR query_canceled THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- One case: a row before the block, the block, and then what is left of the
-- block's work (nothing) and of the transaction's (the row before it).
CREATE FUNCTION sx_case(sql text, read_only boolean DEFAULT false,
                        OUT error text, OUT rows_left text, OUT read_only_after boolean)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sx_log VALUES ('before');
    error := sx_block(sql, read_only);
    SELECT string_agg(step, ', ') INTO rows_left FROM sx_log;
    read_only_after := current_setting('transaction_read_only')::boolean;
    DELETE FROM sx_log;
END
$$;

-- groups of every mode, and queues; waiting claims wait where nothing is
-- claimable: a lease-mode group whose only block is held, paused groups,
-- empty queues
SELECT pgq.create_group('sx_lease', 'SELECT 1', mode => 'lease', lease => '1 hour');
SELECT count(*) FROM pgq.claim('sx_lease');
SELECT pgq.create_group('sx_tx', 'SELECT 1');
SELECT pgq.create_group('sx_advisory', 'SELECT 1', mode => 'advisory');
SELECT pgq.create_group('sx_tx_paused', 'SELECT 1');
SELECT pgq.pause('sx_tx_paused');
SELECT pgq.create_group('sx_advisory_paused', 'SELECT 1', mode => 'advisory');
SELECT pgq.pause('sx_advisory_paused');
SELECT pgq.create_queue('sx_queue');
SELECT pgq.create_queue('sx_tx_queue', mode => 'transaction');
SELECT pgq.register_worker('sx') AS worker \gset

-- In a transaction block: every error is caught in the block, the rest of
-- the transaction commits.
BEGIN;
SELECT sql, c.* FROM (VALUES
    -- a read-only transaction: the first write of a claim fails
    ($$SELECT * FROM pgq.claim('sx_lease', wait => '1 hour')$$, true),
    ($$SELECT * FROM pgq.claim('sx_lease')$$, true),
    ($$SELECT * FROM pgq.claim('sx_tx', wait => '1 hour')$$, true),
    ($$SELECT * FROM pgq.claim('sx_tx')$$, true),
    ($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')$$, true),
    ($$SELECT * FROM pgq.claim('sx_queue')$$, true),
    ($$SELECT * FROM pgq.claim('sx_tx_queue', wait => '1 hour')$$, true),
    ($$SELECT * FROM pgq.claim('sx_tx_queue')$$, true),
    -- bad arguments
    ($$SELECT * FROM pgq.claim('sx_lease', max_blocks => 0, wait => '1 hour')$$, false),
    ($$SELECT * FROM pgq.claim('sx_lease', wait => '-1 hour')$$, false),
    ($$SELECT * FROM pgq.claim('sx_missing', wait => '1 hour')$$, false),
    ($$SELECT * FROM pgq.claim('sx_advisory', wait => '1 hour')$$, false),
    ($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour', attempt => 1)$$, false),
    ($$SELECT * FROM pgq.claim('sx_advisory', worker_id => -1)$$, false)
) AS cases(sql, read_only), LATERAL sx_case(sql, read_only) c;
INSERT INTO sx_log VALUES ('after the cases');
COMMIT;
SELECT step FROM sx_log;
DELETE FROM sx_log;

-- statement_timeout during a waiting claim, in every mode: nothing comes,
-- so each waits until the timeout cancels it.  Rechecks every 10 ms make
-- lease-mode and queue claims start many attempts before that.  The
-- result waited for is of an item enqueued before the transaction (a wait
-- in the transaction that enqueued it is refused at once).
SELECT pgq.create_queue('subxact_results');
SELECT pgq.enqueue('subxact_results', '{}') AS sx_item \gset
SET pgq.wait_recheck_interval = '10ms';
BEGIN;
SET LOCAL statement_timeout = '100ms';
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_lease', wait => '1 hour')$$);
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_tx_paused', wait => '1 hour')$$);
SELECT * FROM sx_case(format($$SELECT * FROM pgq.claim('sx_advisory_paused', wait => '1 hour', worker_id => %s)$$, :worker));
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')$$);
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_tx_queue', wait => '1 hour')$$);
SELECT * FROM sx_case(format($$SELECT * FROM pgq.result(%s, wait => '1 hour')$$, :sx_item));
RESET statement_timeout;
INSERT INTO sx_log VALUES ('after the cases');
COMMIT;
RESET pgq.wait_recheck_interval;
SELECT pgq.drop_group('subxact_results');
SELECT step FROM sx_log;
DELETE FROM sx_log;

-- an advisory-mode claim over the session's limit on locks
SELECT pgq.create_group('sx_advisory_two', 'SELECT g FROM generate_series(1, 2) g', 1, mode => 'advisory');
SELECT count(*) FROM pgq.claim('sx_advisory_two', worker_id => :worker);
SET pgq.max_locks_per_session = 1;
BEGIN;
SELECT * FROM sx_case(format($$SELECT * FROM pgq.claim('sx_advisory_two', wait => '1 hour', worker_id => %s)$$, :worker));
INSERT INTO sx_log VALUES ('after the cases');
COMMIT;
RESET pgq.max_locks_per_session;
SELECT step FROM sx_log;
DELETE FROM sx_log;

-- REPEATABLE READ: refused before anything is claimed
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_lease', wait => '1 hour')$$);
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')$$);
COMMIT;

-- Outside a transaction block: each statement is a transaction of its own,
-- and the next one starts a new one.
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_lease', wait => '1 hour')$$, read_only => true);
SELECT now() = statement_timestamp() AS new_transaction,
       pg_current_xact_id_if_assigned() IS NULL AS no_xid;
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')$$, read_only => true);
SELECT now() = statement_timestamp() AS new_transaction,
       pg_current_xact_id_if_assigned() IS NULL AS no_xid;
SET statement_timeout = '100ms';
SELECT * FROM sx_case($$SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')$$);
RESET statement_timeout;
SELECT now() = statement_timestamp() AS new_transaction,
       pg_current_xact_id_if_assigned() IS NULL AS no_xid;

-- nothing was claimed or lost: the held lease is still held, the other
-- groups still have their blocks, the queues are empty
SELECT group_name, pending, claimed FROM pgq.group_stats
WHERE group_name LIKE 'sx%' ORDER BY group_name;
SELECT queue_name, pending FROM pgq.queue_stats
WHERE queue_name LIKE 'sx%' ORDER BY queue_name;
