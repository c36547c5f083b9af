-- pgq.fail(..., error_data => bytea): a binary error alongside the text
-- one, as pgq.complete takes result_data.  It goes into the item's error
-- history (base64, under "data"), and pgq.result and pgq.dead_items return
-- the one of the last failure as last_error_data.  Blocks of query groups
-- keep text errors only: error_data is refused for them.
\set SHOW_CONTEXT never
SELECT pgq.create_queue('traps_fail', max_attempts => 3);
SELECT pgq.enqueue('traps_fail', '{"task": 1}') AS item \gset

-- a failure with a binary error, say a pickled exception
SELECT attempt FROM pgq.claim('traps_fail') \gset
SELECT pgq.fail(:item, 'ValueError: bad input', retry_after => '0',
                attempt => :attempt, error_data => '\x80049500'::bytea);
SELECT state, last_error, last_error_data FROM pgq.result(:item);
SELECT jsonb_array_length(errors) AS failures,
       errors -> -1 ->> 'error' AS error, errors -> -1 ->> 'data' AS data
FROM pgq.items WHERE item_id = :item;

-- a failure with a text error only: the last failure had no binary error
SELECT attempt FROM pgq.claim('traps_fail') \gset
SELECT pgq.fail(:item, 'timeout', retry_after => '0', attempt => :attempt);
SELECT state, last_error, last_error_data FROM pgq.result(:item);

-- a binary error without a text one, on the last attempt: dead
SELECT attempt FROM pgq.claim('traps_fail') \gset
SELECT pgq.fail(:item, attempt => :attempt, error_data => '\xdeadbeef');
SELECT state, last_error, last_error_data FROM pgq.result(:item);
SELECT queue_name, last_error, last_error_data,
       jsonb_path_query_array(errors, '$[*].data') AS data_history
FROM pgq.dead_items WHERE queue_name = 'traps_fail';

-- a stale attempt changes nothing
SELECT pgq.fail(:item, 'late', attempt => 1, error_data => '\x00');

-- transaction mode: the failure is the claiming transaction's
SELECT pgq.create_queue('traps_fail_tx', mode => 'transaction', max_attempts => 1);
SELECT pgq.enqueue('traps_fail_tx', '{"task": 2}') AS item2 \gset
BEGIN;
SELECT block_id = :item2 AS claimed FROM pgq.claim('traps_fail_tx');
SELECT pgq.fail(:item2, 'boom', error_data => '\x01020304');
COMMIT;
SELECT state, last_error, last_error_data FROM pgq.result(:item2);

-- blocks keep a text error only
SELECT pgq.create_group('traps_fail_blocks', 'SELECT 1', 1, mode => 'lease');
SELECT block_id AS block, attempt FROM pgq.claim('traps_fail_blocks') \gset
\set VERBOSITY terse
SELECT pgq.fail(:block, 'text only', attempt => :attempt, error_data => '\x00');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT pgq.fail(:block, 'text only', attempt => :attempt);

SELECT pgq.drop_group('traps_fail');
SELECT pgq.drop_group('traps_fail_tx');
SELECT pgq.drop_group('traps_fail_blocks');
