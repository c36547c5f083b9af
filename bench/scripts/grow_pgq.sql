-- claim latency against the size of a group (bench/run "grow"): one
-- transaction-mode claim from group :g, rolled back, so that the group keeps
-- its size however long the run lasts
BEGIN;
SELECT block_id FROM pgq.claim(:g);
ROLLBACK;
