-- pgq transaction-mode queue: the claim marks the item done, COMMIT
-- consumes it
BEGIN;
SELECT block_id, payload FROM pgq.claim('tq');
COMMIT;
