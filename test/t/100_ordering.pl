# Ordering keys, drained by several processes at once.  A producer session
# enqueues 1,100 items into a lease-mode queue while four worker sessions
# drain it: 1,000 items spread over 40 ordering keys (25 each, enqueued in
# rounds, some with pgq.enqueue_many, some one by one) and 100 without a
# key.  Each worker loops, in a procedure that commits after every step:
# claim one item (the claim commits), note when its work starts, work, note
# when it ends, then complete it (or fail it) in the transaction that
# records the attempt.  Some items misbehave:
#
#  - "abandon": the worker walks away from its first attempt, as a worker
#    that dies would; the lease (2 s) runs out, a later claim hands the item
#    out again (it is still the head of its key) and it is done then;
#  - "retry": the first attempt fails with retry_after => '0';
#  - "fail": every attempt fails, and the third dead-letters it (pgq.fail);
#  - "poison": every attempt is abandoned, and the lease that runs out at
#    the third attempt dead-letters it (in a claim's look for due items).
#
# The test proves:
#  1. Every item ends done or dead, and the dead ones are exactly the
#     "fail" and "poison" items: a dead head lets its key go on.
#  2. Exactly once: each done item was completed once, a dead one never.
#  3. Per key, items are handed out one at a time in enqueue order: every
#     attempt of an item starts after the work of every attempt of the
#     item before it (of the same key) ended, or, for an abandoned one, after
#     it started; a failed head's retries come before the next item.
#  4. Other keys go on meanwhile: while a poison item held its key, items of
#     other keys were done.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('ordering');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
max_connections = 20
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	SELECT pgq.create_queue('ord', lease => '2 seconds', max_attempts => 3,
	                        backoff => '0');
	-- what each attempt did: its work from started to ended (NULL when the
	-- worker walked away), and how it ended
	CREATE TABLE attempts (
	    item_id bigint, okey text, seq integer, mode text, worker text,
	    attempt integer, started timestamptz, ended timestamptz,
	    outcome text);
	CREATE TABLE producer (done boolean NOT NULL);
	INSERT INTO producer VALUES (false);

	-- the items: key k<i % 40>, seq = its place in the key; a few misbehave
	CREATE FUNCTION item_mode(n integer) RETURNS text LANGUAGE sql AS $$
	    SELECT CASE WHEN n IN (101, 402, 763) THEN 'poison'
	                WHEN n % 97 = 5 THEN 'fail'
	                WHEN n % 53 = 7 THEN 'abandon'
	                WHEN n % 41 = 3 THEN 'retry'
	                ELSE 'ok' END
	$$;
	CREATE FUNCTION item_payload(n integer) RETURNS jsonb LANGUAGE sql AS $$
	    SELECT jsonb_build_object('n', n, 'k', 'k' || (n % 40), 's', n / 40,
	                              'mode', item_mode(n))
	$$;

	-- the producer: rounds of 40 items (one per key), every fifth round one
	-- by one, the others with enqueue_many; 100 items without a key among
	-- them.  A transaction per round.
	CREATE PROCEDURE produce() LANGUAGE plpgsql AS $$
	BEGIN
	    FOR r IN 0 .. 24 LOOP
	        IF r % 5 = 4 THEN
	            FOR n IN r * 40 .. r * 40 + 39 LOOP
	                PERFORM pgq.enqueue('ord', item_payload(n),
	                                    ordering_key => 'k' || (n % 40));
	            END LOOP;
	        ELSE
	            PERFORM pgq.enqueue_many('ord',
	                (SELECT array_agg(item_payload(n) ORDER BY n)
	                 FROM generate_series(r * 40, r * 40 + 39) n),
	                ordering_keys => (SELECT array_agg('k' || (n % 40) ORDER BY n)
	                                  FROM generate_series(r * 40, r * 40 + 39) n));
	        END IF;
	        PERFORM pgq.enqueue_many('ord',
	            (SELECT array_agg(jsonb_build_object('n', 1000 + r * 4 + i,
	                                                 'mode', 'ok'))
	             FROM generate_series(0, 3) i));
	        COMMIT;
	    END LOOP;
	    UPDATE producer SET done = true;
	    COMMIT;
	END
	$$;

	CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
	DECLARE
	    r record;
	    mode text;
	    t0 timestamptz;
	    t1 timestamptz;
	    ok boolean;
	BEGIN
	    LOOP
	        SELECT block_id, attempt, payload INTO r
	        FROM pgq.claim('ord', wait => '1 second');
	        COMMIT;
	        IF r.block_id IS NULL THEN
	            EXIT WHEN (SELECT done FROM producer)
	                  AND NOT EXISTS (SELECT FROM pgq.items
	                                  WHERE state NOT IN ('d', 'f'));
	            CONTINUE;
	        END IF;
	        t0 := clock_timestamp();
	        mode := r.payload ->> 'mode';
	        IF mode = 'poison' OR (mode = 'abandon' AND r.attempt = 1) THEN
	            INSERT INTO attempts VALUES (r.block_id, r.payload ->> 'k',
	                (r.payload ->> 's')::integer, mode, w, r.attempt, t0,
	                NULL, 'abandoned');
	            COMMIT;
	            CONTINUE;
	        END IF;
	        PERFORM pg_sleep(0.001);    -- the work
	        t1 := clock_timestamp();
	        IF mode = 'fail' OR (mode = 'retry' AND r.attempt = 1) THEN
	            ok := pgq.fail(r.block_id, 'boom', retry_after => '0',
	                           attempt => r.attempt);
	            INSERT INTO attempts VALUES (r.block_id, r.payload ->> 'k',
	                (r.payload ->> 's')::integer, mode, w, r.attempt, t0, t1,
	                CASE WHEN ok THEN 'failed' ELSE 'lost' END);
	        ELSE
	            ok := pgq.complete(r.block_id, attempt => r.attempt);
	            INSERT INTO attempts VALUES (r.block_id, r.payload ->> 'k',
	                (r.payload ->> 's')::integer, mode, w, r.attempt, t0, t1,
	                CASE WHEN ok THEN 'done' ELSE 'lost' END);
	        END IF;
	        COMMIT;
	    END LOOP;
	END
	$$;
});

