-- The role a pgq call serves is forgotten when an error ends the call, also
-- when an exception block catches the error: a later call in the same
-- transaction, by another role, is not taken for the first role's.
CREATE ROLE regress_fc_alice;
CREATE ROLE regress_fc_bob;
GRANT USAGE ON SCHEMA pgq TO regress_fc_alice, regress_fc_bob;
SET pgq.max_locks_per_role = 1;
BEGIN;
SET LOCAL ROLE regress_fc_alice;
SELECT pgq.register_worker() > 0 AS registered;
-- alice's call fails inside pgq, and her exception block catches it
DO $$
BEGIN
    PERFORM pgq.claim('fc_no_such_group');
EXCEPTION WHEN undefined_object THEN
    RAISE NOTICE 'caught: %', SQLERRM;
END
$$;
SET LOCAL ROLE regress_fc_bob;
-- bob's placeholder lock is bob's, not one more of alice's
SELECT pgq.register_worker() > 0 AS registered;
RESET ROLE;
SELECT owner, count(*) FROM pgq.workers
WHERE owner IN ('regress_fc_alice', 'regress_fc_bob')
GROUP BY owner ORDER BY owner;
ROLLBACK;
-- and the same after a subtransaction that the caller rolls back itself
BEGIN;
SET LOCAL ROLE regress_fc_alice;
SELECT pgq.register_worker() > 0 AS registered;
SAVEPOINT s;
SELECT pgq.claim('fc_no_such_group');
ROLLBACK TO SAVEPOINT s;
SET LOCAL ROLE regress_fc_bob;
SELECT pgq.register_worker() > 0 AS registered;
ROLLBACK;
RESET pgq.max_locks_per_role;
REVOKE ALL ON SCHEMA pgq FROM regress_fc_alice, regress_fc_bob;
DROP ROLE regress_fc_alice, regress_fc_bob;
