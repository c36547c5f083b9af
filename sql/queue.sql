-- Queues: create_queue, enqueue with payloads, keys, priorities and delays,
-- claims in priority then FIFO order, complete with results, fail with
-- retries and dead-letter, retry, the views, and bad input.
CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT pgq.create_queue('jobs', max_attempts => 2, backoff => '1 hour');
SELECT pgq.create_queue('jobs', max_attempts => 2, backoff => '1 hour');

-- ids come from the blocks' sequence: remember where this test starts
SELECT pgq.enqueue('jobs', '{"n": 1}') AS i1 \gset
SELECT pgq.enqueue('jobs', '{"n": 2}', key => 'k2') AS k2 \gset
-- a key the queue holds returns its item and adds nothing
SELECT pgq.enqueue('jobs', '{"n": 2, "again": true}', key => 'k2') - :k2 AS same;
SELECT pgq.enqueue('jobs', data => '\x00ff', key => 'bin', priority => 7) AS bin \gset
SELECT pgq.enqueue('jobs', '{"n": 4}', priority => 7) AS n4 \gset
SELECT pgq.enqueue('jobs', '{"later": true}', run_at => now() + interval '1 day') AS later \gset
-- in the order given; a key given twice, or held already, gives one item
SELECT array(SELECT x - :i1 FROM unnest(
    pgq.enqueue_many('jobs', ARRAY['{"m": 1}', '{"m": 2}', '{"m": 3}', '{"m": 4}']::jsonb[],
                     keys => ARRAY['m1', NULL, 'm1', 'k2'])) x) AS rel;
SELECT count(*) AS items FROM pgq.items;

SELECT queue_name, mode, pending, scheduled, running, done, dead,
       oldest_pending_age >= '0' AS has_age, max_attempts, backoff
FROM pgq.queue_stats;
-- queues are not query groups
SELECT count(*) FROM pgq.group_stats;

-- highest priority first, then first in, first out; the delayed item waits
SELECT block_id - :i1 AS rel, attempt, ids, payload, data, key
FROM pgq.claim('jobs', 4);
SELECT queue_name, pending, scheduled, running FROM pgq.queue_stats;

-- complete stores the result; a stale attempt changes nothing
SELECT pgq.complete(:n4, '{"ok": 4}', attempt => 2) AS stale;
SELECT pgq.complete(:n4, '{"ok": 4}', attempt => 1) AS done;
SELECT pgq.complete(:n4, '{"ok": 4}', attempt => 1) AS twice;
SELECT pgq.complete(:bin, attempt => 1, result_data => '\xbeef') AS done;
SELECT * FROM pgq.result(:n4);
SELECT * FROM pgq.result(:bin);
SELECT state FROM pgq.result(:i1);
SELECT state FROM pgq.result(:later);
-- the result of an unfinished item, waited for briefly: still running
SELECT state FROM pgq.result(:i1, wait => '10 ms');

-- fail: a retry after the backoff (an hour here), then dead-letter
SELECT pgq.fail(:i1, 'first', attempt => 1) AS failed;
SELECT state, attempt, due_at > now() + interval '29 minutes' AS backed_off,
       due_at <= now() + interval '1 hour' AS within_backoff, last_error
FROM pgq.items WHERE item_id = :i1;
SELECT pgq.fail(:k2, 'no luck', retry_after => '0', attempt => 1) AS failed;
SELECT block_id - :i1 AS rel, attempt FROM pgq.claim('jobs', 1);
SELECT pgq.fail(:k2, 'no luck again', attempt => 2) AS failed;
SELECT queue_name, item_id - :i1 AS rel, key, attempt, last_error,
       jsonb_array_length(errors) AS errors,
       errors -> 0 ->> 'error' AS first_error
FROM pgq.dead_items;
SELECT * FROM pgq.result(:k2);

-- retry: a dead or done item goes back to pending, by id or by key
SELECT pgq.retry(:k2);
SELECT pgq.retry('jobs', 'bin');
SELECT key, state, attempt, result, result_data, last_error
FROM pgq.items WHERE item_id IN (:k2, :bin) ORDER BY key;
SELECT try(format('SELECT pgq.retry(%s)', :k2)) LIKE '55000: item % is not done or dead-lettered' AS refused;
SELECT try(format('SELECT pgq.retry(%s)', :i1)) LIKE '55000: %' AS refused;
SELECT try($$SELECT pgq.retry('jobs', 'nokey')$$);
SELECT try('SELECT pgq.retry(-1)');

