
# kill -9 of one backend while consumers hold claimed blocks.
#
# SIGKILL of a backend is not pg_terminate_backend(): the postmaster cannot
# know what the dying process left in shared memory, so it ends EVERY session
# and goes through crash recovery ("all server processes terminated;
# reinitializing").  All consumers lose their connections; their open
# transactions never committed, so their blocks are pending again; pgq's
# shared memory (claim hints, claimed counts) is created afresh, so
# group_stats.claimed must be 0.  The consumers then reconnect and drain the
# group, and every id is processed exactly once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\nrestart_after_crash = on\n");
$node->start;

setup_tables($node);

my $n_ids = 20000;
my $block_size = 250;
my $n_blocks = $n_ids / $block_size;
my $query = create_src_group($node, 'g', '7 * g', $n_ids, $block_size);

my @consumers = map { new_session($node, "consumer$_") } 1 .. 3;
my $r = run_consumers('g', \@consumers, until => sub { $_[0] >= 20 });
is_deeply($r->{errors}, [], 'before the crash: no consumer error');
my $done = scalar @{ $r->{claims} };
note "$done blocks consumed before the crash";

# --- every consumer claims a block, then waits to insert its ids:
# a SHARE lock on "processed" holds the inserts back, with the claims made
my $blocker = new_session($node, 'blocker');
ok(hold_claims($blocker, 'g', @consumers),
	'three consumers hold a claim and wait to insert');

is_deeply(
	[ @{ group_stats($node, 'g') }{qw(state pending claimed done)} ],
	[ 'ready', $n_blocks - $done - 3, 3, $done ],
	'before the crash: 3 blocks claimed by open transactions');
# the claimed rows are deleted by transactions still in progress
my @held = held_blocks($node);
is(scalar @held, 3, 'three blocks are held: ' . join(', ', @held));
my $processed_before = $node->safe_psql('postgres',
	'SELECT count(*) FROM processed');
is($processed_before, $done * $block_size,
	'committed consumption before the crash');

# --- SIGKILL one consumer's backend: the postmaster restarts all sessions
my $victim = $consumers[1];
my $log_offset = -s $node->logfile;
ok(kill('KILL', $victim->pid), "kill -9 of backend " . $victim->pid);
diag "kill -9 of consumer backend "
  . $victim->pid
  . " (blocks held: @held): crash restart of every session";
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$log_offset = $node->wait_for_log(
	qr/database system is ready to accept connections/, $log_offset);
ok($node->poll_query_until('postgres', 'SELECT true'),
	'server accepts connections again after crash recovery');

# every session was ended, not just the killed one
ok(wait_for_sessions_dead(@consumers, $blocker),
	'every consumer session and the blocker lost its connection');

my $st = group_stats($node, 'g');
is_deeply(
	[ @$st{qw(state pending claimed done)} ],
	[ 'ready', $n_blocks - $done, 0, $done ],
	'after the restart: claimed is 0 (fresh shared memory), the held blocks are pending'
);
is( $node->safe_psql('postgres', 'SELECT count(*) FROM processed'),
	$processed_before, 'committed consumption survived the crash');
check_consistent($node, 'g', 'after the restart');
is(blocks_left($node, @held), 3,
	'the blocks held at the crash are back');

# --- the consumers reconnect and drain the group
@consumers = map { new_session($node, "reconnected$_") } 1 .. 3;
$r = run_consumers('g', \@consumers);
is_deeply($r->{errors}, [], 'after the restart: no consumer error');
is(scalar @{ $r->{claims} },
	$n_blocks - $done, 'after the restart: the remaining blocks consumed');
my %again = map { $_->[1] => $_->[0] } @{ $r->{claims} };
is(scalar(grep { exists $again{$_} } @held),
	3, 'the blocks held at the crash were claimed again');
diag "blocks retried after the restart: "
  . join(', ', map { "$_ by $again{$_}" } @held);

check_exactly_once($node, 'g', $query, $n_ids, $n_blocks, 'end');

$_->close for @consumers;
$node->stop;
done_testing();
