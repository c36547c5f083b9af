-- An advisory-mode queue's hint is a place in claim order
-- (pgq_item_position(): (32767 - priority) << 48 | item id), and a claim
-- scans items_pending_idx from it.  Claims one at a time, each starting
-- where the last one left the hint, keep priority order at the edges of
-- that encoding: priorities 32767 and 0, and item ids from 2^48 on, which
-- have no place of their own.
SELECT pgq.create_queue('pq', mode => 'advisory');
SELECT pgq.register_worker('pq-worker') AS w \gset

-- the highest and the lowest priority, the lowest enqueued first
SELECT cardinality(pgq.enqueue_many('pq',
       ARRAY['{"p": 0, "n": 1}', '{"p": 0, "n": 2}']::jsonb[],
       priority => 0)) AS enqueued;
SELECT cardinality(pgq.enqueue_many('pq',
       ARRAY['{"p": 32767, "n": 1}', '{"p": 32767, "n": 2}']::jsonb[],
       priority => 32767)) AS enqueued;
SELECT pgq.enqueue('pq', '{"p": 1}', priority => 1) > 0 AS enqueued;
SELECT payload FROM pgq.claim('pq', worker_id => :w);
SELECT payload FROM pgq.claim('pq', worker_id => :w);
SELECT payload FROM pgq.claim('pq', worker_id => :w);
-- enqueued after the hint passed priority 32767: it moves the hint back
SELECT pgq.enqueue('pq', '{"p": 32767, "n": 3}', priority => 32767) > 0
       AS enqueued;
SELECT payload FROM pgq.claim('pq', worker_id => :w);
SELECT payload FROM pgq.claim('pq', worker_id => :w);
SELECT payload FROM pgq.claim('pq', worker_id => :w);
SELECT count(*) AS none_left FROM pgq.claim('pq', worker_id => :w);
SELECT pgq.drop_group('pq');

-- Ids from 2^48 - 2 on: 2^48 - 2 is the last id with a place; the next
-- ones have none (place 0), so that the place after a place never carries
-- into the priority.  A claim whose last item looked at is 2^48 - 1 must
-- not move the hint past the items of the same priority after it.
SELECT pgq.create_queue('pq', mode => 'advisory');
SELECT last_value AS ids_were FROM pgq.block_id_seq \gset
SELECT setval('pgq.block_id_seq', (1::bigint << 48) - 3) > 0 AS set;
SELECT pgq.enqueue('pq', '{"p": 5, "n": 1}', priority => 5)
       - (1::bigint << 48) AS id_minus_2_48;
SELECT pgq.enqueue('pq', '{"p": 5, "n": 2}', priority => 5)
       - (1::bigint << 48) AS id_minus_2_48;
SELECT pgq.enqueue('pq', '{"p": 5, "n": 3}', priority => 5)
       - (1::bigint << 48) AS id_minus_2_48;
SELECT pgq.enqueue('pq', '{"p": 1}', priority => 1)
       - (1::bigint << 48) AS id_minus_2_48;
SELECT block_id - (1::bigint << 48) AS id_minus_2_48, payload
FROM pgq.claim('pq', 2, worker_id => :w);
-- the third item of priority 5, pending and held by nobody, comes next
SELECT block_id - (1::bigint << 48) AS id_minus_2_48, payload
FROM pgq.claim('pq', worker_id => :w);
SELECT block_id - (1::bigint << 48) AS id_minus_2_48, payload
FROM pgq.claim('pq', worker_id => :w);
SELECT pgq.drop_group('pq');
SELECT setval('pgq.block_id_seq', :ids_were) > 0 AS set_back;
