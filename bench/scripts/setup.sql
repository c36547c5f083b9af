-- Schema of the pgq benchmark (bench/run).  Plain SQL, written for this
-- benchmark.  Tables of the baselines are in public, helpers in bench.
CREATE EXTENSION pgq;
CREATE SCHEMA bench;

-- durable-commit limit: 1000 counters, updated by primary key
CREATE TABLE counter (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
INSERT INTO counter (id) SELECT g FROM generate_series(1, 1000) g;

-- the seed's plain-SQL query group: one row per block, here of one id
CREATE TABLE q (id bigint PRIMARY KEY, ids bigint[] NOT NULL);

-- visibility-timeout queue: a claim hides a row until vt_until
CREATE TABLE vt (id bigint PRIMARY KEY,
                 vt_until timestamptz NOT NULL,
                 ids bigint[] NOT NULL);

-- naive advisory-lock queue
CREATE TABLE aq (id bigint PRIMARY KEY, ids bigint[] NOT NULL);

-- a Que-style job table (que_style.sql): the key its claims walk, and a
-- payload as pgq's items have
CREATE TABLE que_jobs (priority smallint NOT NULL DEFAULT 100,
                       run_at timestamptz NOT NULL DEFAULT now(),
                       job_id bigserial,
                       args jsonb NOT NULL,
                       error_count integer NOT NULL DEFAULT 0,
                       PRIMARY KEY (priority, run_at, job_id));

-- a plain-SQL job table with a unique key, and the index a claim needs
CREATE TABLE jobs (id bigserial PRIMARY KEY,
                   key text NOT NULL UNIQUE,
                   payload jsonb,
                   state "char" NOT NULL DEFAULT 'p',
                   created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX jobs_pending_idx ON jobs (id) WHERE state = 'p';
CREATE SEQUENCE bench.keys;
SELECT pgq.create_queue('eq');

-- Empty the enqueue cases' tables.
CREATE FUNCTION bench.reset_enqueue() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE jobs;
    DELETE FROM pgq.items;
END $$;

-- Refill one queue with n items, from scratch: the baselines' tables are
-- emptied, pgq's groups dropped and created again (blocks of one id).
CREATE FUNCTION bench.refill(what text, n bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ids text := format('SELECT g FROM generate_series(1, %s) g', n);
BEGIN
    CASE what
    WHEN 'q' THEN
        TRUNCATE q;
        INSERT INTO q SELECT g, ARRAY[g] FROM generate_series(1, n) g;
    WHEN 'vt' THEN
        TRUNCATE vt;
        INSERT INTO vt SELECT g, '-infinity', ARRAY[g] FROM generate_series(1, n) g;
    WHEN 'aq' THEN
        TRUNCATE aq;
        INSERT INTO aq SELECT g, ARRAY[g] FROM generate_series(1, n) g;
    WHEN 'que_jobs' THEN
        TRUNCATE que_jobs;
        INSERT INTO que_jobs (run_at, args)
        SELECT now() - '1 s'::interval, jsonb_build_object('n', g)
        FROM generate_series(1, n) g;
    WHEN 'aqi' THEN
        -- the same payloads, as items of an advisory-mode queue
        PERFORM pgq.drop_group('aqi');
        PERFORM pgq.create_queue('aqi', mode => 'advisory');
        PERFORM pgq.enqueue_many('aqi', ARRAY(SELECT jsonb_build_object('n', g)
                                              FROM generate_series(1, n) g));
    WHEN 'lq' THEN
        -- the same payloads, as items of a lease-mode queue
        PERFORM pgq.drop_group('lq');
        PERFORM pgq.create_queue('lq', lease => '30 s');
        PERFORM pgq.enqueue_many('lq', ARRAY(SELECT jsonb_build_object('n', g)
                                             FROM generate_series(1, n) g));
    WHEN 'tq' THEN
        -- the same payloads, as items of a transaction-mode queue
        PERFORM pgq.drop_group('tq');
        PERFORM pgq.create_queue('tq', mode => 'transaction');
        PERFORM pgq.enqueue_many('tq', ARRAY(SELECT jsonb_build_object('n', g)
                                             FROM generate_series(1, n) g));
    WHEN 'g' THEN
        PERFORM pgq.drop_group('g');
        PERFORM pgq.create_group('g', ids, block_size => 1);
    WHEN 'lg' THEN
        PERFORM pgq.drop_group('lg');
        PERFORM pgq.create_group('lg', ids, block_size => 1, mode => 'lease',
                                 lease => '30 s');
    WHEN 'ag' THEN
        PERFORM pgq.drop_group('ag');
        PERFORM pgq.create_group('ag', ids, block_size => 1, mode => 'advisory');
    WHEN 'lp' THEN
        -- every block leased for an hour: the end of a group, where claims
        -- find nothing while others hold the last blocks
        PERFORM pgq.drop_group('lp');
        PERFORM pgq.create_group('lp', ids, block_size => 1, mode => 'lease',
                                 lease => '1 hour');
        FOR i IN 1 .. (n + 9999) / 10000 LOOP
            PERFORM count(*) FROM pgq.claim('lp', 10000);
        END LOOP;
    END CASE;
END $$;

-- Items left in a queue (blocks of a pgq group, claimed or not).
CREATE FUNCTION bench.remaining(what text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    IF what IN ('q', 'vt', 'aq', 'que_jobs') THEN
        EXECUTE format('SELECT count(*) FROM %I', what) INTO n;
    ELSIF what IN ('aqi', 'lq', 'tq') THEN
        SELECT count(*) INTO n FROM pgq.items i JOIN pgq.groups g USING (group_id)
        WHERE g.group_name = what AND i.state IN ('p', 'r');
    ELSE
        SELECT count(*) INTO n FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
        WHERE g.group_name = what;
    END IF;
    RETURN n;
END $$;
