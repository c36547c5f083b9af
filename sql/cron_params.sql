-- create_group(..., params => ARRAY[...]): the values of the query's $1..$n,
-- read as the types the query gives its parameters (as PREPARE infers
-- them, and EXECUTE reads its values).  The same query with the same values
-- joins the group; other values are another group (42710); a count or type
-- mismatch is an error.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
CREATE TABLE params_ev (id bigint, at timestamptz);
INSERT INTO params_ev
SELECT g, timestamptz '2026-10-01 00:00+00' + (g - 1) * interval '1 day'
FROM generate_series(1, 92) g;

-- November: a time range bound to the query, not pasted into it
SELECT pgq.create_group('params_nov',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2 ORDER BY id',
                        block_size => 10,
                        params => ARRAY['2026-11-01', '2026-12-01']);
SELECT total_ids, total_blocks FROM pgq.group_stats WHERE group_name = 'params_nov';
SELECT min(u), max(u) FROM pgq.blocks b, unnest(b.ids) u
WHERE b.group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'params_nov');
-- kept with their types, written under fixed settings
SELECT params, param_types, canonical_query FROM pgq.groups
WHERE group_name = 'params_nov';

-- the same query and values join, however they are spelled
SELECT pgq.create_group('params_nov',
                        'select id from params_ev where at >= $1 and at < $2 order by 1',
                        block_size => 10,
                        params => ARRAY['2026-11-01 00:00:00+00', '2026-12-01T00:00Z']);
-- the same instants, written in another time zone and date style
SET TimeZone = 'Europe/Paris';
SET DateStyle = 'SQL, DMY';
SELECT pgq.create_group('params_nov',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2 ORDER BY id',
                        block_size => 10,
                        params => ARRAY['01/11/2026 01:00', '01/12/2026 01:00']);
-- the same text in another time zone is another instant: another group
SELECT pgq.create_group('params_nov',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2 ORDER BY id',
                        block_size => 10,
                        params => ARRAY['01/11/2026', '01/12/2026']);
RESET TimeZone;
RESET DateStyle;
SET TimeZone = 'UTC';

-- other values: another group
SELECT pgq.create_group('params_nov',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2 ORDER BY id',
                        block_size => 10,
                        params => ARRAY['2026-11-01', '2026-11-15']);
-- other types (the same query with $1::date): another group
SELECT pgq.create_group('params_nov',
                        'SELECT id FROM params_ev WHERE at >= $1::date AND at < $2 ORDER BY id',
                        block_size => 10,
                        params => ARRAY['2026-11-01', '2026-12-01']);
-- the values pasted into the query: another query
SELECT pgq.create_group('params_nov',
                        $$SELECT id FROM params_ev WHERE at >= '2026-11-01' AND at < '2026-12-01' ORDER BY id$$,
                        block_size => 10);

-- a count mismatch: too few, too many, or values for a query without any
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2');
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2',
                        params => ARRAY['2026-11-01']);
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE at >= $1',
                        params => ARRAY['2026-11-01', '2026-12-01']);
SELECT pgq.create_group('params_bad', 'SELECT id FROM params_ev',
                        params => ARRAY['2026-11-01']);
SELECT pgq.create_group('params_bad', 'SELECT id FROM params_ev',
                        params => '{{1},{2}}');
-- a parameter whose type the query does not tell, or skipped
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE $1 IS NULL',
                        params => ARRAY['x']);
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE id > $2',
                        params => ARRAY['1', '2']);
-- a value that its type does not read, as EXECUTE would say
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE at >= $1',
                        params => ARRAY['the first of November']);
SELECT pgq.create_group('params_bad',
                        'SELECT id FROM params_ev WHERE id > $1',
                        params => ARRAY['1.5']);
-- errors in the query come through as they do without params
SELECT pgq.create_group('params_bad', 'SELECT id FROM params_ev WHERE id > $1 AND',
                        params => ARRAY['1']);
SELECT pgq.create_group('params_bad', 'SELECT id FROM params_nope WHERE id > $1',
                        params => ARRAY['1']);
SELECT count(*) FROM pgq.groups WHERE group_name = 'params_bad';

-- a NULL value, and an empty params for a query without parameters
SELECT pgq.create_group('params_null',
                        'SELECT id FROM params_ev WHERE $1::bigint IS NULL OR id <= $1',
                        params => ARRAY[NULL]);
SELECT pgq.create_group('params_null',
                        'SELECT id FROM params_ev WHERE $1::bigint IS NULL OR id <= $1',
                        params => ARRAY[NULL]);
SELECT pgq.create_group('params_null',
                        'SELECT id FROM params_ev WHERE $1::bigint IS NULL OR id <= $1',
                        params => ARRAY['5']);
SELECT s.total_ids, g.params FROM pgq.group_stats s JOIN pgq.groups g USING (group_name)
WHERE group_name = 'params_null';
SELECT pgq.create_group('params_none', 'SELECT id FROM params_ev', params => '{}');
SELECT pgq.create_group('params_none', 'SELECT id FROM params_ev');
SELECT params, param_types FROM pgq.groups WHERE group_name = 'params_none';

-- asynchronous: the background worker binds the values the creator bound,
-- whatever its own settings
CREATE FUNCTION params_settled(name text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    LOOP
        SELECT state INTO s FROM pgq.groups WHERE group_name = name;
        EXIT WHEN s <> 'materializing';
        PERFORM pg_sleep(0.01);
    END LOOP;
    RETURN s;
END $$;
SET TimeZone = 'America/New_York';
SET DateStyle = 'SQL, DMY';
SELECT pgq.create_group('params_async',
                        'SELECT id FROM params_ev WHERE at >= $1 AND at < $2 ORDER BY id',
                        block_size => 10, async => true,
                        params => ARRAY['01/11/2026 00:00', '01/12/2026 00:00']);
RESET TimeZone;
RESET DateStyle;
SET TimeZone = 'UTC';
SELECT params_settled('params_async');
SELECT total_ids, total_blocks, error FROM pgq.group_stats
WHERE group_name = 'params_async';
SELECT min(u), max(u) FROM pgq.blocks b, unnest(b.ids) u
WHERE b.group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'params_async');
-- a failed group's rematerialization binds them again
CREATE TABLE params_flip (d int);
INSERT INTO params_flip VALUES (0);
SELECT pgq.create_group('params_async_fail',
                        'SELECT id / d FROM params_ev, params_flip WHERE id <= $1',
                        async => true, params => ARRAY['7']);
SELECT params_settled('params_async_fail');
SELECT error FROM pgq.group_stats WHERE group_name = 'params_async_fail';
UPDATE params_flip SET d = 1;
SELECT pgq.rematerialize('params_async_fail');
SELECT params_settled('params_async_fail');
SELECT total_ids FROM pgq.group_stats WHERE group_name = 'params_async_fail';

SELECT pgq.drop_group(g)
FROM unnest(ARRAY['params_nov', 'params_null', 'params_none', 'params_async',
                  'params_async_fail']) g;
DROP FUNCTION params_settled(text);
DROP TABLE params_ev, params_flip;
RESET TimeZone;
