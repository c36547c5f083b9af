-- Isolation between roles (see privilege.c): grants name roles the way
-- PostgreSQL's functions that take a role as text do; a role cannot take a
-- name first and have another role join its group; an id or a name of a
-- group that a role may not use tells it nothing more than an id or a name
-- that does not exist; and no call holds a lock that the owner's calls wait
-- on unless its caller may act on that group.
CREATE FUNCTION roles_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
    hint text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL,
                            hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || SQLERRM
        || CASE WHEN detail <> '' THEN ' DETAIL: ' || detail ELSE '' END
        || CASE WHEN hint <> '' THEN ' HINT: ' || hint ELSE '' END;
END
$$;
-- what an expression on an id gives (its value, or its error), with the id
-- written as N, and whether that is what it gives for an id that no block
-- or item has
CREATE FUNCTION roles_eval(expr text, id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SELECT (%s)::text', format(expr, id)) INTO v;
    RETURN regexp_replace(v, '\m' || id || '\M', 'N', 'g');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\m' || id || '\M', 'N', 'g');
END
$$;
CREATE FUNCTION roles_by_id(expr text, id bigint)
RETURNS TABLE (result text, as_for_no_id boolean) LANGUAGE sql AS $$
    SELECT roles_eval(expr, id),
           roles_eval(expr, id) = roles_eval(expr, id + 1000000)
$$;
GRANT EXECUTE ON FUNCTION roles_eval(text, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION roles_by_id(text, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION roles_try(text) TO PUBLIC;
CREATE ROLE regress_r_owner;
CREATE ROLE regress_r_worker;
CREATE ROLE regress_r_squatter;
CREATE ROLE "Public";
GRANT USAGE ON SCHEMA pgq
    TO regress_r_owner, regress_r_worker, regress_r_squatter, "Public";

-- pgq.grant and pgq.revoke: public in lower case is PUBLIC; any other
-- spelling is a role's name, in double quotes a quoted identifier
SET ROLE regress_r_owner;
SELECT pgq.create_queue('rq_grants');
SELECT pgq.grant('rq_grants', 'Public');
SELECT pgq.grant('rq_grants', '"Public"', 'produce');
SELECT pgq.grant('rq_grants', '"regress_r_worker"', 'produce');
SELECT pgq.grant('rq_grants', 'public', 'produce');
SELECT roles_try($$SELECT pgq.grant('rq_grants', 'PUBLIC')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"public"')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"Public')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"Pub"lic"')$$);
SELECT roles_try($$SELECT pgq.revoke('rq_grants', 'Regress_r_worker', 'produce')$$);
RESET ROLE;
SELECT consumers, producers FROM pgq.groups WHERE group_name = 'rq_grants';
-- the role Public consumes; a role that is not Public does not
SET ROLE "Public";
SELECT count(*) FROM pgq.claim('rq_grants');
RESET ROLE;
SET ROLE regress_r_squatter;
SELECT roles_try($$SELECT * FROM pgq.claim('rq_grants')$$);
RESET ROLE;
SET ROLE regress_r_owner;
SELECT pgq.revoke('rq_grants', '"Public"', 'produce');
SELECT pgq.revoke('rq_grants', 'public', 'produce');
SELECT pgq.revoke('rq_grants', 'regress_r_worker', 'produce');
SELECT pgq.drop_group('rq_grants');
RESET ROLE;

-- Taking a name first.  The squatter creates, before the owner does, a
-- group with the owner's query text (run as the squatter, it reads the
-- squatter's table) and a queue with the owner's name, and grants both to
-- PUBLIC.  The owner's create_group and create_queue must not join them.
CREATE TABLE pt_roles (id int);
INSERT INTO pt_roles VALUES (1), (2), (3);
GRANT SELECT ON pt_roles TO regress_r_owner, regress_r_squatter;
SET ROLE regress_r_squatter;
CREATE TEMP TABLE pt_roles (id int);
INSERT INTO pt_roles VALUES (666);
SELECT pgq.create_group('rg_taken', 'SELECT id FROM pt_roles', 1);
SELECT pgq.create_queue('rq_taken');
SELECT pgq.grant('rg_taken', 'public');
SELECT pgq.grant('rq_taken', 'public');
SELECT pgq.grant('rq_taken', 'public', 'produce');
DROP TABLE pg_temp.pt_roles;
RESET ROLE;
SET ROLE regress_r_owner;
SELECT roles_try($$SELECT pgq.create_group('rg_taken', 'SELECT id FROM pt_roles', 1)$$);
SELECT roles_try($$SELECT pgq.create_queue('rq_taken')$$);
-- naming the owner it means: refused too
SELECT roles_try($$SELECT pgq.create_group('rg_taken', 'SELECT id FROM pt_roles', 1,
                                           owner => 'regress_r_owner')$$);
SELECT roles_try($$SELECT pgq.create_queue('rq_taken', owner => 'regress_r_owner')$$);
-- whose they are, the owner sees in the views
SELECT group_name, owner, total_ids FROM pgq.group_stats WHERE group_name = 'rg_taken';
SELECT queue_name, owner FROM pgq.queue_stats WHERE queue_name = 'rq_taken';
RESET ROLE;
-- a superuser is no exception
SELECT roles_try($$SELECT pgq.create_queue('rq_taken')$$);
SELECT pgq.create_queue('rq_taken', owner => 'regress_r_squatter');

-- The owner's own group and queue, granted to the worker.  A role that may
-- not use them learns that the name is taken, not what it is nor whose.
SET ROLE regress_r_owner;
SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1);
SELECT pgq.create_queue('rq_mine');
SELECT pgq.grant('rg_mine', 'regress_r_worker');
SELECT pgq.grant('rq_mine', 'regress_r_worker', 'produce');
-- the owner joins its own, silently
SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1);
SELECT pgq.create_queue('rq_mine');
RESET ROLE;
SET ROLE regress_r_squatter;
SELECT sql, roles_try(sql) FROM (VALUES
    ($$SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1)$$),
    ($$SELECT pgq.create_group('rq_mine', 'SELECT 1')$$),
    ($$SELECT pgq.create_queue('rq_mine')$$),
    ($$SELECT pgq.create_queue('rg_mine')$$),
    ($$SELECT pgq.create_queue('rg_mine', owner => 'regress_r_owner')$$)
) AS cases(sql);
RESET ROLE;
-- the worker may use them: it joins only when it names their owner, and
-- is told whose they are
SET ROLE regress_r_worker;
SELECT roles_try($$SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1)$$);
SELECT roles_try($$SELECT pgq.create_queue('rq_mine')$$);
SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1,
                        owner => 'regress_r_owner');
