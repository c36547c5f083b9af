# Per-queue retention, applied by the maintenance pass: past a queue's
# retention the pass drops its finished items' payloads, results and
# errors and keeps their keys taken, so that a redelivered key returns the
# old item's id and enqueues nothing; past key_retention it removes them and
# the key is free; with 'infinity' nothing is forgotten; a queue with
# neither setting follows pgq.retention, as before.
#
# Passes run on demand (pgq.wake_maintenance(); the interval is an hour),
# after the rows were made old by hand in one transaction, with the log
# offset taken before, as in 060_worker_logs.pl: whichever pass sees the
# old rows does all of the work, and its log lines are waited for.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('key_retention');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 3600
pgq.retention = 3600
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

# Five items per queue, with keys, payloads and data, done with results;
# the first of each dead-lettered instead, with its error.
$node->safe_psql('postgres', q{
	SELECT pgq.create_queue('keys', max_attempts => 1, retention => '1 hour',
	                        key_retention => '1 day');
	SELECT pgq.create_queue('forever', max_attempts => 1, retention => 'infinity',
	                        key_retention => 'infinity');
	SELECT pgq.create_queue('keys forever', max_attempts => 1,
	                        retention => '1 hour', key_retention => 'infinity');
	SELECT pgq.create_queue('plain', max_attempts => 1);
	CREATE TABLE first_ids AS
	SELECT q, pgq.enqueue_many(q, array_agg(jsonb_build_object('n', n, 'pad', repeat('x', 500))),
	                          keys => array_agg('k' || n), data => array_agg('\x0102'::bytea)) AS ids
	FROM unnest(ARRAY['keys', 'forever', 'keys forever', 'plain']) q,
	     generate_series(1, 5) n
	GROUP BY q;
});
foreach my $q ('keys', 'forever', 'keys forever', 'plain')
{
	$node->safe_psql('postgres', qq{
		SELECT pgq.fail(block_id, 'boom', attempt => attempt)
		FROM pgq.claim('$q') WHERE key = 'k1';
		SELECT pgq.complete_many(array_agg(block_id), array_agg(attempt),
		                         array_agg(jsonb_build_object('ok', key)))
		FROM pgq.claim('$q', 4);
	});
}
is( $node->safe_psql('postgres', q{
		SELECT string_agg(queue_name || ':' || done || '/' || dead, ',' ORDER BY queue_name COLLATE "C")
		FROM pgq.queue_stats}),
	'forever:4/1,keys:4/1,keys forever:4/1,plain:4/1', 'every item finished');

# Enqueue every key again, and say which ids came back and how many items
# each queue then has.
my $redeliver = q{
	DROP TABLE IF EXISTS again;
	CREATE TABLE again AS
	SELECT q, ids,
	       pgq.enqueue_many(q, ARRAY(SELECT '{"again": true}'::jsonb
	                                 FROM generate_series(1, 5)),
	                        keys => ARRAY(SELECT 'k' || n FROM generate_series(1, 5) n)) AS again
	FROM first_ids;
	SELECT string_agg(q || ':' || (again = ids)::text || ':' ||
	                  (SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
	                   WHERE g.group_name = q), ',' ORDER BY q COLLATE "C")
	FROM again};

# Two hours later: past retention (and pgq.retention), within key_retention.
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	UPDATE pgq.items SET finished_at = now() - interval '2 hours'});
$node->safe_psql('postgres', 'SELECT pgq.wake_maintenance()');
ok( $node->wait_for_log(
		qr/LOG:  pgq: database "postgres": dropped the payloads of 10 finished items past retention, keeping their keys, from queues: "keys" \(5\), "keys forever" \(5\)\n/,
		$offset),
	'the pass drops the payloads of the items past retention, and says so');
