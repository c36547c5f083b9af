-- the seed design's claim against the size of its table (bench/run "grow"):
-- gq is the table of the size under test, found through search_path; rolled
-- back, so that the table keeps its size however long the run lasts
BEGIN;
SELECT id FROM gq ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
DELETE FROM gq WHERE id = :id;
ROLLBACK;
