-- What a group's owner who is not a superuser can do, and what other roles
-- are told when they try.
CREATE ROLE regress_ow_owner;
CREATE ROLE regress_ow_worker;
GRANT USAGE ON SCHEMA pgq TO regress_ow_owner, regress_ow_worker;
SET ROLE regress_ow_owner;
SELECT pgq.create_group('ow', 'SELECT g FROM generate_series(1, 3) g', 1,
                        mode => 'lease', max_attempts => 1);
SELECT pgq.grant('ow', 'regress_ow_worker');
RESET ROLE;

-- Dropping, pausing and granting are the owner's: pgq.grant() gives no
-- privilege for them.  The hint says who may, and how to become one.
SET ROLE regress_ow_worker;
SELECT pgq.drop_group('ow');
SELECT pgq.pause('ow');
SELECT pgq.grant('ow', 'regress_ow_worker', 'produce');
RESET ROLE;
-- a role without the consume privilege is told that the owner can grant it
SET ROLE regress_ow_owner;
SELECT pgq.revoke('ow', 'regress_ow_worker');
RESET ROLE;
SET ROLE regress_ow_worker;
SELECT * FROM pgq.claim('ow');
RESET ROLE;
SET ROLE regress_ow_owner;
SELECT pgq.grant('ow', 'regress_ow_worker');
RESET ROLE;

-- members of the owner role may drop the group
GRANT regress_ow_owner TO regress_ow_worker;
SET ROLE regress_ow_worker;
SELECT pgq.drop_group('ow');
RESET ROLE;

REVOKE ALL ON SCHEMA pgq FROM regress_ow_owner, regress_ow_worker;
DROP ROLE regress_ow_owner, regress_ow_worker;
