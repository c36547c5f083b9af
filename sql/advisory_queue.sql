-- Advisory-mode queues: a claim of an item takes a session advisory lock and
-- writes nothing; complete and fail change the row, counting the attempt,
-- and let go of the lock at commit.  Item ids are shown relative to the
-- first item (:i0); worker ids, which come from a sequence, are not shown.
CREATE OR REPLACE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT pgq.create_queue('aq', mode => 'advisory', max_attempts => 2,
                        backoff => '0');
SELECT pgq.create_queue('aq', mode => 'advisory', max_attempts => 2,
                        backoff => '0') AS joined;
SELECT mode, pending, running FROM pgq.queue_stats WHERE queue_name = 'aq';
SELECT pgq.enqueue('aq', '{"n": 1}', key => 'k1') AS i0 \gset
SELECT pgq.enqueue('aq', '{"n": 2}', priority => 5) - :i0 AS rel;
SELECT pgq.enqueue('aq', NULL, data => '\x00ff') - :i0 AS rel;

-- a claim needs a worker, registered in this session
SELECT try($$SELECT pgq.claim('aq')$$);
SELECT pgq.register_worker('w1') AS w \gset

-- claims write nothing: no transaction id, no row changed; highest
-- priority first, then first in, with payload, data and key
BEGIN;
SELECT block_id - :i0 AS rel, attempt, ids, payload, data, key
FROM pgq.claim('aq', 2, worker_id => :w);
SELECT pg_current_xact_id_if_assigned() IS NULL AS wrote_nothing;
COMMIT;
SELECT item_id - :i0 AS rel, state, attempt FROM pgq.items
WHERE item_id >= :i0 ORDER BY item_id;
SELECT pending, running FROM pgq.queue_stats WHERE queue_name = 'aq';
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
-- the held items are not claimed twice, not even by their holder
SELECT block_id - :i0 AS rel, attempt FROM pgq.claim('aq', 5, worker_id => :w);
SELECT count(*) AS nothing_left FROM pgq.claim('aq', worker_id => :w);

-- complete needs the worker too; it stores the result and counts the attempt
SELECT try(format('SELECT pgq.complete(%s)', :i0 + 1));
BEGIN;
SELECT pgq.complete(:i0 + 1, result => '{"ok": true}', worker_id => :w);
SELECT pgq.complete(:i0 + 1, worker_id => :w) AS again,
       pgq.release(:i0 + 1, worker_id => :w) AS release,
       pgq.fail(:i0 + 1, 'x', worker_id => :w) AS fail;
COMMIT;
SELECT state, attempt, result FROM pgq.result(:i0 + 1);
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;

-- a complete rolled back keeps the item held
BEGIN;
SELECT pgq.complete(:i0, worker_id => :w);
ROLLBACK;
SELECT state, attempt FROM pgq.item('aq', 'k1');
SELECT pgq.complete(:i0, result => '"second try"', worker_id => :w);
SELECT state, attempt, result FROM pgq.item('aq', 'k1');

-- fail (of the item still held): a retry (backoff 0: due at once), then
-- dead-lettered at max_attempts
SELECT pgq.fail(:i0 + 2, 'first', worker_id => :w, error_data => '\x01');
SELECT state, attempt, last_error FROM pgq.result(:i0 + 2);
SELECT block_id - :i0 AS rel, attempt FROM pgq.claim('aq', worker_id => :w);
SELECT pgq.fail(:i0 + 2, 'second', worker_id => :w);
SELECT state, attempt, last_error,
       jsonb_path_query_array(errors, '$[*].attempt') AS attempts
FROM pgq.items WHERE item_id = :i0 + 2;
SELECT item_id - :i0 AS rel, last_error FROM pgq.dead_items
WHERE queue_name = 'aq';
-- retry keeps the attempt numbers: the next claim is attempt 3
SELECT pgq.retry(:i0 + 2);

-- release gives the item back at once, under the same attempt; so does the
-- rollback of the claiming transaction
SELECT block_id - :i0 AS rel, attempt FROM pgq.claim('aq', worker_id => :w);
SELECT pgq.release(:i0 + 2, worker_id => :w);
BEGIN;
SELECT block_id - :i0 AS rel, attempt FROM pgq.claim('aq', worker_id => :w);
ROLLBACK;
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;

-- claim(complete => ...) completes the last item and claims the next
SELECT pgq.enqueue('aq', '{"n": 4}') - :i0 AS rel;
SELECT block_id - :i0 AS rel, attempt FROM pgq.claim('aq', worker_id => :w);
SELECT block_id - :i0 AS rel, attempt
FROM pgq.claim('aq', worker_id => :w, complete => :i0 + 2);
SELECT state FROM pgq.result(:i0 + 2);

-- lease-only calls are refused; the batch forms take worker_id
SELECT try(format('SELECT pgq.extend(%s, ''1 min'', 1)', :i0 + 3));
SELECT try(format('SELECT pgq.fail_many(ARRAY[%s])', :i0 + 3));
SELECT pgq.fail_many(ARRAY[:i0 + 3, :i0], ARRAY['a', 'b'], worker_id => :w,
                     retry_after => '1 hour') = ARRAY[:i0 + 3]::bigint[]
       AS only_held;
