-- consume 10000 blocks of group :g in one transaction-mode claim (bench/run
-- "grow", to drain a group before measuring claims on what is left)
BEGIN;
SELECT count(*) FROM pgq.claim(:g, 10000);
COMMIT;
