
# pgq without shared_preload_libraries: groups, claims and commits work; the
# shared-memory parts are missing, so group_stats.claimed is NULL (unknown)
# and a claim has no hint: it scans the group's index from its head, through
# the dead entries of every consumed block that an old snapshot still keeps.
# The same measurement on a preloaded node reads a couple of entries, which
# shows that the measurement can tell the two apart (sql/hint.sql asserts the
# preloaded side in the regression suite).
#
# Lease claims without preload: no shared memory tells a backend whether the
# run took its epoch, so none is taken (pgq.epoch_seq does not move with
# every new connection) and every claiming transaction commits durably: a
# claim in autocommit survives a crash (the WAL writer stopped, then killed,
# as in 040_lease_durability.pl).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $plain = PostgreSQL::Test::Cluster->new('nopreload');
$plain->init;
$plain->append_conf('postgresql.conf', q{
max_prepared_transactions = 2
autovacuum = off
bgwriter_lru_maxpages = 0
restart_after_crash = on
});
$plain->start;

is( $plain->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'pgq is not preloaded');
setup_tables($plain);
pass('CREATE EXTENSION pgq works without preloading');

my $query = 'SELECT g FROM generate_series(1, 1000) g';
is( $plain->safe_psql(
		'postgres', "SELECT pgq.create_group('g', '$query', 100)"),
	't', 'group created');
is_deeply(
	group_stats($plain, 'g'),
	{
		state => 'ready',
		total_ids => 1000,
		total_blocks => 10,
		pending => 10,
		claimed => undef,
		done => 0
	},
	'new group: 10 pending, claimed NULL');

# --- a claim in an open transaction
my $s1 = new_session($plain, 's1');
$s1->query_ok('BEGIN;');
my $claim = $s1->query_ok(
	"SELECT block_id, cardinality(ids), ids[1], ids[100] FROM pgq.claim('g');");
like($claim, qr/^\d+\|100\|1\|100$/, 'claim returns the first block, in query order');
my ($block) = split /\|/, $claim;
is( $s1->query_ok(
		"SELECT pending, coalesce(claimed::text, 'NULL'), done FROM pgq.group_stats WHERE group_name = 'g';"
	),
	'9|NULL|0',
	'the claiming transaction sees its block neither pending nor done');
is_deeply(
	[ @{ group_stats($plain, 'g') }{qw(pending claimed done)} ],
	[ 10, undef, 0 ],
	'other sessions cannot tell the claimed block from pending ones');
$s1->query_ok(
	"INSERT INTO processed SELECT g, $block FROM generate_series(1, 100) g;");
$s1->query_ok('COMMIT;');
is_deeply(
	[ @{ group_stats($plain, 'g') }{qw(state pending claimed done)} ],
	[ 'ready', 9, undef, 1 ],
	'after COMMIT: 9 pending, 1 done');

# --- a rolled-back claim gives the block back
$s1->query_ok('BEGIN;');
my $again = $s1->query_ok("SELECT block_id FROM pgq.claim('g');");
$s1->query_ok('ROLLBACK;');
is( $s1->query_ok(
		"BEGIN; SELECT block_id FROM pgq.claim('g'); ROLLBACK;"),
	$again,
	'after ROLLBACK the same block is claimed again');
is_deeply(
	[ @{ group_stats($plain, 'g') }{qw(pending done)} ],
	[ 9, 1 ], 'rollbacks changed nothing');
$s1->close;

# --- two consumers drain the group
my @consumers = map { new_session($plain, "consumer$_") } 1 .. 2;
my $r = run_consumers('g', \@consumers);
is_deeply($r->{errors}, [], 'no consumer error');
is(scalar @{ $r->{claims} }, 9, 'the consumers took the 9 other blocks');
$_->close for @consumers;
check_exactly_once($plain, 'g', $query, 1000, 10, 'no preload',
	claimed => undef);

