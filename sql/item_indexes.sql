-- pgq.items' primary key is the item id alone (since 0.2): the calls that
-- read all of a queue's items (queue_stats, purge, the count for
-- pgq.max_queue_items, drop_group) read them state by state, each through
-- the partial index that holds that state.  With sequential scans off, a
-- statement that has an index path takes it: none of these calls may scan
-- pgq.items sequentially, and each still sees every item.
CREATE FUNCTION items_seq_scans() RETURNS bigint LANGUAGE sql AS $$
    SELECT seq_scan FROM pg_stat_xact_user_tables
    WHERE relid = 'pgq.items'::regclass
$$;
SELECT pgq.create_queue('ix', lease => '1 min');
-- an item in every state: pending, running, scheduled, waiting behind its
-- ordering key, done, dead, and done past retention (its payload stripped
-- by hand, as the maintenance pass does)
SELECT pgq.enqueue('ix', '{"s": "running"}', key => 'running') > 0 AS enqueued;
SELECT count(*) FROM pgq.claim('ix');
SELECT pgq.enqueue('ix', '{"s": "pending"}', key => 'pending') > 0 AS enqueued,
       pgq.enqueue('ix', '{"s": "scheduled"}', run_at => now() + '1 day') > 0 AS scheduled;
SELECT pgq.enqueue('ix', '{"s": "head"}', ordering_key => 'o', run_at => now() + '1 day') > 0 AS head;
SELECT pgq.enqueue('ix', '{"s": "waiting"}', ordering_key => 'o') > 0 AS waiting;
SELECT pgq.enqueue_many('ix', ARRAY['{"s": "done"}', '{"s": "dead"}', '{"s": "kept"}']::jsonb[],
                        ARRAY['done', 'dead', 'kept']) IS NOT NULL AS enqueued;
UPDATE pgq.items SET state = CASE key WHEN 'dead' THEN 'f' ELSE 'd' END,
                     finished_at = now() - '1 hour'::interval
WHERE key IN ('done', 'dead', 'kept');
UPDATE pgq.items SET payload = NULL WHERE key = 'kept';
SELECT pgq.create_queue('other');
SELECT cardinality(pgq.enqueue_many('other', array_agg('{}'::jsonb)))
FROM generate_series(1, 20);

SET enable_seqscan = off;
-- each check in one transaction, whose count of scans nothing else changes
BEGIN;
SELECT items_seq_scans() AS before \gset
SELECT pending, scheduled, running, done, dead, kept_keys, waiting
FROM pgq.queue_stats WHERE queue_name = 'ix';
SELECT items_seq_scans() - :before AS seq_scans;
COMMIT;

-- purge removes done items (the one past retention too), and dead ones
-- with dead => true
BEGIN;
SELECT items_seq_scans() AS before \gset
SELECT pgq.purge('ix', '1 minute', false) AS purged_done,
       pgq.purge('ix', '1 minute', true) AS purged_dead;
SELECT items_seq_scans() - :before AS seq_scans;
COMMIT;

-- an enqueue counts the queue against pgq.max_queue_items: its 5 items
-- (pending, running, scheduled, the head and the item waiting behind it)
BEGIN;
SELECT items_seq_scans() AS before \gset
SET LOCAL pgq.max_queue_items = 6;
SELECT pgq.enqueue('ix', '{"s": "sixth"}') > 0 AS sixth;
SELECT items_seq_scans() - :before AS seq_scans;
SAVEPOINT s;
SELECT pgq.enqueue('ix', '{"s": "seventh"}');
ROLLBACK TO s;
COMMIT;

-- a drop removes every item of the queue, whatever its state, and no other
SELECT group_id AS ix_id FROM pgq.groups WHERE group_name = 'ix' \gset
BEGIN;
SELECT items_seq_scans() AS before \gset
SELECT pgq.drop_group('ix');
SELECT items_seq_scans() - :before AS seq_scans;
COMMIT;
RESET enable_seqscan;
SELECT count(*) FILTER (WHERE i.group_id = :ix_id) AS ix_items,
       count(*) FILTER (WHERE g.group_name = 'other') AS other_items
FROM pgq.items i LEFT JOIN pgq.groups g USING (group_id);

-- pgq.fail of a transaction-mode item that has an ordering key, in a
-- transaction that claimed more items, looks for a later item of the key
-- among those that the transaction claimed, not among every item enqueued
-- after it, into any queue (which the primary key on the item id alone
-- would walk)
SELECT pgq.create_queue('tx', mode => 'transaction');
SELECT pgq.enqueue('tx', '{"s": "keyed"}', ordering_key => 'o') AS keyed \gset
SELECT pgq.enqueue('tx', '{"s": "plain"}') > 0 AS plain;
SELECT cardinality(pgq.enqueue_many('other', array_agg('{}'::jsonb)))
FROM generate_series(1, 5000);
CREATE FUNCTION items_read() RETURNS bigint LANGUAGE sql AS $$
    SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables
    WHERE relid = 'pgq.items'::regclass
$$;
BEGIN;
SELECT count(*) AS claimed FROM pgq.claim('tx', 2);
SELECT items_read() AS before \gset
SELECT pgq.fail(:keyed, 'failed') AS failed;
SELECT items_read() - :before < 1000 AS read_few;
COMMIT;
SELECT state FROM pgq.items WHERE item_id = :keyed;
SELECT pgq.drop_group('tx'), pgq.drop_group('other');
DROP FUNCTION items_read();
DROP FUNCTION items_seq_scans();
