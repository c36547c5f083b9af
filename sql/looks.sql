-- A waiting lease claim in a transaction that has written.  Each attempt
-- that claims nothing runs in a subtransaction that is rolled back; its
-- look for due blocks saw only the writes of the transaction, which stand,
-- so the rollback must neither forget what the look recorded nor wake the
-- group's waiters.  Had it done both, the claim would wake itself and look
-- again at once, in a loop, until its wait ran out: its transaction would
-- read the group's blocks thousands of times, not a few.  Had it forgotten
-- only, the next claim would walk the group again.
SELECT pgq.create_group('lw', 'SELECT g FROM generate_series(1, 100) g', 1,
                        mode => 'lease', lease => '1 hour');
SELECT count(*) AS leased FROM pgq.claim('lw', 100);
-- a deadline brought a second sooner by hand: claims forget what the last
-- look found, and the next claim looks
UPDATE pgq.blocks SET lease_until = lease_until - interval '1 second'
WHERE block_id = (SELECT min(block_id) FROM pgq.blocks b
                  JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'lw');
CREATE TABLE lw_writes (x int);
BEGIN;
INSERT INTO lw_writes VALUES (1);
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) AS before \gset
SELECT count(*) AS claimed FROM pgq.claim('lw', wait => '200 ms');
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) - :before
       BETWEEN 100 AND 2000 AS a_few_looks;
-- and the record stands: the next claim does not walk the group again
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) AS before \gset
SELECT count(*) AS claimed FROM pgq.claim('lw');
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) - :before
       < 50 AS record_kept;
COMMIT;
DROP TABLE lw_writes;
SELECT pgq.drop_group('lw');
