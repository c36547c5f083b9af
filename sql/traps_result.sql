-- pgq.result(id, wait => ...) in the transaction that enqueued the item (a
-- driver's default outside autocommit): no worker can see the item before
-- that transaction commits, so the wait is refused at once instead of
-- running out.  Without wait, and for items the transaction did not write,
-- pgq.result answers as before.
-- The error, with the item's id left out (ids depend on the tests before).
CREATE FUNCTION traps_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    msg text;
    hint text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || regexp_replace(msg, 'item \d+', 'item N')
           || ' (' || hint || ')';
END
$$;
SELECT pgq.create_queue('traps_result');

BEGIN;
SELECT pgq.enqueue('traps_result', '{"n": 1}') AS item \gset
-- without wait: the state, at once
SELECT state FROM pgq.result(:item);
SELECT state FROM pgq.result(:item, wait => '0');
-- with wait: refused, however short the wait
SELECT traps_try(format('SELECT pgq.result(%s, wait => ''100 ms'')', :item));
ROLLBACK;

-- enqueued in a subtransaction of the caller's transaction: refused too
BEGIN;
SAVEPOINT s;
SELECT pgq.enqueue('traps_result', '{"n": 2}') AS item \gset
RELEASE SAVEPOINT s;
SELECT traps_try(format('SELECT pgq.result(%s, wait => ''100 ms'')', :item));
ROLLBACK;

-- committed: the wait goes on (and here runs out: no worker)
SELECT pgq.enqueue('traps_result', '{"n": 3}') AS item \gset
BEGIN;
SELECT state FROM pgq.result(:item, wait => '10 ms');
COMMIT;

-- claimed by this transaction (a lease claim inside a transaction block):
-- no other worker can complete it before this transaction ends
BEGIN;
SELECT block_id = :item AS claimed, attempt FROM pgq.claim('traps_result');
SELECT traps_try(format('SELECT pgq.result(%s, wait => ''100 ms'')', :item));
ROLLBACK;

-- finished: the result at once, also when this transaction finished it
SELECT pgq.complete(block_id, '{"ok": 3}', attempt => attempt)
FROM pgq.claim('traps_result');
BEGIN;
SELECT state, result FROM pgq.result(:item, wait => '1 hour');
COMMIT;
-- retried by this transaction: pending again, for workers only after commit
BEGIN;
SELECT pgq.retry(:item);
SELECT state FROM pgq.result(:item);
SELECT traps_try(format('SELECT pgq.result(%s, wait => ''100 ms'')', :item));
ROLLBACK;

-- a transaction-mode queue: the claiming transaction completes the item,
-- which is done when it waits for the result
SELECT pgq.create_queue('traps_result_tx', mode => 'transaction');
BEGIN;
SELECT pgq.enqueue('traps_result_tx', '{"n": 4}') AS item \gset
SELECT block_id = :item AS claimed FROM pgq.claim('traps_result_tx');
SELECT pgq.complete(:item, '{"ok": 4}');
SELECT state, result FROM pgq.result(:item, wait => '1 hour');
COMMIT;

SELECT pgq.drop_group('traps_result');
SELECT pgq.drop_group('traps_result_tx');
DROP FUNCTION traps_try(text);
