-- Helpers of the cases of issue #6 that need more than one pgbench script
-- (bench/run: grow, xmin, locks, wake).  Plain SQL and PL/pgSQL, written
-- for this benchmark.  Loaded after setup.sql.

-- grow: a pgq group "grow_<n>" of n blocks of one id, and the seed design's
-- table of n rows as grow_<n>.gq: each size has a schema of its own, so that
-- one pgbench script (grow_seed.sql, which names gq) serves every size
-- through search_path, with prepared statements.
CREATE FUNCTION bench.grow_build(n bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', 'grow_' || n);
    EXECUTE format('CREATE SCHEMA %I', 'grow_' || n);
    EXECUTE format('CREATE TABLE %I.gq (id bigint PRIMARY KEY, ids bigint[] NOT NULL)',
                   'grow_' || n);
    EXECUTE format('INSERT INTO %I.gq SELECT g, ARRAY[g] FROM generate_series(1, %s) g',
                   'grow_' || n, n);
    PERFORM pgq.drop_group('grow_' || n);
    PERFORM pgq.create_group('grow_' || n,
                             format('SELECT g FROM generate_series(1, %s) g', n),
                             block_size => 1);
END $$;

-- wake: one row per round, written by the producer in the transaction that
-- enqueues the round's item (t: the time just before its COMMIT; committed:
-- when COMMIT had returned, stored by the next round's transaction) ...
CREATE TABLE bench.wake_sent (queue text, round integer, t timestamptz NOT NULL,
                              committed timestamptz,
                              PRIMARY KEY (queue, round));
-- ... and by the consumer when its claim has returned the item
CREATE TABLE bench.wake_got (queue text, round integer, t timestamptz NOT NULL,
                             PRIMARY KEY (queue, round));

-- The consumer: claims one item at a time until it has `rounds` items.
-- poll NULL: a waiting claim (wait => '10 s'), the pgq way.  poll given: a
-- claim that does not wait, and a sleep of `poll` after each one that found
-- nothing, the polling loop people write without pgq.  Each claim runs in a
-- transaction of its own; the item is completed after its time is taken.
CREATE PROCEDURE bench.wake_consumer(queue text, rounds integer, poll interval)
LANGUAGE plpgsql AS $$
DECLARE
    got integer := 0;
    id bigint;
    att integer;
    r integer;
    t timestamptz;
    deadline timestamptz := clock_timestamp() + rounds * interval '1 s' + interval '60 s';
BEGIN
    WHILE got < rounds LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'wake consumer: % of % items after the deadline', got, rounds;
        END IF;
        IF poll IS NULL THEN
            SELECT c.block_id, c.attempt, (c.payload ->> 'round')::integer, clock_timestamp()
              INTO id, att, r, t
              FROM pgq.claim(queue, wait => '10 s') c;
        ELSE
            SELECT c.block_id, c.attempt, (c.payload ->> 'round')::integer, clock_timestamp()
              INTO id, att, r, t
              FROM pgq.claim(queue) c;
        END IF;
        IF FOUND THEN
            INSERT INTO bench.wake_got VALUES (queue, r, t);
            PERFORM pgq.complete(id, attempt => att);
            got := got + 1;
            COMMIT;
        ELSE
            COMMIT;
            IF poll IS NOT NULL THEN
                PERFORM pg_sleep(extract(epoch FROM poll));
            END IF;
        END IF;
    END LOOP;
END $$;

-- The producer: `rounds` times, waits until the consumer has the previous
-- item, then a random 0-100 ms (so that items arrive at a random phase of a
-- polling loop), then, if `waiter` (an application_name) is given, until
-- that session sleeps in pgq's wait (wait event type Extension), and then
-- enqueues one item and commits, recording the time just before COMMIT.
CREATE PROCEDURE bench.wake_producer(queue text, rounds integer, waiter text)
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz;
    t_committed timestamptz;
BEGIN
    FOR r IN 1 .. rounds LOOP
        deadline := clock_timestamp() + interval '30 s';
        WHILE r > 1 AND NOT EXISTS (SELECT FROM bench.wake_got g
                                    WHERE g.queue = wake_producer.queue
                                      AND g.round = r - 1) LOOP
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'wake producer: round % was not consumed in 30 s', r - 1;
            END IF;
            PERFORM pg_sleep(0.001);
        END LOOP;
        PERFORM pg_sleep(random() * 0.1);
        IF waiter IS NOT NULL THEN
            LOOP
                PERFORM pg_stat_clear_snapshot();
                EXIT WHEN EXISTS (SELECT FROM pg_stat_activity
                                  WHERE application_name = waiter
                                    AND wait_event_type = 'Extension');
                IF clock_timestamp() > deadline THEN
                    RAISE EXCEPTION 'wake producer: % does not wait in a claim', waiter;
                END IF;
                PERFORM pg_sleep(0.001);
            END LOOP;
        END IF;
        UPDATE bench.wake_sent s SET committed = t_committed
        WHERE s.queue = wake_producer.queue AND s.round = r - 1;
        PERFORM pgq.enqueue(queue, jsonb_build_object('round', r));
        INSERT INTO bench.wake_sent VALUES (queue, r, clock_timestamp());
        COMMIT;
        t_committed := clock_timestamp();
    END LOOP;
    UPDATE bench.wake_sent s SET committed = t_committed
    WHERE s.queue = wake_producer.queue AND s.round = rounds;
    COMMIT;
END $$;

-- "p50 p99 max commit_p50 commit_p99" of a queue, in milliseconds (nearest
-- rank): the wake-up latencies, and how long the producer's COMMIT took
CREATE FUNCTION bench.wake_latency(queue text) RETURNS text
LANGUAGE sql AS $$
    SELECT format('%s %s %s %s %s',
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY ms),
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY ms),
                  max(ms),
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY commit_ms),
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY commit_ms))
    FROM (SELECT extract(epoch FROM g.t - s.t) * 1000 AS ms,
                 extract(epoch FROM s.committed - s.t) * 1000 AS commit_ms
          FROM bench.wake_sent s JOIN bench.wake_got g USING (queue, round)
          WHERE s.queue = wake_latency.queue) l
$$;
