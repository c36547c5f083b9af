-- pgq transaction mode: the claim deletes the block, COMMIT consumes it
BEGIN;
SELECT block_id FROM pgq.claim('g');
COMMIT;
