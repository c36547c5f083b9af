-- Bad input to the lease- and advisory-mode functions: each gets an error
-- with a proper SQLSTATE, and nothing changes.
CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT pgq.create_group('bl', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'lease');
SELECT pgq.create_group('ba', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'advisory');
SELECT pgq.create_group('bt', 'SELECT g FROM generate_series(1, 4) g', 2);
SELECT pgq.register_worker('bad input') AS w \gset
-- one claimed block of each group
SELECT block_id AS l, attempt AS la FROM pgq.claim('bl') \gset
SELECT block_id AS a FROM pgq.claim('ba', worker_id => :w) \gset
SELECT min(block_id) AS t FROM pgq.blocks JOIN pgq.groups USING (group_id)
WHERE group_name = 'bt' \gset
CREATE TEMP VIEW blocks_now AS
SELECT g.group_name, b.block_id, b.state, b.attempt, b.lease_until, b.last_error
FROM pgq.blocks b JOIN pgq.groups g USING (group_id);
CREATE TEMP TABLE before AS SELECT * FROM blocks_now;

-- The statements use the placeholders {L} (the claimed lease-mode block),
-- {LA} (its attempt), {A} (the held advisory-mode block), {T} (a
-- transaction-mode block) and {W} (the worker id).
CREATE TEMP TABLE cases (n serial, sql text);
INSERT INTO cases (sql) VALUES
    -- NULL block ids
    ($$SELECT pgq.complete(NULL, attempt => 1)$$),
    ($$SELECT pgq.release(NULL, attempt => 1)$$),
    ($$SELECT pgq.fail(NULL, 'e', attempt => 1)$$),
    ($$SELECT pgq.extend(NULL, '1 minute', attempt => 1)$$),
    ($$SELECT pgq.complete(NULL, worker_id => {W})$$),
    -- results are not stored yet, whatever the block
    ($$SELECT pgq.complete({L}, '{}', attempt => {LA})$$),
    ($$SELECT pgq.complete({A}, '{"r": 1}', worker_id => {W})$$),
    ($$SELECT pgq.complete(-1, 'null'::jsonb)$$),
    -- extend: the lease must be a positive duration, at most 366 days,
    -- without months; checked before the block is looked up
    ($$SELECT pgq.extend({L}, NULL, attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '0', attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '-1 second', attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '1 day -24 hours', attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '1 month', attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '1 year', attempt => {LA})$$),
    ($$SELECT pgq.extend({L}, '367 days', attempt => {LA})$$),
    ($$SELECT pgq.extend(-1, '0', attempt => 1)$$),
    -- fail: retry_after must not be negative, nor have months
    ($$SELECT pgq.fail({L}, 'e', retry_after => '-1 second', attempt => {LA})$$),
    ($$SELECT pgq.fail({L}, 'e', retry_after => '-1 day', attempt => {LA})$$),
    ($$SELECT pgq.fail({L}, 'e', retry_after => '1 month', attempt => {LA})$$),
    ($$SELECT pgq.fail({A}, 'e', retry_after => '-1 hour', worker_id => {W})$$),
    ($$SELECT pgq.fail(-1, 'e', retry_after => '-1 hour')$$),
    -- lease mode needs the attempt
    ($$SELECT pgq.complete({L})$$),
    ($$SELECT pgq.release({L})$$),
    ($$SELECT pgq.fail({L}, 'e')$$),
    ($$SELECT pgq.extend({L}, '1 minute')$$),
    ($$SELECT pgq.complete({L}, worker_id => {W})$$),
    -- advisory mode needs a worker id that this session registered
    ($$SELECT pgq.complete({A})$$),
    ($$SELECT pgq.release({A})$$),
    ($$SELECT pgq.fail({A}, 'e')$$),
    ($$SELECT pgq.complete({A}, attempt => 1)$$),
    ($$SELECT pgq.complete({A}, worker_id => -1)$$),
    ($$SELECT pgq.release({A}, worker_id => -1)$$),
    ($$SELECT pgq.fail({A}, 'e', worker_id => -1)$$),
    ($$SELECT * FROM pgq.claim('ba')$$),
    ($$SELECT * FROM pgq.claim('ba', worker_id => NULL)$$),
    ($$SELECT * FROM pgq.claim('ba', worker_id => -1)$$),
    ($$SELECT * FROM pgq.claim('ba', worker_id => {W}, wait => '-1 second')$$),
    ($$SELECT * FROM pgq.claim('bl', wait => '-1 day')$$),
    -- operations that the block's mode does not have
    ($$SELECT pgq.extend({A}, '1 minute', attempt => 1)$$),
    ($$SELECT pgq.complete({T}, attempt => 1, worker_id => {W})$$),
    ($$SELECT pgq.release({T}, attempt => 1, worker_id => {W})$$),
    ($$SELECT pgq.fail({T}, 'e', attempt => 1, worker_id => {W})$$),
    ($$SELECT pgq.extend({T}, '1 minute', attempt => 1)$$),
    ($$SELECT pgq.complete({T})$$),
    -- the worker registry
    ($$SELECT pgq.check_worker(NULL)$$),
    ($$SELECT pgq.relock(NULL, {W})$$),
    ($$SELECT pgq.relock(ARRAY[{A}], NULL)$$),
    ($$SELECT pgq.relock(NULL, NULL)$$),
    ($$SELECT pgq.relock(ARRAY[{A}], -1)$$),
    ($$SELECT pgq.relock('{}', -1)$$),
    -- settings
    ($$SET pgq.max_locks_per_session = 0$$),
    ($$SET pgq.max_locks_per_session = -1$$),
    ($$SET pgq.max_locks_per_session = 1000001$$),
    ($$SET pgq.max_locks_per_session = 'many'$$),
    ($$SET pgq.max_locks = 10$$),
    ($$SET pgq.no_such_setting = 1$$);

SELECT sql, try(replace(replace(replace(replace(replace(sql,
           '{LA}', :'la'), '{L}', :'l'), '{A}', :'a'), '{T}', :'t'), '{W}', :'w'))
FROM cases ORDER BY n;

-- the cap is the superuser's to set
CREATE ROLE regress_modes_user;
SET ROLE regress_modes_user;
SELECT try('SET pgq.max_locks_per_session = 1');
RESET ROLE;
DROP ROLE regress_modes_user;
SHOW pgq.max_locks_per_session;

-- nothing changed: the blocks are as they were, still held by their
-- holders, and the worker is still registered
SELECT count(*) AS blocks,
       (SELECT count(*) FROM ((TABLE blocks_now EXCEPT TABLE before)
                              UNION ALL
                              (TABLE before EXCEPT TABLE blocks_now)) d) AS changed
FROM before;
SELECT group_name, pending, claimed, done, failed FROM pgq.group_stats
ORDER BY group_name;
SELECT pgq.check_worker(:w);
SELECT alive, blocks_held FROM pgq.workers WHERE worker_id = :w;
SELECT pgq.complete(:l, attempt => :la) AS lease_complete,
       pgq.complete(:a, worker_id => :w) AS advisory_complete;

SELECT pgq.drop_group('bl'), pgq.drop_group('ba'), pgq.drop_group('bt');
DELETE FROM pgq.worker_registry WHERE pid = pg_backend_pid();
DROP FUNCTION try(text);
