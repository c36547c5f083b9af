-- Every bad input gets an error with a proper SQLSTATE and leaves nothing behind.
CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
CREATE TABLE t (a int);
INSERT INTO t VALUES (1), (2);
CREATE SEQUENCE s;
CREATE FUNCTION writer() RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO t VALUES (3); RETURN 3; END $$;
SELECT pgq.create_group('exists', 'SELECT a FROM t', 10);

SELECT sql, try(sql) FROM (VALUES
    -- names, sizes, modes
    ($$SELECT pgq.create_group(NULL, 'SELECT 1')$$),
    ($$SELECT pgq.create_group('', 'SELECT 1')$$),
    ($$SELECT pgq.create_group(repeat('n', 129), 'SELECT 1')$$),
    ($$SELECT pgq.create_group('x', NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', 0)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', -5)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', 1000001)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', mode => NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', mode => 'bogus')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', lease => NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', lease => '0')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', lease => '-5 minutes')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', lease => '1 month')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', lease => '367 days')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', max_attempts => NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', max_attempts => 0)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', async => NULL)$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', timeout => '1 second')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', async => true, timeout => '0')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', async => true, timeout => '-1 second')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', async => true, timeout => '1 month')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1', async => true, timeout => '0.5 ms')$$),
    ($$SELECT pgq.create_group('x', 'SELEC 1', async => true)$$),
    ($$SELECT pgq.create_group('x', 'SELECT ''a''::text', async => true)$$),
    ($$SELECT pgq.create_group('x', 'SELECT a FROM t FOR UPDATE', async => true)$$),
    -- queries that do not parse, or give no usable ids
    ($$SELECT pgq.create_group('x', 'SELEC 1')$$),
    ($$SELECT pgq.create_group('x', '')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1; SELECT 2')$$),
    ($$SELECT pgq.create_group('x', 'SELECT a FROM no_such_table')$$),
    ($$SELECT pgq.create_group('x', 'SELECT FROM t')$$),
    ($$SELECT pgq.create_group('x', 'SELECT ''a''::text')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1.5')$$),
    ($$SELECT pgq.create_group('x', 'SELECT NULL::int')$$),
    ($$SELECT pgq.create_group('x', 'VALUES (1), (2), (NULL)')$$),
    -- queries that are not one read-only SELECT, VALUES or WITH query
    ($$SELECT pgq.create_group('x', 'CREATE TABLE made (a int)')$$),
    ($$SELECT pgq.create_group('x', 'INSERT INTO t VALUES (9) RETURNING a')$$),
    ($$SELECT pgq.create_group('x', 'DELETE FROM t RETURNING a')$$),
    ($$SELECT pgq.create_group('x', 'UPDATE t SET a = a RETURNING a')$$),
    ($$SELECT pgq.create_group('x', 'WITH d AS (DELETE FROM t RETURNING a) SELECT a FROM d')$$),
    ($$SELECT pgq.create_group('x', 'SELECT a FROM t FOR UPDATE')$$),
    ($$SELECT pgq.create_group('x', 'SELECT a FROM (SELECT a FROM t FOR SHARE) s')$$),
    ($$SELECT pgq.create_group('x', 'SELECT a FROM t WHERE a IN (SELECT a FROM t FOR KEY SHARE)')$$),
    ($$SELECT pgq.create_group('x', 'SELECT 1 INTO made')$$),
    ($$SELECT pgq.create_group('x', 'EXPLAIN SELECT 1')$$),
    ($$SELECT pgq.create_group('x', 'COMMIT')$$),
    ($$SELECT pgq.create_group('x', 'SELECT writer()')$$),
    ($$SELECT pgq.create_group('x', 'SELECT nextval(''s'')')$$),
    -- an existing name with another definition
    ($$SELECT pgq.create_group('exists', 'SELECT a FROM t ORDER BY a')$$),
    ($$SELECT pgq.create_group('exists', 'SELECT a FROM t', 11)$$),
    ($$SELECT pgq.create_group('exists', 'SELECT a FROM t', 10, mode => 'lease')$$),
    ($$SELECT pgq.create_group('exists', 'SELECT a FROM t', 10, lease => '1 hour')$$),
    ($$SELECT pgq.create_group('exists', 'SELECT a FROM t', 10, max_attempts => 9)$$),
    -- claims
    ($$SELECT pgq.claim(NULL)$$),
    ($$SELECT pgq.claim('')$$),
    ($$SELECT pgq.claim('exists', NULL)$$),
    ($$SELECT pgq.claim('exists', 0)$$),
    ($$SELECT pgq.claim('exists', -1)$$),
    ($$SELECT pgq.claim('exists', 10001)$$),
    ($$SELECT pgq.claim('no such group')$$),
    ($$SELECT pgq.drop_group(NULL)$$),
    ($$SELECT pgq.drop_group('')$$),
    ($$SELECT pgq.drop_group(repeat('n', 129))$$)
) AS cases(sql);

-- claims inside a transaction block, where the mode's checks pass
BEGIN;
SELECT try($$SELECT pgq.claim('no such group')$$);
SELECT try($$SELECT pgq.claim('exists', wait => '-1s')$$);
ROLLBACK;

-- nothing was left behind
SELECT group_name FROM pgq.groups;
SELECT count(*) AS blocks FROM pgq.blocks;
SELECT a FROM t ORDER BY a;
SELECT to_regclass('made') AS made;
SELECT last_value, is_called FROM s;

SELECT pgq.drop_group('exists');
DROP FUNCTION try(text);
DROP FUNCTION writer();
DROP TABLE t;
DROP SEQUENCE s;
