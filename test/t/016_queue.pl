
# Job queues end to end, as a workflow scheduler uses them: a producer hands
# tasks to self-hosted worker processes and waits for their results.  This
# test proves:
#
#  1. Workers that wait in pgq.claim(..., wait => '1 hour') on a lease-mode
#     queue get every task: four worker sessions, driven from here, loop
#     claim -> compute (here, in Perl: the sum of the payload's a and b) ->
#     complete with the result and the claim's attempt, in one transaction
#     with the task's side effect (a row in done_log).  One of them claims
#     up to three items at a time and completes them with
#     pgq.complete_many().
#  2. The producer enqueues 200 keyed tasks (one by one, with
#     pgq.enqueue_many(), and one batch that two producers submit at the
#     same time), then waits for each result with
#     pgq.result(id, wait => '1 hour'), and every result is right: flaky
#     tasks, which fail their first attempt (retry_after => '0'), are done at
#     attempt 2; the poison task, which fails every attempt, is dead after
#     max_attempts (3), with its last error, and pgq.dead_items lists all
#     three errors.
#  3. Exactly once: each task was delivered once (flaky ones twice, the
#     poison one three times) and its side effect recorded once.  Two
#     producers racing with the same keys get the same ids; enqueueing every
#     key again (a redelivery) returns the same ids and adds nothing.
#  4. pgq.retry(queue, key) of a done item runs it again, and its new result
#     comes back through pgq.result(wait =>); pgq.retry(id) of the dead item
#     runs it again until it is dead again, its error history kept.
#  5. Transaction mode: a worker claims inside BEGIN and completes with a
#     result; the producer's waiting pgq.result() returns it at COMMIT.  A
#     worker that rolls back gives the item back to a waiting worker.
#  6. The workers stop cleanly (each completes one stop item and quits), and
#     pgq.queue_stats then counts every item done or dead, none pending,
#     scheduled or running.
#
# Every session that waits sets pgq.wait_recheck_interval to an hour and
# waits up to an hour: only the wake-up at the commit that made an item
# claimable (or done, or dead) can end a wait before the test harness gives
# up.  A missed wake-up is a hang, caught by the sessions' timers.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('queue');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	-- the workers' side effect, written in the transaction that completes
	-- the task; no unique constraint: duplicates are counted, not refused
	CREATE TABLE done_log (task_key text NOT NULL, worker text NOT NULL);
});

is( $node->safe_psql('postgres',
		"SELECT pgq.create_queue('tasks', max_attempts => 3)"),
	't', 'lease-mode queue created');
is( $node->safe_psql('postgres',
		"SELECT pgq.create_queue('tasks', max_attempts => 3)"),
	'f', 'creating the same queue again returns false');

my $json = JSON::PP->new->canonical;
my $obs = new_session($node, 'observer');

# ---------------------------------------------------------------------------
# The tasks: task-1 .. task-200, payload {"a": i, "b": ...}; every tenth
# (3, 13, ...) is flaky, task-77 is poison.
my $N = 200;
my $POISON = 'task-77';
my (%task, @keys);
for my $i (1 .. $N)
{
	my $key = "task-$i";
	my %p = (a => $i, b => ($i * 37) % 101);
	$p{flaky} = JSON::PP::true if $i % 10 == 3;
	$p{poison} = JSON::PP::true if $key eq $POISON;
	$task{$key} = { %p, payload => $json->encode(\%p) };
	push @keys, $key;
}

sub sum_of { my ($k) = @_; return $task{$k}{a} + $task{$k}{b}; }

# A statement enqueueing these keys in one pgq.enqueue_many() call; it
# prints the ids as an array.
sub enqueue_many_sql
{
	my @k = @_;
	return
	    "SELECT pgq.enqueue_many('tasks', ARRAY["
	  . join(', ', map { "'$task{$_}{payload}'" } @k)
	  . "]::jsonb[], ARRAY["
	  . join(', ', map { "'$_'" } @k)
	  . "]::text[]);";
}

