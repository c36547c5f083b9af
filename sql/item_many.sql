-- pgq.release_many and pgq.fail_many: the batch forms of release and fail,
-- with the proofs of holding of the single forms (attempts in lease mode,
-- worker_id in advisory mode, the transaction's own claim in a
-- transaction-mode queue), for items and blocks.  Ids come from a
-- sequence: the test names them (items by key, blocks as group name and
-- number) and shows the names.
CREATE FUNCTION many_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
CREATE TABLE names (id bigint PRIMARY KEY, name text UNIQUE);
GRANT SELECT ON names TO PUBLIC;
CREATE FUNCTION id(name text) RETURNS bigint LANGUAGE sql STABLE
AS $$ SELECT id FROM names WHERE name = $1 $$;
CREATE FUNCTION lbl(ids bigint[]) RETURNS text[] LANGUAGE sql STABLE
AS $$ SELECT array(SELECT coalesce(n.name, x::text) FROM unnest(ids) x
                   LEFT JOIN names n ON n.id = x ORDER BY 1) $$;
CREATE FUNCTION name_blocks(group_name text) RETURNS void LANGUAGE sql AS $$
INSERT INTO names
SELECT block_id, group_name || (row_number() OVER (ORDER BY block_id) - 1)
FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = name_blocks.group_name $$;
CREATE FUNCTION name_items(group_name text) RETURNS void LANGUAGE sql AS $$
INSERT INTO names
SELECT item_id, key FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = name_items.group_name $$;

-- lease-mode items
SELECT pgq.create_queue('mq', max_attempts => 5, backoff => '1 hour');
SELECT count(*) FROM unnest(pgq.enqueue_many('mq',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[], keys => ARRAY['a', 'b', 'c']));
SELECT name_items('mq');
SELECT key, attempt FROM pgq.claim('mq', 3);
-- released under their attempts, in any order; one with a stale attempt
-- and an unknown id are left out
SELECT lbl(pgq.release_many(ARRAY[id('c'), id('a'), id('b'), -1],
                            attempts => ARRAY[1, 1, 2, 1]));
SELECT key, state FROM pgq.items WHERE item_id IN (id('a'), id('b'), id('c'))
ORDER BY key;
-- released twice in one call: once
SELECT lbl(pgq.release_many(ARRAY[id('b'), id('b')], ARRAY[1, 1]));
-- not held any more: nothing
SELECT lbl(pgq.release_many(ARRAY[id('a'), id('c')], ARRAY[1, 1]));
SELECT pgq.release_many('{}');

-- failed, each with its error and binary error; one retry_after for all;
-- "c" is named under a stale attempt and left alone
SELECT key, attempt FROM pgq.claim('mq', 3);
SELECT lbl(pgq.fail_many(ARRAY[id('a'), id('b'), id('c')],
                         errors => ARRAY['e-a', NULL, 'e-c'],
                         retry_after => '0',
                         attempts => ARRAY[2, 2, 1],
                         error_data => ARRAY['\x00', NULL, NULL]::bytea[]));
SELECT key, state, attempt, last_error, errors -> -1 ->> 'data' AS data
FROM pgq.items WHERE item_id IN (id('a'), id('b'), id('c')) ORDER BY key;
-- without retry_after, the queue's backoff
SELECT lbl(pgq.fail_many(ARRAY[id('c')], ARRAY['e-c'], attempts => ARRAY[2]));
SELECT key, state, due_at > now() + interval '29 minutes' AS backoff
FROM pgq.items WHERE item_id = id('c');
-- items of lease-mode queues need their attempts
SELECT many_try($$SELECT pgq.fail_many(ARRAY[id('a')])$$);
SELECT many_try($$SELECT pgq.release_many(ARRAY[id('a')])$$);

-- blocks of a lease-mode group
SELECT pgq.create_group('mg', 'SELECT g FROM generate_series(1, 6) g', 2,
                        mode => 'lease', max_attempts => 5);
SELECT name_blocks('mg');
SELECT lbl(array_agg(block_id)), max(attempt) FROM pgq.claim('mg', 3);
SELECT lbl(pgq.release_many(ARRAY[id('mg0'), id('mg1')], ARRAY[1, 1]));
SELECT lbl(pgq.fail_many(ARRAY[id('mg2')], ARRAY['broken'], attempts => ARRAY[1]));
SELECT n.name, b.state, b.last_error FROM pgq.blocks b JOIN names n ON n.id = b.block_id
WHERE n.name LIKE 'mg%' ORDER BY n.name;
-- blocks keep a text error only; a block needs its attempt
SELECT lbl(array_agg(block_id)), max(attempt) FROM pgq.claim('mg', 3);
SELECT many_try($$SELECT pgq.fail_many(ARRAY[id('mg0')], attempts => '{2}',
                                       error_data => '{"\\x01"}')$$);
SELECT many_try($$SELECT pgq.release_many(ARRAY[id('mg0')], '{NULL}')$$);
-- items and blocks in one call
SELECT key AS qk, attempt AS qa FROM pgq.claim('mq') \gset
SELECT lbl(pgq.release_many(ARRAY[id('mg0'), id(:'qk'), id('mg1')], ARRAY[2, :qa, 2]));

-- advisory mode: worker_id
SELECT pgq.create_group('ma', 'SELECT g FROM generate_series(1, 6) g', 2,
                        mode => 'advisory', max_attempts => 2);
