
# Chaos, with nothing lost.
#
# Part 1, one server: a group of PGQ_CHAOS_IDS ids (default 100,000) in each
# claim mode (transaction, lease, advisory; blocks of 100 to 500 ids), each
# drained by PGQ_CHAOS_CONSUMERS consumers (default 3), and a lease-mode job
# queue into which a producer enqueues PGQ_CHAOS_KEYS keyed items (default
# 2000; some keys sent again as redeliveries, and whole batches sent again
# after a lost connection), processed by 3 workers.  Every client records
# what it processes in the transaction that consumes it: lease and advisory
# consumers record and pgq.complete() in one transaction and roll back when
# complete returns false; advisory consumers also check pgq.check_worker()
# in it, and register again and pgq.relock() after losing their locks; queue
# workers record the key in a table with a UNIQUE constraint (see
# test/t/PgqChaos.pm for the protocols).  Meanwhile, spread over the run, the
# test (PGQ_CHAOS_ROUNDS actions, default 12)
#  - ends client sessions with pg_terminate_backend(),
#  - kills a client's backend with SIGKILL (crash restart of every session),
#  - stops the server with pg_ctl -m immediate (twice) and starts it again,
# each time while a client of every claim mode and of the queue holds a
# claim (the transaction-mode one inside its open transaction); and
#  - stalls lease consumers until their block was claimed again by another
#    consumer after the lease ran out (lease: 3 s): their late
#    pgq.complete(attempt =>) must return false, and they roll back,
#  - makes advisory consumers lose their locks (pg_advisory_unlock_all(), as
#    a pooler's DISCARD ALL does): pgq.check_worker() must be false in their
#    completing transaction; they roll back, register again and relock.
# Clients reconnect and carry on, with the block they held, or (half of the
# time) having forgotten it, as a client that died would.  At the end: every
# id recorded exactly once in each mode, every group drained (nothing
# pending, claimed or dead-lettered), every key processed exactly once with
# one item per key and nothing pending, scheduled, running or dead in the
# queue, every commit a client saw still there, and no PANIC, failed
# assertion (TRAP) or process ended by a signal (other than the SIGKILLs
# sent) in the server log.  What was done (kills, restarts, blocks retried)
# is printed with note().
#
# Part 2, failover: the same, smaller (PGQ_CHAOS_FAILOVER_IDS, default
# 20,000), on a primary with a synchronous streaming standby; midway the
# primary is stopped in immediate mode and the standby promoted, and the
# clients move to it (PGQ_CHAOS_FAILOVERS times, each to a new standby).
# Exactly once holds for transaction and lease modes and the queue.  For
# advisory mode, the README promises at-least-once across failures (a
# worker may process a block that another worker also processes: locks and
# the worker registry do not survive a failover) and exactly one result for
# work committed together with pgq.complete() and checked with
# pgq.check_worker() in that transaction: that is what is checked, and the
# blocks the clients processed more than once are counted.
#
# The chaos is drawn from PGQ_CHAOS_SEED (printed; set it to repeat a run's
# choices).  test/soak/chaos.sh runs this test with more ids and more chaos.
# Waits are for observed conditions only; the harness's timeout
# (PG_TEST_TIMEOUT_DEFAULT) guards against hangs.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgqChaos;

my $set = PgqChaos::settings();
# a consumer that lost its locks waits for the others
die 'PGQ_CHAOS_CONSUMERS must be at least 2' if $set->{CONSUMERS} < 2;
srand($set->{SEED});
note "PGQ_CHAOS_SEED=$set->{SEED} "
  . join(' ', map { "PGQ_CHAOS_$_=$set->{$_}" } grep { $_ ne 'SEED' } sort keys %$set);

# block sizes, per mode
my %block_size;
for my $mode (@PgqChaos::MODES)
{
	$block_size{$mode} =
	  $set->{BLOCK_SIZE} ne '' ? $set->{BLOCK_SIZE} : 100 + int(rand(401));
}

my %common = (
	block_size => \%block_size,
	consumers => $set->{CONSUMERS},
	batch => $set->{BATCH},
	queue_workers => $set->{QUEUE_WORKERS},
	lease => $set->{LEASE},
);

# --- part 1: one server ----------------------------------------------------
{
	my $t0 = time();
	my $node = PostgreSQL::Test::Cluster->new('chaos');
	$node->init;
	$node->append_conf('postgresql.conf', PgqChaos::server_conf());
	$node->start;

	my $chaos = PgqChaos->new(
		%common,
		node => $node,
		label => 'chaos',
		ids => $set->{IDS},
		keys => $set->{KEYS});
	$chaos->setup;
	my @actions = PgqChaos::plan_actions(
		rounds => $set->{ROUNDS},
		immediate => $set->{IMMEDIATE},
		kill9 => $set->{KILLS},
		stall => $set->{STALLS},
		unlock => $set->{UNLOCKS});
	note 'chaos: planned actions: ' . join(', ', @actions);
	$chaos->run(@actions);
	my %done;
	$done{$_}++ for @{ $chaos->{done_actions} };
	is($done{immediate} // 0, $set->{IMMEDIATE},
		"chaos: $set->{IMMEDIATE} immediate stops and starts done");
	is($done{kill9} // 0, $set->{KILLS},
		"chaos: $set->{KILLS} backends killed with SIGKILL");
	cmp_ok($done{terminate} // 0, '>=', 1,
		'chaos: sessions ended with pg_terminate_backend');
	$chaos->check;
	$chaos->check_logs;
	$chaos->report;
	note sprintf 'chaos: part 1 took %.0f s', time() - $t0;
	$chaos->{node}->stop;
}

# --- part 2: failover to a streaming standby -------------------------------
{
	my $t0 = time();
	my $primary = PostgreSQL::Test::Cluster->new('failover_primary');
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf', PgqChaos::server_conf());
	$primary->start;
	my $standby = PgqChaos::make_standby($primary, 'failover_standby1');

	my $chaos = PgqChaos->new(
		%common,
		node => $primary,
		standby => $standby,
		label => 'failover',
		ids => $set->{FAILOVER_IDS},
		keys => $set->{FAILOVER_KEYS});
	$chaos->setup;
	my @actions = PgqChaos::plan_actions(
		rounds => $set->{FAILOVER_ROUNDS},
		stall => 1,
		unlock => 1,
		failover => $set->{FAILOVERS});
	note 'failover: planned actions: ' . join(', ', @actions);
	$chaos->run(@actions);
	is($chaos->{failovers} // 0, $set->{FAILOVERS},
		"failover: $set->{FAILOVERS} failovers done");
	is($chaos->{node}->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
		'f', 'failover: the clients ended on a promoted standby');
	$chaos->check;
	$chaos->check_logs;
	$chaos->report;
	note sprintf 'failover: part 2 took %.0f s', time() - $t0;
	$chaos->{node}->stop;
}

done_testing();
