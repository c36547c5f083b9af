
# pgq over several servers, through the router (pgq_proxy, PL/Proxy): a
# router cluster and three shard clusters on this machine, with four
# partition databases placed on the three (part0 and part3 on shard 1,
# part1 on shard 2, part2 on shard 3), as docs/scaling.md sets them up.
#
#  1. The router reaches every partition, and each hands out ids of its own
#     range (pgq.set_partition, checked by pgq_proxy.check()).
#  2. A lease-mode group over a table partitioned across the four (each
#     holds the ids of its residue mod 4) is created through the router on
#     every partition; a keyed queue is filled through it, each item on the
#     partition of its key, and enqueuing the keys again adds nothing.
#  3. Four consumers (separate router sessions) drain both through the
#     router: claim, complete, and record what complete said they held, in
#     tables of the router database whose primary keys refuse a second
#     completion of an id or an item.  Shard 2 is stopped while they run:
#     the consumers go on draining every other partition to the end, no
#     completion of partition 1 succeeds meanwhile, the only errors they
#     see are the router's "unreachable" ones, the stats refuse to answer,
#     an enqueue of a key of partition 1 fails with a clear error (08006),
#     and enqueues of other keys, and without a key, go on.  Shard 2 is
#     started again and the consumers drain the rest: every id and every
#     item is completed exactly once, and every partition is empty.
#
# Leases are 5 seconds: a claim that a partition committed while the router
# lost the connection to it comes back when its lease runs out.  Every wait
# is for an observed condition (the router's tables, a session's end).
#
# Skipped when PL/Proxy (Debian package postgresql-NN-plproxy) is not
# installed for the server under test.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTest;

my $router = start_router();

my $N_IDS = 4000;
my $BLOCK = 20;
my $N_KEYS = 400;
my $PARTS = 4;

# Shards: part0 and part3 on shard 1, part1 on shard 2, part2 on shard 3.
my @shards;
for my $i (1 .. 3)
{
	my $s = PostgreSQL::Test::Cluster->new("shard$i");
	$s->init;
	$s->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
	$s->start;
	push @shards, $s;
}
my @place = ($shards[0], $shards[1], $shards[2], $shards[0]);
my $down = 1;                  # the partition on shard 2, stopped below

for my $p (0 .. $PARTS - 1)
{
	$place[$p]->safe_psql('postgres', "CREATE DATABASE part$p");
	$place[$p]->safe_psql(
		"part$p", qq{
		CREATE EXTENSION pgq;
		SELECT pgq.set_partition($p);
		CREATE TABLE alerts AS
		SELECT g AS id FROM generate_series(1, $N_IDS) g WHERE g % $PARTS = $p;
	});
}

my $servers = join(",\n",
	map {
		"p$_ 'host=" . $place[$_]->host . ' port=' . $place[$_]->port
		  . " dbname=part$_'"
	} 0 .. $PARTS - 1);
$router->safe_psql(
	'postgres', qq{
	CREATE EXTENSION pgq_proxy CASCADE;
	CREATE SERVER pgq FOREIGN DATA WRAPPER plproxy OPTIONS ($servers);
	CREATE USER MAPPING FOR PUBLIC SERVER pgq;
	CREATE TABLE done_ids (id bigint PRIMARY KEY);
	CREATE TABLE done_blocks (block_id bigint PRIMARY KEY);
	CREATE TABLE done_items (item_id bigint PRIMARY KEY, key text UNIQUE);
});

# 1. the cluster as the router sees it
is( $router->safe_psql(
		'postgres',
		"SELECT string_agg(format('%s:%s:%s', partition, reachable, ids_ok), ' ' ORDER BY partition) FROM pgq_proxy.check()"
	),
	'0:t:t 1:t:t 2:t:t 3:t:t',
	'every partition is reachable and has its own id range');

# 2. a group over the partitioned table, and a keyed queue
is( $router->safe_psql(
		'postgres',
		"SELECT pgq.create_group('alerts', 'SELECT id FROM alerts ORDER BY id', block_size => $BLOCK, mode => 'lease', lease => '5 s', max_attempts => 1000)"
	),
	't',
	'create_group through the router: true for the creator');
is( $router->safe_psql(
		'postgres',
		"SELECT pgq.create_group('alerts', 'SELECT id FROM alerts ORDER BY id', block_size => $BLOCK, mode => 'lease', lease => '5 s', max_attempts => 1000)"
	),
	'f',
	'create_group again: false, joined on every partition');
