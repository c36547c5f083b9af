# Advisory-mode queues across a failover to a streaming standby.
#
# A claim of an item writes nothing, so nothing of it is replicated: the
# advisory locks and the UNLOGGED worker registry stay on the primary.
# - Two workers on the primary claim 30 of the queue's 100 items (see
#   PgqAdvisory.pm); W1 completes two of them (one the head of an ordering
#   key) and they are replicated; W2 has a completion open at the failover.
# - On the standby, check_worker() of the primary's workers is false, and
#   claim, register_worker and relock fail with 25006
#   (read_only_sql_transaction).
# - The primary stops (immediate) and the standby is promoted: the registry
#   is empty, check_worker() of the old ids is false, nothing is running,
#   and no row changed but those of the two completions (and the item they
#   handed the ordering key on to): the claims never wrote.
# - Two new workers that relock() every item claimed on the old primary,
#   started at the same moment, share the items still held there: each goes
#   to exactly one of them, and none that was completed before the failover.
# - Every item is completed exactly once in the end, each ordering key's
#   items in enqueue order, every one at its first attempt.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqAdvisory qw(:DEFAULT :queue);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# no maintenance passes: they would clear out the dead registrations that
# this test looks at
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$primary->start;
setup_advisory_queue($primary);
take_snapshot($primary);

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$standby->start;

# Ids to numbers, for readable checks.
sub ns { return join ',', map { n_of($_) } @_; }
sub sorted_ns { return join ',', sort { $a <=> $b } map { n_of($_) } @_; }

# --- two workers on the primary hold 15 items each; W1 completes two
my ($s1, $w1) = worker_session($primary, 'w1');
my @w1_claimed = claim_items($s1, $w1, 15);
my ($s2, $w2) = worker_session($primary, 'w2');
my @w2_claimed = claim_items($s2, $w2, 15);
is(ns(@w1_claimed), '1,2,3,4,5,6,7,8,9,10,11,21,22,23,24',
	'W1 claimed 15 items on the primary');
is(ns(@w2_claimed), join(',', 25 .. 39), 'W2 claimed the next 15');
my @completed = item_ids(1, 11);
ok(complete_item($s1, $w1, $_), 'W1 completed item ' . n_of($_)) for @completed;
my $open = $w2_claimed[0];
is(start_completion($s2, $w2, $open), 't',
	'W2 completed item ' . n_of($open) . ', not committed at the failover');
my @claimed = sort { $a <=> $b } (@w1_claimed, @w2_claimed);
my %completed = map { $_ => 1 } @completed;
my @held = grep { !$completed{$_} } @claimed;
is(queue_stats($primary), '54|0|28|16|2|0', 'primary: 28 items running, 2 done');
$primary->wait_for_catchup($standby);

# --- the standby has no registry and no locks
is($standby->safe_psql('postgres',
		'SELECT string_agg(n::text, \',\' ORDER BY n) FROM completed'),
	'1,11', 'the standby has the two completions');
is(sorted_ns(changed_since_snapshot($standby)), '1,11,12',
	'and no other change: the claims were not replicated, they wrote nothing');
is($standby->safe_psql('postgres',
		"SELECT pgq.check_worker($w1), pgq.check_worker($w2)"),
	'f|f', "check_worker of the primary's workers is false on the standby");
like(error_of($standby,
		"SELECT * FROM pgq.claim('aq', max_blocks => 1, worker_id => $w1)"),
	qr/^25006: cannot claim blocks during recovery$/,
	'a claim of the queue on the standby fails with 25006');
like(error_of($standby, 'SELECT pgq.register_worker()'),
	qr/^25006: cannot register a worker during recovery$/,
	'register_worker on the standby fails with 25006');
like(error_of($standby, "SELECT pgq.relock('{$held[0]}', worker_id => $w1)"),
	qr/^25006: cannot relock blocks during recovery$/,
	'relock of an item on the standby fails with 25006');
like(error_of($standby, "SELECT pgq.complete($held[0], worker_id => $w1)"),
	qr/^25006: cannot complete a block during recovery$/,
	'completing an item on the standby fails with 25006');
note 'queue_stats on the standby (pending|scheduled|running|waiting|done|dead): '
  . queue_stats($standby);

# --- failover
note 'stopping the primary in immediate mode, promoting the standby';
$primary->stop('immediate');
$s1->quit;
$s2->quit;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';

is($standby->safe_psql('postgres', 'SELECT count(*) FROM pgq.worker_registry'),
	'0', 'the registry on the new primary is empty');
is($standby->safe_psql('postgres',
		"SELECT pgq.check_worker($w1), pgq.check_worker($w2)"),
	'f|f', 'check_worker of the old ids is false on the new primary');