SELECT pgq.create_queue('rq_mine', owner => 'regress_r_owner');
SELECT roles_try($$SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1,
                                           owner => 'regress_r_squatter')$$);
SELECT roles_try($$SELECT pgq.create_queue('rq_mine', mode => 'transaction',
                                           owner => 'regress_r_owner')$$);
SELECT roles_try($$SELECT pgq.create_queue('rg_mine', owner => 'regress_r_owner')$$);
-- owner => a role whose group does not exist yet: nothing is created
SELECT roles_try($$SELECT pgq.create_queue('rq_later', owner => 'regress_r_owner')$$);
SELECT roles_try($$SELECT pgq.create_group('rg_later', 'SELECT 1',
                                           owner => 'regress_r_owner')$$);
RESET ROLE;
SELECT count(*) FROM pgq.groups WHERE group_name IN ('rq_later', 'rg_later');
-- owner => a role the caller is a member of: creates, and joins silently
GRANT regress_r_owner TO regress_r_worker;
SET ROLE regress_r_worker;
SELECT pgq.create_queue('rq_later', owner => 'regress_r_owner');
SELECT pgq.create_queue('rq_later', owner => 'regress_r_owner');
SELECT pgq.create_group('rg_mine', 'SELECT id FROM pt_roles', 1);
SELECT queue_name, owner FROM pgq.queue_stats WHERE queue_name = 'rq_later';
RESET ROLE;
REVOKE regress_r_owner FROM regress_r_worker;
SELECT pgq.drop_group(g) FROM unnest('{rg_taken,rq_taken,rg_mine,rq_mine,rq_later}'::text[]) g;
DROP TABLE pt_roles;

