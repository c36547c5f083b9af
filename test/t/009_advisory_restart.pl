# Advisory mode across server restarts: advisory locks live only in shared
# memory, so every restart drops the workers' claims, and the registry is
# how a worker finds out.
#
# - Crash restart ($node->stop('immediate'), then start: crash recovery):
#   the UNLOGGED registry is emptied, check_worker() of an old id is false,
#   claiming with an old id fails with 55000 (object_not_in_prerequisite_state),
#   new ids do not repeat old ones, and new workers relock() the old blocks:
#   all of those not consumed, including one whose completion was not
#   committed at the crash, and none that another worker holds or that was
#   consumed.
# - Clean restart ($node->restart, fast mode): the registry rows survive
#   (unlogged tables are kept by a clean shutdown), but check_worker() is
#   false because the placeholder locks are gone; relock() regains the blocks.
# - Every id is processed exactly once in the end.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqAdvisory;

my $node = PostgreSQL::Test::Cluster->new('advrestart');
$node->init;
# no maintenance passes: they would clear out the dead registrations that
# this test looks at
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$node->start;

# 200 ids, 20 blocks of 10
my $n_ids = 200;
my $n_blocks = setup_advisory_group($node, $n_ids, 10);

# Relock @blocks as worker $w; returns the block ids regained.
sub relock
{
	my ($s, $w, @blocks) = @_;
	my $got = $s->query_safe(
		"SELECT pgq.relock('{" . join(',', @blocks) . "}', worker_id => $w)");
	$got =~ s/^\{|\}$//g;
	return split /,/, $got;
}

# --- two workers hold blocks; W1 consumed one (committed), W2 has completed
# one in a transaction that is still open when the server crashes
my ($s1, $w1) = worker_session($node, 'w1');
my @w1_claimed = claim($s1, $w1, 4);
ok(process($s1, $w1, $w1_claimed[0]), "W1 consumed block $w1_claimed[0]");
my @w1_held = @w1_claimed[ 1 .. 3 ];

my ($s2, $w2) = worker_session($node, 'w2');
my @w2_held = claim($s2, $w2, 2);
$s2->query_safe('BEGIN');
record_ids($s2, $w2_held[0]);
is($s2->query_safe("SELECT pgq.complete($w2_held[0], worker_id => $w2)"),
	't', "W2 completed block $w2_held[0], not committed yet");
note "workers $w1 and $w2 hold blocks @w1_held and @w2_held";

is(stats($node), 'ready|14|5|1', 'before the crash: 5 blocks claimed, 1 done');
is($node->safe_psql('postgres',
		'SELECT count(*) FROM pgq.workers WHERE alive'),
	'2', 'both workers alive');

# --- crash restart
note 'stopping the server in immediate mode: crash recovery at the next start';
$node->stop('immediate');
$s1->quit;
$s2->quit;
$node->start;

is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.worker_registry'),
	'0', 'crash recovery emptied the unlogged registry');
is($node->safe_psql('postgres',
		"SELECT pgq.check_worker($w1), pgq.check_worker($w2)"),
	'f|f', 'check_worker of the old ids is false in a new session');
like(error_of($node, "SELECT * FROM pgq.claim('g', worker_id => $w1)"),
	not_registered($w1),
	'claiming with an old id fails with 55000');
like(error_of($node, "SELECT pgq.complete($w1_held[0], worker_id => $w1)"),
	not_registered($w1),
	'completing with an old id fails with 55000');
is(stats($node), 'ready|19|0|1',
	'after the crash: nothing claimed, the uncommitted completion undone');
is($node->safe_psql('postgres', 'SELECT count(*) FROM processed'),
	'10', 'only the committed block is recorded as processed');

# --- new workers take the old blocks back
my ($n1s, $n1) = worker_session($node, 'n1');
my ($n2s, $n2) = worker_session($node, 'n2');
cmp_ok($n1, '>', $w2, "new worker ids ($n1, $n2) do not repeat old ones");
cmp_ok($n2, '>', $n1, 'and keep increasing');

is(join(',', relock($n1s, $n1, @w1_held)), join(',', @w1_held),
	"relock by n1 regains exactly W1's blocks @w1_held");
is(join(',', relock($n2s, $n2, @w2_held)), join(',', @w2_held),
	"relock by n2 regains exactly W2's blocks @w2_held, "
	  . 'including the one whose completion was not committed');
is(join(',', relock($n2s, $n2, @w1_held)), '',
	'relock of blocks that n1 holds regains nothing');
is(join(',', relock($n1s, $n1, $w1_claimed[0])), '',
	'relock of a consumed block regains nothing');
is(stats($node), 'ready|14|5|1', 'after relock: 5 blocks claimed again');
is(workers($node), "n1|t|3\nn2|t|2", 'pgq.workers: n1 and n2 alive with the old blocks');

# --- clean restart
note 'restarting the server cleanly (fast mode)';
$node->restart;
$n1s->quit;
$n2s->quit;

is($node->safe_psql('postgres',
		'SELECT string_agg(worker_id::text, \',\' ORDER BY worker_id) FROM pgq.worker_registry'),
	"$n1,$n2", 'the registry rows survive a clean restart');
is($node->safe_psql('postgres',
		"SELECT pgq.check_worker($n1), pgq.check_worker($n2)"),
	'f|f', 'check_worker is false: the placeholder locks are gone');
is($node->safe_psql('postgres',
		'SELECT string_agg(alive::text || \'/\' || blocks_held, \',\') FROM pgq.workers'),
	'false/0,false/0', 'pgq.workers shows them not alive');
like(error_of($node, "SELECT * FROM pgq.claim('g', worker_id => $n1)"),
	not_registered($n1),
	'claiming with an id from before the clean restart fails with 55000');
is(stats($node), 'ready|19|0|1', 'after the clean restart: nothing claimed');

my ($ms, $m) = worker_session($node, 'm');
cmp_ok($m, '>', $n2, "new worker id $m after the clean restart");
my @held = sort { $a <=> $b } (@w1_held, @w2_held);
is(join(',', relock($ms, $m, @held)), join(',', @held),
	"relock regains all held blocks @held");
is(stats($node), 'ready|14|5|1', 'after relock: 5 blocks claimed again');

# --- drain, exactly once
my ($done, $refused) = drain($ms, $m, 4, @held);
note "m completed $done blocks, $refused completions refused and rolled back";
is($done, $n_blocks - 1, 'm completed every block not consumed before');
is($refused, 0, 'no completion was refused');
check_drained($node, $n_ids, $n_blocks);
$ms->quit;

done_testing();
