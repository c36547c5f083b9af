-- pgq lease mode, 100 blocks: claim and complete them in ONE statement, so
-- in the claim's transaction (pgq has no batch complete yet).  Outside a
-- transaction block a lease claim sets synchronous_commit = off for its
-- transaction, so these completes commit asynchronously.
SELECT count(pgq.complete(c.block_id, attempt => c.attempt))
  FROM pgq.claim('lg', 100) c;
