-- A lease-mode queue's claims start from its hint, a place in claim order
-- (priority, then item id) past the items found consumed or held, not at
-- the head of items_pending_idx, where the dead entries of finished items
-- pile up while an old snapshot keeps them.
SELECT pgq.create_queue('hq', max_attempts => 3);
SELECT cardinality(pgq.enqueue_many('hq', ARRAY(SELECT jsonb_build_object('n', g)
                                                FROM generate_series(1, 300) g)));

-- a prepared transaction with an xid holds back the xmin horizon: nothing
-- finished from here on can be cleaned up, not even by index entry killing
BEGIN;
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
PREPARE TRANSACTION 'hold_xmin_q';

\set ECHO none
\o /dev/null
SELECT 'SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim(''hq'')'
FROM generate_series(1, 200) \gexec
\o
\set ECHO all

SELECT pending, done FROM pgq.queue_stats WHERE queue_name = 'hq';

-- the 201st claim reads an index entry or two, not the 200 dead ones (the
-- counter also holds earlier transactions' reads until the statistics are
-- flushed, hence the range)
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) AS before \gset
SELECT payload FROM pgq.claim('hq');
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) - :before
       BETWEEN 1 AND 4 AS from_hint;
ROLLBACK;

-- the rolled-back claim's item comes first again: the abort lowered the hint
SELECT block_id AS i201, attempt AS a201, payload FROM pgq.claim('hq') \gset
SELECT :'payload' AS payload;
ROLLBACK PREPARED 'hold_xmin_q';

-- whatever makes an item pending before the hint lowers it at commit, and
-- claims take it in its place: an enqueue of higher priority,
SELECT pgq.enqueue('hq', '{"urgent": 1}', priority => 5) AS urgent \gset
SELECT block_id = :urgent AS urgent_first, payload FROM pgq.claim('hq');
SELECT pgq.complete(:urgent, attempt => 1);
-- an item given back,
SELECT pgq.release(:i201, attempt => :a201);
SELECT block_id = :i201 AS released_first, attempt FROM pgq.claim('hq');
-- a failed attempt whose retry is due at once (moved back to pending by the
-- claim that takes it),
SELECT pgq.fail(:i201, 'boom', attempt => 2, retry_after => '0');
SELECT block_id = :i201 AS retry_first, attempt FROM pgq.claim('hq');
-- a dead item retried by hand
SELECT pgq.fail(:i201, 'boom again', attempt => 3);
SELECT state FROM pgq.items WHERE item_id = :i201;
SELECT block_id <> :i201 AS next_one, payload FROM pgq.claim('hq');
SELECT pgq.retry(:i201);
SELECT block_id = :i201 AS retried_first, payload FROM pgq.claim('hq');
SELECT pgq.drop_group('hq');

-- an ordering key handed on: k2 waits for k1, and becomes pending behind
-- the hint once k1 is done
SELECT pgq.create_queue('oq');
SELECT pgq.enqueue('oq', '{"k": 1}', ordering_key => 'k') AS k1 \gset
SELECT pgq.enqueue('oq', '{"k": 2}', ordering_key => 'k') AS k2 \gset
SELECT cardinality(pgq.enqueue_many('oq', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]));
SELECT block_id = :k1 AS k1_first FROM pgq.claim('oq');
SELECT payload FROM pgq.claim('oq');
SELECT pgq.complete(:k1, attempt => 1);
SELECT block_id = :k2 AS handed_on FROM pgq.claim('oq');

-- an enqueue in a prepared transaction: PREPARE lets it through, but
-- COMMIT PREPARED lowers no hint, so claims find the item by a full scan,
-- which a claim that comes up short makes at most once a second (a waiting
-- claim looks again every pgq.wait_recheck_interval)
BEGIN;
SELECT pgq.enqueue('oq', '{"prepared": 1}', priority => 9) AS p \gset
PREPARE TRANSACTION 'q_enqueue';
COMMIT PREPARED 'q_enqueue';
SELECT count(*) FROM pgq.claim('oq', 2);
SELECT block_id = :p AS found, payload FROM pgq.claim('oq', wait => '10 min');
SELECT pending, running FROM pgq.queue_stats WHERE queue_name = 'oq';
SELECT pgq.drop_group('oq');

-- a claim over a list probes each queue for work before it claims (all of
-- them in a new session, which served none last); a queue with a hint is
-- probed from it, not from the head of items_pending_idx
SELECT pgq.create_queue('lq1');
SELECT pgq.create_queue('lq2');
SELECT cardinality(pgq.enqueue_many('lq1', ARRAY(SELECT jsonb_build_object('n', g)
                                                 FROM generate_series(1, 300) g)));
BEGIN;
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
PREPARE TRANSACTION 'hold_xmin_l';
\set ECHO none
\o /dev/null
SELECT 'SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim(''lq1'')'
FROM generate_series(1, 200) \gexec
\o
\set ECHO all
\c
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) AS before \gset
SELECT payload FROM pgq.claim(ARRAY['lq2', 'lq1']);
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) - :before
       BETWEEN 1 AND 8 AS probed_from_hint;
ROLLBACK;
ROLLBACK PREPARED 'hold_xmin_l';

-- what lies below the hint (here an item of a prepared transaction, whose
-- COMMIT PREPARED lowers nothing) the probe of a queue with nothing past its
-- hint finds at the rate of full scans, and it lowers the hint to it, so
-- that the claim takes it
SELECT pgq.create_queue('lq3');
SELECT cardinality(pgq.enqueue_many('lq3', '{"{}", "{}"}'));
SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('lq3', 2);
BEGIN;
SELECT pgq.enqueue('lq3', '{"prepared": 1}', priority => 9) AS p \gset
PREPARE TRANSACTION 'l_enqueue';
COMMIT PREPARED 'l_enqueue';
\c
SELECT block_id = :p AS found_below_hint, payload FROM pgq.claim(ARRAY['lq2', 'lq3']);
SELECT pgq.drop_group('lq1');
SELECT pgq.drop_group('lq2');
SELECT pgq.drop_group('lq3');

-- transaction-mode queues claim from their hint too: a claim consumed at
-- commit moves it past the item, a rolled-back one lowers it back
SELECT pgq.create_queue('tq', mode => 'transaction');
SELECT cardinality(pgq.enqueue_many('tq', ARRAY(SELECT jsonb_build_object('n', g)
                                                FROM generate_series(1, 300) g)));
BEGIN;
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
PREPARE TRANSACTION 'hold_xmin_t';
\set ECHO none
\o /dev/null
SELECT unnest(ARRAY['BEGIN', 'SELECT block_id FROM pgq.claim(''tq'')', 'COMMIT'])
FROM generate_series(1, 200) \gexec
\o
\set ECHO all
SELECT pending, done FROM pgq.queue_stats WHERE queue_name = 'tq';
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) AS before \gset
SELECT payload FROM pgq.claim('tq');
SELECT pg_stat_get_xact_tuples_returned('pgq.items_pending_idx'::regclass) - :before
       BETWEEN 1 AND 4 AS from_hint;
ROLLBACK;
ROLLBACK PREPARED 'hold_xmin_t';
BEGIN;
SELECT payload FROM pgq.claim('tq');
COMMIT;
-- and an enqueue of higher priority lowers it at commit
SELECT pgq.enqueue('tq', '{"urgent": 1}', priority => 5) AS urgent \gset
BEGIN;
SELECT block_id = :urgent AS urgent_first, payload FROM pgq.claim('tq');
COMMIT;
SELECT pgq.drop_group('tq');
