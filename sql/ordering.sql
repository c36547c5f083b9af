-- Ordering keys: items of one key are handed out one at a time, in enqueue
-- order; other keys (and items without one) go on in parallel.  Item ids
-- come from a sequence: shown relative to the queue's first item.
CREATE FUNCTION ord_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 'item \d+', 'item N', 'g');
END
$$;
-- the items of a queue: id relative to its first, ordering key, state
CREATE FUNCTION ord_items(q text)
RETURNS TABLE (rel bigint, okey text, state "char", priority integer)
LANGUAGE sql AS $$
    SELECT i.item_id - min(i.item_id) OVER (), i.ordering_key, i.state,
           i.priority
    FROM pgq.items i JOIN pgq.groups g USING (group_id)
    WHERE g.group_name = q ORDER BY i.item_id
$$;

-- bad arguments change nothing
SELECT pgq.create_queue('oq', max_attempts => 3);
SELECT ord_try($$SELECT pgq.enqueue('oq', '{}', ordering_key => '')$$);
SELECT ord_try($$SELECT pgq.enqueue('oq', '{}', ordering_key => repeat('x', 1025))$$);
SELECT ord_try($$SELECT pgq.enqueue_many('oq', ARRAY['{}', '{}']::jsonb[],
                                         ordering_keys => ARRAY['a'])$$);
SELECT ord_try($$SELECT pgq.enqueue_many('oq', ARRAY['{}']::jsonb[],
                                         ordering_keys => ARRAY['']::text[])$$);
SELECT ord_try($$SELECT pgq.enqueue_many('oq', ARRAY['{}']::jsonb[],
                                         ordering_keys => ARRAY[['a']])$$);
SELECT count(*) AS items FROM ord_items('oq');
-- a key of 1024 bytes is fine
SELECT pgq.enqueue('oq', '{}', ordering_key => repeat('x', 1024)) > 0 AS ok;
SELECT okey = repeat('x', 1024) AS long_key, state FROM ord_items('oq');
SELECT pgq.purge('oq');
DELETE FROM pgq.items WHERE group_id = (SELECT group_id FROM pgq.groups
                                         WHERE group_name = 'oq');

-- the first item of a key is pending; the next ones of it wait
SELECT pgq.enqueue('oq', '{"n": 1}', ordering_key => 'a') AS a1 \gset
SELECT pgq.enqueue('oq', '{"n": 2}', ordering_key => 'a') AS a2 \gset
SELECT pgq.enqueue('oq', '{"n": 3}', ordering_key => 'b') AS b1 \gset
SELECT pgq.enqueue('oq', '{"n": 4}') AS none1 \gset
SELECT array_agg(id - :a1) AS rel_ids
FROM unnest(pgq.enqueue_many('oq', ARRAY['{"n": 5}', '{"n": 6}', '{"n": 7}',
                                         '{"n": 8}']::jsonb[],
                             ordering_keys => ARRAY['a', 'c', NULL, 'c'])) id;
SELECT * FROM ord_items('oq');
SELECT pending, waiting, scheduled, running FROM pgq.queue_stats
WHERE queue_name = 'oq';
SELECT state FROM pgq.result(:a2);
SELECT state FROM pgq.results('oq', ARRAY[:a2]::bigint[]);

-- a claim takes the heads only, one per key
SELECT block_id - :a1 AS rel, payload FROM pgq.claim('oq', 10) ORDER BY 1;
SELECT count(*) AS more FROM pgq.claim('oq', 10);

-- complete hands the key on: the next of 'a' becomes pending
SELECT pgq.complete(:a1, attempt => 1);
SELECT * FROM ord_items('oq') WHERE okey = 'a';
-- a rolled-back completion hands nothing on
BEGIN;
SELECT pgq.complete(:b1, attempt => 1);
SELECT pgq.complete(:a1 + 5, attempt => 1);
SELECT rel, okey, state FROM ord_items('oq') WHERE okey IN ('b', 'c');
ROLLBACK;
SELECT rel, okey, state FROM ord_items('oq') WHERE okey IN ('b', 'c');

