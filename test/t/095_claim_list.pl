
# Workers that serve several queues through one claim,
# pgq.claim(group_names text[], ...).  This test proves:
#
#  1. Exactly once: four worker sessions, driven from here side by side,
#     drain six queues (four in lease mode, two in transaction mode) through
#     the same list, two items per claim, each in a transaction that records
#     the item in done_log and completes it (lease mode) or commits it
#     (transaction mode).  Every item is recorded once, and every item ends
#     done.
#  2. Waiting on all of them: the workers wait with wait => '1 hour' and a
#     recheck interval of an hour, so only wake-ups end their waits: items
#     enqueued into an empty queue of the list while they wait reach them,
#     and the stop items, enqueued into the last queue of the list once
#     everything is done, end every worker.  A missed wake-up is a hang,
#     caught by the sessions' timers.
#  3. Fairness: the first queue of every worker's list holds 300 items and
#     stays full for most of the run; the smaller queues after it are served
#     in turn meanwhile: the 50 items of the third queue are all done before
#     150 of the first queue's are.
#
# The queues: q1 (300 items), q2 (100), q3 (50), q4 (empty; 50 arrive while
# the workers run), t5 (100, transaction mode), t6 (50, transaction mode),
# ctl (the stop items, lease mode).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('claim_list');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	-- the workers' side effect, written in the transaction that finishes
	-- the item; no unique constraint: duplicates are counted, not refused
	CREATE TABLE done_log (seq bigserial, group_name text NOT NULL,
	                       n int NOT NULL, worker text NOT NULL);
	SELECT pgq.create_queue(q) FROM unnest(ARRAY['q1', 'q2', 'q3', 'q4', 'ctl']) q;
	SELECT pgq.create_queue(q, mode => 'transaction')
	FROM unnest(ARRAY['t5', 't6']) q;
	SELECT pgq.enqueue_many(q, ARRAY(SELECT jsonb_build_object('n', g)
	                                 FROM generate_series(1, n) g))
	FROM (VALUES ('q1', 300), ('q2', 100), ('q3', 50), ('t5', 100), ('t6', 50)) v(q, n);
});
my $total = 300 + 100 + 50 + 50 + 100 + 50;
my $list = q{ARRAY['q1', 'q2', 'q3', 'q4', 't5', 't6', 'ctl']};

my $obs = new_session($node, 'observer');
sub done_count { return $obs->query_ok('SELECT count(*) FROM done_log;'); }

# ---------------------------------------------------------------------------
# The workers: claim (in a transaction), then record and finish what came,
# and commit.  A worker that gets a stop item completes it and quits; a
# second stop item in the same claim is released for another worker.
my @workers = map {
	my $s = new_session($node, "w$_");
	$s->query_ok("SET pgq.wait_recheck_interval = '1h';");
	{ s => $s, name => "w$_", state => 'idle', stopping => 0, stopped => 0 }
} 1 .. 4;

sub start_claim
{
	my ($w) = @_;
	$w->{s}->send(
		"BEGIN; SELECT c.block_id, c.attempt, c.group_name, "
		  . "coalesce(c.payload ->> 'n', 'stop') "
		  . "FROM pgq.claim($list, 2, wait => '1 hour') c;");
	$w->{state} = 'claiming';
	$w->{s}->poll;    # hand the statement to psql
	return;
}

# Finish what a claim returned: one transaction, then the next claim.
sub finish_claim
{
	my ($w, $rows) = @_;
	my @sql;
	my $stops = 0;
	for my $row (split /\n/, $rows)
	{
		next if $row eq '';
		my ($id, $attempt, $group, $n) = split /\|/, $row;
		if ($n eq 'stop')
		{
			push @sql,
			  $stops++ == 0
			  ? "SELECT pgq.complete($id, attempt => $attempt);"
			  : "SELECT pgq.release($id, attempt => $attempt);";
			next;
		}
		push @sql,
		  "INSERT INTO done_log (group_name, n, worker) VALUES ('$group', $n, '$w->{name}');";
		push @sql, "SELECT pgq.complete($id, attempt => $attempt);"
		  if $group !~ /^t/;
	}
	$w->{stopping} = 1 if $stops > 0;
	$w->{s}->send(join("\n", @sql, 'COMMIT;'));
	$w->{state} = 'finishing';
	$w->{s}->poll;
	return;
}

# Drive the workers until $until returns true, or all have stopped.
sub run_workers_until
{
	my ($until) = @_;
	while (!$until->())
	{
		my $busy = 0;
		for my $w (grep { !$_->{stopped} } @workers)
		{
			my $state = $w->{s}->poll;
			die "worker $w->{name} died: $w->{s}{error}" if $state eq 'dead';
			if ($state eq 'busy')
			{
				$busy++;
				next;
			}
			die "worker $w->{name} failed: $w->{s}{error}"
			  if $w->{s}{error} ne '';
			if ($w->{state} eq 'claiming')
			{
				finish_claim($w, $w->{s}{result});
			}
			elsif ($w->{stopping})
			{
				$w->{stopped} = 1;
			}
			else
			{
				start_claim($w);
			}
		}
		last if !grep { !$_->{stopped} } @workers;
		usleep(5_000);
	}
	return;
}

start_claim($_) for @workers;

# q4 is empty: items enqueued there once the run is under way must reach
# the workers, which may all be waiting by then
run_workers_until(sub { done_count() >= 200 });
$obs->query_ok(q{
	SELECT pgq.enqueue_many('q4', ARRAY(SELECT jsonb_build_object('n', g)
	                                    FROM generate_series(1, 50) g));});

run_workers_until(sub { done_count() >= $total });
is(done_count(), $total, 'every item was recorded');

# everything is done: the workers wait; one stop item each ends them
$obs->query_ok(q{
	SELECT pgq.enqueue_many('ctl', ARRAY(SELECT '"stop"'::jsonb
	                                     FROM generate_series(1, 4)));});
run_workers_until(sub { 0 });
is(scalar(grep { $_->{stopped} } @workers), 4, 'every worker got a stop item and stopped');

# ---------------------------------------------------------------------------
# Exactly once
is( $obs->query_ok(q{
		SELECT count(*) FROM (SELECT group_name, n FROM done_log
		                      GROUP BY group_name, n HAVING count(*) > 1) d;}),
	'0', 'no item was recorded twice');
is( $obs->query_ok(q{
		SELECT string_agg(group_name || ' ' || c, ', ' ORDER BY group_name)
		FROM (SELECT group_name, count(*) AS c FROM done_log GROUP BY 1) d;}),
	'q1 300, q2 100, q3 50, q4 50, t5 100, t6 50',
	'every item of every queue was recorded');
is( $obs->query_ok(q{
		SELECT count(*) FROM pgq.items WHERE state <> 'd';}),
	'0', 'every item is done, the stop items too');
is( $obs->query_ok(q{
		SELECT string_agg(DISTINCT worker, ' ' ORDER BY worker) FROM done_log;}),
	'w1 w2 w3 w4', 'every worker took part');

# ---------------------------------------------------------------------------
# Fairness: q1, first of the list and fullest, did not hold up q3
my ($q3_last, $q1_150th) = split /\|/, $obs->query_ok(q{
	SELECT (SELECT max(seq) FROM done_log WHERE group_name = 'q3'),
	       (SELECT seq FROM done_log WHERE group_name = 'q1'
	        ORDER BY seq OFFSET 149 LIMIT 1);});
ok($q3_last < $q1_150th,
	"the last of q3's 50 items was done before the 150th of q1's 300 ($q3_last < $q1_150th)");

$_->{s}->close for @workers;
$obs->close;
$node->stop;
done_testing();
