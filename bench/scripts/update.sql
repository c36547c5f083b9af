-- durable-commit limit: one single-row UPDATE by primary key per commit
\set id random(1, 1000)
UPDATE counter SET n = n + 1 WHERE id = :id;