my $blocks_per_part = $N_IDS / $PARTS / $BLOCK;
is( $router->safe_psql(
		'postgres',
		"SELECT state, total_ids, total_blocks, pending, partitions FROM pgq.group_stats WHERE group_name = 'alerts'"
	),
	"ready|$N_IDS|" . ($blocks_per_part * $PARTS) . '|'
	  . ($blocks_per_part * $PARTS) . "|$PARTS",
	'group_stats sums the partitions');
for my $p (0 .. $PARTS - 1)
{
	is( $place[$p]->safe_psql(
			"part$p",
			"SELECT count(*), bool_and(block_id >> 42 = $p), bool_and(ids <@ (SELECT array_agg(id::bigint) FROM alerts)) FROM pgq.blocks"
		),
		"$blocks_per_part|t|t",
		"partition $p materialized its own ids, in blocks of its own range");
}

is( $router->safe_psql('postgres',
		"SELECT pgq.create_queue('jobs', lease => '5 s', max_attempts => 1000)"),
	't', 'create_queue through the router');
my $keys_sql =
  "ARRAY(SELECT 'job-' || g FROM generate_series(1, $N_KEYS) g)";
my $ids1 = $router->safe_psql(
	'postgres',
	"SELECT pgq.enqueue_many('jobs', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $N_KEYS) g), keys => $keys_sql)"
);
my $ids2 = $router->safe_psql(
	'postgres',
	"SELECT pgq.enqueue_many('jobs', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $N_KEYS) g), keys => $keys_sql)"
);
is($ids2, $ids1, 'enqueuing the keys again returns the same ids');
is( $router->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE pgq_proxy.id_partition(i) = pgq_proxy.key_partition(k, $PARTS)), count(DISTINCT pgq_proxy.id_partition(i)) FROM unnest('$ids1'::bigint[], $keys_sql) AS u(i, k)"
	),
	"$N_KEYS|$PARTS",
	'each item went to the partition of its key, over all partitions');
is( $router->safe_psql('postgres',
		"SELECT pending, partitions FROM pgq.queue_stats WHERE queue_name = 'jobs'"),
	"$N_KEYS|$PARTS", 'queue_stats sums the partitions: nothing added twice');
my $items_expected = $N_KEYS;

# A consumer's step: claim a block and an item through the router (waiting
# at most a second), complete each, and record what complete said was held.
my $step = q{
WITH k AS (SELECT c.block_id, c.ids,
                  pgq.complete(c.block_id, attempt => c.attempt) AS ok
           FROM pgq.claim('alerts', wait => '1 s') c),
     d AS (INSERT INTO done_ids SELECT unnest(k.ids) FROM k WHERE k.ok)
INSERT INTO done_blocks SELECT k.block_id FROM k WHERE k.ok;
WITH k AS (SELECT c.block_id, c.key,
                  pgq.complete(c.block_id, attempt => c.attempt) AS ok
           FROM pgq.claim('jobs', wait => '1 s') c)
INSERT INTO done_items SELECT k.block_id, k.key FROM k WHERE k.ok;
};

my @consumers = map { new_session($router, "consumer$_") } 1 .. 4;
my $obs = new_session($router, 'observer');
my @errors;
my $steps = 0;

