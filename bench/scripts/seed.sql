-- the seed's plain-SQL query-group design: take the first unlocked row,
-- delete it, commit
BEGIN;
SELECT id FROM q ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
DELETE FROM q WHERE id = :id;
COMMIT;
