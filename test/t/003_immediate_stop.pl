
# An immediate shutdown (no checkpoint, crash recovery at the next start) in
# the middle of consumption.  Committed consumption survives: the ids in
# "processed" are exactly the ids of the blocks no longer in pgq.blocks; the
# blocks of transactions still open at the stop are pending again; pgq's
# shared memory is new, so group_stats.claimed is 0.
#
# Two stops: one while three consumers hold a claim each (their inserts held
# back by a lock, so the committed count before the stop is known exactly),
# one while consumers are committing as fast as they can (any transaction may
# be cut anywhere; every commit a client saw must have survived).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('immediate');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;

setup_tables($node);

my $n_ids = 20000;
my $block_size = 200;
my $n_blocks = $n_ids / $block_size;
my $query = create_src_group($node, 'g', '11 * g', $n_ids, $block_size);

# --- stop 1: three consumers hold a claim each
my @consumers = map { new_session($node, "consumer$_") } 1 .. 3;
my $r = run_consumers('g', \@consumers, until => sub { $_[0] >= 20 });
is_deeply($r->{errors}, [], 'before stop 1: no consumer error');

my $blocker = new_session($node, 'blocker');
ok(hold_claims($blocker, 'g', @consumers),
	'three consumers hold a claim and wait to insert');

my $st = group_stats($node, 'g');
is($st->{claimed}, 3, 'before stop 1: 3 blocks claimed');
my $done = $st->{done};
my @held = held_blocks($node);
is(scalar @held, 3, 'blocks held at stop 1: ' . join(', ', @held));
my $processed_before = $node->safe_psql('postgres',
	'SELECT count(*) FROM processed');
is($processed_before, $done * $block_size,
	"before stop 1: $done blocks consumed, $processed_before ids processed");

$node->stop('immediate');
diag "immediate stop with 3 claims open (blocks @held)";
$node->start;
ok(wait_for_sessions_dead(@consumers, $blocker),
	'stop 1 ended every session');

$st = group_stats($node, 'g');
is_deeply(
	[ @$st{qw(state pending claimed done)} ],
	[ 'ready', $n_blocks - $done, 0, $done ],
	'after stop 1: claimed 0, the held blocks pending, done unchanged');
my $processed_after = check_consistent($node, 'g', 'after stop 1');
is($processed_after, $processed_before,
	'after stop 1: the ids processed before the stop, and no others');
is(blocks_left($node, @held), 3,
	'the blocks held at stop 1 are back');

# --- stop 2: while consumers are committing
@consumers = map { new_session($node, "again$_") } 1 .. 3;
# the processing of a block takes a little time here (pg_sleep stands for
# the work, not for synchronisation), so that the stop is likely to find
# transactions in flight; the checks below hold either way
$r = run_consumers(
	'g', \@consumers,
	work => 'SELECT pg_sleep(0.02);',
	until => sub {
		return 0 if $_[0] < 15;
		$node->stop('immediate');
		return 1;
	});
my $seen = scalar @{ $r->{claims} };    # commits that the clients saw
my @unexpected = grep { !/$PgqTest::LOST_RE/ } @{ $r->{errors} };
is_deeply(\@unexpected, [],
	'stop 2: consumers saw nothing but the loss of their connections');
diag "immediate stop after $seen commits seen by the clients, "
  . scalar(@{ $r->{errors} })
  . " consumer transactions cut";
$node->start;
ok(wait_for_sessions_dead(@consumers), 'stop 2 ended every session');

$st = group_stats($node, 'g');
is($st->{claimed}, 0, 'after stop 2: claimed 0');
is($st->{pending} + $st->{done}, $n_blocks, 'after stop 2: pending + done = all blocks');
check_consistent($node, 'g', 'after stop 2');
my $done2 = $st->{done} - $done;
cmp_ok($done2, '>=', $seen,
	"after stop 2: every commit the clients saw survived ($done2 >= $seen)");
cmp_ok($done2, '<=', $seen + 3,
	'after stop 2: at most the three transactions in flight committed unseen');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM processed"),
	($done + $done2) * $block_size,
	'after stop 2: processed ids match the done blocks');

# --- drain
@consumers = map { new_session($node, "last$_") } 1 .. 3;
$r = run_consumers('g', \@consumers);
is_deeply($r->{errors}, [], 'drain: no consumer error');
is(scalar @{ $r->{claims} }, $n_blocks - $done - $done2,
	'drain: the remaining blocks consumed');
is( $node->safe_psql(
		'postgres',
		'SELECT count(DISTINCT block_id) FROM processed WHERE block_id IN ('
		  . join(',', @held) . ')'),
	3,
	'the blocks held at stop 1 were processed after the restart');

check_exactly_once($node, 'g', $query, $n_ids, $n_blocks, 'end');

$_->close for @consumers;
$node->stop;
done_testing();
