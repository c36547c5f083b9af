/* pgq--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pgq" to load this file. \quit

-- Groups: one row each, written at creation and when materialization ends;
-- never per claim.
CREATE TABLE pgq.groups (
    group_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_name   text NOT NULL UNIQUE,
    mode         text NOT NULL
                 CHECK (mode IN ('transaction', 'lease', 'advisory')),
    query        text NOT NULL,
    block_size   integer NOT NULL CHECK (block_size > 0),
    state        text NOT NULL DEFAULT 'materializing'
                 CHECK (state IN ('materializing', 'ready', 'failed')),
    owner        regrole NOT NULL,
    search_path  text NOT NULL,
    total_ids    bigint,
    total_blocks bigint,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ready_at     timestamptz
);

-- Blocks still to be consumed.  A transaction-mode claim locks and deletes
-- its block, so COMMIT consumes it and ROLLBACK gives it back.  Block ids
-- come from one sequence, so their order within a group is the query's.
CREATE SEQUENCE pgq.block_id_seq AS bigint;

-- The primary key is the only index, so that a claim's scan of one group
-- from its hint can only ever be planned on it.
CREATE TABLE pgq.blocks (
    group_id bigint NOT NULL,
    block_id bigint NOT NULL,
    ids      bigint[] NOT NULL,
    PRIMARY KEY (group_id, block_id)
);
-- Id arrays are large and barely compressible: store them out of line
-- without spending CPU on compression.
ALTER TABLE pgq.blocks ALTER COLUMN ids SET STORAGE EXTERNAL;

SELECT pg_catalog.pg_extension_config_dump('pgq.groups', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.blocks', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.block_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.groups_group_id_seq', '');

CREATE FUNCTION pgq.create_group(group_name text, query text,
                                 block_size integer DEFAULT 5000,
                                 mode text DEFAULT 'transaction',
                                 async boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_create_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.create_group(text, text, integer, text, boolean) IS
'create a group of blocks from a query''s ids; true for the caller that created it';

CREATE FUNCTION pgq.drop_group(group_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'pgq_drop_group'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION pgq.drop_group(text) IS
'drop a group and its blocks; false if it did not exist';

CREATE FUNCTION pgq.claim(group_name text, max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL)
RETURNS TABLE (block_id bigint, attempt integer, ids bigint[], payload jsonb)
AS 'MODULE_PATHNAME', 'pgq_claim'
LANGUAGE C VOLATILE ROWS 1;

COMMENT ON FUNCTION pgq.claim(text, integer, interval) IS
'claim up to max_blocks unclaimed blocks of a group';

-- Blocks of a group held by open transactions: claimed, from shared memory
-- (NULL when pgq is not preloaded), and own, held by the calling transaction.
CREATE FUNCTION pgq.inflight(group_id bigint, created_at timestamptz,
                             OUT claimed bigint, OUT own bigint)
AS 'MODULE_PATHNAME', 'pgq_inflight'
LANGUAGE C VOLATILE STRICT;

-- A block claimed by another open transaction is still visible to this
-- snapshot, one claimed by this transaction is not: "remaining" counts the
-- visible rows, and the in-flight counts turn that into pending and claimed.
-- Without shared memory (pgq not preloaded) claimed is NULL, and blocks that
-- other transactions hold count as pending.
CREATE VIEW pgq.group_stats AS
SELECT g.group_name,
       g.mode,
       CASE WHEN g.state = 'ready' AND s.pending = 0
                 AND coalesce(f.claimed, f.own) = 0
            THEN 'drained' ELSE g.state END AS state,
       g.block_size,
       g.total_ids,
       g.total_blocks,
       s.pending,
       f.claimed,
       g.total_blocks - r.remaining - f.own AS done,
       0::bigint AS failed,
       g.created_at,
       g.ready_at,
       g.owner,
       CASE WHEN g.total_blocks > 0
            THEN round(100.0 * (g.total_blocks - r.remaining - f.own)
                       / g.total_blocks, 1)
       END AS percent_done,
       g.error
FROM pgq.groups g
CROSS JOIN LATERAL (SELECT count(*) AS remaining
                    FROM pgq.blocks b
                    WHERE b.group_id = g.group_id) r
CROSS JOIN LATERAL pgq.inflight(g.group_id, g.created_at) f
CROSS JOIN LATERAL (SELECT greatest(r.remaining + f.own
                                    - coalesce(f.claimed, f.own), 0)
                           AS pending) s;

COMMENT ON VIEW pgq.group_stats IS
'progress of every group: blocks pending, claimed by open transactions, and done';
