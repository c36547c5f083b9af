-- In transaction mode, COMMIT consumes a claimed block and ROLLBACK gives it
-- back: pgq.complete, release, fail and extend do not apply to the blocks
-- of such a group, and refuse every one of them with 42809, also the blocks
-- that the caller's own transaction claimed (and whose rows it deleted).
CREATE FUNCTION xr_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE sql INTO result;
    RETURN result;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT pgq.create_group('xr', 'SELECT g FROM generate_series(1, 4) g', 1);

BEGIN;
SELECT block_id AS own FROM pgq.claim('xr') \gset
SAVEPOINT s;
SELECT block_id AS own_in_savepoint FROM pgq.claim('xr') \gset
SAVEPOINT t;
SELECT block_id AS undone FROM pgq.claim('xr') \gset
ROLLBACK TO SAVEPOINT t;
SELECT min(block_id) AS other FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
WHERE g.group_name = 'xr' AND block_id NOT IN (:own, :own_in_savepoint, :undone) \gset
SELECT which, call, xr_try(format(call, id)) FROM (VALUES
    ('own', :own), ('own, in a savepoint', :own_in_savepoint),
    ('claimed in a savepoint rolled back', :undone),
    ('not claimed', :other)
) AS blocks(which, id), (VALUES
    ('SELECT pgq.complete(%s)'),
    ('SELECT pgq.complete(%s, attempt => 1)'),
    ('SELECT pgq.complete(%s, result => ''{}'')'),
    ('SELECT pgq.release(%s)'),
    ('SELECT pgq.fail(%s, ''error'')'),
    ('SELECT pgq.extend(%s, ''1 minute'')'),
    ('SELECT block_id FROM pgq.claim(''xr'', complete => %s)')
) AS calls(call)
ORDER BY which, call;
-- the transaction still holds its blocks, and consumes them at COMMIT
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'xr';
COMMIT;
SELECT pending, claimed, done FROM pgq.group_stats WHERE group_name = 'xr';

-- a consumed block is gone: false, as for any id that names nothing
SELECT pgq.complete(:own), pgq.release(:own), pgq.fail(:own, 'error'),
       pgq.extend(:own, '1 minute');

-- items of a transaction-mode queue are completed and failed in the
-- claiming transaction, as before; release and extend are refused
SELECT pgq.create_queue('xrq', mode => 'transaction');
SELECT pgq.enqueue('xrq', '{}') AS item \gset
BEGIN;
SELECT block_id = :item AS claimed FROM pgq.claim('xrq');
SELECT xr_try(format('SELECT pgq.release(%s)', :item)),
       xr_try(format('SELECT pgq.extend(%s, ''1 minute'')', :item)),
       pgq.complete(:item, result => '{"ok": true}');
COMMIT;
SELECT state, result FROM pgq.result(:item);