like(error_of($standby,
		"SELECT * FROM pgq.claim('aq', max_blocks => 1, worker_id => $w1)"),
	not_registered($w1),
	'claiming with an old id fails with 55000 on the new primary');
is(queue_stats($standby), '82|0|0|16|2|0', 'new primary: nothing running');
is(sorted_ns(changed_since_snapshot($standby)), '1,11,12',
	'new primary: only the completed items changed');

# --- two new workers relock every item claimed on the old primary, at the
# same moment: a third session holds pgq.groups locked while both start,
# and both wait on it (seen in pg_locks) before it lets go
my ($n1s, $n1) = worker_session($standby, 'n1');
my $n1_pid = $n1s->query_safe('SELECT pg_backend_pid()');
my ($n2s, $n2) = worker_session($standby, 'n2');
my $n2_pid = $n2s->query_safe('SELECT pg_backend_pid()');
cmp_ok($n1, '>', $w2, "new worker ids ($n1, $n2) do not repeat old ones");

my $gate = $standby->background_psql('postgres');
$gate->query_safe('BEGIN; LOCK TABLE pgq.groups IN ACCESS EXCLUSIVE MODE');
# n1 goes up the list, n2 down it, so that they meet if they overlap
my $up = join(',', @claimed);
my $down = join(',', reverse @claimed);
$n1s->query_until(qr/sent/,
	"\\echo sent\nSELECT pgq.relock('{$up}', worker_id => $n1);\n");
$n2s->query_until(qr/sent/,
	"\\echo sent\nSELECT pgq.relock('{$down}', worker_id => $n2);\n");
# (a relock that does not wait, but ends, fails the check at once)
$standby->poll_query_until('postgres', qq{
	SELECT count(*) FROM pg_stat_activity a
	WHERE pid IN ($n1_pid, $n2_pid)
	  AND (EXISTS (SELECT FROM pg_locks l
	               WHERE l.pid = a.pid AND NOT l.granted
	                 AND l.relation = 'pgq.groups'::regclass)
	       OR (state = 'idle' AND query LIKE 'SELECT pgq.relock%'))}, '2')
  or die 'the relocks neither waited for the gate nor ended';
is($standby->safe_psql('postgres', qq{
	SELECT count(*) FROM pg_locks
	WHERE relation = 'pgq.groups'::regclass AND NOT granted
	  AND pid IN ($n1_pid, $n2_pid)}),
	'2', 'both relocks wait for the gate');
$gate->query_safe('COMMIT');

# The ids regained by the relock that was sent to session $s.
sub relock_result
{
	my ($s) = @_;
	my $out = $s->query_until(qr/relocked\n/, "\\echo relocked\n");
	$out =~ /^\{(.*)\}\nrelocked\n\z/ or die "unexpected relock output: $out";
	return split /,/, $1;
}
my @got1 = relock_result($n1s);
my @got2 = relock_result($n2s);
note sprintf 'n1 regained %d items (%s), n2 regained %d items (%s)',
  scalar @got1, ns(@got1), scalar @got2, ns(@got2);

my %count;
$count{$_}++ for @got1, @got2;
is(join(',', sort { $a <=> $b } keys %count), join(',', @held),
	'together they regained exactly the items still held at the failover');
is(join(',', grep { $count{$_} > 1 } sort { $a <=> $b } keys %count), '',
	'no item was regained by both');
is(join(',', grep { $count{$_} } @completed), '',
	'none of the items completed before the failover was regained');
ok($count{$open}, 'the item whose completion was open at the failover was regained');
is(queue_stats($standby), '54|0|28|16|2|0', 'new primary: 28 items running again');
is(workers($standby),
	"n1|t|" . scalar(@got1) . "\nn2|t|" . scalar(@got2),
	'pgq.workers shows each new worker with its share');
is(sorted_ns(changed_since_snapshot($standby)), '1,11,12',
	'the relocks changed no row');
$gate->quit;

# --- drain, exactly once
my ($done1, $refused1) = drain_queue($n1s, $n1, 8, @got1);
my ($done2, $refused2) = drain_queue($n2s, $n2, 8, @got2);
note "n1 completed $done1 items, n2 $done2; "
  . ($refused1 + $refused2) . ' completions refused and rolled back';
is($done1 + $done2, 98, 'the new workers completed every item left');
is($refused1 + $refused2, 0, 'no completion was refused');
check_queue_drained($standby, 'across the failover');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM pgq.items WHERE attempt <> 1'),
	'0', 'every item was completed at its first attempt: the lost claims did not count');
$n1s->quit;
$n2s->quit;

done_testing();
