-- visibility-timeout design, 100 rows: hide them for 30 s, then delete them
WITH c AS (UPDATE vt SET vt_until = now() + interval '30 s'
             WHERE id IN (SELECT id FROM vt WHERE vt_until < now()
                          ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)
             RETURNING id)
SELECT array_agg(id) AS ids FROM c \gset
DELETE FROM vt WHERE id = ANY (:ids::bigint[]);
