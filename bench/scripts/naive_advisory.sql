-- a naive advisory-lock design in plain SQL
SELECT id FROM aq WHERE pg_try_advisory_lock(id) LIMIT 1 \gset
DELETE FROM aq WHERE id = :id;
SELECT pg_advisory_unlock(:id);
