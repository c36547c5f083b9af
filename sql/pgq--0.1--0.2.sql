/* pgq--0.1--0.2.sql: what 0.2 adds to 0.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgq UPDATE TO '0.2'" to load this file. \quit

-- Whether the current user may consume, produce or administer (own) a
-- group, as the functions that need the privilege decide it: clients can
-- check before they start a worker.
CREATE FUNCTION pgq.has_group_privilege(group_name text, privilege text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_has_group_privilege'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION pgq.has_group_privilege(text, text) IS
'may the current user consume, produce or administer the group?';
