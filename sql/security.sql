-- pgq's own SQL cannot be redirected through search_path.
CREATE SCHEMA regress_evil;
CREATE FUNCTION regress_evil.always(text, text) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text,
                                FUNCTION = regress_evil.always);
CREATE FUNCTION regress_evil.always8(bigint, bigint) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_evil.= (LEFTARG = bigint, RIGHTARG = bigint,
                                FUNCTION = regress_evil.always8);
CREATE OPERATOR regress_evil.>= (LEFTARG = bigint, RIGHTARG = bigint,
                                 FUNCTION = regress_evil.always8);
CREATE FUNCTION regress_evil.nextval(regclass) RETURNS bigint
    LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION regress_evil.current_setting(text) RETURNS text
    LANGUAGE sql AS 'SELECT ''hijacked''';
CREATE FUNCTION regress_evil.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE FUNCTION regress_evil.unnest(bigint[]) RETURNS SETOF bigint
    LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION regress_evil.array_remove(regrole[], regrole) RETURNS regrole[]
    LANGUAGE sql AS 'SELECT $1';
SET search_path = regress_evil, pg_catalog, public;
SELECT pgq.create_group('one', 'SELECT 1', 1);
-- with the planted "=", this would find group "one" and fail or join it
SELECT pgq.create_group('two', 'SELECT 2', 1);
BEGIN;
SELECT ids FROM pgq.claim('two');
COMMIT;
BEGIN;
SELECT ids FROM pgq.claim('one');
ROLLBACK;
SELECT pgq.drop_group('one');
-- queues, with the same plants: keys, claims, results and grants hold
SELECT pgq.create_queue('evilq');
SELECT pgq.enqueue('evilq', '{"a": 1}', key => 'k1') AS e1 \gset
SELECT pgq.enqueue('evilq', '{"a": 2}', key => 'k1') = :e1 AS same_item;
SELECT cardinality(pgq.enqueue_many('evilq', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[])) AS many;
SELECT payload FROM pgq.claim('evilq', 3) ORDER BY block_id;
SELECT cardinality(pgq.complete_many(ARRAY[:e1]::bigint[], ARRAY[1], ARRAY['{"r": 1}']::jsonb[])) AS completed;
SELECT state, result FROM pgq.result(:e1);
SELECT pgq.grant('evilq', 'public', 'produce');
SELECT pgq.revoke('evilq', 'public', 'produce');
RESET search_path;
SELECT group_name, producers, finished_at IS NULL AS unfinished FROM pgq.groups WHERE group_name = 'evilq';
SELECT key, state, finished_at > '2001-01-01' AS real_time FROM pgq.items ORDER BY item_id;
SELECT pgq.drop_group('evilq');
SELECT group_name, search_path, block_id > 0 AS real_block_id
FROM pgq.groups LEFT JOIN pgq.blocks USING (group_id) ORDER BY group_name;
SELECT pgq.drop_group('two');
DROP SCHEMA regress_evil CASCADE;

-- The group's query runs as the role that calls create_group, never with
-- the rights pgq uses for its own tables.
CREATE TABLE secret (id int);
INSERT INTO secret VALUES (1), (2);
CREATE ROLE regress_alice;
GRANT USAGE ON SCHEMA pgq TO regress_alice;
SET ROLE regress_alice;
SELECT pgq.create_group('secret', 'SELECT id FROM secret', 1);
RESET ROLE;
SELECT count(*) FROM pgq.groups WHERE group_name = 'secret';
GRANT SELECT ON secret TO regress_alice;
SET ROLE regress_alice;
SELECT pgq.create_group('secret', 'SELECT id FROM secret', 1);
RESET ROLE;
SELECT owner, total_ids FROM pgq.group_stats WHERE group_name = 'secret';
SELECT pgq.drop_group('secret');
REVOKE ALL ON SCHEMA pgq FROM regress_alice;
DROP TABLE secret;
DROP ROLE regress_alice;
