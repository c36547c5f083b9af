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
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('advrestart');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'");
$node->start;

# 200 ids, 20 blocks of 10
my $n_ids = 200;
my $n_blocks = 20;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE processed (id bigint, block_id bigint);
	SELECT pgq.create_group('g', 'SELECT g FROM generate_series(1, 200) g', 10,
	                        mode => 'advisory');
});

my %ids_of;    # block id -> ids, as the claims returned them

# Claim up to $n blocks as worker $w; returns the block ids.
sub claim
{
	my ($s, $w, $n) = @_;
	my @blocks;
	for my $line (split /\n/, $s->query_safe(
		"SELECT block_id, ids FROM pgq.claim('g', max_blocks => $n, worker_id => $w)"))
	{
		my ($block, $ids) = split /\|/, $line;
		$ids_of{$block} = $ids;
		push @blocks, $block;
	}
	return @blocks;
}

# Process one held block exactly once: record its ids and complete it in one
# transaction; if pgq.complete() says the block is not ours, roll back.
sub process
{
	my ($s, $w, $block) = @_;
	$s->query_safe('BEGIN');
	$s->query_safe(
		"INSERT INTO processed SELECT unnest('$ids_of{$block}'::bigint[]), $block");
	my $ok = $s->query_safe("SELECT pgq.complete($block, worker_id => $w)");
	$s->query_safe($ok eq 't' ? 'COMMIT' : 'ROLLBACK');
	return $ok eq 't';
}

# Process the blocks held, then claim and process until nothing is left.
sub drain
{
	my ($s, $w, @todo) = @_;
	my ($done, $refused, $rounds) = (0, 0, 0);
	while (@todo)
	{
		process($s, $w, $_) ? $done++ : $refused++ for @todo;
		die 'the group does not drain' if ++$rounds > $n_blocks;
		@todo = claim($s, $w, 4);
	}
	return ($done, $refused);
}

sub relock
{
	my ($s, $w, @blocks) = @_;
	my $got = $s->query_safe(
		"SELECT pgq.relock('{" . join(',', @blocks) . "}', worker_id => $w)");
	$got =~ s/^\{|\}$//g;
	return split /,/, $got;
}

# A statement that must fail: returns "SQLSTATE: message".
sub error_of
{
	my ($sql) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $err =~ /ERROR:  ([0-9A-Z]{5}): (.*)/ ? "$1: $2" : "no error: $out";
}

sub stats
{
	return $node->safe_psql('postgres',
		"SELECT state, pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g'");
}

# --- two workers hold blocks; W1 consumed one (committed), W2 has completed
# one in a transaction that is still open when the server crashes
my $s1 = $node->background_psql('postgres');
my $w1 = $s1->query_safe("SELECT pgq.register_worker('w1')");
my @w1_claimed = claim($s1, $w1, 4);
ok(process($s1, $w1, $w1_claimed[0]), "W1 consumed block $w1_claimed[0]");
my @w1_held = @w1_claimed[ 1 .. 3 ];

my $s2 = $node->background_psql('postgres');
my $w2 = $s2->query_safe("SELECT pgq.register_worker('w2')");
my @w2_held = claim($s2, $w2, 2);
$s2->query_safe('BEGIN');
$s2->query_safe(
	"INSERT INTO processed SELECT unnest('$ids_of{$w2_held[0]}'::bigint[]), $w2_held[0]");
is($s2->query_safe("SELECT pgq.complete($w2_held[0], worker_id => $w2)"),
	't', "W2 completed block $w2_held[0], not committed yet");
note "workers $w1 and $w2 hold blocks @w1_held and @w2_held";

is(stats(), 'ready|14|5|1', 'before the crash: 5 blocks claimed, 1 done');
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
like(error_of("SELECT * FROM pgq.claim('g', worker_id => $w1)"),
	qr/^55000: worker $w1 is not registered in this session$/,
	'claiming with an old id fails with 55000');
like(error_of("SELECT pgq.complete($w1_held[0], worker_id => $w1)"),
	qr/^55000: worker $w1 is not registered in this session$/,
	'completing with an old id fails with 55000');
is(stats(), 'ready|19|0|1',
	'after the crash: nothing claimed, the uncommitted completion undone');
is($node->safe_psql('postgres', 'SELECT count(*) FROM processed'),
	'10', 'only the committed block is recorded as processed');

# --- new workers take the old blocks back
my $n1s = $node->background_psql('postgres');
my $n1 = $n1s->query_safe("SELECT pgq.register_worker('n1')");
my $n2s = $node->background_psql('postgres');
my $n2 = $n2s->query_safe("SELECT pgq.register_worker('n2')");
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
is(stats(), 'ready|14|5|1', 'after relock: 5 blocks claimed again');
is($node->safe_psql('postgres',
		'SELECT worker_name, alive, blocks_held FROM pgq.workers ORDER BY worker_id'),
	"n1|t|3\nn2|t|2", 'pgq.workers: n1 and n2 alive with the old blocks');

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
like(error_of("SELECT * FROM pgq.claim('g', worker_id => $n1)"),
	qr/^55000: worker $n1 is not registered in this session$/,
	'claiming with an id from before the clean restart fails with 55000');
is(stats(), 'ready|19|0|1', 'after the clean restart: nothing claimed');

my $ms = $node->background_psql('postgres');
my $m = $ms->query_safe("SELECT pgq.register_worker('m')");
cmp_ok($m, '>', $n2, "new worker id $m after the clean restart");
my @held = sort { $a <=> $b } (@w1_held, @w2_held);
is(join(',', relock($ms, $m, @held)), join(',', @held),
	"relock regains all held blocks @held");
is(stats(), 'ready|14|5|1', 'after relock: 5 blocks claimed again');

# --- drain, exactly once
my ($done, $refused) = drain($ms, $m, @held);
note "m completed $done blocks, $refused completions refused and rolled back";
is($done, $n_blocks - 1, 'm completed every block not consumed before');
is($refused, 0, 'no completion was refused');
is($node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM processed'),
	"$n_ids|$n_ids|1|$n_ids", 'every id processed exactly once');
is(stats(), "drained|0|0|$n_blocks", 'the group is drained');
$ms->quit;

done_testing();