# Statements enqueueing these keys one pgq.enqueue() call each, each its own
# transaction; each prints "key|id".
sub enqueue_one_sql
{
	return join "\n",
	  map { "SELECT '$_', pgq.enqueue('tasks', '$task{$_}{payload}', key => '$_');" }
	  @_;
}

sub parse_array
{
	my ($arr) = @_;
	die "not an array: $arr" unless $arr =~ /^\{([\d,]*)\}$/;
	return split /,/, $1;
}

# ---------------------------------------------------------------------------
# The workers.  Each is a psql session and a state: 'claiming' (its waiting
# claim is under way), 'finishing' (the transaction that completes or fails
# what it claimed is under way), 'stopped' or 'failed'.  worker_event() moves
# a worker on when its psql has finished, as a worker process would: compute
# the results, send them, claim again.
my (@workers, @deliveries, @worker_errors);
for my $i (1 .. 4)
{
	my $s = new_session($node, "w$i");
	$s->query_ok("SET pgq.wait_recheck_interval = '1h';");
	push @workers,
	  {
		name => "w$i",
		s => $s,
		max => $i == 4 ? 3 : 1,    # w4 takes up to 3 items, complete_many
		state => 'idle',
		done => 0,
	  };
}
my $worker_pids = join(',', map { $_->{s}->pid } @workers);

sub worker_claim
{
	my ($w) = @_;
	$w->{s}->send(
		"SELECT block_id, attempt, key, payload FROM pgq.claim('tasks', max_blocks => $w->{max}, wait => '1 hour');"
	);
	$w->{s}->poll;    # hand the statement to psql
	$w->{state} = 'claiming';
	return;
}

# The transaction that handles what a claim returned; returns it and the
# lines it should print.
sub worker_work
{
	my ($w, @items) = @_;
	my (@sql, @expect, @many);
	my $n = $w->{name};

	# a stop item: complete one, give back anything else, then quit
	if (grep { $_->{p}{stop} } @items)
	{
		$w->{stopping} = 1;
		my $stopped = 0;
		for my $it (@items)
		{
			if ($it->{p}{stop} && !$stopped++)
			{
				push @sql,
				  "SELECT pgq.complete($it->{id}, result => '{\"stopped\": \"$n\"}', attempt => $it->{attempt});";
			}
			else
			{
				push @sql,
				  "SELECT pgq.release($it->{id}, attempt => $it->{attempt});";
			}
			push @expect, 't';
		}
		return (\@sql, \@expect);
	}

	for my $it (@items)
	{
		my ($id, $att, $key, $p) = @$it{qw(id attempt key p)};
		if ($p->{poison})
		{
			push @sql,
			  "SELECT pgq.fail($id, 'poison: attempt $att', retry_after => '0', attempt => $att);";
			push @expect, 't';
		}
		elsif ($p->{flaky} && $att == 1)
		{
			push @sql,
			  "SELECT pgq.fail($id, 'flaky: attempt 1 fails', retry_after => '0', attempt => $att);";
			push @expect, 't';
		}
		else
		{
			my $result = $json->encode({ sum => $p->{a} + $p->{b} });
			if ($w->{max} > 1)
			{
				push @many, [ $id, $att, $key, $result ];
			}
			else
			{
				# the side effect only if the worker still held the item
				push @sql,
				  "INSERT INTO done_log (task_key, worker) SELECT '$key', '$n' WHERE pgq.complete($id, result => '$result', attempt => $att) RETURNING task_key;";
			}
			push @expect, $key;
			$w->{done}++;
		}
	}
	if (@many)
	{
		my $col = sub {
			my ($i, $q) = @_;
			return join(', ', map { $q ? "'$_->[$i]'" : $_->[$i] } @many);
		};
		# the side effects of the items that pgq.complete_many() completed
		push @sql, "WITH c AS MATERIALIZED (
  SELECT pgq.complete_many(ARRAY[" . $col->(0) . "]::bigint[],
                           ARRAY[" . $col->(1) . "]::int[],
                           ARRAY[" . $col->(3, 1) . "]::jsonb[]) AS done)
INSERT INTO done_log (task_key, worker)
SELECT t.k, '$n' FROM c,
       unnest(ARRAY[" . $col->(0) . "]::bigint[], ARRAY[" . $col->(2, 1) . "]::text[]) AS t(id, k)
WHERE t.id = ANY (c.done) RETURNING task_key;";
	}
	return (\@sql, \@expect);
}

