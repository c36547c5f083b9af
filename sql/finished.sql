-- Hearing when work is finished: pgq.results (the state and result of a
-- set of items, waiting for all or any of them), and the NOTIFY of a
-- queue's done and dead items (pgq.notify_finished, on the channel
-- pgq.channel(queue, finished => true)).  Item ids come from a sequence:
-- shown relative to the first item of each part.
CREATE FUNCTION fin_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION fin_try(text) TO PUBLIC;

SELECT pgq.create_queue('fq', max_attempts => 1);
SELECT pgq.enqueue('fq', '{"n": 1}') AS f1 \gset
SELECT pgq.enqueue('fq', '{"n": 2}') AS f2 \gset
SELECT pgq.enqueue('fq', '{"n": 3}', run_at => now() + '1 hour') AS f3 \gset
SELECT block_id - :f1 AS rel, attempt FROM pgq.claim('fq', 2);
SELECT pgq.complete(:f1, '{"ok": 1}', attempt => 1, result_data => '\x01');
SELECT pgq.fail(:f2, 'broke', attempt => 1, error_data => '\xbad0');

-- one row per distinct id, in the order of block_ids; an id that is not an
-- item of the queue gets a row with only its id
SELECT block_id - :f1 AS rel, state, result, result_data, attempt,
       last_error, last_error_data
FROM pgq.results('fq', ARRAY[:f3, :f1, :f2, :f1, :f1 - 1000, :f3]);
-- the same rows as pgq.result
SELECT bool_and(row(r.state, r.result, r.result_data, r.attempt, r.last_error,
                    r.last_error_data) IS NOT DISTINCT FROM
                (SELECT row(o.state, o.result, o.result_data, o.attempt,
                            o.last_error, o.last_error_data)
                 FROM pgq.result(r.block_id) o)) AS same_as_result
FROM pgq.results('fq', ARRAY[:f1, :f2, :f3]) r;
-- no ids: no rows
SELECT count(*) FROM pgq.results('fq', '{}');

-- waiting: all of them finished already, or any one of them: at once
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f1, :f2], wait => '1 hour');
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f3, :f1], wait => '1 hour', wait_for => 'any');
-- ids that are no items of the queue neither end nor hold up a wait
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f1, :f1 - 1000], wait => '1 hour');
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f1 - 1000], wait => '1 hour', wait_for => 'any');
-- the time is up: the states at that moment
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f1, :f3], wait => '10 ms');
-- wait => 0 does not wait
SELECT block_id - :f1 AS rel, state
FROM pgq.results('fq', ARRAY[:f3], wait => '0');

-- a wait for items that this transaction enqueued is refused at once;
-- without wait, or for finished items, the call answers
BEGIN;
SELECT pgq.enqueue('fq', '{"n": 4}') AS f4 \gset
SELECT replace(fin_try(format('SELECT * FROM pgq.results(%L, ARRAY[%s, %s], wait => %L)',
                              'fq', :f1, :f4, '1 hour')), :'f4', 'F4');
SELECT replace(fin_try(format('SELECT * FROM pgq.results(%L, ARRAY[%s, %s], wait => %L, wait_for => %L)',
                              'fq', :f1, :f4, '1 hour', 'any')), :'f4', 'F4');
SELECT block_id - :f1 AS rel, state FROM pgq.results('fq', ARRAY[:f1, :f4]);
ROLLBACK;

