-- A lease-mode pgq.complete, pgq.release or pgq.fail records only a wake
-- at commit, which PREPARE TRANSACTION lets through: a transaction that
-- made one can be prepared (its COMMIT PREPARED wakes no waiting claim,
-- which sees the change at its next recheck).  The reference said such a
-- transaction could not be prepared, until a review (issue 21) found that
-- it can; this pins what the reference now says.
SELECT pgq.create_group('pl', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease', max_attempts => 5);
SELECT block_id AS b, attempt AS a FROM pgq.claim('pl') \gset
BEGIN;
SELECT pgq.complete(:b, attempt => :a);
PREPARE TRANSACTION 'pl_complete';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'pl\_%';
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
WHERE gid LIKE 'pl\_%' \gexec
SELECT block_id AS b, attempt AS a FROM pgq.claim('pl') \gset
BEGIN;
SELECT pgq.release(:b, attempt => :a);
PREPARE TRANSACTION 'pl_release';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'pl\_%';
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
WHERE gid LIKE 'pl\_%' \gexec
SELECT block_id AS b, attempt AS a FROM pgq.claim('pl') \gset
BEGIN;
SELECT pgq.fail(:b, 'x', attempt => :a);
PREPARE TRANSACTION 'pl_fail';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'pl\_%';
SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts
WHERE gid LIKE 'pl\_%' \gexec
SELECT pgq.drop_group('pl');