-- Names do not leak.  The owner's query group, with a block in flight,
-- and its queue, with an item claimed and one done; the squatter may use
-- neither.
SET ROLE regress_r_owner;
SELECT pgq.create_group('rg_secret', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'lease');
SELECT pgq.create_queue('rq_secret');
SELECT pgq.enqueue('rq_secret', '{"secret": 1}') AS item_held \gset
SELECT pgq.enqueue('rq_secret', '{"secret": 2}') AS item_done \gset
SELECT count(*) FROM pgq.claim('rq_secret', 2);
SELECT pgq.complete(:item_done, '{"r": 1}', attempt => 1);
SELECT block_id AS block FROM pgq.claim('rg_secret') \gset
SELECT pgq.create_group('rg_adv', 'SELECT g FROM generate_series(1, 4) g', 2,
                        mode => 'advisory');
SELECT pgq.register_worker('owner''s worker') AS worker \gset
SELECT block_id AS adv_block FROM pgq.claim('rg_adv', worker_id => :worker) \gset
RESET ROLE;
SET ROLE regress_r_squatter;
SELECT set_config('roles.sq_worker', pgq.register_worker('squatter''s worker')::text,
                  false) IS NOT NULL AS registered;
RESET ROLE;
-- an id of a group the caller may not see is an id that does not exist
SET ROLE regress_r_squatter;
SELECT expr, (roles_by_id(expr, id)).* FROM (VALUES
    ('pgq.result(%s)', :item_held),
    ('pgq.result(%s)', :item_done),
    ('pgq.result(%s)', :block),
    ('pgq.retry(%s)', :item_done),
    ('pgq.retry(%s)', :block),
    ('pgq.complete(%s, attempt => 1)', :item_held),
    ('pgq.complete(%s, attempt => 1)', :block),
    ('pgq.complete(%s, ''{}'', attempt => 1)', :block),
    ('pgq.complete(%s, worker_id => 1)', :block),
    ('pgq.release(%s, attempt => 1)', :item_held),
    ('pgq.release(%s, attempt => 1)', :block),
    ('pgq.fail(%s, ''x'', attempt => 1)', :item_held),
    ('pgq.fail(%s, ''x'', attempt => 1)', :block),
    ('pgq.extend(%s, ''1 hour'', attempt => 1)', :item_held),
    ('pgq.extend(%s, ''1 hour'', attempt => 1)', :block),
    ('pgq.complete_many(ARRAY[%s], ARRAY[1])', :item_held),
    ('pgq.complete_many(ARRAY[%s], ARRAY[1])', :block),
    ('pgq.complete(%s, worker_id => current_setting(''roles.sq_worker'')::bigint)', :adv_block),
    ('pgq.release(%s, worker_id => current_setting(''roles.sq_worker'')::bigint)', :adv_block),
    ('pgq.fail(%s, worker_id => current_setting(''roles.sq_worker'')::bigint)', :adv_block),
    ('pgq.relock(ARRAY[%s], current_setting(''roles.sq_worker'')::bigint)', :adv_block)
) AS cases(expr, id);
-- ... and a name tells it that the name is taken, but not by what or whom
SELECT sql, roles_try(sql) FROM (VALUES
    ($$SELECT pgq.enqueue('rg_secret', '{}')$$),
    ($$SELECT pgq.enqueue_many('rg_secret', ARRAY['{}']::jsonb[])$$),
    ($$SELECT pgq.retry('rg_secret', 'k')$$),
    ($$SELECT pgq.drop_group('rg_secret')$$),
    ($$SELECT pgq.drop_group('rq_secret')$$),
    ($$SELECT pgq.pause('rg_secret')$$),
    ($$SELECT pgq.resume('rq_secret')$$),
    ($$SELECT pgq.purge('rq_secret')$$),
    ($$SELECT pgq.rematerialize('rg_secret')$$),
    ($$SELECT pgq.grant('rq_secret', 'regress_r_squatter')$$),
    ($$SELECT * FROM pgq.claim('rg_secret')$$)
) AS cases(sql);
RESET ROLE;
-- nothing happened to them
SELECT i.item_id = :item_held AS held, i.state, i.attempt, i.result
FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'rq_secret' ORDER BY i.item_id;
SELECT b.block_id = :block AS held, b.state, b.attempt
FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'rg_secret' ORDER BY b.block_id;
-- a producer sees the queue: what it may not do is named
SET ROLE regress_r_owner;
SELECT pgq.grant('rq_secret', 'regress_r_worker', 'produce');
RESET ROLE;
SET ROLE regress_r_worker;
SELECT roles_try(format('SELECT pgq.complete(%s, attempt => 1)', :item_held));
SELECT state FROM pgq.result(:item_done);
RESET ROLE;

