-- Administration from psql: pause and resume, purge, and running a failed
-- materialization again.
SELECT pgq.create_group('ad', 'SELECT g FROM generate_series(1, 4) g', 1);
SELECT pgq.pause('ad');
SELECT pgq.pause('ad') AS again;
SELECT state FROM pgq.group_stats WHERE group_name = 'ad';
-- a paused group hands out nothing, also to a waiting claim whose time is up
BEGIN;
SELECT count(*) FROM pgq.claim('ad');
SELECT count(*) FROM pgq.claim('ad', wait => '10 ms');
COMMIT;
SELECT pgq.resume('ad');
SELECT pgq.resume('ad') AS again;
BEGIN;
SELECT ids FROM pgq.claim('ad');
COMMIT;
SELECT state, pending, done FROM pgq.group_stats WHERE group_name = 'ad';

-- queues too, and purge
SELECT pgq.create_queue('aq', max_attempts => 1);
SELECT pgq.enqueue_many('aq', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                        keys => ARRAY['a', 'b', 'c']) IS NOT NULL AS enqueued;
SELECT pgq.pause('aq');
SELECT count(*) FROM pgq.claim('aq', 3);
SELECT queue_name, pending, paused FROM pgq.queue_stats WHERE queue_name = 'aq';
SELECT pgq.resume('aq');
SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('aq') WHERE key = 'a';
SELECT pgq.fail(block_id, 'no', attempt => attempt) FROM pgq.claim('aq') WHERE key = 'b';
SELECT queue_name, pending, done, dead FROM pgq.queue_stats WHERE queue_name = 'aq';
-- done items that finished an hour ago or more: none yet
SELECT pgq.purge('aq', older_than => '1 hour');
SELECT pgq.purge('aq');
SELECT key, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'aq') ORDER BY key;
SELECT pgq.purge('aq', dead => true);
SELECT key, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'aq') ORDER BY key;
-- a purged key is free again
SELECT pgq.enqueue('aq', '{"n": 1, "again": true}', key => 'a') IS NOT NULL AS enqueued;
SELECT count(*) FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'aq') AND key = 'a';

-- rematerialize: a failed asynchronous group runs its query again
CREATE TABLE flip (d int);
INSERT INTO flip VALUES (0);
-- polls the group's state until its materialization has ended
CREATE FUNCTION settled(name text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    LOOP
        SELECT state INTO s FROM pgq.groups WHERE group_name = name;
        EXIT WHEN s <> 'materializing';
        PERFORM pg_sleep(0.01);
    END LOOP;
    RETURN s;
END $$;
SELECT pgq.create_group('re', 'SELECT g / d FROM generate_series(1, 5) g, flip', 2,
                        async => true);
SELECT settled('re');
SELECT error FROM pgq.group_stats WHERE group_name = 're';
UPDATE flip SET d = 1;
SELECT pgq.rematerialize('re');
SELECT settled('re');
SELECT state, total_ids, total_blocks, error FROM pgq.group_stats WHERE group_name = 're';
SELECT pgq.rematerialize('re');
SELECT pgq.drop_group('re');
DROP FUNCTION settled(text);
DROP TABLE flip;

-- bad input
CREATE FUNCTION admin_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT sql, admin_try(sql) FROM (VALUES
    ($$SELECT pgq.pause(NULL)$$),
    ($$SELECT pgq.pause('nope')$$),
    ($$SELECT pgq.resume('')$$),
    ($$SELECT pgq.purge('aq', older_than => NULL)$$),
    ($$SELECT pgq.purge('aq', older_than => '-1 day')$$),
    ($$SELECT pgq.purge('aq', dead => NULL)$$),
    ($$SELECT pgq.rematerialize('aq')$$),
    ($$SELECT pgq.rematerialize('nope')$$)
) AS cases(sql);
DROP FUNCTION admin_try(text);
SELECT pgq.drop_group('ad'), pgq.drop_group('aq');
