-- Isolation between roles (see privilege.c): grants name roles the way
-- PostgreSQL's functions that take a role as text do; a role cannot take a
-- name first and have another role join its group; an id or a name of a
-- group that a role may not use tells it nothing more than an id or a name
-- that does not exist; and no call holds a lock that the owner's calls wait
-- on unless its caller may act on that group.
CREATE FUNCTION roles_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION roles_try(text) TO PUBLIC;
CREATE ROLE regress_r_owner;
CREATE ROLE regress_r_worker;
CREATE ROLE regress_r_squatter;
CREATE ROLE "Public";
GRANT USAGE ON SCHEMA pgq
    TO regress_r_owner, regress_r_worker, regress_r_squatter, "Public";

-- pgq.grant and pgq.revoke: public in lower case is PUBLIC; any other
-- spelling is a role's name, in double quotes a quoted identifier
SET ROLE regress_r_owner;
SELECT pgq.create_queue('rq_grants');
SELECT pgq.grant('rq_grants', 'Public');
SELECT pgq.grant('rq_grants', '"Public"', 'produce');
SELECT pgq.grant('rq_grants', '"regress_r_worker"', 'produce');
SELECT pgq.grant('rq_grants', 'public', 'produce');
SELECT roles_try($$SELECT pgq.grant('rq_grants', 'PUBLIC')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"public"')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"Public')$$);
SELECT roles_try($$SELECT pgq.grant('rq_grants', '"Pub"lic"')$$);
SELECT roles_try($$SELECT pgq.revoke('rq_grants', 'Regress_r_worker', 'produce')$$);
RESET ROLE;
SELECT consumers, producers FROM pgq.groups WHERE group_name = 'rq_grants';
-- the role Public consumes; a role that is not Public does not
SET ROLE "Public";
SELECT count(*) FROM pgq.claim('rq_grants');
RESET ROLE;
SET ROLE regress_r_squatter;
SELECT roles_try($$SELECT * FROM pgq.claim('rq_grants')$$);
RESET ROLE;
SET ROLE regress_r_owner;
SELECT pgq.revoke('rq_grants', '"Public"', 'produce');
SELECT pgq.revoke('rq_grants', 'public', 'produce');
SELECT pgq.revoke('rq_grants', 'regress_r_worker', 'produce');
SELECT pgq.drop_group('rq_grants');
RESET ROLE;

REVOKE ALL ON SCHEMA pgq
    FROM regress_r_owner, regress_r_worker, regress_r_squatter, "Public";
DROP FUNCTION roles_try(text);
DROP ROLE regress_r_owner, regress_r_worker, regress_r_squatter, "Public";
