-- the durable-commit limit in the transaction-mode cycle's three round
-- trips: the same single-row UPDATE between BEGIN and COMMIT
\set id random(1, 1000)
BEGIN;
UPDATE counter SET n = n + 1 WHERE id = :id;
COMMIT;