ok( $node->wait_for_log(
		qr/LOG:  pgq: database "postgres": removed 5 finished items past key retention from queue: "plain" \(5\)\n/,
		$offset),
	'a queue without settings loses its items past pgq.retention, as before');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(c, ',' ORDER BY n COLLATE "C")
		FROM (SELECT g.group_name AS n,
		             g.group_name || ':' || count(i.item_id) || ':' ||
		             count(i.payload) || ':' || count(i.data) || ':' ||
		             count(i.result) || ':' || count(i.errors) AS c
		      FROM pgq.groups g LEFT JOIN pgq.items i USING (group_id)
		      GROUP BY g.group_name) s}),
	'forever:5:5:5:4:1,keys:5:0:0:0:0,keys forever:5:0:0:0:0,plain:0:0:0:0:0',
	'payloads, data, results and errors are dropped, the rows of the keys stay');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(queue_name || ':' || done || '/' || dead || '/' || kept_keys, ','
		                  ORDER BY queue_name COLLATE "C")
		FROM pgq.queue_stats}),
	'forever:4/1/0,keys:0/0/5,keys forever:0/0/5,plain:0/0/0',
	'queue_stats counts the kept keys apart');
is( $node->safe_psql('postgres', q{
		SELECT state || ':' || attempt || ':' || (result IS NULL) || ':' || (last_error IS NULL)
		FROM pgq.item('keys', 'k1') UNION ALL
		SELECT state || ':' || attempt || ':' || (result IS NULL) || ':' || (last_error IS NULL)
		FROM pgq.item('keys', 'k2')}),
	"dead:1:true:true\ndone:1:true:true",
	'pgq.item tells the state and attempt of a key past retention');
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT pgq.retry('keys', 'k2')});
like($err, qr/ERROR:  item \d+ cannot be retried: its payload was dropped/,
	'a retry of an item past retention is refused');
is($node->safe_psql('postgres', $redeliver),
	'forever:true:5,keys:true:5,keys forever:true:5,plain:false:5',
	'redelivered keys return the old ids and add nothing, but where the key was forgotten');

# Two days later: past key_retention of "keys"; the others keep their keys.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	BEGIN;
	UPDATE pgq.items SET finished_at = now() - interval '2 days'
	WHERE finished_at IS NOT NULL;
	-- the items enqueued again in "plain" are done an hour ago
	SELECT pgq.complete_many(array_agg(block_id), array_agg(attempt))
	FROM pgq.claim('plain', 5);
	COMMIT;
});
$node->safe_psql('postgres', 'SELECT pgq.wake_maintenance()');
ok( $node->wait_for_log(
		qr/LOG:  pgq: database "postgres": removed 5 finished items past key retention from queue: "keys" \(5\)\n/,
		$offset),
	'the pass removes the items past key_retention, and says so');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(c, ',' ORDER BY n COLLATE "C")
		FROM (SELECT g.group_name AS n,
		             g.group_name || ':' || count(i.item_id) || ':' || count(i.payload) AS c
		      FROM pgq.groups g LEFT JOIN pgq.items i USING (group_id)
		      GROUP BY g.group_name) s}),
	'forever:5:5,keys:0:0,keys forever:5:0,plain:5:5',
	'infinity forgets nothing; the kept keys of "keys" are gone');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pgq.item('keys', 'k2')}),
	'0', 'pgq.item finds no item for a key past key_retention');
is($node->safe_psql('postgres', $redeliver),
	'forever:true:5,keys:false:5,keys forever:true:5,plain:false:5',
	'a key past key_retention is free: enqueued again, it makes a new item');

# retention can change: "keys forever" forgets its keys when told to.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SELECT pgq.set_retention('keys forever', '1 hour', '1 day');
	SELECT pgq.wake_maintenance()});
ok( $node->wait_for_log(
		qr/LOG:  pgq: database "postgres": removed 5 finished items past key retention from queue: "keys forever" \(5\)\n/,
		$offset),
	'set_retention applies at the next pass');

$node->stop;
done_testing();
