
# A transaction-mode consumer ended with pg_terminate_backend() while it holds
# a claimed block gives the block back at once (its transaction aborts), the
# group's claimed count drops back to 0, and another consumer processes the
# block.  In the end every id of the group is processed exactly once.
#
# pg_terminate_backend() ends one session: the other consumers stay connected
# and go on (compare 002_crash_restart.pl, where kill -9 of one backend makes
# the postmaster restart every session).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('terminate');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;

setup_tables($node);

# 20000 ids beyond the int4 range, in a scrambled order, 250 per block
my $n_ids = 20000;
my $block_size = 250;
my $n_blocks = $n_ids / $block_size;
my $query =
  create_src_group($node, 'g', '5000000000 + 3 * g', $n_ids, $block_size);
is_deeply(
	group_stats($node, 'g'),
	{
		state => 'ready',
		total_ids => $n_ids,
		total_blocks => $n_blocks,
		pending => $n_blocks,
		claimed => 0,
		done => 0
	},
	"group has $n_blocks pending blocks");

my @consumers = map { new_session($node, "consumer$_") } 1 .. 3;

# --- the consumers take a first share of the blocks
my $r = run_consumers('g', \@consumers, until => sub { $_[0] >= 20 });
is_deeply($r->{errors}, [], 'first run: no consumer error');
my $done = scalar @{ $r->{claims} };
cmp_ok($done, '>=', 20, "first run: $done blocks consumed");

# --- a fourth consumer claims a block, processes it, but does not commit
my $victim = new_session($node, 'victim');
$victim->query_ok('BEGIN;');
my ($vblock) = split /\|/, $victim->query_ok(
	qq{SELECT set_config('pgqtest.block', block_id::text, true),
	          set_config('pgqtest.ids', ids::text, true) IS NULL
	   FROM pgq.claim('g');});
like($vblock, qr/^\d+$/, "victim claimed block $vblock");
$victim->query_ok(
	q{INSERT INTO processed (id, block_id)
	  SELECT unnest(current_setting('pgqtest.ids')::bigint[]),
	         current_setting('pgqtest.block')::bigint;});
note "victim (pid $victim->{pid}) holds block $vblock, transaction open";

is_deeply(
	[ @{ group_stats($node, 'g') }{qw(state pending claimed done)} ],
	[ 'ready', $n_blocks - $done - 1, 1, $done ],
	'while the victim holds its block: 1 claimed, not pending, not done');
is( $node->safe_psql(
		'postgres',
		"SELECT state FROM pg_stat_activity WHERE pid = $victim->{pid}"),
	'idle in transaction',
	'victim is idle in transaction');

# --- the other consumers take everything else, skipping the victim's block
$r = run_consumers('g', \@consumers);
is_deeply($r->{errors}, [], 'second run: no consumer error');
$done += scalar @{ $r->{claims} };
is($done, $n_blocks - 1, 'second run: all blocks but the victim\'s consumed');
is( scalar(grep { $_->[1] == $vblock } @{ $r->{claims} }),
	0, 'nobody claimed the victim\'s block while it was held');
is_deeply(
	[ @{ group_stats($node, 'g') }{qw(state pending claimed done)} ],
	[ 'ready', 0, 1, $n_blocks - 1 ],
	'only the victim\'s block is left: claimed, so the group is not drained');

# --- end the victim's session with its transaction open
is( $node->safe_psql(
		'postgres', "SELECT pg_terminate_backend($victim->{pid})"),
	't', 'pg_terminate_backend(victim)');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $victim->{pid}"
	),
	'victim backend is gone');
diag "terminated consumer backend $victim->{pid} holding block $vblock";

is_deeply(
	[ @{ group_stats($node, 'g') }{qw(state pending claimed done)} ],
	[ 'ready', 1, 0, $n_blocks - 1 ],
	'after the terminate: the block is pending again, claimed is back to 0');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM processed WHERE block_id = $vblock"),
	0, 'the victim\'s inserts were rolled back');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pgq.blocks WHERE block_id = $vblock"),
	1, 'the victim\'s block is back in pgq.blocks');

# the victim's client learns that its COMMIT never happened
$victim->send('COMMIT;');
is($victim->wait, 'dead', 'victim\'s psql lost its connection');
like($victim->{error}, $PgqTest::LOST_RE,
	'victim\'s client was told the session ended');

# --- the others pick up the returned block (the claim hint was above it)
$r = run_consumers('g', \@consumers);
is_deeply($r->{errors}, [], 'third run: no consumer error');
is_deeply([ map { $_->[1] } @{ $r->{claims} } ],
	[$vblock], 'the returned block was claimed again, and it was the last');
diag "block $vblock retried by $r->{claims}[0][0]" if @{ $r->{claims} };

check_exactly_once($node, 'g', $query, $n_ids, $n_blocks, 'end');

$_->close for @consumers;
$node->stop;
done_testing();