-- a group's NOTIFY channel is told only to the roles that may use it
SELECT channel AS rq_channel FROM pgq.groups WHERE group_name = 'rq_secret' \gset
SELECT pgq.channel('rq_secret') = :'rq_channel' AS superuser_may;
SET ROLE regress_r_squatter;
SELECT roles_try($$SELECT pgq.channel('rq_secret')$$);
SELECT roles_try($$SELECT pgq.channel('rg_secret')$$);
RESET ROLE;
SET ROLE regress_r_worker;
SELECT pgq.channel('rq_secret') = :'rq_channel' AS producer_may;
SELECT roles_try($$SELECT pgq.channel('rg_secret')$$);
RESET ROLE;

-- pgq.inflight answers for a group the caller may not see as for one that
-- does not exist
SET ROLE regress_r_owner;
SELECT pgq.create_group('rg_tx', 'SELECT g FROM generate_series(1, 4) g', 2);
RESET ROLE;
SELECT group_id AS tx_group, created_at AS tx_created FROM pgq.groups
WHERE group_name = 'rg_tx' \gset
BEGIN;
SET LOCAL ROLE regress_r_owner;
SELECT count(*) FROM pgq.claim('rg_tx');
SELECT * FROM pgq.inflight(:tx_group, :'tx_created');
SET LOCAL ROLE regress_r_squatter;
SELECT * FROM pgq.inflight(:tx_group, :'tx_created');
SELECT * FROM pgq.inflight(:tx_group + 1000, :'tx_created');
ROLLBACK;

-- pgq.workers shows a role its own workers (and those of roles it has the
-- privileges of), as pg_stat_activity shows sessions; superusers see all
SET ROLE regress_r_owner;
SELECT worker_name, alive, blocks_held, owner FROM pgq.workers;
RESET ROLE;
SET ROLE regress_r_squatter;
SELECT worker_name, owner FROM pgq.workers;
RESET ROLE;
SELECT worker_name, owner FROM pgq.workers
WHERE owner IN ('regress_r_owner', 'regress_r_squatter') ORDER BY worker_id;
SELECT pg_advisory_unlock_all();

SET ROLE regress_r_owner;
SELECT pgq.drop_group('rg_secret');
SELECT pgq.drop_group('rq_secret');
SELECT pgq.drop_group('rg_tx');
SELECT pgq.drop_group('rg_adv');
RESET ROLE;

REVOKE ALL ON SCHEMA pgq
    FROM regress_r_owner, regress_r_worker, regress_r_squatter, "Public";
DROP FUNCTION roles_by_id(text, bigint);
DROP FUNCTION roles_eval(text, bigint);
DROP FUNCTION roles_try(text);
DROP ROLE regress_r_owner, regress_r_worker, regress_r_squatter, "Public";