# Keep the consumers stepping until $cond (SQL on the router's tables)
# returns 't'; let their last steps finish.
sub drive
{
	my ($cond, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $met = 0;
	while (time() < $deadline)
	{
		for my $c (@consumers)
		{
			my $state = $c->poll;
			die $c->name . " died: $c->{error}" if $state eq 'dead';
			next if $state eq 'busy';
			if ($steps++ >= @consumers)
			{
				push @errors, grep { /ERROR:/ } split /\n/, ($c->{error} // '');
			}
			$c->send($step) unless $met;
		}
		if (!$met)
		{
			$met = $obs->query_ok("$cond;") eq 't';
		}
		elsif (!grep { $_->is_busy } @consumers)
		{
			ok(1, $what);
			return;
		}
		usleep(20_000);
	}
	fail("$what: timed out");
	return;
}

# 3. drain, with partition 1 (shard 2) stopped on the way
drive("SELECT count(*) >= 30 FROM done_blocks", 'consumers started');

$shards[1]->stop('fast');
my $p1_blocks = $obs->query_ok(
	"SELECT count(*) FROM done_blocks WHERE block_id >> 42 = $down;");
my $p1_items = $obs->query_ok(
	"SELECT count(*) FROM done_items WHERE item_id >> 42 = $down;");

# enqueues while partition 1 is down
my ($key_down, $key_up) = split /\|/, $obs->query_ok(
	"SELECT min(k) FILTER (WHERE pgq_proxy.key_partition(k, $PARTS) = $down), min(k) FILTER (WHERE pgq_proxy.key_partition(k, $PARTS) = 0) FROM (SELECT 'late-' || g AS k FROM generate_series(1, 100) g) x;"
);
my ($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT pgq.enqueue('jobs', '{}', key => '$key_down')");
like(
	$err,
	qr/ERROR:  08006: partition $down of the pgq cluster is unreachable/,
	'an enqueue of a key of the stopped partition fails with a clear error');
like(
	$router->safe_psql('postgres',
		"SELECT pgq.enqueue('jobs', '{}', key => '$key_up') >> 42"),
	qr/^0$/,
	'an enqueue of a key of another partition goes on');
isnt(
	$router->safe_psql('postgres', "SELECT pgq.enqueue('jobs', '{}') >> 42"),
	"$down", 'an enqueue without a key goes to a reachable partition');
$items_expected += 2;
($ret, $out, $err) = $router->psql('postgres',
	"SELECT count(*) FROM pgq.group_stats");
like($err, qr/ERROR:  PL\/Proxy function .*part$down/,
	'group_stats refuses to answer while a partition is down');
is( $router->safe_psql(
		'postgres',
		"SELECT string_agg(format('%s:%s', partition, reachable), ' ' ORDER BY partition) FROM pgq_proxy.check()"
	),
	'0:t 1:f 2:t 3:t',
	'pgq_proxy.check() names the partition out of reach');

# every other partition is drained to the end meanwhile
my $others_ids = $N_IDS / $PARTS * ($PARTS - 1);
my $others_items = $router->safe_psql(
	'postgres',
	"SELECT count(*) + 2 FROM unnest($keys_sql) k WHERE pgq_proxy.key_partition(k, $PARTS) <> $down"
);
drive(
	"SELECT (SELECT count(*) FROM done_ids WHERE id % $PARTS <> $down) = $others_ids AND (SELECT count(*) FROM done_items WHERE item_id >> 42 <> $down) = $others_items",
	'with shard 2 stopped, the consumers drained every other partition');
is( $obs->query_ok(
		"SELECT count(*) FROM done_blocks WHERE block_id >> 42 = $down;"),
	$p1_blocks,
	'no block of the stopped partition was completed meanwhile');
is( $obs->query_ok(
		"SELECT count(*) FROM done_items WHERE item_id >> 42 = $down;"),
	$p1_items,
	'no item of the stopped partition was completed meanwhile');

# shard 2 back: the key enqueues now, the rest drains
$shards[1]->start;
like(
	$router->safe_psql('postgres',
		"SELECT pgq.enqueue('jobs', '{}', key => '$key_down') >> 42"),
	qr/^$down$/,
	'the key of the partition that is back enqueues');
$items_expected += 1;
is( $router->safe_psql(
		'postgres',
		"SELECT pgq.enqueue_many('jobs', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $N_KEYS) g), keys => $keys_sql)"
	),
	$ids1,
	'after the restart, enqueuing the keys again still adds nothing');
drive(
	"SELECT (SELECT count(*) FROM done_ids) = $N_IDS AND (SELECT count(*) FROM done_items) = $items_expected",
	'the consumers drained the group and the queue');

# 4. exactly once, nothing lost
is( $obs->query_ok(
		"SELECT count(*), min(id), max(id) FROM done_ids;"),
	"$N_IDS|1|$N_IDS",
	'every id was completed exactly once (primary key), none lost');
is( $obs->query_ok(
		"SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE key IS NULL) FROM done_items;"
	),
	"$items_expected|" . ($items_expected - 1) . '|1',
	'every item was completed exactly once, none lost');
is( $router->safe_psql(
		'postgres',
		"SELECT state, done, partitions FROM pgq.group_stats WHERE group_name = 'alerts'"
	),
	"drained|" . ($blocks_per_part * $PARTS) . "|$PARTS",
	'the group is drained on every partition');
is( $router->safe_psql(
		'postgres',
		"SELECT pending, running, scheduled, done, dead FROM pgq.queue_stats WHERE queue_name = 'jobs'"
	),
	"0|0|0|$items_expected|0",
	'the queue has every item done, none dead');
for my $p (0 .. $PARTS - 1)
{
	is( $place[$p]->safe_psql(
			"part$p",
			"SELECT (SELECT count(*) FROM pgq.blocks), (SELECT count(*) FROM pgq.items WHERE state <> 'd')"
		),
		'0|0',
		"partition $p holds no block and no unfinished item");
}
# Claims pass the stopped partition over; only a completion of one of its
# blocks or items (claimed before it stopped) can fail.
my @bad = grep {
	!/ERROR:  PL\/Proxy function pgq\.complete\(\d+\): \[part$down\]|ERROR:  pgq\.complete\(\d+\): \[part$down\] REMOTE ERROR: terminating connection/
} @errors;
is(scalar(@bad), 0,
	'the consumers saw no error but completions on the stopped partition')
  or diag join("\n", @bad);
note scalar(@errors) . " steps failed while shard 2 was down";

# fail_many and set_retention through the router: each id's failure goes to
# its partition, with its own error
$router->safe_psql('postgres',
	"SELECT pgq.create_queue('fq', max_attempts => 1, lease => '1 hour')");
$router->safe_psql('postgres',
	"SELECT pgq.enqueue_many('fq', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 40) g), keys => ARRAY(SELECT 'f' || g FROM generate_series(1, 40) g))"
);
my $fq = $router->safe_psql('postgres',
	"SELECT count(DISTINCT block_id >> 42), array_agg(block_id ORDER BY block_id), array_agg(attempt ORDER BY block_id) FROM pgq.claim('fq', 40)"
);
my ($fq_parts, $fq_ids, $fq_attempts) = split /\|/, $fq;
is($fq_parts, $PARTS, 'the keyed items of fq lie on every partition');
is( $router->safe_psql(
		'postgres',
		"SELECT pgq.fail_many('$fq_ids', ARRAY(SELECT 'e' || x FROM unnest('$fq_ids'::bigint[]) x), attempts => '$fq_attempts') = '$fq_ids'::bigint[]"
	),
	't',
	'fail_many through the router fails every item it held, ids in order');
is( $router->safe_psql(
		'postgres',
		"SELECT pending, running, dead, partitions FROM pgq.queue_stats WHERE queue_name = 'fq'"
	),
	"0|0|40|$PARTS",
	'the failed items are dead on their partitions');
my $fq_errors = 0;
for my $p (0 .. $PARTS - 1)
{
	$fq_errors += $place[$p]->safe_psql("part$p",
		"SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'fq' AND i.last_error = 'e' || i.item_id"
	);
}
is($fq_errors, 40, 'each item got its own error');
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT pgq.fail_many('$fq_ids', ARRAY['x'])");
like($err, qr/ERROR:  2202E: errors must have one element per block id/,
	'fail_many refuses errors of another length, as pgq does');
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT pgq.release_many(NULL)");
like($err, qr/ERROR:  22004: block_ids must not be NULL/,
	'release_many refuses a NULL array, as pgq does');
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT pgq.release_many('$fq_ids', ARRAY[1])");
like($err, qr/ERROR:  2202E: attempts must have one element per block id/,
	'release_many refuses attempts of another length, as pgq does');
$router->safe_psql('postgres',
	"SELECT pgq.set_retention('fq', '1 day', 'infinity')");
is( $router->safe_psql(
		'postgres',
		"SELECT retention, key_retention FROM pgq.queue_stats WHERE queue_name = 'fq'"
	),
	'1 day|infinity',
	'set_retention through the router sets every partition');

# transaction mode cannot go through the router
$router->safe_psql('postgres',
	"SELECT pgq.create_group('tx', 'SELECT id FROM alerts', block_size => $BLOCK)");
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nBEGIN; SELECT * FROM pgq.claim('tx'); COMMIT;");
like(
	$err,
	qr/ERROR:  0A000: transaction-mode groups cannot be claimed through the pgq router/,
	'a transaction-mode claim through the router is refused');

$_->close for @consumers, $obs;
$_->stop for @shards;
$router->stop;
done_testing();
