-- round-trip limit: one statement, nothing written
SELECT 1;