# Move a worker on if its psql has finished; true if it had.
sub worker_event
{
	my ($w) = @_;
	my $s = $w->{s};
	my $state = $s->poll;
	return 0 if $state eq 'busy';
	if ($state eq 'dead' || $s->{error} ne '')
	{
		push @worker_errors, "$w->{name} ($w->{state}): $s->{error}";
		$w->{state} = 'failed';
		return 1;
	}

	if ($w->{state} eq 'claiming')
	{
		my @items;
		for my $line (grep { $_ ne '' } split /\n/, $s->{result})
		{
			my ($id, $att, $key, $payload) = split /\|/, $line, 4;
			push @items,
			  {
				id => $id,
				attempt => $att,
				key => $key,
				p => $json->decode($payload)
			  };
			push @deliveries, [ $w->{name}, $key, $att, $id ];
		}
		if (!@items)
		{
			# the wait is an hour: a claim that returns nothing is wrong
			push @worker_errors,
			  "$w->{name}: a waiting claim returned no item";
			worker_claim($w);
			return 1;
		}
		my ($sql, $expect) = worker_work($w, @items);
		$w->{expect} = $expect;
		$s->send(join("\n", 'BEGIN;', @$sql, 'COMMIT;'));
		$s->poll;
		$w->{state} = 'finishing';
	}
	elsif ($w->{state} eq 'finishing')
	{
		my @got = sort grep { $_ ne '' } split /\n/, $s->{result};
		my @exp = sort @{ $w->{expect} };
		push @worker_errors,
		  "$w->{name}: expected [@exp] from its transaction, got [@got]"
		  if "@got" ne "@exp";
		if ($w->{stopping})
		{
			$s->close;
			$w->{state} = 'stopped';
		}
		else
		{
			worker_claim($w);
		}
	}
	return 1;
}