-- a head that is released stays the head
SELECT block_id - :a1 AS rel, attempt FROM pgq.claim('oq');
SELECT pgq.release(:a2, attempt => 1);
SELECT rel, okey, state FROM ord_items('oq') WHERE okey = 'a';
-- a head that fails is retried before the rest of its key, which waits
SELECT block_id - :a1 AS rel, attempt FROM pgq.claim('oq');
SELECT pgq.fail(:a2, 'first', retry_after => '0', attempt => 2);
SELECT rel, okey, state FROM ord_items('oq') WHERE okey = 'a';
SELECT block_id - :a1 AS rel, attempt FROM pgq.claim('oq');
-- dead-lettered at max_attempts: the next item of the key proceeds
SELECT pgq.fail(:a2, 'second', attempt => 3);
SELECT rel, okey, state FROM ord_items('oq') WHERE okey = 'a';
SELECT item_id - :a1 AS rel, ordering_key, last_error FROM pgq.dead_items
WHERE queue_name = 'oq';

-- complete_many hands keys on too
SELECT array_agg(block_id - :a1 ORDER BY block_id) AS rel,
       array_agg(attempt ORDER BY block_id) AS attempts
FROM pgq.claim('oq', 10);
SELECT array_length(pgq.complete_many(ARRAY[:a1 + 4, :b1, :a1 + 5],
                                      ARRAY[1, 1, 1]), 1) AS completed;
SELECT * FROM ord_items('oq');
SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('oq', 10);
SELECT pending, waiting, done, dead FROM pgq.queue_stats WHERE queue_name = 'oq';

-- retry: a dead item whose key has moved on is refused; once the key has
-- nothing unfinished, the retried item becomes its head again
SELECT pgq.enqueue('oq', '{"n": 9}', ordering_key => 'a') AS a9 \gset
SELECT ord_try(format('SELECT pgq.retry(%s)', :a2));
SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('oq');
SELECT pgq.retry(:a2);
SELECT pgq.enqueue('oq', '{"n": 10}', ordering_key => 'a') AS a10 \gset
SELECT rel, okey, state FROM ord_items('oq') WHERE okey = 'a';
-- the item's own errors: not done or dead
SELECT ord_try(format('SELECT pgq.retry(%s)', :a10));

-- an ordering key with an idempotency key: a duplicate adds nothing, and a
-- waiting item's key is taken like any other
SELECT pgq.enqueue('oq', '{"n": 11}', key => 'k11', ordering_key => 'a') AS a11 \gset
SELECT pgq.enqueue('oq', '{"n": 11}', key => 'k11', ordering_key => 'a') = :a11 AS same;
SELECT pgq.enqueue('oq', '{"n": 11}', key => 'k11', ordering_key => 'z') = :a11 AS same;
SELECT state FROM pgq.item('oq', 'k11');
SELECT count(*) AS a_items FROM ord_items('oq') WHERE okey = 'a';

-- priority orders the heads of keys, not the items within one key
SELECT pgq.create_queue('pq');
SELECT pgq.enqueue('pq', '{"n": 1}', ordering_key => 'x', priority => 1) AS p1 \gset
SELECT pgq.enqueue('pq', '{"n": 2}', ordering_key => 'x', priority => 9) AS p2 \gset
SELECT pgq.enqueue('pq', '{"n": 3}', ordering_key => 'y', priority => 5) AS p3 \gset
SELECT pgq.enqueue('pq', '{"n": 4}', priority => 3) AS p4 \gset
SELECT block_id - :p1 AS rel, payload FROM pgq.claim('pq', 10);
SELECT pgq.complete(:p1, attempt => 1);
SELECT block_id - :p1 AS rel, payload FROM pgq.claim('pq', 10);

-- a head enqueued with a later run_at is scheduled; its key waits for it.
-- An item waiting with a later run_at becomes scheduled when handed on.
SELECT pgq.create_queue('rq');
SELECT pgq.enqueue('rq', '{"n": 1}', ordering_key => 'd',
                   run_at => now() + interval '1 hour') AS r1 \gset
