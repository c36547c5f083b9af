-- visibility-timeout design, one row: hide it for 30 s, then delete it
UPDATE vt SET vt_until = now() + interval '30 s'
  WHERE id IN (SELECT id FROM vt WHERE vt_until < now()
               ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id \gset
DELETE FROM vt WHERE id = :id;