# Keep the workers going until $cond returns true.  The sessions' timers
# (PgqTest::Session) guard against hangs; the deadline here guards a loop
# whose condition no session can make come true.
sub run_workers_until
{
	my ($cond, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $ok = eval {
		for (;;)
		{
			my $moved = 0;
			for my $w (@workers)
			{
				$moved += worker_event($w)
				  if $w->{state} eq 'claiming' || $w->{state} eq 'finishing';
			}
			last if $cond->();
			die "gave up waiting for $what\n" if time() > $deadline;
			usleep(1_000) unless $moved;
		}
		1;
	};
	return if $ok;
	my $err = $@;
	# what everybody was doing when it hung
	diag "while waiting for $what: $err";
	diag 'workers: ' . join(', ', map { "$_->{name} $_->{state}" } @workers);
	diag $node->safe_psql(
		'postgres', q{
		SELECT application_name, pid, pg_blocking_pids(pid), state,
		       wait_event_type, wait_event, left(query, 100)
		FROM pg_stat_activity WHERE backend_type = 'client backend'});
	diag $node->safe_psql(
		'postgres', q{
		SELECT item_id, key, state, attempt, due_at, clock_timestamp(),
		       last_error
		FROM pgq.items WHERE state NOT IN ('d', 'f') ORDER BY item_id});
	die $err;
}

# Run statements in a producer session while the workers go on; returns
# their output, dies on an error.
sub produce
{
	my ($s, $sql) = @_;
	$s->send($sql);
	return finish($s);
}

# Wait for what a producer session was sent, keeping the workers going.
sub finish
{
	my ($s) = @_;
	run_workers_until(sub { $s->poll ne 'busy' }, $s->name);
	die "producer " . $s->name . " died: $s->{error}" if $s->is_dead;
	die "producer " . $s->name . " failed: $s->{error}" if $s->{error} ne '';
	return $s->{result};
}

sub stats
{
	my ($queue) = @_;
	return $obs->query_ok(
		"SELECT pending, scheduled, running, done, dead, oldest_pending_age IS NULL FROM pgq.queue_stats WHERE queue_name = '$queue';"
	);
}

# Per key, the attempts under which workers got it, in order.
sub delivered
{
	my %d;
	push @{ $d{ $_->[1] } }, $_->[2] for grep { $_->[1] ne '' } @deliveries;
	return \%d;
}

# ---------------------------------------------------------------------------
# The workers wait before there is any work: every task reaches them through
# a wake-up.
worker_claim($_) for @workers;
ok( wait_until(
		$obs,
		"SELECT count(*) FROM pg_stat_activity WHERE pid IN ($worker_pids) AND wait_event_type = 'Extension';",
		'4',
		map { $_->{s} } @workers),
	'the four workers sleep in pgq.claim(wait => ...) on the empty queue');

my $producer = new_session($node, 'scheduler');
$producer->query_ok("SET pgq.wait_recheck_interval = '1h';");
my %id;

# Two producers submit the same batch (task-181 .. task-200) at the same
# time: the second one's insert waits for the first one's transaction, and
# once that commits it gets the first one's ids.
{
	my $p2 = new_session($node, 'scheduler2');
	my @race = @keys[ 180 .. 199 ];
	my $sql = enqueue_many_sql(@race);
	my @ids1 = parse_array($producer->query_ok("BEGIN; $sql"));
	$p2->send($sql);
	ok( wait_until(
			$obs,
			"SELECT wait_event_type FROM pg_stat_activity WHERE pid = " . $p2->pid . ";",
			'Lock', $p2),
		'a second producer enqueueing the same keys waits for the first');
	$producer->query_ok('COMMIT;');
	my @ids2 = parse_array(finish($p2));
	is(scalar @ids1, 20, 'the first producer got 20 ids');
	is_deeply(\@ids2, \@ids1,
		'the second producer got the same ids, in the order of its keys');
	@id{@race} = @ids1;
	$p2->close;
}

# task-1 .. task-100 one by one, each enqueue its own transaction: the
# workers start while the producer goes on
for my $line (split /\n/, produce($producer, enqueue_one_sql(@keys[ 0 .. 99 ])))
{
	my ($k, $i) = split /\|/, $line;
	$id{$k} = $i;
}

# task-101 .. task-180 in batches of 20
for (my $i = 100; $i < 180; $i += 20)
{
	my @batch = @keys[ $i .. $i + 19 ];
	@id{@batch} = parse_array(produce($producer, enqueue_many_sql(@batch)));
}
my %distinct = reverse %id;
is(scalar keys %distinct, $N, "$N tasks enqueued, each with its own id");

# ---------------------------------------------------------------------------
# The producer waits for every result in turn.
my %expected;
for my $k (@keys)
{
	$expected{$k} =
	    $k eq $POISON ? 'dead, attempt 3, error: poison: attempt 3'
	  : $task{$k}{flaky} ? 'done, attempt 2, sum ' . sum_of($k)
	  :                    'done, attempt 1, sum ' . sum_of($k);
}

# "key|state|result|attempt|last_error" lines, as what they mean
sub results
{
	my ($out) = @_;
	my %got;
	for my $line (split /\n/, $out)
	{
		my ($k, $state, $result, $att, $err) = split /\|/, $line, 5;
		$got{$k} =
		  $state eq 'done'
		  ? "done, attempt $att, sum " . ($json->decode($result)->{sum} // 'none')
		  : "$state, attempt $att, error: $err" . ($result ne '' ? ", result $result" : '');
	}
	return \%got;
}

sub result_sql
{
	return join "\n",
	  map {
		"SELECT '$_', state, result, attempt, last_error FROM pgq.result($id{$_}, wait => '1 hour');"
	  } @_;
}

my $t0 = time();
my $got = results(produce($producer, result_sql(@keys)));
note sprintf('all %d results arrived %.1f s after the last enqueue', $N, time() - $t0);
is_deeply($got, \%expected,
	'every result is right: flaky tasks done at attempt 2, the poison one dead at attempt 3');

note 'tasks completed per worker: '
  . join(', ', map { "$_->{name}: $_->{done}" } @workers);

is( $obs->query_ok(q{
	SELECT item_id, key, attempt, last_error,
	       (SELECT string_agg(format('%s:%s', e->>'attempt', e->>'error'), ', ' ORDER BY o)
	        FROM jsonb_array_elements(errors) WITH ORDINALITY x(e, o))
	FROM pgq.dead_items WHERE queue_name = 'tasks';}),
	"$id{$POISON}|$POISON|3|poison: attempt 3|"
	  . '1:poison: attempt 1, 2:poison: attempt 2, 3:poison: attempt 3',
	'pgq.dead_items lists the poison task with its three errors');

# Exactly once, so far: deliveries and side effects per key.
my %exp_delivered = map {
	$_ => $_ eq $POISON ? [ 1, 2, 3 ] : $task{$_}{flaky} ? [ 1, 2 ] : [1]
} @keys;
is_deeply(delivered(), \%exp_delivered,
	'each task delivered once, flaky ones twice (attempts 1, 2), the poison one three times'
);

sub done_log_counts
{
	my %c = map { split /\|/ }
	  split /\n/,
	  $obs->query_ok('SELECT task_key, count(*) FROM done_log GROUP BY task_key;');
	return \%c;
}
my %exp_log = map { $_ => 1 } grep { $_ ne $POISON } @keys;
is_deeply(done_log_counts(), \%exp_log,
	'each task\'s side effect recorded exactly once, none for the poison task');
is(stats('tasks'), '0|0|0|199|1|t',
	'queue_stats: 199 done, 1 dead, nothing pending, scheduled or running');

# ---------------------------------------------------------------------------
# A redelivery: the scheduler submits every task again.  Same ids, nothing
# added, nothing for the workers to do.
{
	my %again;
	for my $line (split /\n/, produce($producer, enqueue_one_sql(@keys[ 0 .. 99 ])))
	{
		my ($k, $i) = split /\|/, $line;
		$again{$k} = $i;
	}
	for (my $i = 100; $i < $N; $i += 50)
	{
		my @batch = @keys[ $i .. $i + 49 ];
		@again{@batch} = parse_array(produce($producer, enqueue_many_sql(@batch)));
	}
	is_deeply(\%again, \%id, 'enqueueing the same keys again returns the same ids');
	is(stats('tasks'), '0|0|0|199|1|t',
		'queue_stats unchanged: still 200 items, nothing pending');
}

# ---------------------------------------------------------------------------
# pgq.retry(queue, key) of done items: both run again, under attempt numbers
# that go on from where they were (so a worker still holding an earlier
# attempt is refused): task-5 at attempt 2, and the flaky task-3, which fails
# only attempt 1, is done at attempt 3.
{
	is( produce($producer,
			"SELECT pgq.retry('tasks', 'task-5'), pgq.retry('tasks', 'task-3');"),
		't|t', 'pgq.retry(queue, key) of two done items');
	my $r = results(produce($producer, result_sql('task-5', 'task-3')));
	is_deeply(
		$r,
		{
			'task-5' => 'done, attempt 2, sum ' . sum_of('task-5'),
			'task-3' => 'done, attempt 3, sum ' . sum_of('task-3')
		},
		'their new results come back through pgq.result(wait =>)');
	is_deeply(
		[ @{ delivered() }{qw(task-5 task-3)} ],
		[ [ 1, 2 ], [ 1, 2, 3 ] ],
		'both were delivered again, with attempt numbers that go on');
}

# pgq.retry(id) of the dead item: three more failed attempts (max_attempts
# counts claims from 0 again; their numbers are 4 to 6), dead again, its
# error history kept (six errors).
{
	is(produce($producer, "SELECT pgq.retry($id{$POISON});"),
		't', 'pgq.retry(id) of the dead item');
	is_deeply(results(produce($producer, result_sql($POISON))),
		{ $POISON => 'dead, attempt 6, error: poison: attempt 6' },
		'pgq.result(wait =>) returns when it is dead again');
	is( $obs->query_ok(qq{
		SELECT attempt, jsonb_array_length(errors),
		       (SELECT string_agg(e->>'attempt', ',' ORDER BY o)
		        FROM jsonb_array_elements(errors) WITH ORDINALITY x(e, o))
		FROM pgq.dead_items WHERE item_id = $id{$POISON};}),
		'6|6|1,2,3,4,5,6',
		'pgq.dead_items: attempt 6, the errors of both rounds');
}

$exp_delivered{'task-5'} = [ 1, 2 ];
$exp_delivered{'task-3'} = [ 1, 2, 3 ];
$exp_delivered{$POISON} = [ 1, 2, 3, 4, 5, 6 ];
is_deeply(delivered(), \%exp_delivered,
	'no other task was delivered again: the redelivered keys were not run');
$exp_log{'task-5'} = 2;
$exp_log{'task-3'} = 2;
is_deeply(done_log_counts(), \%exp_log,
	'side effects: once per task, twice for the two retried ones');

# ---------------------------------------------------------------------------
# Transaction mode: the item is done when the claiming transaction commits.
is( $node->safe_psql('postgres',
		"SELECT pgq.create_queue('tx_tasks', mode => 'transaction')"),
	't', 'transaction-mode queue created');
{
	my $txa = new_session($node, 'txa');
	my $txb = new_session($node, 'txb');
	$_->query_ok("SET pgq.wait_recheck_interval = '1h';") for ($txa, $txb);
	my $sleeping = sub {
		my ($s) = @_;
		return wait_until(
			$obs,
			"SELECT count(*) FROM pg_stat_activity WHERE pid = "
			  . $s->pid
			  . " AND wait_event_type = 'Extension';",
			'1', $s);
	};
	my $claim = "SELECT block_id, attempt, key, payload FROM pgq.claim('tx_tasks', wait => '1 hour');";

	# a worker waits in its transaction; the producer enqueues
	$txa->send("BEGIN; $claim");
	ok($sleeping->($txa), 'transaction mode: a worker waits inside BEGIN');
	my $id1 = $producer->query_ok(
		"SELECT pgq.enqueue('tx_tasks', '{\"a\": 1, \"b\": 2}', key => 'tx-1');");
	is($txa->wait, 'done', 'the enqueue woke it');
	is($txa->{result}, "$id1|1|tx-1|{\"a\": 1, \"b\": 2}",
		'it got the item, attempt 1');

	# the producer waits for the result
	$producer->send(
		"SELECT state, result, attempt FROM pgq.result($id1, wait => '1 hour');");
	ok($sleeping->($producer),
		'the producer waits in pgq.result() while the claim is open');
	is($obs->query_ok("SELECT state FROM pgq.result($id1);"),
		'pending', 'to others the item is pending until the claim commits');
	$txa->query_ok(
		"INSERT INTO done_log VALUES ('tx-1', 'txa'); SELECT pgq.complete($id1, result => '{\"sum\": 3}');"
	);
	is($producer->poll, 'busy', 'completed, not committed: the producer still waits');
	$txa->query_ok('COMMIT;');
	is($producer->wait, 'done', 'the commit woke the producer');
	is($producer->{result}, 'done|{"sum": 3}|1',
		'... with the result, attempt 1');

	# a worker that rolls back gives the item back to a waiting worker
	my $id2 = $producer->query_ok(
		"SELECT pgq.enqueue('tx_tasks', '{\"a\": 5, \"b\": 6}', key => 'tx-2');");
	like($txb->query_ok("BEGIN; $claim"),
		qr/^$id2\|1\|tx-2\|/, 'worker txb claims the second item');
	$txa->send("BEGIN; $claim");
	ok($sleeping->($txa), 'worker txa waits: nothing else to claim');
	$producer->send(
		"SELECT state, result, attempt FROM pgq.result($id2, wait => '1 hour');");
	ok($sleeping->($producer), 'the producer waits for the second result');
	$txb->query_ok(
		"INSERT INTO done_log VALUES ('tx-2', 'txb'); SELECT pgq.complete($id2, result => '{\"sum\": 0}'); ROLLBACK;"
	);
	is($txa->wait, 'done', 'the rollback woke worker txa');
	like($txa->{result}, qr/^$id2\|1\|tx-2\|/,
		'it got the item given back, at attempt 1 (the rolled-back claim left nothing)'
	);
	$txa->query_ok(
		"INSERT INTO done_log VALUES ('tx-2', 'txa'); SELECT pgq.complete($id2, result => '{\"sum\": 11}'); COMMIT;"
	);
	is($producer->wait, 'done', 'the commit woke the producer');
	is($producer->{result}, 'done|{"sum": 11}|1',
		'... with the result of the worker that committed');
	is( $obs->query_ok(
			"SELECT string_agg(task_key || ':' || worker, ',' ORDER BY task_key) FROM done_log WHERE task_key LIKE 'tx-%';"
		),
		'tx-1:txa,tx-2:txa',
		'transaction mode: each side effect once, none of the rolled-back worker');
	$txa->close;
	$txb->close;
}

# ---------------------------------------------------------------------------
# Stop the workers: a stop item each.  A worker that gets one completes it
# (and gives back anything else it claimed with it) and quits, so each of
# the four takes exactly one.
my @stop_ids = parse_array(
	produce($producer,
		"SELECT pgq.enqueue_many('tasks', array_fill('{\"stop\": true}'::jsonb, ARRAY[4]));"
	));
run_workers_until(
	sub { !grep { $_->{state} =~ /^(claiming|finishing)$/ } @workers },
	'the workers to stop');
is_deeply([ map { $_->{state} } @workers ],
	[qw(stopped stopped stopped stopped)], 'all four workers stopped');
is_deeply(\@worker_errors, [], 'no worker ran into an error');
is( $obs->query_ok(
		"SELECT string_agg(r.state || ' ' || (r.result->>'stopped'), ',' ORDER BY r.result->>'stopped') FROM unnest('{"
		  . join(',', @stop_ids)
		  . "}'::bigint[]) AS s(id), pgq.result(s.id) r;"),
	'done w1,done w2,done w3,done w4',
	'each worker completed one stop item');
is_deeply(delivered(), \%exp_delivered,
	'in the end, no task was delivered more often than said above');

is(stats('tasks'), '0|0|0|203|1|t',
	'queue_stats for tasks: 203 done (199 tasks, 4 stop items), 1 dead, nothing pending, scheduled or running'
);
is(stats('tx_tasks'), '0|0|0|2|0|t',
	'queue_stats for tx_tasks: 2 done, nothing else');

$producer->close;
$obs->close;
$node->stop;
my $log = slurp_file($node->logfile);
unlike($log, qr/PANIC|TRAP:|terminated by signal/,
	'no crash or assertion failure in the server log');

done_testing();
