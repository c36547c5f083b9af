-- pgq.item(queue_name, key): an item looked up by its key, without
-- enqueuing it.  Item ids come from a sequence: shown relative to :i1.
CREATE FUNCTION item_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION item_try(text) TO PUBLIC;

SELECT pgq.create_queue('iq', max_attempts => 2);
SELECT pgq.enqueue('iq', '{"n": 1}', key => 'k1') AS i1 \gset
SELECT pgq.enqueue('iq', '{"n": 2}', key => 'k2') AS i2 \gset

-- pending, never claimed
SELECT block_id - :i1 AS rel, state, attempt, result, result_data,
       last_error, last_error_data
FROM pgq.item('iq', 'k1');
-- a key the queue has not: no row, and nothing enqueued
SELECT count(*) FROM pgq.item('iq', 'nope');
SELECT count(*) AS items FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'iq';
-- strict: a NULL key or queue name gives no row
SELECT count(*) FROM pgq.item('iq', NULL);
SELECT count(*) FROM pgq.item(NULL, 'k1');

-- running, then done with its result
SELECT block_id - :i1 AS rel, attempt FROM pgq.claim('iq');
SELECT state, attempt FROM pgq.item('iq', 'k1');
SELECT pgq.complete(:i1, '{"ok": true}', attempt => 1, result_data => '\x0102');
SELECT block_id - :i1 AS rel, state, attempt, result, result_data, last_error
FROM pgq.item('iq', 'k1');

-- a failure: scheduled with its error, then dead with the last one
SELECT block_id - :i2 AS rel, attempt FROM pgq.claim('iq');
SELECT pgq.fail(:i2, 'first', retry_after => '0', attempt => 1);
SELECT state, attempt, last_error, last_error_data FROM pgq.item('iq', 'k2');
SELECT block_id - :i2 AS rel, attempt FROM pgq.claim('iq');
SELECT pgq.fail(:i2, 'second', attempt => 2, error_data => '\xdead');
SELECT state, attempt, result, last_error, last_error_data
FROM pgq.item('iq', 'k2');
-- the same as pgq.result says
SELECT (SELECT row(state, attempt, result, result_data, last_error, last_error_data)
        FROM pgq.item('iq', 'k2')) IS NOT DISTINCT FROM
       (SELECT row(state, attempt, result, result_data, last_error, last_error_data)
        FROM pgq.result(:i2)) AS same_as_result;
-- retried: pending again, its last error kept
SELECT pgq.retry('iq', 'k2');
SELECT state, last_error FROM pgq.item('iq', 'k2');

-- in a transaction-mode queue, the claiming transaction sees its own claim
SELECT pgq.create_queue('iqt', mode => 'transaction');
SELECT pgq.enqueue('iqt', '{"t": 1}', key => 't1') AS t1 \gset
BEGIN;
SELECT block_id - :t1 AS rel FROM pgq.claim('iqt');
SELECT state, attempt FROM pgq.item('iqt', 't1');
ROLLBACK;
SELECT state, attempt FROM pgq.item('iqt', 't1');

-- bad input
SELECT item_try($$SELECT * FROM pgq.item('iq', '')$$);
SELECT item_try($$SELECT * FROM pgq.item('iq', repeat('x', 1025))$$);
SELECT item_try($$SELECT * FROM pgq.item('', 'k1')$$);
SELECT item_try($$SELECT * FROM pgq.item('no such queue', 'k1')$$);
SELECT pgq.create_group('iqg', 'SELECT 1', 1);
SELECT item_try($$SELECT * FROM pgq.item('iqg', 'k1')$$);

-- privileges: consume or produce; a role that may do neither learns only
-- that the name is taken, as from pgq.retry(queue_name, key)
CREATE ROLE regress_item_producer;
CREATE ROLE regress_item_consumer;
CREATE ROLE regress_item_stranger;
GRANT USAGE ON SCHEMA pgq
    TO regress_item_producer, regress_item_consumer, regress_item_stranger;
SELECT pgq.grant('iq', 'regress_item_producer', 'produce');
SELECT pgq.grant('iq', 'regress_item_consumer', 'consume');
SET ROLE regress_item_producer;
SELECT state, last_error FROM pgq.item('iq', 'k2');
RESET ROLE;
SET ROLE regress_item_consumer;
SELECT state, last_error FROM pgq.item('iq', 'k2');
RESET ROLE;
SET ROLE regress_item_stranger;
SELECT item_try($$SELECT * FROM pgq.item('iq', 'k2')$$);
SELECT item_try($$SELECT * FROM pgq.item('iq', 'nope')$$);
RESET ROLE;
-- a revoke takes effect at once
SELECT pgq.revoke('iq', 'regress_item_consumer', 'consume');
SET ROLE regress_item_consumer;
SELECT item_try($$SELECT * FROM pgq.item('iq', 'k2')$$);
RESET ROLE;

SELECT pgq.drop_group('iq');
SELECT pgq.drop_group('iqt');
SELECT pgq.drop_group('iqg');
REVOKE ALL ON SCHEMA pgq
    FROM regress_item_producer, regress_item_consumer, regress_item_stranger;
DROP ROLE regress_item_producer, regress_item_consumer, regress_item_stranger;
DROP FUNCTION item_try(text);