SELECT state FROM pgq.result(:i0 + 3);

-- a delayed item is claimed once due; ordering keys: one item at a time
SELECT pgq.enqueue('aq', '{"n": 5}', run_at => now() + '1 hour') - :i0 AS rel;
SELECT count(*) AS not_yet FROM pgq.claim('aq', worker_id => :w);
SELECT pgq.enqueue('aq', '{"o": 1}', ordering_key => 'o') AS o1 \gset
SELECT pgq.enqueue('aq', '{"o": 2}', ordering_key => 'o') AS o2 \gset
SELECT block_id = :o1 AS head FROM pgq.claim('aq', 5, worker_id => :w);
SELECT count(*) AS behind_the_head FROM pgq.claim('aq', worker_id => :w);
SELECT pgq.complete(:o1, worker_id => :w);
SELECT block_id = :o2 AS next FROM pgq.claim('aq', worker_id => :w);
SELECT pgq.release_many(ARRAY[:o2], worker_id => :w) = ARRAY[:o2]::bigint[]
       AS released;

-- locks lost (pg_advisory_unlock_all, a restart, a failover): the items
-- are still pending, and relock takes them back
SELECT block_id = :o2 AS again FROM pgq.claim('aq', worker_id => :w);
SELECT pg_advisory_unlock_all();
SELECT pgq.check_worker(:w);
SELECT pgq.register_worker('w1') AS w \gset
SELECT pgq.relock(ARRAY[:o2, :i0], :w) = ARRAY[:o2]::bigint[] AS relocked;
SELECT pending, running FROM pgq.queue_stats WHERE queue_name = 'aq';
SELECT pgq.complete(:o2, worker_id => :w);

-- claims start from the queue's hint, a place in claim order past the
-- items finished; whatever makes an item pending before it lowers it at
-- commit: an enqueue of higher priority, an ordering key handed on, a retry
SELECT pgq.create_queue('hq', mode => 'advisory', max_attempts => 1);
SELECT pgq.enqueue('hq', '{"o": 1}', ordering_key => 'k') AS h1 \gset
SELECT pgq.enqueue('hq', '{"o": 2}', ordering_key => 'k') AS h2 \gset
SELECT pgq.enqueue_many('hq', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]) AS hn \gset
SELECT block_id = :h1 AS head FROM pgq.claim('hq', worker_id => :w);
SELECT block_id = (:'hn'::bigint[])[1] AS first FROM pgq.claim('hq', worker_id => :w);
SELECT block_id = (:'hn'::bigint[])[2] AS second
FROM pgq.claim('hq', worker_id => :w, complete => (:'hn'::bigint[])[1]);
-- h1's completion hands k on: h2, before the hint, is pending, and first
SELECT pgq.complete(:h1, worker_id => :w);
SELECT block_id = :h2 AS handed_on
FROM pgq.claim('hq', worker_id => :w, complete => (:'hn'::bigint[])[2]);
SELECT pgq.fail(:h2, 'dead', worker_id => :w);
SELECT block_id = (:'hn'::bigint[])[3] AS third FROM pgq.claim('hq', worker_id => :w);
-- a retry of the dead h2 puts it before the hint again
SELECT pgq.retry(:h2);
SELECT block_id = :h2 AS retried
FROM pgq.claim('hq', worker_id => :w, complete => (:'hn'::bigint[])[3]);
-- an item of higher priority comes first, though enqueued last
SELECT pgq.enqueue('hq', '{"urgent": true}', priority => 9) AS urgent \gset
SELECT block_id = :urgent AS urgent_first
FROM pgq.claim('hq', worker_id => :w, complete => :h2);
-- an item given back is claimed again, before those after it
SELECT pgq.release(:urgent, worker_id => :w);
SELECT block_id = :urgent AS given_back FROM pgq.claim('hq', worker_id => :w);
SELECT block_id = (:'hn'::bigint[])[4] AS last
FROM pgq.claim('hq', worker_id => :w, complete => :urgent);
SELECT pgq.complete((:'hn'::bigint[])[4], worker_id => :w);
SELECT i.state, count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'hq' GROUP BY i.state ORDER BY i.state;
-- the hint moves back at commit, but not at COMMIT PREPARED: an item that a
-- prepared transaction enqueued is found by a full scan, which a claim that
-- comes up short makes when no other session holds items of the queue (and
-- otherwise at most once a second)
BEGIN;
SELECT pgq.enqueue('hq', '{"n": 5}', priority => 9) AS prepared \gset
PREPARE TRANSACTION 'aq_enqueue';
COMMIT PREPARED 'aq_enqueue';
SELECT block_id = :prepared AS found, payload
FROM pgq.claim('hq', worker_id => :w, wait => '10 min');
SELECT pgq.complete(:prepared, worker_id => :w);
SELECT pgq.drop_group('hq');

-- a claim in a read-only transaction writes nothing and is allowed
BEGIN READ ONLY;
SELECT count(*) AS none_pending FROM pgq.claim('aq', worker_id => :w);
COMMIT;
SELECT pgq.drop_group('aq');
SELECT blocks_held FROM pgq.workers WHERE worker_id = :w;
DROP FUNCTION try(text);
