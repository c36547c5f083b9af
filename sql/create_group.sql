-- Creating groups: blocks follow the query's order, every id lands once.
CREATE TABLE alerts (alert_id bigint PRIMARY KEY, jd numeric NOT NULL);
INSERT INTO alerts SELECT g, 2460600 + g / 100.0 FROM generate_series(1, 1234) g;

-- the first caller creates the group, the next ones join it
SELECT pgq.create_group('ztf', $$SELECT alert_id FROM alerts WHERE jd BETWEEN 2460601 AND 2460610 ORDER BY jd DESC$$, block_size => 100);
SELECT pgq.create_group('ztf', $$SELECT alert_id FROM alerts WHERE jd BETWEEN 2460601 AND 2460610 ORDER BY jd DESC$$, block_size => 100);
SELECT pgq.create_group(group_name => 'ztf', query => $$SELECT alert_id FROM alerts WHERE jd BETWEEN 2460601 AND 2460610 ORDER BY jd DESC$$, block_size => 100, mode => 'transaction', async => false);

SELECT group_name, mode, state, block_size, total_ids, total_blocks, pending, claimed, done, failed, owner::text = current_user AS owned
FROM pgq.group_stats;

-- blocks hold up to block_size ids, in the query's order, and block ids follow that order
SELECT count(*) AS blocks, min(cardinality(ids)) AS smallest, max(cardinality(ids)) AS largest
FROM pgq.blocks b JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'ztf';
WITH flat AS (
    SELECT u.id, row_number() OVER (ORDER BY b.block_id, u.ord) AS pos
    FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
    CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY u(id, ord)
    WHERE g.group_name = 'ztf'),
expected AS (
    SELECT alert_id AS id, row_number() OVER (ORDER BY jd DESC) AS pos
    FROM alerts WHERE jd BETWEEN 2460601 AND 2460610)
SELECT count(*) AS ids, count(*) FILTER (WHERE f.id IS DISTINCT FROM e.id) AS out_of_order
FROM flat f FULL JOIN expected e USING (pos);

-- the last block is the partial one
SELECT cardinality(ids) FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'ztf' ORDER BY block_id DESC LIMIT 1;

-- every integer type gives ids; domains over them too
CREATE DOMAIN small_id AS smallint;
SELECT pgq.create_group('int2', 'SELECT g::small_id FROM generate_series(1, 7) g', 3);
SELECT pgq.create_group('int4', 'VALUES (3), (1), (2)', 2);
SELECT pgq.create_group('int8', 'WITH x AS (SELECT 9223372036854775807 AS id UNION ALL SELECT -9223372036854775808) SELECT id FROM x', 1);
SELECT g.group_name, b.ids FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name IN ('int2', 'int4', 'int8') ORDER BY b.block_id;

-- extra columns are ignored; duplicates are kept as the query returns them
SELECT pgq.create_group('dups', 'SELECT 5 AS id, ''x'' AS other UNION ALL SELECT 5, ''y''', 10);
SELECT ids FROM pgq.blocks b JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'dups';

-- an empty result makes a group that is drained at once
SELECT pgq.create_group('empty', 'SELECT 1 WHERE false', 10);
SELECT group_name, state, total_ids, total_blocks, pending, done FROM pgq.group_stats WHERE group_name = 'empty';

-- the query runs read-only and sees the caller's own uncommitted work
BEGIN;
CREATE TABLE fresh AS SELECT g AS id FROM generate_series(1, 10) g;
SELECT pgq.create_group('fresh', 'SELECT id FROM fresh', 4);
SELECT total_ids, total_blocks FROM pgq.group_stats WHERE group_name = 'fresh';
ROLLBACK;
SELECT count(*) FROM pgq.groups WHERE group_name = 'fresh';

-- the search_path of the creator is recorded
SELECT search_path FROM pgq.groups WHERE group_name = 'ztf';

-- drop_group removes the group and its blocks; false when there is none
SELECT pgq.drop_group('dups');
SELECT pgq.drop_group('dups');
SELECT count(*) FROM pgq.groups WHERE group_name = 'dups';
SELECT count(*) FROM pgq.blocks WHERE group_id NOT IN (SELECT group_id FROM pgq.groups);

-- a dropped name can be created again, with another query
SELECT pgq.create_group('dups', 'SELECT 1', 1);

SELECT pgq.drop_group(group_name) FROM pgq.groups ORDER BY group_id;
DROP TABLE alerts;
DROP DOMAIN small_id;