SELECT name_blocks('ma');
SELECT pgq.register_worker('many') AS w \gset
SELECT lbl(array_agg(block_id)) FROM pgq.claim('ma', 3, worker_id => :w);
SELECT many_try($$SELECT pgq.release_many(ARRAY[id('ma0')])$$);
SELECT lbl(pgq.release_many(ARRAY[id('ma0'), id('ma1')], worker_id => :w));
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT lbl(pgq.fail_many(ARRAY[id('ma2'), id('ma0')], ARRAY['x', 'y'], worker_id => :w));
SELECT n.name, b.state, b.attempt, b.last_error FROM pgq.blocks b
JOIN names n ON n.id = b.block_id WHERE n.name LIKE 'ma%' ORDER BY n.name;
SELECT many_try($$SELECT pgq.release_many(ARRAY[id('ma2')], worker_id => 0)$$);

-- every id is checked before any is given back: an advisory lock given back
-- at once would not come back with the rollback of a later error
SELECT n.name AS ab FROM pgq.claim('ma', 1, worker_id => :w) c
JOIN names n ON n.id = c.block_id \gset
SELECT n.name AS gb, c.attempt AS ga FROM pgq.claim('mg') c
JOIN names n ON n.id = c.block_id \gset
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT many_try(format('SELECT pgq.release_many(ARRAY[id(%L), id(%L)], worker_id => %s)',
                       :'ab', :'gb', :w));
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT lbl(pgq.release_many(ARRAY[id(:'ab'), id(:'gb')], ARRAY[NULL, :ga], worker_id => :w))
    = lbl(ARRAY[id(:'ab'), id(:'gb')]) AS both;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;

-- a transaction-mode queue: fail_many fails the transaction's own claims
SELECT pgq.create_queue('mt', mode => 'transaction', max_attempts => 3);
SELECT count(*) FROM unnest(pgq.enqueue_many('mt',
    ARRAY['{"t": 1}', '{"t": 2}']::jsonb[], keys => ARRAY['t1', 't2']));
SELECT name_items('mt');
BEGIN;
SELECT key FROM pgq.claim('mt');
-- t2 is not this transaction's claim
SELECT lbl(pgq.fail_many(ARRAY[id('t1'), id('t2')], ARRAY['t-err', 'no'],
                         retry_after => '0'));
COMMIT;
SELECT key, state, last_error FROM pgq.items WHERE item_id IN (id('t1'), id('t2'))
ORDER BY key;
-- release does not apply to transaction mode, as pgq.release() says
BEGIN;
SELECT key FROM pgq.claim('mt');
SELECT many_try($$SELECT pgq.release_many(ARRAY[id('t1')])$$);
ROLLBACK;
-- nor do blocks of transaction-mode groups
SELECT pgq.create_group('mtg', 'SELECT 1', 1);
SELECT name_blocks('mtg');
SELECT many_try($$SELECT pgq.fail_many(ARRAY[id('mtg0')])$$);

-- bad input
SELECT many_try('SELECT pgq.release_many(NULL)');
SELECT many_try('SELECT pgq.fail_many(NULL)');
SELECT many_try($$SELECT pgq.release_many('{1, NULL}', '{1, 1}')$$);
SELECT many_try($$SELECT pgq.release_many('{{1}}')$$);
SELECT many_try($$SELECT pgq.release_many('{1, 2}', '{1}')$$);
SELECT many_try($$SELECT pgq.fail_many('{1, 2}', errors => '{a}')$$);
SELECT many_try($$SELECT pgq.fail_many('{1}', error_data => '{"\\x01", "\\x02"}')$$);
SELECT many_try($$SELECT pgq.fail_many('{1}', attempts => '{{1}}')$$);
SELECT many_try($$SELECT pgq.fail_many('{1}', retry_after => '-1 second')$$);
SELECT many_try($$SELECT pgq.fail_many('{1}', retry_after => '1 month')$$);

-- privileges: consume on every group concerned that the caller may see;
-- ids of the others are not held
CREATE ROLE regress_many_producer;
CREATE ROLE regress_many_stranger;
GRANT USAGE ON SCHEMA pgq TO regress_many_producer, regress_many_stranger;
GRANT USAGE ON SCHEMA public TO regress_many_producer, regress_many_stranger;
SELECT pgq.grant('mq', 'regress_many_producer', 'produce');
SELECT key AS qk, attempt AS qa FROM pgq.claim('mq') \gset
SET ROLE regress_many_stranger;
SELECT lbl(pgq.release_many(ARRAY[id(:'qk')], ARRAY[:qa]));
SELECT lbl(pgq.fail_many(ARRAY[id(:'qk')], attempts => ARRAY[:qa]));
RESET ROLE;
SET ROLE regress_many_producer;
SELECT many_try(format('SELECT pgq.release_many(ARRAY[id(%L)], ARRAY[%s])', :'qk', :qa));
SELECT many_try(format('SELECT pgq.fail_many(ARRAY[id(%L)], attempts => ARRAY[%s])', :'qk', :qa));
RESET ROLE;
SELECT lbl(pgq.release_many(ARRAY[id(:'qk')], ARRAY[:qa]));

SELECT pgq.drop_group(g) FROM unnest(ARRAY['mq', 'mg', 'ma', 'mt', 'mtg']) g;
REVOKE ALL ON SCHEMA pgq FROM regress_many_producer, regress_many_stranger;
REVOKE ALL ON SCHEMA public FROM regress_many_producer, regress_many_stranger;
REVOKE ALL ON names FROM PUBLIC;
DROP ROLE regress_many_producer, regress_many_stranger;
DROP FUNCTION many_try(text);
DROP FUNCTION id(text);
DROP FUNCTION lbl(bigint[]);
DROP FUNCTION name_blocks(text);
DROP FUNCTION name_items(text);
DROP TABLE names;