# four workers start first, waiting for work; the producer fills the queue
# while they drain it
# (a session's statements reach psql as it is polled: poll them all)
my @workers = map { new_session($node, "w$_") } 1 .. 4;
my $producer = new_session($node, 'producer');
$_->send("SET pgq.wait_recheck_interval = '100ms'; CALL work('" . $_->name . "');")
  for @workers;
$producer->send('CALL produce();');
my %state;
while (grep { ($state{$_->name} = $_->poll) eq 'busy' } @workers, $producer)
{
	usleep(20_000);
}
for my $s (@workers, $producer)
{
	is($state{ $s->name }, 'done', $s->name . ' finished');
	is($s->{error}, '', $s->name . ' without errors');
}

# 1. every item finished; the dead ones are the "fail" and "poison" items
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE state = 'd') || ' done, '
		    || count(*) FILTER (WHERE state = 'f') || ' dead, '
		    || count(*) FILTER (WHERE state NOT IN ('d', 'f')) || ' other'
		FROM pgq.items}),
	'1086 done, 14 dead, 0 other',
	'every item is done or dead');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM pgq.items
		WHERE (state = 'f') <> (payload ->> 'mode' IN ('fail', 'poison'))}),
	'0', 'the dead items are exactly the failing and the poison ones');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT last_error, ',' ORDER BY last_error)
		FROM pgq.dead_items WHERE ordering_key IS NOT NULL}),
	'boom,lease expired',
	'dead-lettered by pgq.fail and by leases that ran out');

# 2. exactly once
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM pgq.items i
		WHERE (SELECT count(*) FROM attempts a
		       WHERE a.item_id = i.item_id AND a.outcome = 'done')
		      <> CASE WHEN i.state = 'd' THEN 1 ELSE 0 END}),
	'0', 'each done item was completed once, each dead one never');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM attempts WHERE mode = 'abandon'
		GROUP BY item_id HAVING count(*) <> 2 LIMIT 1}),
	'', 'abandoned items were handed out again after their lease ran out');

# 3. per key: one at a time, in enqueue order
is( $node->safe_psql('postgres', q{
		WITH per_item AS (
		    SELECT okey, seq,
		           min(started) AS first_start,
		           max(CASE WHEN outcome IN ('done', 'failed') THEN ended
		                    ELSE started END) AS last_end
		    FROM attempts WHERE okey IS NOT NULL GROUP BY okey, seq)
		SELECT count(*) FROM per_item p JOIN per_item q
		  ON q.okey = p.okey AND q.seq > p.seq
		WHERE q.first_start <= p.last_end}),
	'0',
	'no item of a key was handed out before every item in front of it ended');
is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT okey) || ' keys, ' || count(DISTINCT seq) || ' places'
		FROM attempts WHERE okey IS NOT NULL}),
	'40 keys, 25 places', 'every key and place was handed out');

# 4. other keys went on while a poison head held its key
cmp_ok( $node->safe_psql('postgres', q{
		SELECT count(*) FROM attempts a
		WHERE a.outcome = 'done' AND a.okey IS NOT NULL
		  AND a.okey <> (SELECT okey FROM attempts WHERE mode = 'poison'
		                 ORDER BY started LIMIT 1)
		  AND a.started > (SELECT min(started) FROM attempts WHERE mode = 'poison')
		  AND a.started < (SELECT max(started) FROM attempts WHERE mode = 'poison')}),
	'>', 0, 'items of other keys were done while a poison head held its key');
cmp_ok( $node->safe_psql('postgres',
		q{SELECT count(DISTINCT worker) FROM attempts WHERE outcome = 'done'}),
	'>', 1, 'more than one worker did items');

$_->close for @workers, $producer;
$node->stop;
done_testing();
