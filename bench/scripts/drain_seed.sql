-- consume 10000 rows of the seed design's table gq (found through
-- search_path) in one statement: the seed's claim and delete, 10000 at a time
DELETE FROM gq WHERE id IN (SELECT id FROM gq ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED);
