-- create_group joins a group whose query reads the same as the caller's,
-- however the text is laid out (whitespace, comments, the case of
-- keywords), and refuses (42710) a query that reads something else: other
-- constants, or the same text naming another table under another
-- search_path.
\set SHOW_CONTEXT never
CREATE SCHEMA traps_a;
CREATE SCHEMA traps_b;
CREATE TABLE traps_a.t AS SELECT g AS id FROM generate_series(1, 10) g;
CREATE TABLE traps_b.t AS SELECT g AS id FROM generate_series(101, 110) g;
SET search_path = traps_a, public;
SELECT pgq.create_group('traps_layout', 'SELECT id FROM t WHERE id > 2 ORDER BY id',
                        block_size => 5);

-- the same query, laid out otherwise: joins
SELECT pgq.create_group('traps_layout', $$select id
    from   t        -- the ids
    where  id > 2   /* the later ones */
    order by id;$$, block_size => 5);
SELECT pgq.create_group('traps_layout',
                        'SELECT "id" FROM traps_a.t WHERE id > ''2'' ORDER BY 1',
                        block_size => 5);

-- another constant: another query
SELECT pgq.create_group('traps_layout', 'SELECT id FROM t WHERE id > 3 ORDER BY id',
                        block_size => 5);
-- another table of the same name, under another search_path
SET search_path = traps_b, public;
SELECT pgq.create_group('traps_layout', 'SELECT id FROM t WHERE id > 2 ORDER BY id',
                        block_size => 5);
SELECT pgq.create_group('traps_layout', 'SELECT id FROM traps_a.t WHERE id > 2 ORDER BY id',
                        block_size => 5);
RESET search_path;

-- nothing was created by the refused calls; the group is the first one's
SELECT group_name, total_ids, total_blocks FROM pgq.group_stats
WHERE group_name = 'traps_layout';
BEGIN;
SELECT ids FROM pgq.claim('traps_layout');
ROLLBACK;

-- a group made before the update from 0.1 has no canonical query: its text
-- must be the same, character for character
UPDATE pgq.groups SET canonical_query = NULL WHERE group_name = 'traps_layout';
SET search_path = traps_a, public;
SELECT pgq.create_group('traps_layout', 'SELECT id FROM t WHERE id > 2 ORDER BY id',
                        block_size => 5);
SELECT pgq.create_group('traps_layout', 'select id from t where id > 2 order by id',
                        block_size => 5);
RESET search_path;

-- the joiner's query is read as the joiner: one that does not parse, or
-- names a table it cannot see, fails as a creation would
SELECT pgq.create_group('traps_layout', 'SELECT id FROM', block_size => 5);
SELECT pgq.create_group('traps_layout', 'SELECT id FROM t WHERE id > 2 ORDER BY id',
                        block_size => 5);

SELECT pgq.drop_group('traps_layout');
DROP SCHEMA traps_a CASCADE;
DROP SCHEMA traps_b CASCADE;
