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
RESET search_path;
SELECT group_name, search_path, block_id > 0 AS real_block_id
FROM pgq.groups LEFT JOIN pgq.blocks USING (group_id) ORDER BY group_name;
SELECT pgq.drop_group('two');
DROP SCHEMA regress_evil CASCADE;

-- The group's query runs as the role that calls create_group.  (Until pgq
-- has a privilege model of its own, a role needs these grants to use it.)
CREATE TABLE secret (id int);
INSERT INTO secret VALUES (1), (2);
CREATE ROLE regress_alice;
GRANT USAGE ON SCHEMA pgq TO regress_alice;
GRANT SELECT, INSERT, UPDATE, DELETE ON pgq.groups, pgq.blocks TO regress_alice;
GRANT USAGE ON SEQUENCE pgq.block_id_seq TO regress_alice;
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
REVOKE ALL ON pgq.groups, pgq.blocks FROM regress_alice;
REVOKE ALL ON SEQUENCE pgq.block_id_seq FROM regress_alice;
REVOKE ALL ON SCHEMA pgq FROM regress_alice;
DROP TABLE secret;
DROP ROLE regress_alice;
