-- A claim over a list probes each queue from where its claims start: the
-- shared hint, or a place below it where the claiming transaction itself
-- made an item pending (an enqueue of higher priority here), which the
-- shared hint moves to only at commit.  The one-name form claims such an
-- item; the list form must not take the queue for empty.
SELECT pgq.create_queue('own1', mode => 'transaction');
SELECT pgq.create_queue('own2', mode => 'transaction');
SELECT cardinality(pgq.enqueue_many('own1', '{"{}", "{}"}'));
BEGIN;
SELECT count(*) FROM pgq.claim('own1', 2);
COMMIT;
BEGIN;
-- comes up short: its look below the hint is the one the rate allows now
SELECT count(*) FROM pgq.claim('own1');
SELECT pgq.enqueue('own1', '{"urgent": 1}', priority => 5) AS urgent \gset
SELECT block_id = :urgent AS own_item, group_name
FROM pgq.claim(ARRAY['own2', 'own1']);
ROLLBACK;
SELECT pgq.drop_group('own1');
SELECT pgq.drop_group('own2');
