-- Per-queue retention: create_queue(retention =>, key_retention =>), their
-- checks, pgq.set_retention, and what pgq.item, pgq.result, pgq.retry, an
-- enqueue of the key, pgq.queue_stats and pgq.dead_items do with an item
-- past retention, whose payload a maintenance pass dropped (here the pass's
-- statement is run by hand: test/t/087_key_retention.pl runs the pass).
CREATE FUNCTION ret_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION ret_try(text) TO PUBLIC;
-- an error's detail and hint
CREATE FUNCTION ret_why(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
    hint text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN detail || E'\n' || hint;
END
$$;

-- NULL (the default) is pgq.retention; 'infinity' keeps for ever; an
-- interval converts (a driver's interval parameter too)
SELECT pgq.create_queue('r_default');
SELECT pgq.create_queue('r_month', retention => '30 days', key_retention => 'infinity');
SELECT pgq.create_queue('r_typed', retention => interval '1 day', key_retention => interval '2 days');
SELECT pgq.create_queue('r_keys', key_retention => 'INFINITY ');
SELECT pgq.create_queue('r_zero', retention => '0', key_retention => '0');
SELECT queue_name, retention, key_retention FROM pgq.queue_stats
WHERE queue_name LIKE 'r\_%' ORDER BY queue_name;
SELECT 'infinity'::pgq.retention_interval, '1 day 2 hours'::pgq.retention_interval;

-- joining: the settings given must match ('1 day' is '24 hours'); those not
-- given match any
SELECT pgq.create_queue('r_month');
SELECT pgq.create_queue('r_month', retention => '720 hours');
SELECT pgq.create_queue('r_month', key_retention => 'infinity');
SELECT ret_try($$SELECT pgq.create_queue('r_month', key_retention => '1 year')$$);
SELECT ret_try($$SELECT pgq.create_queue('r_default', retention => '7 days')$$);

-- bad settings: 22023, and nothing created
SELECT sql, ret_try(sql) FROM (VALUES
    ($$SELECT pgq.create_queue('r_bad', retention => '-1 s')$$),
    ($$SELECT pgq.create_queue('r_bad', key_retention => '-1 day')$$),
    ($$SELECT pgq.create_queue('r_bad', retention => '1 mon -40 days')$$),
    ($$SELECT pgq.create_queue('r_bad', retention => '1001 years')$$),
    ($$SELECT pgq.create_queue('r_bad', retention => '2 days', key_retention => '1 day')$$),
    ($$SELECT pgq.create_queue('r_bad', retention => 'infinity', key_retention => '10 years')$$),
    ($$SELECT pgq.create_queue('r_bad', retention => 'forever')$$),
    ($$SELECT pgq.set_retention('r_month', '-1 s', NULL)$$),
    ($$SELECT pgq.set_retention('r_month', 'infinity', '1 day')$$),
    ($$SELECT pgq.set_retention('nope', NULL, NULL)$$),
    ($$SELECT pgq.set_retention(NULL, NULL, NULL)$$)
) AS cases(sql);
SELECT count(*) FROM pgq.groups WHERE group_name = 'r_bad';
SELECT pgq.create_group('r_group', 'SELECT 1');
SELECT ret_try($$SELECT pgq.set_retention('r_group', '1 day', NULL)$$);

-- set_retention: for the owner; NULL is pgq.retention again
SELECT pgq.set_retention('r_default', '1 hour', 'infinity');
SELECT retention, key_retention FROM pgq.queue_stats WHERE queue_name = 'r_default';
SELECT pgq.set_retention('r_default', NULL, NULL);
SELECT retention, key_retention FROM pgq.queue_stats WHERE queue_name = 'r_default';
CREATE ROLE regress_ret_user;
GRANT USAGE ON SCHEMA pgq TO regress_ret_user;
SELECT pgq.grant('r_month', 'regress_ret_user', 'produce');
SET ROLE regress_ret_user;
SELECT ret_try($$SELECT pgq.set_retention('r_month', NULL, NULL)$$);
SELECT ret_try($$SELECT pgq.set_retention('r_default', NULL, NULL)$$);
RESET ROLE;

-- An item done, one dead: then past retention, as a pass leaves them.
SELECT pgq.create_queue('r_items', max_attempts => 1, key_retention => 'infinity');
SELECT pgq.enqueue('r_items', '{"n": 1}', key => 'done', data => '\x01') AS done_id \gset
SELECT pgq.enqueue('r_items', '{"n": 2}', key => 'dead') AS dead_id \gset
SELECT pgq.complete(block_id, '{"ok": 1}', attempt => attempt, result_data => '\x02')
FROM pgq.claim('r_items');
SELECT pgq.fail(block_id, 'boom', attempt => attempt, error_data => '\x03')
FROM pgq.claim('r_items');
SELECT done, dead, kept_keys FROM pgq.queue_stats WHERE queue_name = 'r_items';
SELECT count(*) FROM pgq.dead_items WHERE queue_name = 'r_items';
-- the pass's statement (worker.c), for rows finished before its cutoff
UPDATE pgq.items SET payload = NULL, data = NULL, result = NULL,
       result_data = NULL, last_error = NULL, errors = NULL
WHERE item_id IN (:done_id, :dead_id);
SELECT done, dead, kept_keys FROM pgq.queue_stats WHERE queue_name = 'r_items';
SELECT count(*) FROM pgq.dead_items WHERE queue_name = 'r_items';
-- pgq.item and pgq.result: the state and attempt stay, the rest is NULL
SELECT block_id = :done_id AS same_id, state, attempt, result, result_data,
       last_error, last_error_data
FROM pgq.item('r_items', 'done');
SELECT block_id = :dead_id AS same_id, state, attempt, result, last_error
FROM pgq.item('r_items', 'dead');
SELECT * FROM pgq.result(:done_id);
-- the key is still taken: the old id, nothing added
SELECT pgq.enqueue('r_items', '{"n": 3}', key => 'done') = :done_id AS old_id;
SELECT pgq.enqueue_many('r_items', ARRAY['{}', '{}']::jsonb[],
                        keys => ARRAY['dead', 'done']) = ARRAY[:dead_id, :done_id]::bigint[] AS old_ids;
SELECT count(*) AS items FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'r_items';
-- a retry is refused: there is nothing left to process
SELECT ret_try(format('SELECT pgq.retry(%s)', :done_id)) = format(
    '55000: item %s cannot be retried: its payload was dropped', :done_id) AS refused;
SELECT ret_why($$SELECT pgq.retry('r_items', 'dead')$$);
-- pgq.purge removes them like any finished item: their keys are free again
SELECT pgq.purge('r_items', dead => true);
SELECT pgq.enqueue('r_items', '{"n": 4}', key => 'done') > :done_id AS new_id;

SELECT pgq.drop_group(group_name) FROM pgq.groups WHERE group_name LIKE 'r\_%' ORDER BY 1;
REVOKE USAGE ON SCHEMA pgq FROM regress_ret_user;
DROP ROLE regress_ret_user;
DROP FUNCTION ret_try(text);
DROP FUNCTION ret_why(text);
