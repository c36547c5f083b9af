-- A Que-style job queue in plain SQL, written for this benchmark after the
-- design that Que (Ruby) made known: jobs in a table keyed by
-- (priority, run_at, job_id); a worker walks it in that order with a
-- recursive query, trying pg_try_advisory_lock() on each job until one is
-- taken; it reads the job again (another worker may have finished it after
-- the walk's snapshot and before the lock: then it only unlocks), works,
-- deletes it and unlocks.
WITH RECURSIVE walk AS (
    (SELECT job_id, priority, run_at, pg_try_advisory_lock(job_id) AS locked
     FROM que_jobs
     WHERE run_at <= now()
     ORDER BY priority, run_at, job_id
     LIMIT 1)
    UNION ALL
    (SELECT n.job_id, n.priority, n.run_at, pg_try_advisory_lock(n.job_id)
     FROM walk w,
          LATERAL (SELECT j.job_id, j.priority, j.run_at
                   FROM que_jobs j
                   WHERE j.run_at <= now()
                     AND (j.priority, j.run_at, j.job_id)
                         > (w.priority, w.run_at, w.job_id)
                   ORDER BY j.priority, j.run_at, j.job_id
                   LIMIT 1) n
     WHERE NOT w.locked)
)
SELECT job_id AS id, priority AS pri, run_at AS at FROM walk WHERE locked LIMIT 1 \gset
SELECT count(*) AS ok, min(args::text) AS args FROM que_jobs
WHERE priority = :pri AND run_at = :at AND job_id = :id \gset
\if :ok
DELETE FROM que_jobs WHERE priority = :pri AND run_at = :at AND job_id = :id;
\endif
SELECT pg_advisory_unlock(:id);
