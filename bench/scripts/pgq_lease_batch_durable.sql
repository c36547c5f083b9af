-- the same in a transaction block: the claim does not switch
-- synchronous_commit off there, so COMMIT is durable
BEGIN;
SELECT count(pgq.complete(c.block_id, attempt => c.attempt))
  FROM pgq.claim('lg', 100) c;
COMMIT;