SELECT pgq.enqueue('rq', '{"n": 2}', ordering_key => 'd') AS r2 \gset
SELECT pgq.enqueue('rq', '{"n": 3}', ordering_key => 'd',
                   run_at => now() + interval '1 hour') AS r3 \gset
SELECT * FROM ord_items('rq');
SELECT count(*) AS claimed FROM pgq.claim('rq');
UPDATE pgq.items SET due_at = now() - interval '1 second' WHERE item_id = :r1;
SELECT block_id - :r1 AS rel FROM pgq.claim('rq');
SELECT pgq.complete(:r1, attempt => 1);
SELECT block_id - :r1 AS rel FROM pgq.claim('rq');
SELECT pgq.complete(:r2, attempt => 1);
SELECT rel, okey, state FROM ord_items('rq');
SELECT pending, scheduled, waiting FROM pgq.queue_stats WHERE queue_name = 'rq';

-- a lease that runs out at max_attempts dead-letters the head, and the
-- claim that does it may take the next item of the key
SELECT pgq.create_queue('lq', max_attempts => 1);
SELECT pgq.enqueue('lq', '{"n": 1}', ordering_key => 'e') AS l1 \gset
SELECT pgq.enqueue('lq', '{"n": 2}', ordering_key => 'e') AS l2 \gset
SELECT block_id - :l1 AS rel FROM pgq.claim('lq');
UPDATE pgq.items SET due_at = now() - interval '1 second' WHERE item_id = :l1;
SELECT block_id - :l1 AS rel FROM pgq.claim('lq');
SELECT rel, okey, state FROM ord_items('lq');
SELECT last_error FROM pgq.dead_items WHERE queue_name = 'lq';

-- purge removes finished items only: waiting ones stay
SELECT pgq.create_queue('uq');
SELECT pgq.enqueue_many('uq', ARRAY['{}', '{}', '{}']::jsonb[],
                        ordering_keys => ARRAY['f', 'f', 'f']) IS NOT NULL AS ok;
SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('uq');
SELECT pgq.purge('uq');
SELECT okey, state FROM ord_items('uq');

-- transaction mode: a claim hands the key on when it commits
SELECT pgq.create_queue('tq', mode => 'transaction', max_attempts => 3);
SELECT pgq.enqueue_many('tq', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                        ordering_keys => ARRAY['g', 'g', 'g'])
       AS t \gset
SELECT (:'t'::bigint[])[1] AS t1 \gset
BEGIN;
SELECT block_id - :t1 AS rel, payload FROM pgq.claim('tq', 10);
SELECT rel, state FROM ord_items('tq');
ROLLBACK;
SELECT rel, state FROM ord_items('tq');
-- a failure that retries the item takes the hand-on back
BEGIN;
SELECT block_id - :t1 AS rel FROM pgq.claim('tq');
SELECT pgq.fail(:t1, 'again', retry_after => '0');
SELECT rel, state FROM ord_items('tq');
COMMIT;
-- the retry comes first
BEGIN;
SELECT block_id - :t1 AS rel FROM pgq.claim('tq');
SELECT rel, state FROM ord_items('tq');
-- the same transaction may take the next item of the key after it; a
-- failure of the first would then put it behind a later one: refused
SELECT block_id - :t1 AS rel FROM pgq.claim('tq');
SELECT ord_try(format('SELECT pgq.fail(%s, %L)', :t1, 'late'));
SELECT pgq.fail(:t1 + 1, 'second first', retry_after => '0');
SELECT pgq.fail(:t1, 'first then', retry_after => '0');
SELECT rel, state FROM ord_items('tq');
COMMIT;
BEGIN;
SELECT block_id - :t1 AS rel FROM pgq.claim('tq');
SELECT rel, state FROM ord_items('tq');
COMMIT;

-- the names of the states
SELECT i.state, count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'oq' GROUP BY i.state ORDER BY i.state;
SELECT block_id - :a1 AS rel, state FROM pgq.item('oq', 'k11');

SELECT pgq.drop_group(q) FROM unnest(ARRAY['oq', 'pq', 'rq', 'lq', 'uq', 'tq']) q;
