-- Privileges.  pgq's tables belong to the extension's owner and are granted
-- to nobody; a role with USAGE on schema pgq may create groups and queues,
-- and use those it owns or was granted with pgq.grant().  The views show
-- each role the groups it may use.
CREATE FUNCTION priv_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION priv_try(text) TO PUBLIC;
CREATE ROLE regress_owner;
CREATE ROLE regress_worker;
CREATE ROLE regress_producer;
CREATE ROLE regress_stranger;
CREATE TABLE pt (id int);
INSERT INTO pt VALUES (1), (2), (3);
GRANT SELECT ON pt TO regress_owner;

-- without USAGE on the schema, nothing
SET ROLE regress_stranger;
SELECT priv_try($$SELECT pgq.create_group('p1', 'SELECT 1')$$);
RESET ROLE;
GRANT USAGE ON SCHEMA pgq
    TO regress_owner, regress_worker, regress_producer, regress_stranger;

-- pgq's tables stay closed, also to a role with USAGE
SET ROLE regress_worker;
SELECT priv_try('SELECT count(*) FROM pgq.blocks');
SELECT priv_try('SELECT count(*) FROM pgq.items');
SELECT priv_try('UPDATE pgq.groups SET owner = current_user::regrole');
RESET ROLE;

-- an owner's group and queue
SET ROLE regress_owner;
SELECT pgq.create_group('p1', 'SELECT id FROM pt', 1);
SELECT pgq.create_queue('pq1');
SELECT pgq.enqueue('pq1', '{"secret": 1}') AS item \gset
SELECT group_name, owner, total_ids FROM pgq.group_stats;
SELECT queue_name, owner, pending FROM pgq.queue_stats;
RESET ROLE;

-- a role that was granted nothing can do nothing with them, and sees nothing
SET ROLE regress_stranger;
SELECT sql, priv_try(sql) FROM (VALUES
    ($$SELECT * FROM pgq.claim('p1')$$),
    ($$SELECT * FROM pgq.claim('pq1')$$),
    ($$SELECT pgq.create_group('p1', 'SELECT id FROM pt', 1)$$),
    ($$SELECT pgq.create_queue('pq1')$$),
    ($$SELECT pgq.drop_group('p1')$$),
    ($$SELECT pgq.drop_group('pq1')$$),
    ($$SELECT pgq.enqueue('pq1', '{}')$$),
    ($$SELECT pgq.enqueue_many('pq1', ARRAY['{}']::jsonb[])$$),
    ($$SELECT pgq.enqueue_many('pq1', '{}'::jsonb[])$$),
    ($$SELECT pgq.grant('p1', 'regress_stranger')$$),
    ($$SELECT pgq.revoke('p1', 'regress_worker')$$)
) AS cases(sql);
-- an item of a queue it may not see is one that does not exist (roles.sql)
SELECT replace(priv_try(format('SELECT pgq.result(%s)', :item)), 'item ' || :'item', 'item N');
SELECT replace(priv_try(format('SELECT pgq.retry(%s)', :item)), 'item ' || :'item', 'item N');
SELECT pgq.complete(:item, attempt => 1);
SELECT pgq.complete_many(ARRAY[:item]::bigint[], ARRAY[1]);
SELECT count(*) AS groups_seen FROM pgq.group_stats;
SELECT count(*) AS queues_seen FROM pgq.queue_stats;
-- names of groups it may not use are free to nobody: creating one is an error
SELECT priv_try($$SELECT pgq.create_group('pq1', 'SELECT 1')$$);
RESET ROLE;

-- grants: consume to the worker, produce to the producer
SET ROLE regress_owner;
SELECT pgq.grant('p1', 'regress_worker');
SELECT pgq.grant('pq1', 'regress_worker', 'consume');
SELECT pgq.grant('pq1', 'regress_producer', 'produce');
SELECT pgq.grant('pq1', 'regress_producer', 'produce');
SELECT priv_try($$SELECT pgq.grant('p1', 'regress_worker', 'admin')$$);
SELECT priv_try($$SELECT pgq.grant('p1', 'regress_nobody')$$);
SELECT priv_try($$SELECT pgq.grant('nope', 'regress_worker')$$);
RESET ROLE;
SELECT group_name, consumers, producers FROM pgq.groups
WHERE group_name IN ('p1', 'pq1') ORDER BY group_name;

SET ROLE regress_worker;
BEGIN;
SELECT ids FROM pgq.claim('p1');
COMMIT;
SELECT group_name, done FROM pgq.group_stats;
SELECT block_id = :item AS the_item, payload FROM pgq.claim('pq1');
SELECT pgq.complete(:item, '{"done": 1}', attempt => 1);
SELECT priv_try($$SELECT pgq.drop_group('p1')$$);
SELECT priv_try($$SELECT pgq.enqueue('pq1', '{}')$$);
-- joining needs consume, and the owner's name: the worker may
SELECT pgq.create_group('p1', 'SELECT id FROM pt', 1, owner => 'regress_owner');
RESET ROLE;

SET ROLE regress_producer;
SELECT pgq.enqueue('pq1', '{"n": 2}') > :item AS enqueued;
SELECT state, result FROM pgq.result(:item);
SELECT priv_try($$SELECT * FROM pgq.claim('pq1')$$);
SELECT queue_name, pending, done FROM pgq.queue_stats;
RESET ROLE;

-- revoke, and PUBLIC
SET ROLE regress_owner;
SELECT pgq.revoke('p1', 'regress_worker');
SELECT pgq.grant('pq1', 'public', 'consume');
RESET ROLE;
SET ROLE regress_worker;
SELECT priv_try($$SELECT * FROM pgq.claim('p1')$$);
RESET ROLE;
SET ROLE regress_stranger;
SELECT payload FROM pgq.claim('pq1');
RESET ROLE;

-- members of the owner role act as the owner: they may drop
GRANT regress_owner TO regress_worker;
SET ROLE regress_worker;
SELECT pgq.drop_group('p1');
SELECT pgq.drop_group('pq1');
RESET ROLE;
SELECT count(*) FROM pgq.groups WHERE group_name IN ('p1', 'pq1');

REVOKE ALL ON SCHEMA pgq
    FROM regress_owner, regress_worker, regress_producer, regress_stranger;
DROP TABLE pt;
DROP FUNCTION priv_try(text);
DROP ROLE regress_owner, regress_worker, regress_producer, regress_stranger;