-- release and extend, in lease mode; the retried item's attempt numbers
-- went on, so a holder of its attempt before the retry is refused
SELECT block_id - :i1 AS rel, attempt FROM pgq.claim('jobs', 1);
SELECT pgq.extend(:bin, '1 hour', attempt => 1) AS stale_extended;
SELECT pgq.extend(:bin, '1 hour', attempt => 2) AS extended;
SELECT due_at > now() + interval '59 minutes' AS extended FROM pgq.items WHERE item_id = :bin;
SELECT pgq.release(:bin, attempt => 1) AS stale_released;
SELECT pgq.release(:bin, attempt => 2) AS released;
SELECT pgq.release(:bin, attempt => 2) AS again;

-- complete_many: the ids the caller held
SELECT array(SELECT x - :i1 FROM unnest(
    pgq.complete_many(array_agg(block_id ORDER BY block_id),
                      array_agg(attempt ORDER BY block_id),
                      array_agg(jsonb_build_object('id', block_id - :i1) ORDER BY block_id))) x)
       AS completed
FROM pgq.claim('jobs', 3);
SELECT item_id - :i1 AS rel, state, result FROM pgq.items
WHERE state = 'd' ORDER BY item_id;

-- complete_many takes blocks of lease-mode groups too
SELECT pgq.create_group('lg', 'SELECT g FROM generate_series(1, 6) g', 2,
                        mode => 'lease');
SELECT cardinality(pgq.complete_many(array_agg(block_id), array_agg(attempt)))
       AS completed
FROM pgq.claim('lg', 2);
SELECT cardinality(pgq.complete_many(array_agg(block_id), array_agg(attempt + 1)))
       AS stale_attempts
FROM pgq.claim('lg', 1);
SELECT state, done, pending, claimed FROM pgq.group_stats WHERE group_name = 'lg';
SELECT pgq.drop_group('lg');
-- the ids it returns are those completed, of blocks and items alike (made
-- after SPI's memory is gone: where bigint is passed by reference, as on
-- 32-bit builds, they pointed into it)
SELECT pgq.create_group('lg_ids', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease');
SELECT pgq.create_queue('q_ids');
SELECT count(pgq.enqueue('q_ids', jsonb_build_object('n', g)))
FROM generate_series(1, 3) g;
WITH c AS (SELECT block_id, attempt FROM pgq.claim('lg_ids', 3)
           UNION ALL
           SELECT block_id, attempt FROM pgq.claim('q_ids', 3))
SELECT count(*) AS claimed,
       pgq.complete_many(array_agg(block_id ORDER BY block_id),
                         array_agg(attempt ORDER BY block_id))
       = array_agg(block_id ORDER BY block_id) AS returns_the_ids
FROM c;
SELECT pgq.drop_group('lg_ids'), pgq.drop_group('q_ids');

-- transaction mode: the claim is consumed at COMMIT, given back at ROLLBACK
SELECT pgq.create_queue('tx', mode => 'transaction');
SELECT pgq.enqueue('tx', '{"t": 1}') AS t1 \gset
BEGIN;
SELECT block_id - :t1 AS rel, attempt, payload FROM pgq.claim('tx');
ROLLBACK;
BEGIN;
SELECT block_id - :t1 AS rel, attempt, payload FROM pgq.claim('tx');
SELECT pgq.complete(:t1, '{"r": "t"}');
COMMIT;
SELECT state, result FROM pgq.result(:t1);
-- complete from a transaction that did not claim the item: false
SELECT pgq.complete(:t1, '{"other": true}') AS not_mine;
SELECT try('SELECT pgq.release(' || (:t1) || ')');

-- drop_group removes a queue and its items
SELECT pgq.drop_group('tx');
SELECT count(*) FROM pgq.items
WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = items.group_id);