# --- the claim hint: index entries read by one claim after 200 consumed
# blocks whose dead entries cannot be cleaned up
sub hint_measure
{
	my ($node) = @_;
	$node->safe_psql('postgres',
		"SELECT pgq.create_group('hint', 'SELECT g FROM generate_series(1, 300) g', 1)"
	);
	# a prepared transaction with an xid holds back the xmin horizon: nothing
	# consumed from here on can be pruned, nor its index entries killed
	$node->safe_psql('postgres',
		"BEGIN; SELECT pg_current_xact_id(); PREPARE TRANSACTION 'hold_xmin';");

	# 200 claims, each in its own transaction, then a measured one, all in
	# one session (the measured claim plans nothing new)
	my $out = $node->safe_psql(
		'postgres',
		("BEGIN; SELECT ids[1] FROM pgq.claim('hint'); COMMIT;\n" x 200) . q{
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) AS before \gset
SELECT ids[1] FROM pgq.claim('hint');
SELECT pg_stat_get_xact_tuples_returned('pgq.blocks_pkey'::regclass) - :before;
ROLLBACK;
});
	my @lines = split /\n/, $out;
	my $delta = pop @lines;
	my $name = $node->name;
	is_deeply(\@lines, [ 1 .. 201 ],
		"$name: 201 claims got the blocks in order");
	is_deeply(
		[ @{ group_stats($node, 'hint') }{qw(pending done)} ],
		[ 100, 200 ],
		"$name: 200 blocks consumed");

	$node->safe_psql('postgres', "ROLLBACK PREPARED 'hold_xmin'");
	return $delta;
}

my $plain_reads = hint_measure($plain);
cmp_ok($plain_reads, '>', 100,
	"without preload, the claim read the dead index entries ($plain_reads)");

my $preloaded = PostgreSQL::Test::Cluster->new('preload');
$preloaded->init;
$preloaded->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\nmax_prepared_transactions = 2\n");
$preloaded->start;
$preloaded->safe_psql('postgres', 'CREATE EXTENSION pgq');
my $hint_reads = hint_measure($preloaded);
# at least one: the claim did scan the index (a sequential scan would read
# none, and prove nothing about the hint)
ok($hint_reads >= 1 && $hint_reads < 5,
	"with preload, the claim started at the hint ($hint_reads index entries read)");
diag "index entries read by the 201st claim: $plain_reads without preload, "
  . "$hint_reads with preload";

# --- lease claims: no epoch per connection, durable commits
my $epoch_before = $plain->safe_psql('postgres',
	'SELECT last_value FROM pgq.epoch_seq');
$plain->safe_psql('postgres', q{
	SELECT pgq.create_group('lz', 'SELECT g FROM generate_series(1, 4) g', 1,
	                        mode => 'lease');
});
my @lz = map {
	$plain->safe_psql('postgres',
		"SELECT block_id || ' ' || attempt FROM pgq.claim('lz')")
} 1 .. 3;
is_deeply([ map { (split / /)[1] } @lz ], [ 1, 1, 1 ],
	'three connections claimed a block each, attempt 1');
is($plain->safe_psql('postgres', 'SELECT last_value FROM pgq.epoch_seq'),
	$epoch_before, 'no connection took an epoch of its own');
is( $plain->safe_psql('postgres',
		"SELECT string_agg(DISTINCT epoch::text, ',') FROM pgq.blocks b
		 JOIN pgq.groups USING (group_id) WHERE group_name = 'lz'"),
	$epoch_before + 1,
	'the blocks record one more than the last epoch taken');

my $walwriter = $plain->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok(kill('STOP', $walwriter), "the WAL writer ($walwriter) is stopped");
my ($lz_block, $lz_attempt) = split / /,
  $plain->safe_psql('postgres',
	"SELECT block_id || ' ' || attempt FROM pgq.claim('lz')");
my $log_offset = -s $plain->logfile;
ok(kill('KILL', $walwriter), 'kill -9 of the WAL writer: a crash restart');
$plain->wait_for_log(qr/database system is ready to accept connections/,
	$log_offset);
is( $plain->safe_psql('postgres',
		"SELECT state::text || ' ' || attempt FROM pgq.blocks WHERE block_id = $lz_block"),
	"c $lz_attempt", 'the claim made in autocommit survived the crash');

$plain->stop;
$preloaded->stop;
done_testing();
