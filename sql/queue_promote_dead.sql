-- A lease-mode claim of a queue moves no more due items back to pending
-- than it asks for (promote_due() in queue.c).  Items whose lease ran out
-- on their last attempt are dead-lettered by that move, and are not
-- claimable: they must not use up what the claim asks for.  Here the
-- oldest due item is such an item, and a delayed item is due after it: a
-- claim of one item must dead-letter the first and take the second, not
-- come back empty (a waiting claim would end with nothing, since its
-- attempt dead-lettered something).  Found by the sixteenth read of issue
-- 21.
-- A queue of one attempt whose item 1 was claimed and whose item 2 is
-- delayed; item 1's lease ran out, then item 2's run came.
CREATE FUNCTION dead_then_delayed(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgq.create_queue(q, max_attempts => 1);
    PERFORM pgq.enqueue(q, '{"n": 1}');
    PERFORM pgq.claim(q, 1);
    PERFORM pgq.enqueue(q, '{"n": 2}', run_at => now() + interval '1 hour');
    UPDATE pgq.items SET due_at = now() - (3 - (payload->>'n')::int) * interval '1 s'
    WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = q);
    RETURN q;
END $$;
SELECT dead_then_delayed('pdq');
SELECT payload->>'n' AS n, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pdq')
ORDER BY 1;
SELECT c.payload->>'n' AS got, c.attempt FROM pgq.claim('pdq', 1) c;
SELECT payload->>'n' AS n, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pdq')
ORDER BY 1;
-- the same with a waiting claim: it must not end empty
SELECT dead_then_delayed('pdw');
SELECT c.payload->>'n' AS got FROM pgq.claim('pdw', 1, wait => '10 s') c;
-- a claim of two takes both due items behind three dead-lettered ones
SELECT pgq.create_queue('pd2', max_attempts => 1);
SELECT cardinality(pgq.enqueue_many('pd2', ARRAY(SELECT jsonb_build_object('n', g)
                                                 FROM generate_series(1, 3) g)));
SELECT count(*) AS taken FROM pgq.claim('pd2', 3);
SELECT cardinality(pgq.enqueue_many('pd2', ARRAY(SELECT jsonb_build_object('n', g)
                                                 FROM generate_series(4, 5) g),
                                    run_at => now() + interval '1 hour'));
UPDATE pgq.items SET due_at = now() - (10 - (payload->>'n')::int) * interval '1 s'
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pd2');
SELECT c.payload->>'n' AS got FROM pgq.claim('pd2', 2) c ORDER BY 1;
SELECT payload->>'n' AS n, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pd2')
ORDER BY 1;
-- Items that a dead-lettered item's ordering key is handed on to are
-- pending in the claim's transaction, and hidden from other claims until
-- it ends, as the due items it moves are: they count as made pending, so
-- that a claim does not go on to dead-letter more heads and hand their
-- keys on too.  Items 1 (key k1) and 2 (key k2) ran out of attempts, 3 (k1)
-- and 4 (k2) wait behind them: a claim of one in an open transaction
-- dead-letters item 1 and takes item 3, and leaves item 2 running, for
-- the next claim.
SELECT pgq.create_queue('pdk', max_attempts => 1);
SELECT pgq.enqueue('pdk', jsonb_build_object('n', n),
                   ordering_key => 'k' || n) > 0 AS enqueued
FROM generate_series(1, 2) n;
SELECT count(*) AS taken FROM pgq.claim('pdk', 2);
SELECT pgq.enqueue('pdk', jsonb_build_object('n', n),
                   ordering_key => 'k' || (n - 2)) > 0 AS enqueued
FROM generate_series(3, 4) n;
UPDATE pgq.items SET due_at = now() - (10 - (payload->>'n')::int) * interval '1 s'
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pdk')
  AND state = 'c';
BEGIN;
SELECT c.payload->>'n' AS got FROM pgq.claim('pdk', 1) c;
SELECT payload->>'n' AS n, state FROM pgq.items
WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'pdk')
ORDER BY 1;
COMMIT;
SELECT pgq.drop_group('pdq');
SELECT pgq.drop_group('pdw');
SELECT pgq.drop_group('pd2');
SELECT pgq.drop_group('pdk');
DROP FUNCTION dead_then_delayed(text);
