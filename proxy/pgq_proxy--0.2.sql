/* pgq_proxy--0.2.sql: pgq's functions in a router database (docs/scaling.md) */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pgq_proxy CASCADE" to load this file. \quit

-- The router has pgq's functions under their own names and arguments, in
-- schema pgq, so that a worker written for one server works against the
-- router by changing its connection string.  Each call goes, through
-- PL/Proxy, to the partition databases of the cluster named pgq: a foreign
-- server (CREATE SERVER pgq FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ...,
-- p1 ...)) or plproxy.get_cluster_partitions('pgq').  Each partition
-- database has pgq, and pgq.set_partition(n) run once: it hands out block
-- and item ids from a range of its own, so that an id names its partition,
-- id >> 42 (pgq.set_partition in pgq's scripts).  Helpers are in schema
-- pgq_proxy.  Every call to a partition commits there on its own: nothing
-- the router does is undone by the caller's ROLLBACK.
CREATE SCHEMA pgq;
CREATE SCHEMA pgq_proxy;

GRANT USAGE ON SCHEMA pgq, pgq_proxy TO PUBLIC;

CREATE TYPE pgq.claimed AS (
    block_id bigint,
    attempt  integer,
    ids      bigint[],
    payload  jsonb,
    data     bytea,
    key      text
);

CREATE TYPE pgq.claimed_from AS (
    block_id   bigint,
    attempt    integer,
    ids        bigint[],
    payload    jsonb,
    data       bytea,
    key        text,
    group_name text
);

-- ---------------------------------------------------------------------------
-- Routing
-- ---------------------------------------------------------------------------

-- How many partitions the cluster has: the options p0, p1, ... of the
-- foreign server pgq, or what plproxy.get_cluster_partitions('pgq') returns.
-- PL/Proxy wants a power of 2.
CREATE FUNCTION pgq_proxy.partitions()
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog
AS $$
DECLARE
    n integer;
BEGIN
    SELECT count(*) FILTER (WHERE o ~ '^p[0-9]+=')
    INTO n
    FROM pg_catalog.pg_foreign_server s
    CROSS JOIN LATERAL unnest(s.srvoptions) o
    WHERE s.srvname = 'pgq';
    IF n = 0 THEN
        BEGIN
            EXECUTE 'SELECT count(*) FROM plproxy.get_cluster_partitions(''pgq'')'
            INTO n;
        EXCEPTION WHEN undefined_function OR invalid_schema_name THEN
            n := 0;
        END;
    END IF;
    IF n = 0 THEN
        RAISE EXCEPTION 'the pgq cluster has no partitions'
            USING ERRCODE = '42704',
                  HINT = 'Create the foreign server pgq with options p0, p1, ...: see docs/scaling.md.';
    END IF;
    RETURN n;
END
$$;

-- The partition of a block or item id: each partition database hands out
-- ids from partition << 42 + 1 on (pgq.set_partition).  PL/Proxy maps the
-- value to a partition with value & (partitions - 1).
CREATE FUNCTION pgq_proxy.id_partition(id bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce((id OPERATOR(pg_catalog.>>) 42)::integer, 0) $$;

-- The partition of an item by its routing key (its ordering key, else its
-- key), as PL/Proxy would map hashtext(key); NULL for an item without one.
CREATE FUNCTION pgq_proxy.key_partition(key text, partitions integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.hashtext(key)
       OPERATOR(pg_catalog.&) (partitions OPERATOR(pg_catalog.-) 1)
$$;

-- Does an error raised by a call to a partition say that the partition is
-- out of reach (down, restarting, the connection lost), rather than
-- something about the call?  PL/Proxy reports its own connection failures
-- as XX000 naming the libpq call or the timeout; a partition that shuts
-- down or crashes under a call sends 57P01 to 57P03.
CREATE FUNCTION pgq_proxy.unreachable(state text, message text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog
AS $$
SELECT state LIKE '08%'
    OR state IN ('57P01', '57P02', '57P03')
    OR (state = 'XX000'
        AND message ~ '^PL/Proxy function .*(PQ[A-Za-z]+:|connect timeout|query timeout|connection)')
$$;

-- Does an error that pgq_proxy.unreachable() accepts say that the call never
-- reached the partition (PL/Proxy could not connect, or could not send the
-- query)?  Otherwise the connection went while the partition may have run
-- the call, and committed it.
CREATE FUNCTION pgq_proxy.not_sent(state text, message text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog
AS $$
SELECT state = 'XX000'
   AND message ~ '^PL/Proxy function \S+: (\[[^]]*\] (PQconnectStart|PQconnectPoll|PQsendQueryParams): |connect timeout to: )'
$$;

-- Refuse ids that a partition handed out from another partition's range:
-- its pgq was installed again, or restored, without pgq.set_partition.
CREATE FUNCTION pgq_proxy.check_id(id bigint, part integer, partitions integer)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog
AS $$
BEGIN
    IF id IS NOT NULL AND pgq_proxy.id_partition(id) & (partitions - 1) <> part THEN
        RAISE EXCEPTION 'partition % of the pgq cluster handed out id %, which is not in its range', part, id
            USING ERRCODE = '55000',
                  HINT = format('Run SELECT pgq.set_partition(%s) in that partition database.', part);
    END IF;
    RETURN id;
END
$$;

-- ---------------------------------------------------------------------------
-- Calls to one partition (RUN ON part) or to several (SPLIT over an array
-- of partition numbers, which tells each call its partition)
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgq_proxy.claim_on(part integer, grp text, nblocks integer,
                                   wt interval, cmpl bigint, att integer)
RETURNS SETOF pgq.claimed
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT * FROM pgq.claim(grp, nblocks, wt, NULL::bigint, cmpl, att);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.claim_list_on(part integer, grps text[],
                                        nblocks integer, wt interval,
                                        cmpl bigint, att integer)
RETURNS SETOF pgq.claimed_from
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT * FROM pgq.claim(grps, nblocks, wt, NULL::bigint, cmpl, att);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.enqueue_on(part integer, grp text, pl jsonb,
                                     k text, prio integer,
                                     at timestamptz, dt bytea, ok text)
RETURNS bigint
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT pgq.enqueue(grp, pl, k, prio, at, dt, ok) AS id;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.enqueue_many_on(parts integer[], grp text,
                                          pls jsonb[], ks text[],
                                          prio integer, at timestamptz,
                                          dts bytea[], oks text[])
RETURNS TABLE (part integer, item_ids bigint[])
AS $$
    CLUSTER 'pgq';
    SPLIT parts, pls, ks, dts, oks;
    RUN ON parts;
    SELECT (parts)[1] AS part,
           pgq.enqueue_many(grp, pls, ks, prio, at, dts, oks) AS item_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.enqueue_many_one(part integer, grp text,
                                           pls jsonb[], ks text[],
                                           prio integer, at timestamptz,
                                           dts bytea[], oks text[])
RETURNS bigint[]
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT pgq.enqueue_many(grp, pls, ks, prio, at, dts, oks) AS item_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.complete_many_one(part integer, bids bigint[],
                                            atts integer[], res jsonb[])
RETURNS bigint[]
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT pgq.complete_many(bids, atts, res) AS done_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.complete_many_on(parts integer[], bids bigint[],
                                           atts integer[], res jsonb[])
RETURNS SETOF bigint[]
AS $$
    CLUSTER 'pgq';
    SPLIT parts, bids, atts, res;
    RUN ON parts;
    SELECT pgq.complete_many(bids, atts, res) AS done_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.release_many_on(parts integer[], bids bigint[],
                                          atts integer[])
RETURNS SETOF bigint[]
AS $$
    CLUSTER 'pgq';
    SPLIT parts, bids, atts;
    RUN ON parts;
    SELECT pgq.release_many(bids, atts, NULL::bigint) AS released_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.fail_many_on(parts integer[], bids bigint[],
                                       errs text[], retry interval,
                                       atts integer[], edata bytea[])
RETURNS SETOF bigint[]
AS $$
    CLUSTER 'pgq';
    SPLIT parts, bids, errs, atts, edata;
    RUN ON parts;
    SELECT pgq.fail_many(bids, errs, retry, atts, NULL::bigint, edata)
           AS failed_ids;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.create_group_on(parts integer[], grp text, q text,
                                          bsize integer, md text,
                                          asy boolean, ls interval,
                                          maxatt integer, tmo interval,
                                          own text, prm text[])
RETURNS TABLE (part integer, created boolean)
AS $$
    CLUSTER 'pgq';
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS part,
           pgq.create_group(grp, q, bsize, md, asy, ls, maxatt, tmo,
                            own::regrole, prm) AS created;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.create_queue_on(parts integer[], grp text, md text,
                                          ls interval, maxatt integer,
                                          bo interval, maxbo interval,
                                          own text, ret text, keyret text)
RETURNS TABLE (part integer, created boolean)
AS $$
    CLUSTER 'pgq';
    SPLIT parts;
    RUN ON parts;
    SELECT (parts)[1] AS part,
           pgq.create_queue(grp, md, ls, maxatt, bo, maxbo, own::regrole,
                            ret::pgq.retention_interval,
                            keyret::pgq.retention_interval) AS created;
$$ LANGUAGE plproxy;

-- Calls that run on every partition and return a value from each.
CREATE FUNCTION pgq_proxy.drop_group_all(grp text)
RETURNS SETOF boolean
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT pgq.drop_group(grp) AS dropped;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.pause_all(grp text, pause boolean)
RETURNS SETOF boolean
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT CASE WHEN pause THEN pgq.pause(grp) ELSE pgq.resume(grp) END AS changed;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.purge_all(grp text, older interval, dd boolean)
RETURNS SETOF bigint
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT pgq.purge(grp, older, dd) AS purged;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.set_retention_all(grp text, ret text, keyret text)
RETURNS SETOF void
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT pgq.set_retention(grp, ret::pgq.retention_interval,
                             keyret::pgq.retention_interval);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.grant_all(grp text, rl text, priv text, revoke boolean)
RETURNS SETOF integer
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT 1 AS done
    FROM (SELECT CASE WHEN revoke THEN pgq.revoke(grp, rl, priv)::text
                      ELSE pgq.grant(grp, rl, priv)::text END) AS r;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.retry_key_all(grp text, k text)
RETURNS SETOF boolean
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT pgq.retry(grp, k) AS retried;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.group_stats_all()
RETURNS TABLE (group_name text, mode text, state text, block_size integer,
               total_ids bigint, total_blocks bigint, pending bigint,
               claimed bigint, done bigint, failed bigint,
               created_at timestamptz, ready_at timestamptz, owner text,
               lease interval, max_attempts integer, error text)
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT s.group_name, s.mode, s.state, s.block_size, s.total_ids,
           s.total_blocks, s.pending, s.claimed, s.done, s.failed,
           s.created_at, s.ready_at, s.owner::text AS owner, s.lease,
           s.max_attempts, s.error
    FROM pgq.group_stats s;
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq_proxy.queue_stats_all()
RETURNS TABLE (queue_name text, mode text, pending bigint, scheduled bigint,
               running bigint, done bigint, dead bigint,
               oldest_pending_age interval, lease interval,
               max_attempts integer, backoff interval, max_backoff interval,
               owner text, created_at timestamptz, paused boolean,
               kept_keys bigint, retention text, key_retention text,
               waiting bigint)
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
    SELECT s.queue_name, s.mode, s.pending, s.scheduled, s.running, s.done,
           s.dead, s.oldest_pending_age, s.lease, s.max_attempts, s.backoff,
           s.max_backoff, s.owner::text AS owner, s.created_at, s.paused,
           s.kept_keys, s.retention::text AS retention,
           s.key_retention::text AS key_retention, s.waiting
    FROM pgq.queue_stats s;
$$ LANGUAGE plproxy;

-- What one partition says about itself: its id range as pgq.set_partition
-- left it (the sequence's bounds), and its groups' and queues' counts.
CREATE FUNCTION pgq_proxy.partition_on(part integer,
                                       OUT min_id bigint, OUT max_id bigint,
                                       OUT groups bigint, OUT queues bigint)
AS $$
    CLUSTER 'pgq';
    RUN ON part;
    SELECT q.min_value AS min_id, q.max_value AS max_id,
           (SELECT count(*) FROM pgq.group_stats) AS groups,
           (SELECT count(*) FROM pgq.queue_stats) AS queues
    FROM pg_catalog.pg_sequences q
    WHERE q.schemaname = 'pgq' AND q.sequencename = 'block_id_seq';
$$ LANGUAGE plproxy;

-- Every partition: whether the router reaches it, whether pgq.set_partition
-- gave it its own id range, and what went wrong.  For setting up a cluster
-- and for watching it: one call per partition, one after the other.
CREATE FUNCTION pgq_proxy.check(OUT partition integer, OUT reachable boolean,
                                OUT ids_ok boolean, OUT groups bigint,
                                OUT queues bigint, OUT error text)
RETURNS SETOF record
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    r record;
BEGIN
    FOR p IN 0 .. parts - 1 LOOP
        partition := p;
        error := NULL;
        BEGIN
            r := pgq_proxy.partition_on(p);
            reachable := true;
            ids_ok := r.min_id = (p::bigint << 42) + 1
                  AND r.max_id = least(((p::bigint + 1) << 42) - 1,
                                       (1::bigint << 48) - 2);
            groups := r.groups;
            queues := r.queues;
            IF NOT ids_ok THEN
                error := format('ids are not in the range of partition %s: run SELECT pgq.set_partition(%s) there', p, p);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            reachable := NOT pgq_proxy.unreachable(SQLSTATE, SQLERRM);
            ids_ok := NULL;
            groups := NULL;
            queues := NULL;
            error := SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- Claims
-- ---------------------------------------------------------------------------

-- Claim from the partitions in turn, starting from a random one (or, with
-- complete, the one that holds the block to complete), until max_blocks
-- rows came or every partition was asked.  A partition out of reach is
-- passed over.  With wait and nothing claimed, wait on each partition in
-- turn for at most pgq_proxy.wait_slice (100 ms by default) at a time,
-- until a row comes, the time is up, or every reachable partition returned
-- at once with nothing (a query group that can yield no more there).  When
-- only partitions out of reach are left to wait on, sleep a slice between
-- two tries rather than spin, and fail when none at all is reachable.
CREATE FUNCTION pgq_proxy.claim(group_names text[], one boolean,
                                max_blocks integer, wait interval,
                                worker_id bigint, complete bigint,
                                attempt integer)
RETURNS SETOF pgq.claimed_from
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    want integer := coalesce(max_blocks, 1);
    first integer;
    p integer;
    r pgq.claimed_from;
    cmpl bigint := complete;
    att integer := attempt;
    down integer[] := '{}';
    finished boolean[];
    unreached boolean[];
    all_finished boolean;
    waited boolean;
    slice interval;
    s interval;
    deadline timestamptz;
    t0 timestamptz;
    got integer;
    claimed_ids bigint[] := '{}';
    claimed_atts integer[] := '{}';
    st text;
    msg text;
BEGIN
    IF worker_id IS NOT NULL THEN
        RAISE EXCEPTION 'advisory-mode claims cannot go through the pgq router'
            USING ERRCODE = '0A000',
                  HINT = 'Advisory locks live in the session that claimed: claim from the partition database itself, or use a lease-mode group.';
    END IF;
    IF complete IS NOT NULL THEN
        first := pgq_proxy.id_partition(complete) & (parts - 1);
    ELSE
        first := floor(random() * parts)::integer;
    END IF;

    -- one look at every partition, without waiting
    FOR i IN 0 .. parts - 1 LOOP
        p := (first + i) % parts;
        BEGIN
            IF one THEN
                FOR r IN SELECT c.*, group_names[1]
                         FROM pgq_proxy.claim_on(p, group_names[1], want, NULL,
                                                 cmpl, att) c
                LOOP
                    claimed_ids := claimed_ids || pgq_proxy.check_id(r.block_id, p, parts);
                    claimed_atts := claimed_atts || r.attempt;
                    RETURN NEXT r;
                    want := want - 1;
                END LOOP;
            ELSE
                FOR r IN SELECT * FROM pgq_proxy.claim_list_on(p, group_names, want,
                                                              NULL, cmpl, att)
                LOOP
                    claimed_ids := claimed_ids || pgq_proxy.check_id(r.block_id, p, parts);
                    claimed_atts := claimed_atts || r.attempt;
                    RETURN NEXT r;
                    want := want - 1;
                END LOOP;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            IF pgq_proxy.unreachable(st, msg) THEN
                down := down || p;
                IF cmpl IS NOT NULL AND pgq_proxy.not_sent(st, msg) THEN
                    RAISE WARNING 'block % was not completed: partition % of the pgq cluster is unreachable', cmpl, p;
                ELSIF cmpl IS NOT NULL THEN
                    RAISE WARNING 'block % may have been completed: the connection to partition % of the pgq cluster was lost', cmpl, p
                        USING HINT = 'Call pgq.result() or pgq.complete() for it once the partition is back.';
                END IF;
            ELSE
                -- what other partitions gave is not returned: give it back
                IF cardinality(claimed_ids) > 0 THEN
                    PERFORM pgq_proxy.release_claims(claimed_ids, claimed_atts, parts);
                END IF;
                IF st = '25P01' THEN
                    RAISE EXCEPTION 'transaction-mode groups cannot be claimed through the pgq router'
                        USING ERRCODE = '0A000',
                              DETAIL = msg,
                              HINT = 'Each call through the router commits on its partition at once: claim and commit on a partition database itself, or use a lease-mode group.';
                END IF;
                RAISE;
            END IF;
        END;
        cmpl := NULL;
        att := NULL;
        EXIT WHEN want <= 0;
    END LOOP;
    IF want < coalesce(max_blocks, 1) THEN
        RETURN;
    END IF;
    IF cardinality(down) = parts THEN
        RAISE EXCEPTION 'no partition of the pgq cluster is reachable'
            USING ERRCODE = '08006';
    END IF;
    IF wait IS NULL THEN
        IF cardinality(down) > 0 THEN
            RAISE WARNING 'partitions % of the pgq cluster are unreachable: their work cannot be claimed until they are back', down;
        END IF;
        RETURN;
    END IF;

    -- waiting: a slice on each partition in turn
    slice := coalesce(nullif(current_setting('pgq_proxy.wait_slice', true), '')::interval,
                      interval '100 ms');
    deadline := clock_timestamp() + wait;
    finished := array_fill(false, ARRAY[parts]);
    unreached := array_fill(false, ARRAY[parts]);
    FOR p IN SELECT unnest(down) LOOP
        unreached[p + 1] := true;
    END LOOP;
    LOOP
        all_finished := true;
        waited := false;
        FOR i IN 0 .. parts - 1 LOOP
            p := (first + i) % parts;
            CONTINUE WHEN finished[p + 1];
            s := least(slice, deadline - clock_timestamp());
            EXIT WHEN s <= interval '0';
            t0 := clock_timestamp();
            got := 0;
            BEGIN
                IF one THEN
                    FOR r IN SELECT c.*, group_names[1]
                             FROM pgq_proxy.claim_on(p, group_names[1], want, s,
                                                     NULL, NULL) c
                    LOOP
                        PERFORM pgq_proxy.check_id(r.block_id, p, parts);
                        RETURN NEXT r;
                        got := got + 1;
                    END LOOP;
                ELSE
                    FOR r IN SELECT * FROM pgq_proxy.claim_list_on(p, group_names, want,
                                                                  s, NULL, NULL)
                    LOOP
                        PERFORM pgq_proxy.check_id(r.block_id, p, parts);
                        RETURN NEXT r;
                        got := got + 1;
                    END LOOP;
                END IF;
                IF got > 0 THEN
                    RETURN;
                END IF;
                unreached[p + 1] := false;
                -- back at once with nothing: this partition is finished
                IF clock_timestamp() - t0 < s / 2 THEN
                    finished[p + 1] := true;
                ELSE
                    all_finished := false;
                    waited := true;
                END IF;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                IF NOT pgq_proxy.unreachable(st, msg) THEN
                    RAISE;
                END IF;
                unreached[p + 1] := true;
                all_finished := false;
            END;
        END LOOP;
        EXIT WHEN all_finished;
        s := least(slice, deadline - clock_timestamp());
        EXIT WHEN s <= interval '0';
        IF NOT waited THEN
            -- nothing waited a slice: only partitions out of reach are left
            IF NOT (true = ANY (finished)) THEN
                RAISE EXCEPTION 'no partition of the pgq cluster is reachable'
                    USING ERRCODE = '08006';
            END IF;
            PERFORM pg_catalog.pg_sleep(extract(epoch FROM s)::double precision);
        END IF;
    END LOOP;
    down := ARRAY(SELECT i - 1 FROM generate_subscripts(unreached, 1) i
                  WHERE unreached[i] ORDER BY i);
    IF cardinality(down) > 0 THEN
        RAISE WARNING 'partitions % of the pgq cluster are unreachable: their work cannot be claimed until they are back', down;
    END IF;
END
$$;

-- Give back claims that the router could not return (best effort: a
-- partition out of reach keeps them until their leases run out).
CREATE FUNCTION pgq_proxy.release_claims(block_ids bigint[], attempts integer[],
                                         partitions integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    PERFORM pgq_proxy.release_many_on(
        ARRAY(SELECT pgq_proxy.id_partition(b) & (partitions - 1)
              FROM unnest(block_ids) b),
        block_ids, attempts);
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'could not give back blocks % claimed through the pgq router: %', block_ids, SQLERRM;
END
$$;

CREATE FUNCTION pgq.claim(group_name text, max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL,
                          worker_id bigint DEFAULT NULL,
                          complete bigint DEFAULT NULL,
                          attempt integer DEFAULT NULL)
RETURNS SETOF pgq.claimed
LANGUAGE sql
SET search_path = pg_catalog
ROWS 1
AS $$
SELECT c.block_id, c.attempt, c.ids, c.payload, c.data, c.key
FROM pgq_proxy.claim(ARRAY[group_name], true, max_blocks, wait, worker_id,
                     complete, attempt) c
$$;

COMMENT ON FUNCTION pgq.claim(text, integer, interval, bigint, bigint, integer) IS
'claim up to max_blocks blocks or items from the partitions in turn, after completing the block given as complete';

CREATE FUNCTION pgq.claim(group_names text[], max_blocks integer DEFAULT 1,
                          wait interval DEFAULT NULL,
                          worker_id bigint DEFAULT NULL,
                          complete bigint DEFAULT NULL,
                          attempt integer DEFAULT NULL)
RETURNS SETOF pgq.claimed_from
LANGUAGE sql
SET search_path = pg_catalog
ROWS 1
AS $$
SELECT * FROM pgq_proxy.claim(group_names, false, max_blocks, wait,
                              worker_id, complete, attempt)
$$;

COMMENT ON FUNCTION pgq.claim(text[], integer, interval, bigint, bigint, integer) IS
'claim up to max_blocks blocks or items of a list of groups from the partitions in turn';

-- ---------------------------------------------------------------------------
-- Calls on one block or item: to the partition its id names
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgq.complete(block_id bigint, result jsonb DEFAULT NULL,
                             attempt integer DEFAULT NULL,
                             worker_id bigint DEFAULT NULL,
                             result_data bytea DEFAULT NULL)
RETURNS boolean
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq.release(block_id bigint, attempt integer DEFAULT NULL,
                            worker_id bigint DEFAULT NULL)
RETURNS boolean
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq.fail(block_id bigint, error text DEFAULT NULL,
                         retry_after interval DEFAULT NULL,
                         attempt integer DEFAULT NULL,
                         worker_id bigint DEFAULT NULL,
                         error_data bytea DEFAULT NULL)
RETURNS boolean
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq.extend(block_id bigint, lease interval,
                           attempt integer DEFAULT NULL)
RETURNS boolean
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq.retry(block_id bigint)
RETURNS boolean
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

CREATE FUNCTION pgq.result(block_id bigint, wait interval DEFAULT NULL,
                           OUT state text, OUT result jsonb,
                           OUT result_data bytea, OUT attempt integer,
                           OUT last_error text, OUT last_error_data bytea)
AS $$
    CLUSTER 'pgq';
    RUN ON pgq_proxy.id_partition(block_id);
$$ LANGUAGE plproxy;

-- Items of several partitions: each partition waits for its own, at once.
CREATE FUNCTION pgq.results(queue_name text, block_ids bigint[],
                            wait interval DEFAULT NULL,
                            wait_for text DEFAULT 'all',
                            OUT block_id bigint, OUT state text,
                            OUT result jsonb, OUT result_data bytea,
                            OUT attempt integer, OUT last_error text,
                            OUT last_error_data bytea)
RETURNS SETOF record
AS $$
    CLUSTER 'pgq';
    SPLIT block_ids;
    RUN ON pgq_proxy.id_partition(block_ids);
$$ LANGUAGE plproxy;

-- The partitions of ids, for splitting a batch: arrays of NULLs stand for a
-- NULL array, which PL/Proxy cannot split.
CREATE FUNCTION pgq_proxy.id_partitions(block_ids bigint[], partitions integer)
RETURNS integer[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog
AS $$
SELECT coalesce(array_agg(pgq_proxy.id_partition(b) & (partitions - 1) ORDER BY n), '{}')
FROM unnest(block_ids) WITH ORDINALITY AS u(b, n)
$$;

CREATE FUNCTION pgq.complete_many(block_ids bigint[],
                                  attempts integer[] DEFAULT NULL,
                                  results jsonb[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    n integer := cardinality(block_ids);
    done bigint[];
BEGIN
    IF block_ids IS NULL OR n = 0
       OR (attempts IS NOT NULL AND cardinality(attempts) <> n)
       OR (results IS NOT NULL AND cardinality(results) <> n) THEN
        -- nothing to route, or a mistake for pgq to report: one partition
        RETURN pgq_proxy.complete_many_one(
            coalesce(pgq_proxy.id_partition(block_ids[1]), 0), block_ids,
            attempts, results);
    END IF;
    SELECT coalesce(array_agg(i ORDER BY i), '{}') INTO done
    FROM pgq_proxy.complete_many_on(
             pgq_proxy.id_partitions(block_ids, parts), block_ids,
             coalesce(attempts, array_fill(NULL::integer, ARRAY[n])),
             coalesce(results, array_fill(NULL::jsonb, ARRAY[n]))) d,
         unnest(d) i;
    RETURN done;
END
$$;

CREATE FUNCTION pgq.release_many(block_ids bigint[],
                                 attempts integer[] DEFAULT NULL,
                                 worker_id bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    n integer := coalesce(cardinality(block_ids), 0);
    done bigint[];
BEGIN
    IF worker_id IS NOT NULL THEN
        RAISE EXCEPTION 'advisory-mode blocks cannot be released through the pgq router'
            USING ERRCODE = '0A000';
    END IF;
    IF block_ids IS NULL THEN
        RAISE EXCEPTION 'block_ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF coalesce(cardinality(attempts), n) <> n THEN
        RAISE EXCEPTION 'attempts must have one element per block id'
            USING ERRCODE = '2202E',
                  HINT = 'Pass NULL, or one element per block id, in the same order.';
    END IF;
    SELECT coalesce(array_agg(i ORDER BY i), '{}') INTO done
    FROM pgq_proxy.release_many_on(
             pgq_proxy.id_partitions(block_ids, parts), block_ids,
             coalesce(attempts, array_fill(NULL::integer, ARRAY[n]))) d,
         unnest(d) i;
    RETURN done;
END
$$;

-- The failures go to the partitions the ids name, in parallel, each with
-- its error, attempt and binary error.
CREATE FUNCTION pgq.fail_many(block_ids bigint[],
                              errors text[] DEFAULT NULL,
                              retry_after interval DEFAULT NULL,
                              attempts integer[] DEFAULT NULL,
                              worker_id bigint DEFAULT NULL,
                              error_data bytea[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    n integer := coalesce(cardinality(block_ids), 0);
    failed bigint[];
BEGIN
    IF worker_id IS NOT NULL THEN
        RAISE EXCEPTION 'advisory-mode blocks cannot be failed through the pgq router'
            USING ERRCODE = '0A000';
    END IF;
    IF block_ids IS NULL THEN
        RAISE EXCEPTION 'block_ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF coalesce(cardinality(errors), n) <> n THEN
        RAISE EXCEPTION 'errors must have one element per block id'
            USING ERRCODE = '2202E';
    END IF;
    IF coalesce(cardinality(attempts), n) <> n THEN
        RAISE EXCEPTION 'attempts must have one element per block id'
            USING ERRCODE = '2202E';
    END IF;
    IF coalesce(cardinality(error_data), n) <> n THEN
        RAISE EXCEPTION 'error_data must have one element per block id'
            USING ERRCODE = '2202E';
    END IF;
    SELECT coalesce(array_agg(i ORDER BY i), '{}') INTO failed
    FROM pgq_proxy.fail_many_on(
             pgq_proxy.id_partitions(block_ids, parts), block_ids,
             coalesce(errors, array_fill(NULL::text, ARRAY[n])), retry_after,
             coalesce(attempts, array_fill(NULL::integer, ARRAY[n])),
             coalesce(error_data, array_fill(NULL::bytea, ARRAY[n]))) d,
         unnest(d) i;
    RETURN failed;
END
$$;

-- ---------------------------------------------------------------------------
-- Enqueues: to the partition of the item's ordering key, else of its key,
-- else to a random one (the next one when that cannot be reached; not when
-- the connection went after the call was sent, which may have enqueued it)
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgq_proxy.unreachable_error(part integer, route text, msg text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    RAISE EXCEPTION 'partition % of the pgq cluster is unreachable', part
        USING ERRCODE = '08006',
              DETAIL = format('Items of key %L go to partition %s. %s', route, part, msg),
              HINT = 'Enqueue again once the partition is back: with a key, nothing is added twice.';
END
$$;

CREATE FUNCTION pgq.enqueue(group_name text, payload jsonb DEFAULT NULL,
                            key text DEFAULT NULL, priority integer DEFAULT 0,
                            run_at timestamptz DEFAULT NULL,
                            data bytea DEFAULT NULL,
                            ordering_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    route text := coalesce(ordering_key, key);
    p integer;
    tries integer := 0;
    st text;
    msg text;
BEGIN
    IF route IS NULL THEN
        p := floor(random() * parts)::integer;
    ELSE
        p := pgq_proxy.key_partition(route, parts);
    END IF;
    LOOP
        BEGIN
            RETURN pgq_proxy.check_id(
                pgq_proxy.enqueue_on(p, group_name, payload, key, priority,
                                     run_at, data, ordering_key), p, parts);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            IF NOT pgq_proxy.unreachable(st, msg) THEN
                RAISE;
            END IF;
            IF route IS NOT NULL THEN
                PERFORM pgq_proxy.unreachable_error(p, route, msg);
            END IF;
            -- the partition may have enqueued it: another would add it again
            IF NOT pgq_proxy.not_sent(st, msg) THEN
                RAISE EXCEPTION 'the outcome of the enqueue on partition % of the pgq cluster is unknown', p
                    USING ERRCODE = '08007',
                          DETAIL = 'The connection was lost after the call was sent: the item may have been enqueued. ' || msg,
                          HINT = 'Give items a key to make an enqueue safe to repeat.';
            END IF;
            tries := tries + 1;
            IF tries >= parts THEN
                RAISE EXCEPTION 'no partition of the pgq cluster is reachable'
                    USING ERRCODE = '08006', DETAIL = msg;
            END IF;
            p := (p + 1) % parts;
        END;
    END LOOP;
END
$$;

COMMENT ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, bytea, text) IS
'add an item to the partition of its ordering key, else of its key, else to a random one';

CREATE FUNCTION pgq.enqueue_many(group_name text, payloads jsonb[] DEFAULT NULL,
                                 keys text[] DEFAULT NULL,
                                 priority integer DEFAULT 0,
                                 run_at timestamptz DEFAULT NULL,
                                 data bytea[] DEFAULT NULL,
                                 ordering_keys text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    parts integer := pgq_proxy.partitions();
    n integer := greatest(coalesce(cardinality(payloads), -1),
                          coalesce(cardinality(data), -1));
    targets integer[];
    ids bigint[];
    r record;
    j integer;
    one integer;
    st text;
    msg text;
BEGIN
    IF n <= 0
       OR (payloads IS NOT NULL AND cardinality(payloads) <> n)
       OR (data IS NOT NULL AND cardinality(data) <> n)
       OR (keys IS NOT NULL AND cardinality(keys) <> n)
       OR (ordering_keys IS NOT NULL AND cardinality(ordering_keys) <> n) THEN
        -- nothing to route, or a mistake for pgq to report: one partition
        RETURN pgq_proxy.enqueue_many_one(floor(random() * parts)::integer,
                                          group_name, payloads, keys, priority,
                                          run_at, data, ordering_keys);
    END IF;
    -- each item's partition: its ordering key's, its key's, or one random
    -- partition for all the items without either
    one := floor(random() * parts)::integer;
    targets := ARRAY(SELECT coalesce(pgq_proxy.key_partition(coalesce(o, k), parts), one)
                     FROM generate_series(1, n) i,
                          LATERAL (SELECT ordering_keys[i] AS o, keys[i] AS k) x
                     ORDER BY i);
    ids := array_fill(NULL::bigint, ARRAY[n]);
    BEGIN
        FOR r IN SELECT * FROM pgq_proxy.enqueue_many_on(
                     targets, group_name,
                     coalesce(payloads, array_fill(NULL::jsonb, ARRAY[n])),
                     coalesce(keys, array_fill(NULL::text, ARRAY[n])),
                     priority, run_at,
                     coalesce(data, array_fill(NULL::bytea, ARRAY[n])),
                     coalesce(ordering_keys, array_fill(NULL::text, ARRAY[n])))
        LOOP
            -- the partition's ids, in the order of its items
            j := 0;
            FOR i IN 1 .. n LOOP
                IF targets[i] = r.part THEN
                    j := j + 1;
                    ids[i] := pgq_proxy.check_id(r.item_ids[j], r.part, parts);
                END IF;
            END LOOP;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        IF NOT pgq_proxy.unreachable(st, msg) THEN
            RAISE;
        END IF;
        RAISE EXCEPTION 'a partition of the pgq cluster is unreachable'
            USING ERRCODE = '08006',
                  DETAIL = 'The items of the other partitions may have been enqueued. ' || msg,
                  HINT = 'Enqueue the batch again once the partition is back: with keys, nothing is added twice.';
    END;
    RETURN ids;
END
$$;

COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], text[], integer, timestamptz, bytea[], text[]) IS
'add many items, each to the partition of its ordering key or key; returns their ids in the order given';

-- ---------------------------------------------------------------------------
-- Groups and queues: on every partition
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgq_proxy.all_partitions()
RETURNS integer[]
LANGUAGE sql STABLE
SET search_path = pg_catalog
AS $$ SELECT ARRAY(SELECT generate_series(0, pgq_proxy.partitions() - 1)) $$;

-- Each partition runs the query over its own part of the data.  The result
-- is partition 0's: true for the one caller that created the group there.
CREATE FUNCTION pgq.create_group(group_name text, query text,
                                 block_size integer DEFAULT 5000,
                                 mode text DEFAULT 'transaction',
                                 async boolean DEFAULT false,
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 timeout interval DEFAULT NULL,
                                 owner regrole DEFAULT NULL,
                                 params text[] DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$
SELECT bool_or(c.created) FILTER (WHERE c.part = 0)
FROM pgq_proxy.create_group_on(pgq_proxy.all_partitions(), group_name, query,
                               block_size, mode, async, lease, max_attempts,
                               timeout, owner::text, params) c
$$;

COMMENT ON FUNCTION pgq.create_group(text, text, integer, text, boolean,
                                     interval, integer, interval, regrole,
                                     text[]) IS
'create a group on every partition, each over its own part of the data; partition 0''s answer';

-- retention and key_retention are text here ('7 days', 'infinity'): the
-- router has no pgq.retention_interval.
CREATE FUNCTION pgq.create_queue(group_name text,
                                 mode text DEFAULT 'lease',
                                 lease interval DEFAULT '5 minutes',
                                 max_attempts integer DEFAULT 5,
                                 backoff interval DEFAULT '10 seconds',
                                 max_backoff interval DEFAULT '1 hour',
                                 owner regrole DEFAULT NULL,
                                 retention text DEFAULT NULL,
                                 key_retention text DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$
SELECT bool_or(c.created) FILTER (WHERE c.part = 0)
FROM pgq_proxy.create_queue_on(pgq_proxy.all_partitions(), group_name, mode,
                               lease, max_attempts, backoff, max_backoff,
                               owner::text, retention, key_retention) c
$$;

COMMENT ON FUNCTION pgq.create_queue(text, text, interval, integer, interval,
                                     interval, regrole, text, text) IS
'create a queue on every partition; partition 0''s answer';

CREATE FUNCTION pgq.drop_group(group_name text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT bool_or(d) FROM pgq_proxy.drop_group_all(group_name) d $$;

CREATE FUNCTION pgq.pause(group_name text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT bool_or(d) FROM pgq_proxy.pause_all(group_name, true) d $$;

CREATE FUNCTION pgq.resume(group_name text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT bool_or(d) FROM pgq_proxy.pause_all(group_name, false) d $$;

CREATE FUNCTION pgq.purge(group_name text, older_than interval DEFAULT '0',
                          dead boolean DEFAULT false)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT sum(d)::bigint FROM pgq_proxy.purge_all(group_name, older_than, dead) d $$;

-- Retention as text, as create_queue takes it here (see pgq.create_queue).
CREATE FUNCTION pgq.set_retention(queue_name text, retention text,
                                  key_retention text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT FROM pgq_proxy.set_retention_all(queue_name, retention, key_retention) $$;

CREATE FUNCTION pgq.grant(group_name text, role text,
                          privilege text DEFAULT 'consume')
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT FROM pgq_proxy.grant_all(group_name, role, privilege, false) $$;

CREATE FUNCTION pgq.revoke(group_name text, role text,
                           privilege text DEFAULT 'consume')
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT FROM pgq_proxy.grant_all(group_name, role, privilege, true) $$;

CREATE FUNCTION pgq.retry(group_name text, key text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog
AS $$ SELECT bool_or(d) FROM pgq_proxy.retry_key_all(group_name, key) d $$;

-- An item by key: from every partition, as a key may have gone with its
-- ordering key to another partition than its own.
CREATE FUNCTION pgq.item(queue_name text, key text,
                         OUT block_id bigint, OUT state text,
                         OUT attempt integer, OUT result jsonb,
                         OUT result_data bytea, OUT last_error text,
                         OUT last_error_data bytea)
RETURNS SETOF record
AS $$
    CLUSTER 'pgq';
    RUN ON ALL;
$$ LANGUAGE plproxy;

-- ---------------------------------------------------------------------------
-- Progress: summed over the partitions (every partition must answer).  A
-- group is drained when it is drained on every partition; partitions says
-- on how many it exists.
-- ---------------------------------------------------------------------------

CREATE VIEW pgq.group_stats AS
SELECT s.group_name,
       min(s.mode) AS mode,
       CASE WHEN bool_or(s.state = 'failed') THEN 'failed'
            WHEN bool_or(s.state = 'materializing') THEN 'materializing'
            WHEN bool_and(s.state = 'drained')
                 AND count(*) = pgq_proxy.partitions() THEN 'drained'
            WHEN bool_or(s.state = 'paused') THEN 'paused'
            ELSE 'ready' END AS state,
       min(s.block_size) AS block_size,
       sum(s.total_ids)::bigint AS total_ids,
       sum(s.total_blocks)::bigint AS total_blocks,
       sum(s.pending)::bigint AS pending,
       sum(s.claimed)::bigint AS claimed,
       sum(s.done)::bigint AS done,
       sum(s.failed)::bigint AS failed,
       min(s.created_at) AS created_at,
       CASE WHEN bool_and(s.ready_at IS NOT NULL) THEN max(s.ready_at) END AS ready_at,
       min(s.owner) AS owner,
       round(100.0 * sum(s.done) / nullif(sum(s.total_blocks), 0), 1) AS percent_done,
       min(s.lease) AS lease,
       min(s.max_attempts) AS max_attempts,
       string_agg(s.error, '; ') AS error,
       count(*) AS partitions
FROM pgq_proxy.group_stats_all() s
GROUP BY s.group_name;

COMMENT ON VIEW pgq.group_stats IS
'progress of every group, summed over the partitions';

CREATE VIEW pgq.queue_stats AS
SELECT s.queue_name,
       min(s.mode) AS mode,
       sum(s.pending)::bigint AS pending,
       sum(s.scheduled)::bigint AS scheduled,
       sum(s.running)::bigint AS running,
       sum(s.done)::bigint AS done,
       sum(s.dead)::bigint AS dead,
       max(s.oldest_pending_age) AS oldest_pending_age,
       min(s.lease) AS lease,
       min(s.max_attempts) AS max_attempts,
       min(s.backoff) AS backoff,
       min(s.max_backoff) AS max_backoff,
       min(s.owner) AS owner,
       min(s.created_at) AS created_at,
       bool_or(s.paused) AS paused,
       sum(s.kept_keys)::bigint AS kept_keys,
       min(s.retention) AS retention,
       min(s.key_retention) AS key_retention,
       sum(s.waiting)::bigint AS waiting,
       count(*) AS partitions
FROM pgq_proxy.queue_stats_all() s
GROUP BY s.queue_name;

COMMENT ON VIEW pgq.queue_stats IS
'every queue: items by state, summed over the partitions';

GRANT SELECT ON pgq.group_stats, pgq.queue_stats TO PUBLIC;
