-- pgq.claim over a list of groups, pgq.claim(group_names text[], ...): its
-- arguments and errors, the shape of its result, how it shares a claim
-- between the groups of the list and takes from them in turn, paused
-- groups, query groups and mixed modes, waiting, and complete =>.  Item
-- ids come from a sequence: the test shows keys and group names instead.
CREATE FUNCTION list_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
CREATE FUNCTION fill(queue text, prefix text, n int) RETURNS bigint
LANGUAGE sql AS $$
SELECT count(*) FROM unnest(pgq.enqueue_many(queue,
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, n) g),
    keys => ARRAY(SELECT prefix || g FROM generate_series(1, n) g))) $$;

-- the signature: the one-name form's arguments, its columns and group_name
SELECT pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result
FROM pg_proc p
WHERE p.oid = 'pgq.claim(text[], integer, interval, bigint, bigint, integer)'::regprocedure;
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid = 'pgq.claimed_from'::regclass AND attnum > 0
ORDER BY attnum;

SELECT pgq.create_queue('lq_a'), pgq.create_queue('lq_b'),
       pgq.create_queue('lq_c'), pgq.create_queue('lq_empty');
SELECT fill('lq_a', 'a', 30), fill('lq_b', 'b', 4), fill('lq_c', 'c', 30);

-- a bare string is still a group name: the one-name form, without group_name
SELECT key FROM pgq.claim('lq_a');

-- max_blocks 3 over three queues with work: one from each, in enqueue order
SELECT group_name, key, attempt, payload, ids, data
FROM pgq.claim(ARRAY['lq_a', 'lq_b', 'lq_c'], 3) ORDER BY group_name;

-- claims of one, repeated: the queues with work in turn, never the same
-- one twice in a row; lq_b, last of the list in its first round or not,
-- gets its turn, until it runs out; then lq_a and lq_c take turns
CREATE TEMP TABLE served (n serial, group_name text, key text);
DO $$
BEGIN
    FOR i IN 1 .. 13 LOOP
        INSERT INTO served (group_name, key)
        SELECT group_name, key
        FROM pgq.claim(ARRAY['lq_a', 'lq_empty', 'lq_b', 'lq_c']);
    END LOOP;
END $$;
SELECT group_name, count(*), string_agg(key, ' ' ORDER BY n) AS keys
FROM served GROUP BY group_name ORDER BY group_name;
SELECT count(*) AS same_group_twice_in_a_row
FROM served s1 JOIN served s2 ON s2.n = s1.n + 1
WHERE s1.group_name = s2.group_name;
SELECT count(*) AS served_before_b_ran_out
FROM served WHERE n <= 9 GROUP BY group_name ORDER BY group_name;

-- shares: each queue with work gets what is left divided by the queues
-- not yet asked (rounded up); a queue that runs short leaves the rest to
-- the queues that gave all they were asked
SELECT pgq.enqueue('lq_b', '{"n": 5}', key => 'b5') > 0 AS enqueued;
SELECT group_name, count(*)
FROM pgq.claim(ARRAY['lq_a', 'lq_b'], 6) GROUP BY group_name ORDER BY group_name;
SELECT group_name, count(*)
FROM pgq.claim(ARRAY['lq_a', 'lq_c', 'lq_empty'], 6) GROUP BY group_name ORDER BY group_name;

-- a paused queue is skipped; resumed, it is served again
SELECT pgq.pause('lq_c');
SELECT group_name, count(*)
FROM pgq.claim(ARRAY['lq_c', 'lq_a'], 4) GROUP BY group_name ORDER BY group_name;
SELECT pgq.resume('lq_c');
SELECT group_name, count(*)
FROM pgq.claim(ARRAY['lq_c', 'lq_a'], 4) GROUP BY group_name ORDER BY group_name;

-- nothing claimable: no rows, at once or after the wait
SELECT count(*) FROM pgq.claim(ARRAY['lq_empty', 'lq_b']);
SELECT count(*) FROM pgq.claim(ARRAY['lq_empty', 'lq_b'], wait => '10 ms');

-- complete => completes the item first, in the same transaction
SELECT key, state FROM pgq.items WHERE key = 'a1';
SELECT group_name, key
FROM pgq.claim(ARRAY['lq_a'],
               complete => (SELECT item_id FROM pgq.items WHERE key = 'a1'),
               attempt => 1);
SELECT key, state FROM pgq.items WHERE key = 'a1';
-- one not held: a warning, and the claim goes on
SELECT group_name, key FROM pgq.claim(ARRAY['lq_c'], complete => -1);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'], attempt => 1)$$);

-- query groups and mixed modes: each group is claimed as the one-name form
-- claims it.  A transaction-mode group needs a transaction block, whatever
-- else the list holds; blocks come with their ids
SELECT pgq.create_group('lq_tx', 'SELECT g FROM generate_series(1, 4) g', 2);
SELECT pgq.create_group('lq_adv', 'SELECT g FROM generate_series(1, 2) g', 2,
                        mode => 'advisory');
SELECT * FROM pgq.claim(ARRAY['lq_a', 'lq_tx']);
BEGIN;
SELECT group_name, ids, key FROM pgq.claim(ARRAY['lq_tx', 'lq_b'], 4)
ORDER BY group_name, ids;
-- drained: this transaction holds what is left, and the wait ends at once
SELECT count(*) FROM pgq.claim(ARRAY['lq_tx'], wait => '1 h');
ROLLBACK;
BEGIN;
SELECT group_name, ids FROM pgq.claim(ARRAY['lq_tx', 'lq_empty']);
COMMIT;
-- advisory mode needs worker_id, and a worker of this session
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', 'lq_adv'])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_adv'], worker_id => -1)$$);
SELECT pgq.register_worker('lq') AS w \gset
SELECT group_name, ids FROM pgq.claim(ARRAY['lq_adv', 'lq_empty'], worker_id => :w);
SELECT pgq.complete(block_id, worker_id => :w)
FROM pgq.blocks b JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'lq_adv';

-- bad arguments
SELECT list_try($$SELECT * FROM pgq.claim(NULL::text[])$$);
SELECT list_try($$SELECT * FROM pgq.claim('{}'::text[])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY[NULL]::text[])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', NULL])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', 'lq_b', 'lq_a'])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', ''])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', repeat('x', 129)])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY[['lq_a'], ['lq_b']])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'], NULL)$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'], 0)$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'], 10001)$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'], wait => '-1 s')$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', 'lq_missing'])$$);
-- the checks run group by group, in the list's order
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_missing', 'lq_tx'])$$);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_tx', 'lq_missing'])$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a'])$$);
ROLLBACK;
BEGIN READ ONLY;
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_empty'])$$);
ROLLBACK;

-- privileges: every group of the list must be one the caller may consume
CREATE ROLE regress_list_worker;
GRANT USAGE ON SCHEMA pgq TO regress_list_worker;
SELECT pgq.grant('lq_a', 'regress_list_worker', 'consume');
SET ROLE regress_list_worker;
SELECT group_name, key FROM pgq.claim(ARRAY['lq_a']);
SELECT list_try($$SELECT * FROM pgq.claim(ARRAY['lq_a', 'lq_c'])$$);
RESET ROLE;

SELECT pgq.drop_group(g)
FROM unnest(ARRAY['lq_a', 'lq_b', 'lq_c', 'lq_empty', 'lq_tx', 'lq_adv']) g;
REVOKE USAGE ON SCHEMA pgq FROM regress_list_worker;
DROP ROLE regress_list_worker;
DROP FUNCTION list_try(text);
DROP FUNCTION fill(text, text, int);
