
# A long wait does not pile up memory.  Waiting claims and a waiting
# pgq.result() look again at every wake-up; each look must free what it
# allocated, or a waiter woken by thousands of commits grows by megabytes
# (it did: about 8 kB per look, the SPI result of each look).
#
# Three waiters sleep side by side: a lease-mode claim of a query group whose
# blocks are all held, a claim of a queue whose only item is held, and
# pgq.result() of that item.  Then $wakes transactions wake them all without
# giving them anything: each completes the held block and enqueues an item,
# and rolls back (a rollback wakes the groups' waiters, as a commit would).
# Each waiter's memory is logged (pg_log_backend_memory_contexts) before and
# after; it must not grow by more than $bound_kb.  The waiters then end for
# real: the holder completes its block and item, and an item is enqueued.
#
# Wake-ups that come while a waiter looks make it look once more, not once
# each, so each waiter counts its looks itself: every look after a wake-up
# reads the group's row (a waiting claim) or the item's (pgq.result) with one
# scan of pgq.groups or pgq.items, which the waiter's transaction counts
# (pg_stat_get_xact_numscans, read in the waiter's statement once the wait
# is over).  Each must have looked at least $min_looks times while the
# wake-ups came, so that a leak of even 1 kB per look would pass the bound
# twice over.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use PgqTest;

my $wakes = 3000;
my $bound_kb = 512;
my $min_looks = 1000;

my $node = PostgreSQL::Test::Cluster->new('wait_memory');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	SELECT pgq.create_group('lg', 'SELECT g FROM generate_series(1, 2) g',
	                        block_size => 1, mode => 'lease', lease => '1 hour');
	SELECT pgq.create_queue('q', lease => '1 hour');
	SELECT pgq.enqueue('q', '{"n": 1}');
});

# The holder takes every block and the item, under leases that outlast the test.
my $holder = new_session($node, 'holder');
my @blocks = split /\n/,
  $holder->query_ok(q{SELECT block_id FROM pgq.claim('lg', max_blocks => 2);});
my $item = $holder->query_ok(q{SELECT block_id FROM pgq.claim('q');});
is(scalar @blocks, 2, 'the holder holds both blocks');
ok($item, "the holder holds item $item");
my $block = $blocks[0];

# The waiters: only wake-ups make them look again.  For each, its query,
# the relation that it scans once at each look after a wake-up, and how many
# scans of it the waiter makes besides (the claim's lookup of its group;
# pgq.result's lookup of the item, and its first look).
my %waiters = (
	'lease claim' => [
		q{SELECT count(*)::text AS r FROM pgq.claim('lg', wait => '1 hour')},
		'groups', 1
	],
	'queue claim' => [
		q{SELECT payload::text AS r FROM pgq.claim('q', wait => '1 hour')},
		'groups', 1
	],
	'pgq.result' => [
		qq{SELECT state AS r FROM pgq.result($item, wait => '1 hour')},
		'items', 2
	],
);
my %w;
for my $name (sort keys %waiters)
{
	my ($query, $rel) = @{ $waiters{$name} };
	(my $app = $name) =~ s/\W/_/g;
	$w{$name} = new_session($node, $app);
	$w{$name}->query_ok("SET pgq.wait_recheck_interval = '1h';");

	# the result, and then (a row formed from the finished wait's row) the
	# scans of the relation and its indexes by the waiter's transaction
	$w{$name}->send(
		qq{WITH w AS MATERIALIZED ($query)
SELECT w.r || '|' || sum(pg_stat_get_xact_numscans(c.oid))
FROM w, pg_class c
WHERE c.oid = 'pgq.$rel'::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index
                WHERE indrelid = 'pgq.$rel'::regclass)
GROUP BY w.r;});
}

my $obs = new_session($node, 'observer');

# Wait until every waiter sleeps in its wait (wait event "Extension").
sub all_sleeping
{
	my $pids = join(',', map { $_->pid } values %w);
	my $n = scalar keys %w;
	return wait_until(
		$obs, qq{
	SELECT count(*) = $n FROM pg_stat_activity
	WHERE pid IN ($pids) AND wait_event_type = 'Extension';}, 't',
		values %w);
}

# The total of a backend's memory contexts, from the server log: ask it to
# log them and wait for the line.
sub logged_memory
{
	my ($pid) = @_;
	my $offset = -s $node->logfile;
	$obs->query_ok("SELECT pg_log_backend_memory_contexts($pid);");
	for (;;)
	{
		my $log = slurp_file($node->logfile, $offset);
		return $1 if $log =~ /\[$pid\] .*?Grand total: (\d+) bytes/;
		usleep(10_000);    # polling interval
	}
}

ok(all_sleeping(), 'the waiters sleep');
my %before = map { $_ => logged_memory($w{$_}->pid) } keys %w;

# The wake-ups: each transaction gives the groups back what it took.  They
# go to psql a hundred at a time.
my $waker = new_session($node, 'waker');
for (my $i = 0; $i < $wakes; $i += 100)
{
	$waker->query_ok(
		qq{BEGIN;
SELECT pgq.complete($block, attempt => 1);
SELECT pgq.enqueue('q', '{"n": 2}');
ROLLBACK;
} x 100);
}

ok(all_sleeping(), "the waiters sleep again after $wakes wake-ups");
my %after = map { $_ => logged_memory($w{$_}->pid) } keys %w;

# End the waits: the holder's work is done, and an item comes.  Its three
# commits, and the queue claim's own, wake each waiter at most four times.
my $end_looks = 4;
$holder->query_ok(
	qq{SELECT pgq.complete(b, attempt => 1) FROM unnest('{@{[join(',', @blocks)]}}'::bigint[]) b;
	   SELECT pgq.complete($item, result => '{"ok": true}', attempt => 1);
	   SELECT pgq.enqueue('q', '{"n": 3}');});
my %result;
for my $name (sort keys %w)
{
	is($w{$name}->wait, 'done', "$name: the wait ended");
	is($w{$name}->{error}, '', "$name: without an error");
	my ($r, $scans) = $w{$name}->{result} =~ /\A(.*)\|(\d+)\z/s;
	$result{$name} = $r // '';
	my $looks = ($scans // 0) - $waiters{$name}[2] - $end_looks;
	my $growth_kb = ($after{$name} - $before{$name}) / 1024;
	note sprintf(
		'%s: %d bytes before, %d after the wake-ups; %d scans of pgq.%s',
		$name, $before{$name}, $after{$name}, $scans // -1, $waiters{$name}[1]);
	cmp_ok($looks, '>=', $min_looks,
		"$name: looked again at least $min_looks times during the wake-ups");
	cmp_ok($growth_kb, '<', $bound_kb,
		"$name: memory grew by less than $bound_kb kB over at least $looks looks");
}
is($result{'lease claim'}, '0', 'lease claim: the group ran out');
is($result{'queue claim'}, '{"n": 3}', 'queue claim: got the new item');
is($result{'pgq.result'}, 'done', 'pgq.result: the item is done');

$_->close for ($holder, $obs, $waker, values %w);
$node->stop;
done_testing();