-- Bad input: an error with a SQLSTATE, and nothing written.
SELECT pgq.create_group('grp', 'SELECT 1');
SELECT count(*) AS before FROM pgq.items \gset
SELECT sql, try(sql) FROM (VALUES
    ($$SELECT pgq.create_queue(NULL)$$),
    ($$SELECT pgq.create_queue('')$$),
    ($$SELECT pgq.create_queue('q2', mode => 'nope')$$),
    ($$SELECT pgq.create_queue('q2', lease => '0')$$),
    ($$SELECT pgq.create_queue('q2', max_attempts => 0)$$),
    ($$SELECT pgq.create_queue('q2', backoff => '-1 s')$$),
    ($$SELECT pgq.create_queue('q2', max_backoff => '1 mon')$$),
    ($$SELECT pgq.create_queue('jobs', max_attempts => 3)$$),
    ($$SELECT pgq.create_queue('grp')$$),
    ($$SELECT pgq.create_group('jobs', 'SELECT 1')$$),
    ($$SELECT pgq.enqueue('jobs')$$),
    ($$SELECT pgq.enqueue('jobs', NULL, key => 'k')$$),
    ($$SELECT pgq.enqueue(NULL, '{}')$$),
    ($$SELECT pgq.enqueue('nope', '{}')$$),
    ($$SELECT pgq.enqueue('grp', '{}')$$),
    ($$SELECT pgq.enqueue('jobs', '{}', priority => -1)$$),
    ($$SELECT pgq.enqueue('jobs', '{}', priority => 32768)$$),
    ($$SELECT pgq.enqueue('jobs', '{}', priority => NULL)$$),
    ($$SELECT pgq.enqueue('jobs', '{}', key => '')$$),
    ($$SELECT pgq.enqueue('jobs', '{}', key => repeat('k', 1025))$$),
    ($$SELECT pgq.enqueue_many('jobs')$$),
    ($$SELECT pgq.enqueue_many('jobs', ARRAY['{}']::jsonb[], keys => ARRAY['a', 'b'])$$),
    ($$SELECT pgq.enqueue_many('jobs', ARRAY['{}', NULL]::jsonb[])$$),
    ($$SELECT pgq.enqueue_many('jobs', ARRAY[['{}']]::jsonb[])$$),
    ($$SELECT pgq.enqueue_many('jobs', ARRAY['{}']::jsonb[], keys => ARRAY[repeat('k', 1025)])$$),
    ($$SELECT pgq.enqueue_many('grp', ARRAY['{}']::jsonb[])$$),
    ($$SELECT pgq.enqueue_many('nope', '{}'::jsonb[])$$),
    ($$SELECT pgq.result(NULL)$$),
    ($$SELECT pgq.result(-1)$$),
    ($$SELECT pgq.result(-1, wait => '-1 s')$$),
    ($$SELECT pgq.complete_many(NULL)$$),
    ($$SELECT pgq.complete_many(ARRAY[1, 2], ARRAY[1])$$),
    ($$SELECT pgq.complete_many(ARRAY[NULL]::bigint[], ARRAY[1])$$)
) AS cases(sql);
SELECT count(*) - :before AS written FROM pgq.items;
SELECT group_name, kind FROM pgq.groups ORDER BY group_name;

-- the result of a block: query groups have none
SELECT min(block_id) AS gb FROM pgq.blocks \gset
SELECT try(format('SELECT pgq.result(%s)', :gb)) LIKE '42809: block % belongs to query group "grp": only queue items have results' AS refused;
SELECT try(format($$SELECT pgq.complete(%s, '{}')$$, :gb));

-- A new key is inserted at once.  A key found taken costs one killed row
-- version, and the session then looks for its keys first: resending the key
-- inserts nothing.  (Row versions inserted by this transaction, killed ones
-- included; a new session, which has met no taken key yet.)
\c
BEGIN;
SELECT pgq.enqueue('jobs', '{}', key => 'resent') AS resent \gset
SELECT pg_stat_get_xact_tuples_inserted('pgq.items'::regclass) AS after_new;
SELECT pgq.enqueue('jobs', '{}', key => 'resent') = :resent AS found;
SELECT pg_stat_get_xact_tuples_inserted('pgq.items'::regclass) AS after_first_resend;
SELECT pgq.enqueue('jobs', '{}', key => 'resent') = :resent AS found;
SELECT pg_stat_get_xact_tuples_inserted('pgq.items'::regclass) AS after_second_resend;
SELECT count(*) AS items_with_key FROM pgq.items WHERE key = 'resent';
COMMIT;
