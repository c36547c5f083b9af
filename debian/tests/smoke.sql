-- Smoke test of an installed pgq, run in a throwaway cluster that preloads
-- it (shared_preload_libraries = 'pgq'): by debian/rules at build time
-- against debian/postgresql-NN-pgq, by debian/tests/smoke (autopkgtest) and
-- test/package.sh against the installed package.
\set ON_ERROR_STOP 1
CREATE EXTENSION pgq;
SELECT extversion FROM pg_extension WHERE extname = 'pgq';
SELECT pgq.create_group('pkg', 'SELECT g FROM generate_series(1, 10) g', 5);
SELECT group_name, total_ids, total_blocks, pending FROM pgq.group_stats WHERE group_name = 'pkg';
BEGIN;
SELECT cardinality(ids) AS claimed_ids FROM pgq.claim('pkg');
COMMIT;
DO $$
DECLARE
    s record;
BEGIN
    SELECT * INTO STRICT s FROM pgq.group_stats WHERE group_name = 'pkg';
    IF s.total_ids <> 10 OR s.total_blocks <> 2 OR s.done <> 1 OR s.pending <> 1 THEN
        RAISE EXCEPTION 'pgq smoke test: unexpected group_stats %', row_to_json(s);
    END IF;
    IF current_setting('shared_preload_libraries') !~ 'pgq' THEN
        RAISE EXCEPTION 'pgq smoke test: pgq is not preloaded';
    END IF;
END
$$;
SELECT 'pgq smoke test: OK' AS result;
