# Advisory mode across a failover to a streaming standby.
#
# Advisory locks and the UNLOGGED worker registry are not replicated:
# - on the standby the registry cannot be read at all (PostgreSQL refuses
#   unlogged relations during recovery with 0A000), check_worker() of the
#   primary's workers is false, and claim, register_worker and relock fail
#   with 25006 (read_only_sql_transaction);
# - after the primary stops (immediate) and the standby is promoted, the
#   registry is empty, check_worker() of the old ids is false, and two new
#   workers that relock() every block claimed on the old primary, started at
#   the same moment, share the blocks still held there: each block goes to
#   exactly one of them, and none that was consumed before the failover;
# - every id is processed exactly once in the end.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqAdvisory;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# no maintenance passes: they would clear out the dead registrations that
# this test looks at
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$primary->start;

# 200 ids, 40 blocks of 5
my $n_ids = 200;
my $n_blocks = setup_advisory_group($primary, $n_ids, 5);

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$standby->start;

# --- two workers on the primary hold 15 blocks each; W1 consumes one
my ($s1, $w1) = worker_session($primary, 'w1');
my @w1_claimed = claim($s1, $w1, 15);
my ($s2, $w2) = worker_session($primary, 'w2');
my @w2_claimed = claim($s2, $w2, 15);
is(scalar(@w1_claimed) . '+' . scalar(@w2_claimed), '15+15',
	'each worker on the primary claimed 15 blocks');
my $consumed = $w1_claimed[0];
ok(process($s1, $w1, $consumed), "W1 consumed block $consumed");
my @claimed = sort { $a <=> $b } (@w1_claimed, @w2_claimed);
my @held = grep { $_ != $consumed } @claimed;
is(stats($primary), "ready|10|29|1", 'primary: 29 blocks claimed, 1 done');
$primary->wait_for_catchup($standby);

# --- the standby has no registry and no locks
my $err = error_of($standby, 'SELECT count(*) FROM pgq.worker_registry');
note "reading the registry on the standby: $err";
is($err,
	'0A000: cannot access temporary or unlogged relations during recovery',
	'the unlogged registry cannot be read on the standby');
is($standby->safe_psql('postgres',
		"SELECT pgq.check_worker($w1), pgq.check_worker($w2)"),
	'f|f', "check_worker of the primary's workers is false on the standby");
like(error_of($standby,
		"SELECT * FROM pgq.claim('g', max_blocks => 1, worker_id => $w1)"),
	qr/^25006: cannot claim blocks during recovery$/,
	'a claim on the standby fails with 25006');
like(error_of($standby, 'SELECT pgq.register_worker()'),
	qr/^25006: cannot register a worker during recovery$/,
	'register_worker on the standby fails with 25006');
like(error_of($standby, "SELECT pgq.relock('{$held[0]}', worker_id => $w1)"),
	qr/^25006: cannot relock blocks during recovery$/,
	'relock on the standby fails with 25006');
# the standby's shared memory knows nothing of the primary's claims: it
# shows the held blocks as pending (an observation, not part of the contract)
note 'group_stats on the standby (state|pending|claimed|done): '
  . stats($standby);

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
		"SELECT * FROM pgq.claim('g', max_blocks => 1, worker_id => $w1)"),
	not_registered($w1),
	'claiming with an old id fails with 55000 on the new primary');
is(stats($standby), "ready|39|0|1", 'new primary: nothing claimed');

# --- two new workers relock every block claimed on the old primary, at the
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
$standby->poll_query_until('postgres', qq{
	SELECT count(*) FROM pg_locks
	WHERE relation = 'pgq.groups'::regclass AND NOT granted
	  AND pid IN ($n1_pid, $n2_pid)}, '2')
  or die 'the relocks did not wait for the gate';
$gate->query_safe('COMMIT');

# The block ids regained by the relock that was sent to session $s.
sub relock_result
{
	my ($s) = @_;
	my $out = $s->query_until(qr/relocked\n/, "\\echo relocked\n");
	$out =~ /^\{(.*)\}\nrelocked\n\z/ or die "unexpected relock output: $out";
	return split /,/, $1;
}
my @got1 = relock_result($n1s);
my @got2 = relock_result($n2s);
note sprintf 'n1 regained %d blocks (%s), n2 regained %d blocks (%s)',
  scalar @got1, "@got1", scalar @got2, "@got2";

my %count;
$count{$_}++ for @got1, @got2;
is(join(',', sort { $a <=> $b } keys %count), join(',', @held),
	'together they regained exactly the blocks still held at the failover');
is(join(',', grep { $count{$_} > 1 } sort { $a <=> $b } keys %count), '',
	'no block was regained by both');
ok(!$count{$consumed}, "block $consumed, consumed before the failover, was not regained");
is(stats($standby), "ready|10|29|1", 'new primary: 29 blocks claimed again');
is(workers($standby),
	"n1|t|" . scalar(@got1) . "\nn2|t|" . scalar(@got2),
	'pgq.workers shows each new worker with its share');
$gate->quit;

# --- drain, exactly once
my ($done1, $refused1) = drain($n1s, $n1, 8, @got1);
my ($done2, $refused2) = drain($n2s, $n2, 8, @got2);
note "n1 completed $done1 blocks, n2 $done2; "
  . ($refused1 + $refused2) . ' completions refused and rolled back';
is($done1 + $done2, $n_blocks - 1, 'the new workers completed every block left');
is($refused1 + $refused2, 0, 'no completion was refused');
check_drained($standby, $n_ids, $n_blocks, 'across the failover');
$n1s->quit;
$n2s->quit;

done_testing();