-- bad input
SELECT fin_try($$SELECT * FROM pgq.results(NULL, '{1}')$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', NULL)$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{1,NULL}')$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{{1},{2}}')$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{1}', wait_for => 'some')$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{1}', wait_for => NULL)$$);
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{1}', wait => '-1 s')$$);
SELECT fin_try($$SELECT * FROM pgq.results('', '{1}')$$);
SELECT fin_try($$SELECT * FROM pgq.results('no such queue', '{1}')$$);
SELECT pgq.create_group('fg', 'SELECT 1', 1);
SELECT fin_try($$SELECT * FROM pgq.results('fg', '{1}')$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT fin_try($$SELECT * FROM pgq.results('fq', '{1}', wait => '1 s')$$);
-- without wait, any isolation level
SELECT count(*) FROM pgq.results('fq', '{1}');
ROLLBACK;

-- pgq.notify_finished and the finished channel
SELECT pgq.channel('fq', finished => true) = pgq.channel('fq') || '_finished'
    AS finished_channel;
SELECT fin_try($$SELECT pgq.channel('fg', finished => true)$$);
SELECT pgq.channel('fq', NULL) IS NULL AS strict;
SELECT notify_finished FROM pgq.groups WHERE group_name = 'fq';
SELECT pgq.notify_finished('fq');
SELECT pgq.notify_finished('fq', true);
SELECT notify_finished FROM pgq.groups WHERE group_name = 'fq';
SELECT pgq.notify_finished('fq', false);
SELECT fin_try($$SELECT pgq.notify_finished(NULL)$$);
SELECT fin_try($$SELECT pgq.notify_finished('fq', NULL)$$);
SELECT fin_try($$SELECT pgq.notify_finished('fg')$$);
SELECT fin_try($$SELECT pgq.notify_finished('no such queue')$$);

-- privileges: pgq.results for consumers and producers, notify_finished for
-- the owner; a role that may do neither learns only that the name is taken
CREATE ROLE regress_fin_producer;
CREATE ROLE regress_fin_consumer;
CREATE ROLE regress_fin_stranger;
GRANT USAGE ON SCHEMA pgq
    TO regress_fin_producer, regress_fin_consumer, regress_fin_stranger;
SELECT pgq.grant('fq', 'regress_fin_producer', 'produce');
SELECT pgq.grant('fq', 'regress_fin_consumer', 'consume');
SET ROLE regress_fin_producer;
SELECT block_id - :f1 AS rel, state FROM pgq.results('fq', ARRAY[:f1]);
SELECT pgq.channel('fq', finished => true) IS NOT NULL AS told;
SELECT fin_try($$SELECT pgq.notify_finished('fq')$$);
RESET ROLE;
SET ROLE regress_fin_consumer;
SELECT block_id - :f1 AS rel, state FROM pgq.results('fq', ARRAY[:f1]);
RESET ROLE;
SET ROLE regress_fin_stranger;
SELECT fin_try(format('SELECT * FROM pgq.results(%L, ARRAY[%s])', 'fq', :f1));
SELECT fin_try($$SELECT pgq.channel('fq', finished => true)$$);
SELECT fin_try($$SELECT pgq.notify_finished('fq')$$);
RESET ROLE;

-- The NOTIFY.  The listener is a second session, opened through dblink
-- (see notify.sql); received() lists what it got since the last call, ids
-- relative to :base.
CREATE EXTENSION dblink;
SELECT dblink_connect('listener',
    format('dbname=%s port=%s host=%s', current_database(),
           current_setting('port'),
           split_part(current_setting('unix_socket_directories'), ',', 1)));
CREATE FUNCTION listen(group_name text) RETURNS void LANGUAGE sql AS $$
    SELECT dblink_exec('listener',
                       format('LISTEN %I', pgq.channel(group_name, finished => true)));
$$;
CREATE FUNCTION received(base bigint)
RETURNS TABLE (queue text, done bigint[], dead bigint[])
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM * FROM dblink('listener', 'SELECT 1') AS t(x int);
    RETURN QUERY
    SELECT (SELECT g.group_name FROM pgq.groups g
            WHERE g.channel || '_finished' = n.notify_name),
           (SELECT array_agg(d::bigint - base ORDER BY d::bigint)
            FROM jsonb_array_elements_text(n.extra::jsonb -> 'done') d),
           (SELECT array_agg(d::bigint - base ORDER BY d::bigint)
            FROM jsonb_array_elements_text(n.extra::jsonb -> 'dead') d)
    FROM dblink_get_notify('listener') n;
END
$$;

-- the attempt under which an item is held
CREATE FUNCTION att(id bigint) RETURNS integer LANGUAGE sql AS $$
    SELECT attempt FROM pgq.items WHERE item_id = id;
$$;

SELECT pgq.create_queue('nq', max_attempts => 2);
SELECT pgq.create_queue('nq_off');
SELECT listen('nq');
SELECT listen('nq_off');
SELECT pgq.notify_finished('nq');
SELECT pgq.enqueue_many('nq', array_fill('{}'::jsonb, ARRAY[6])) AS ids \gset
SELECT (:'ids'::bigint[])[1] AS base \gset
SELECT pgq.enqueue_many('nq_off', array_fill('{}'::jsonb, ARRAY[2])) IS NOT NULL;

-- a queue that did not opt in: nothing
SELECT pgq.complete_many(array_agg(block_id), array_agg(attempt)) IS NOT NULL
FROM pgq.claim('nq_off', 2);
SELECT * FROM received(:base);

-- complete: one notification at the commit, not before
SELECT block_id - :base AS rel FROM pgq.claim('nq', 4);
BEGIN;
SELECT pgq.complete(:base, attempt => att(:base));
SELECT * FROM received(:base);
COMMIT;
SELECT * FROM received(:base);
-- complete_many: the items of one transaction in one notification
SELECT pgq.complete_many(ARRAY[:base + 1, :base + 2],
                         ARRAY[att(:base + 1), att(:base + 2)]) IS NOT NULL;
SELECT * FROM received(:base);
-- a completion rolled back, or in a subtransaction rolled back: nothing
BEGIN;
SELECT pgq.complete(:base + 3, attempt => att(:base + 3));
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT pgq.complete(:base + 3, attempt => att(:base + 3));
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT * FROM received(:base);
-- a subtransaction that commits: its completion counts
BEGIN;
SAVEPOINT s;
SELECT pgq.complete(:base + 3, attempt => att(:base + 3));
RELEASE SAVEPOINT s;
COMMIT;
SELECT * FROM received(:base);
-- a failure with a retry left: nothing
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
SELECT pgq.fail(:base + 4, 'first', retry_after => '0', attempt => att(:base + 4));
SELECT * FROM received(:base);
-- on the last attempt: dead; dead and done in one transaction, in one
-- notification
SELECT block_id - :base AS rel FROM pgq.claim('nq', 2);
BEGIN;
SELECT pgq.fail_many(ARRAY[:base + 4], errors => ARRAY['second'],
                     attempts => ARRAY[att(:base + 4)]) IS NOT NULL;
SELECT pgq.complete(:base + 5, attempt => att(:base + 5));
COMMIT;
SELECT * FROM received(:base);
-- failed, then claimed again and completed, in one transaction: done
SELECT pgq.retry(:base + 5);
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
BEGIN;
SELECT pgq.fail(:base + 5, 'again', attempt => att(:base + 5), retry_after => '0');
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
SELECT pgq.complete(:base + 5, attempt => att(:base + 5));
COMMIT;
SELECT * FROM received(:base);
-- completed, then retried in the same transaction: nothing
BEGIN;
SELECT pgq.retry(:base + 4);
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
SELECT pgq.complete(:base + 4, attempt => att(:base + 4));
SELECT pgq.retry(:base + 4);
COMMIT;
SELECT * FROM received(:base);
-- a lease that runs out on the last attempt: dead, announced by the claim
-- that finds it so (the deadline is moved by hand)
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
UPDATE pgq.items SET due_at = now() - interval '1 second'
WHERE item_id = :base + 4;
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
UPDATE pgq.items SET due_at = now() - interval '1 second'
WHERE item_id = :base + 4;
SELECT count(*) FROM pgq.claim('nq', 1);
SELECT block_id - :base AS rel, state FROM pgq.results('nq', ARRAY[:base + 4]);
SELECT * FROM received(:base);
-- PREPARE is refused while there are notes to send
SELECT pgq.retry(:base + 4);
SELECT block_id - :base AS rel FROM pgq.claim('nq', 1);
BEGIN;
SELECT pgq.complete(:base + 4, attempt => att(:base + 4));
PREPARE TRANSACTION 'fin';
SELECT * FROM received(:base);
-- turned off: nothing
SELECT pgq.notify_finished('nq', false);
SELECT pgq.complete(:base + 4, attempt => att(:base + 4));
SELECT * FROM received(:base);
SELECT pgq.notify_finished('nq', true);

-- transaction mode: the claim's commit finishes the items; one failed in
-- the claiming transaction is not finished; a rolled back claim, nothing
SELECT pgq.create_queue('nqt', mode => 'transaction');
SELECT listen('nqt');
SELECT pgq.notify_finished('nqt');
SELECT pgq.enqueue_many('nqt', array_fill('{}'::jsonb, ARRAY[3])) AS tids \gset
SELECT (:'tids'::bigint[])[1] AS tbase \gset
BEGIN;
SELECT block_id - :tbase AS rel FROM pgq.claim('nqt', 2);
SELECT pgq.complete(:tbase, '{"r": 1}');
SELECT pgq.fail(:tbase + 1, 'no', retry_after => '1 hour');
COMMIT;
SELECT * FROM received(:tbase);
BEGIN;
SELECT block_id - :tbase AS rel FROM pgq.claim('nqt', 1);
ROLLBACK;
SELECT * FROM received(:tbase);

-- many items: payloads under NOTIFY's limit of 8000 bytes, every id once
SELECT pgq.enqueue_many('nq', array_fill('{}'::jsonb, ARRAY[3000])) IS NOT NULL;
SELECT pgq.complete_many(array_agg(block_id), array_agg(attempt)) IS NOT NULL
FROM pgq.claim('nq', 3000);
SELECT count(*) FROM dblink('listener', 'SELECT 1') AS t(x int);
CREATE TEMP TABLE got AS SELECT * FROM dblink_get_notify('listener');
SELECT count(*) > 1 AS several, bool_and(octet_length(extra) < 8000) AS fit,
       (SELECT count(DISTINCT d) FROM got,
        jsonb_array_elements_text(extra::jsonb -> 'done') d) AS ids
FROM got;
DROP TABLE got;

SELECT dblink_disconnect('listener');
DROP FUNCTION received(bigint);
DROP FUNCTION listen(text);
DROP FUNCTION att(bigint);
DROP EXTENSION dblink;
SELECT pgq.drop_group('fq');
SELECT pgq.drop_group('fg');
SELECT pgq.drop_group('nq');
SELECT pgq.drop_group('nq_off');
SELECT pgq.drop_group('nqt');
REVOKE ALL ON SCHEMA pgq
    FROM regress_fin_producer, regress_fin_consumer, regress_fin_stranger;
DROP ROLE regress_fin_producer, regress_fin_consumer, regress_fin_stranger;
DROP FUNCTION fin_try(text);
