
# Asynchronous materialization (pgq.create_group(..., async => true)), end
# to end.  Two background workers, a reader that runs the group's query and a
# writer that commits its ids as blocks, do the work after the creating
# transaction commits.  This test proves:
#
#  1. Streaming: consumers claim blocks while the query is still running (a
#     waiting claim is woken by a batch commit), and the whole group is then
#     consumed exactly once.
#  2. The query runs as the role that created the group: a role that cannot
#     read a table gets a 'failed' group whose error says "permission
#     denied"; what that role can read materializes, and current_user is that
#     role.  Claims of a failed group return no rows at once, with a warning.
#  3. timeout => (and pgq.materialize_timeout) bounds the query's run: the
#     group fails with "statement timeout" and the workers go.  timeout
#     without async is refused (22023).
#  4. A rolled-back creation leaves nothing: no group, no blocks, no workers.
#  5. While the creating transaction is open, nobody else sees the group; once
#     it commits, the group materializes, its blocks in the query's order.
#  6. pgq.drop_group() of a group still materializing stops both workers and
#     leaves no block of it.
#  7. A claim waiting on a materializing group keeps waiting while it is
#     materializing, and returns no rows when the group becomes ready with
#     nothing left to claim (a group of no ids; a group whose one block
#     another session consumed meanwhile).
#  8. The search_path in effect at creation is the one the query runs with.
#  9. Without two free background worker slots (none free, or one),
#     create_group fails with 53400 and a hint naming max_worker_processes,
#     and leaves nothing behind: no group row, no worker left running.
#
# Making a query block without sleeping: one row of the query takes a shared
# advisory lock (key 4242) that a test session holds.  The reader then waits
# on that lock (seen in pg_locks) until the session lets it go; meanwhile the
# writer commits what the reader handed over before (the rows of the
# reader's fetches before the one that waits).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTest;

my $LOCK_KEY = 4242;

# A query of the ids 1..$n whose row $at waits for the advisory lock $LOCK_KEY
# (in share mode: any number of readers may take it once it is free).  With
# $drop_row, row $at is left out of the result once the lock is had.
sub blocking_query
{
	my ($n, $at, $drop_row) = @_;
	my $want = $drop_row ? 'x' : '';
	return "SELECT g FROM generate_series(1, $n) g WHERE CASE WHEN g = $at "
	  . "THEN pg_advisory_xact_lock_shared($LOCK_KEY)::text = '$want' ELSE true END";
}

# dollar-quoted, to be passed to create_group
sub dq { return '$q$' . $_[0] . '$q$'; }

# The materialization workers in pg_stat_activity.
my $WORKERS = q{(SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type LIKE 'pgq materialize%')};

# True once a reader waits for the advisory lock $LOCK_KEY.
my $READER_WAITS = qq{SELECT count(*) > 0
	FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	WHERE a.backend_type = 'pgq materialize reader'
	  AND l.locktype = 'advisory' AND l.classid = 0 AND l.objid = $LOCK_KEY
	  AND l.objsubid = 1 AND NOT l.granted};

# Poll until no materialization worker is left.
sub workers_gone
{
	my ($node, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok($node->poll_query_until('postgres', "SELECT $WORKERS = 0"), $label);
	return;
}

# Poll until the group is no longer materializing; returns its state and
# error (pgq.groups), and checks that pgq.group_stats agrees on the state.
sub end_state
{
	my ($node, $group) = @_;
	$node->poll_query_until('postgres',
		"SELECT state <> 'materializing' FROM pgq.groups WHERE group_name = '$group'"
	) or diag "group $group is still materializing";
	my ($state, $error) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT state, coalesce(error, '') FROM pgq.groups WHERE group_name = '$group'"),
	  2;
	return ($state // '', $error // '');
}

sub group_id
{
	my ($node, $group) = @_;
	return $node->safe_psql('postgres',
		"SELECT group_id FROM pgq.groups WHERE group_name = '$group'");
}

sub blocks_of
{
	my ($node, $gid) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pgq.blocks WHERE group_id = $gid");
}

# Blocks whose group does not exist (left over by a creation or a drop).
sub orphan_blocks
{
	my ($node) = @_;
	return $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM pgq.blocks b
		WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = b.group_id)});
}

# Run SQL, returning (exit code, stdout, stderr); never dies on an SQL
# error.  A guard against hangs, not an assertion: the harness's timeout.
sub psql_full
{
	my ($node, $sql, %opt) = @_;
	my ($out, $err);
	my $rc = $node->psql(
		'postgres', $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		timeout => $PostgreSQL::Test::Utils::timeout_default,
		%opt);
	return ($rc, $out // '', $err // '');
}

# Claims of a failed group: zero rows at once, also a waiting claim (an hour,
# with a recheck interval of an hour: only "the group failed" can end it
# before the harness gives up), each with a warning that the group failed.
sub check_failed_claims
{
	my ($node, $group, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	for my $wait ('', ", wait => '1 hour'")
	{
		my ($rc, $out, $err) = psql_full(
			$node, qq{SET pgq.wait_recheck_interval = '1h';
			BEGIN;
			SELECT count(*) FROM pgq.claim('$group'$wait);
			COMMIT;});
		my $what = $wait ? 'a waiting claim' : 'a claim';
		is("$rc|$out", '0|0', "$label: $what returns no rows");
		like($err, qr/WARNING:.*"\Q$group\E".*fail/,
			"$label: $what warns that the group failed");
	}
	return;
}

my $node = PostgreSQL::Test::Cluster->new('async');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
# the reader's query must not take parallel workers' slots
max_parallel_workers_per_gather = 0
});
$node->start;
setup_tables($node);

my $holder = new_session($node, 'lock_holder');
my $obs = new_session($node, 'observer');

# ---------------------------------------------------------------------------
# 1. Streaming: blocks can be claimed while the query still runs.
{
	my $n = 2_000_000;
	my $query = blocking_query($n, 1_000_000);
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('stream', " . dq($query) . ", 5000, async => true)"),
		't',
		'streaming: async create_group returns true at once');
	my $gid = group_id($node, 'stream');
	ok($node->poll_query_until('postgres', $READER_WAITS),
		'streaming: the reader waits on the lock at row 1,000,000');

	# One consumer step, in one transaction: claim (waiting for the first
	# batch if need be), record the ids, and look at the group's state.
	my $c = new_session($node, 'early_consumer');
	my $consume = consume_sql('stream',
		q{SELECT count(*), count(DISTINCT block_id), max(id) FROM processed;
SELECT g.state, s.state FROM pgq.groups g JOIN pgq.group_stats s USING (group_name)
WHERE group_name = 'stream';});
	$consume =~ s/pgq\.claim\('stream'\)/pgq.claim('stream', wait => '1 hour')/
	  or die 'consume_sql changed';
	my @out = split /\n/, $c->query_ok($consume);
	like($out[0] // '', qr/^\d+\|f$/,
		'streaming: a waiting claim got a block while the query runs');
	my ($n_ids, $n_blocks, $max_id) = split /\|/, $out[1] // '';
	is(($n_ids // '') . '|' . ($n_blocks // ''),
		'5000|1', 'streaming: 5000 ids of one block recorded');
	cmp_ok($max_id // 1e9, '<', 1_000_000,
		'streaming: all of them from before the row the query waits at');
	is($out[2] // '', 'materializing|materializing',
		'streaming: in the claiming transaction the group is materializing');
	$c->close;

	# While the reader waits, the writer commits everything it was handed.
	# The reader hands over the query's rows in fetches: with fetches of up
	# to 5,000 rows, it has handed over at least the ids up to 995,000,
	# which are 199 full blocks.
	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT (SELECT count(*) FROM pgq.blocks WHERE group_id = $gid)
		     + (SELECT count(DISTINCT block_id) FROM processed) >= 199}),
		'streaming: while the reader waits, the writer commits what it has');
	is( $node->safe_psql('postgres',
			"SELECT state FROM pgq.group_stats WHERE group_name = 'stream'"),
		'materializing', 'streaming: the group is still materializing');

	# Let the query go on, and drain the group with four consumers whose
	# claims wait: each stops when a claim returns no rows, which a waiting
	# claim does only once the group is ready and nothing is left.
	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'streaming: lock released');
	my @consumers = map { new_session($node, "consumer$_") } 1 .. 4;
	my $step = consume_sql('stream');
	$step =~ s/pgq\.claim\('stream'\)/pgq.claim('stream', wait => '1 hour')/
	  or die 'consume_sql changed';
	my (@errors, %active);
	my $claimed = 0;
	for my $s (@consumers)
	{
		$s->send($step);
		$active{ $s->name } = $s;
	}
	while (%active)
	{
		for my $s (values %active)
		{
			my $state = $s->poll;
			next if $state eq 'busy';
			if ($state eq 'dead' || $s->{error} ne '')
			{
				push @errors, $s->name . ": $s->{error}";
				delete $active{ $s->name };
			}
			elsif ($s->{result} eq '')
			{
				delete $active{ $s->name };
			}
			else
			{
				$claimed++;
				$s->send($step);
			}
		}
		usleep(5_000);
	}
	is_deeply(\@errors, [], 'streaming: no consumer error');
	note "streaming: the four consumers committed $claimed blocks after the release";

	my ($state, $total_ids, $total_blocks) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT state, total_ids, total_blocks FROM pgq.groups WHERE group_name = 'stream'"
	  );
	is("$state|$total_ids", "ready|$n",
		"streaming: the group is ready with $n ids");
	note "streaming: $total_blocks blocks";
	check_exactly_once($node, 'stream', $query, $n, $total_blocks, 'streaming');
	$_->close for @consumers;
	workers_gone($node, 'streaming: the workers exited');
	$node->safe_psql('postgres', 'TRUNCATE processed');
}

# ---------------------------------------------------------------------------
# 2. The query runs as the creator: a login role that may use pgq but not
# read "secret".
$node->safe_psql(
	'postgres', q{
	CREATE ROLE mallory LOGIN;
	CREATE TABLE secret AS SELECT g AS id FROM generate_series(1, 10) g;
	CREATE TABLE visible AS SELECT g AS id FROM generate_series(1, 10) g;
	GRANT SELECT ON visible TO mallory;
	GRANT USAGE ON SCHEMA pgq TO mallory;
	GRANT ALL ON ALL TABLES IN SCHEMA pgq TO mallory;
	GRANT ALL ON ALL SEQUENCES IN SCHEMA pgq TO mallory;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgq TO mallory;
});
my $as_mallory = $node->connstr('postgres') . ' user=mallory';
{
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('sec', 'SELECT id FROM secret', 1, async => true)",
			connstr => $as_mallory),
		't',
		'creator: mallory creates an async group over a table she cannot read');
	my ($state, $error) = end_state($node, 'sec');
	is($state, 'failed', 'creator: the group failed');
	like($error, qr/permission denied for table secret/,
		'creator: error says permission denied');
	like($error, qr/42501/, 'creator: the error includes its SQLSTATE');
	is( $node->safe_psql('postgres',
			"SELECT state, error IS NOT DISTINCT FROM \$e\$$error\$e\$ FROM pgq.group_stats WHERE group_name = 'sec'"
		),
		'failed|t',
		'creator: group_stats shows the failure and its error');
	is(blocks_of($node, group_id($node, 'sec')), 0, 'creator: no blocks');
	check_failed_claims($node, 'sec', 'failed group');
	workers_gone($node, 'creator: the workers of the failed group exited');

	# Rows only a query run as mallory returns: the superuser the workers
	# connect as would get none.
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('vis', \$q\$SELECT id FROM visible WHERE current_user = 'mallory'\$q\$, 3, async => true)",
			connstr => $as_mallory),
		't',
		'creator: mallory creates an async group over a table she can read');
	($state, $error) = end_state($node, 'vis');
	is("$state|$error", 'ready|', 'creator: that group is ready');
	is( $node->safe_psql('postgres',
			"SELECT owner, total_ids, total_blocks FROM pgq.groups WHERE group_name = 'vis'"),
		'mallory|10|4',
		'creator: owned by mallory; current_user was mallory for all 10 rows');
	workers_gone($node, 'creator: the workers exited');
}

# ---------------------------------------------------------------------------
# 3. timeout => bounds the query's run; so does pgq.materialize_timeout.
{
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('slow', "
			  . dq(blocking_query(10, 5))
			  . ", 1, async => true, timeout => '200ms')"),
		't',
		'timeout: async group created with a 200ms timeout');
	my ($state, $error) = end_state($node, 'slow');
	is($state, 'failed', 'timeout: the blocked query made the group fail');
	like($error, qr/statement timeout/, 'timeout: error says statement timeout');
	workers_gone($node, 'timeout: the workers exited (lock still held)');

	# the setting, when timeout is NULL: set for the whole cluster, so that it
	# applies whether it is read at creation or by the workers
	$node->safe_psql('postgres',
		'ALTER SYSTEM SET pgq.materialize_timeout = 200');
	$node->reload;
	ok( $node->poll_query_until(
			'postgres', 'SHOW pgq.materialize_timeout', '200ms'),
		'timeout: pgq.materialize_timeout = 200ms in new sessions');
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('slow_guc', "
			  . dq(blocking_query(10, 5))
			  . ", 1, async => true)"),
		't',
		'timeout: async group created without a timeout');
	($state, $error) = end_state($node, 'slow_guc');
	is($state, 'failed', 'pgq.materialize_timeout made the group fail');
	like($error, qr/statement timeout/,
		'pgq.materialize_timeout: error says statement timeout');
	workers_gone($node, 'pgq.materialize_timeout: the workers exited');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET pgq.materialize_timeout');
	$node->reload;
	ok( $node->poll_query_until(
			'postgres', 'SHOW pgq.materialize_timeout', '0'),
		'timeout: pgq.materialize_timeout back to 0');
	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'timeout: lock released');

	my ($rc, $out, $err) = psql_full($node,
		"\\set VERBOSITY verbose\nSELECT pgq.create_group('sync_to', 'SELECT 1', timeout => '1s');"
	);
	isnt($rc, 0, 'timeout without async is an error');
	like($err, qr/ERROR:  22023:/, '... with SQLSTATE 22023');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pgq.groups WHERE group_name = 'sync_to'"),
		0, '... and no group');
}

# ---------------------------------------------------------------------------
# 4. A rolled-back creation: the workers, started for the transaction, exit
# without writing anything.
{
	my $s = new_session($node, 'rollback');
	is( $s->query_ok(
			"BEGIN; SELECT pgq.create_group('rb', 'SELECT g FROM generate_series(1, 1000) g', 10, async => true);"
		),
		't',
		'rollback: async create_group in a transaction block');
	ok($node->poll_query_until('postgres', "SELECT $WORKERS = 2"),
		'rollback: both workers run while the transaction is open');
	$s->query_ok('ROLLBACK;');
	workers_gone($node, 'rollback: the workers exited after the rollback');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pgq.groups WHERE group_name = 'rb'"),
		0, 'rollback: no group');
	is(orphan_blocks($node), 0, 'rollback: no blocks without a group');
	$s->close;
}

# ---------------------------------------------------------------------------
# 5. The creator's transaction still open: the workers wait for it.
{
	my $s = new_session($node, 'creator');
	is( $s->query_ok(
			"BEGIN; SELECT pgq.create_group('open', 'SELECT g FROM generate_series(1, 20000) g', 1000, async => true);"
		),
		't',
		'open: async create_group in a transaction block');
	ok($node->poll_query_until('postgres', "SELECT $WORKERS = 2"),
		'open: both workers run while the transaction is open');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pgq.groups WHERE group_name = 'open'"),
		0,
		'open: other sessions do not see the group');
	is(orphan_blocks($node), 0, 'open: no block of it is visible');
	is( $s->query_ok(
			"SELECT state FROM pgq.groups WHERE group_name = 'open'; COMMIT;"),
		'materializing',
		'open: the creator sees it materializing, and commits');
	my ($state, $error) = end_state($node, 'open');
	is("$state|$error", 'ready|', 'open: after the commit the group is ready');
	my $gid = group_id($node, 'open');
	is( $node->safe_psql(
			'postgres', qq{
		SELECT g.total_ids, g.total_blocks, count(*),
		       bool_and(u.id = u.rn), max(array_length(b_ids, 1))
		FROM pgq.groups g,
		     LATERAL (SELECT b.ids AS b_ids, x.id,
		                     row_number() OVER (ORDER BY b.block_id, x.ord) AS rn
		              FROM pgq.blocks b, unnest(b.ids) WITH ORDINALITY x(id, ord)
		              WHERE b.group_id = g.group_id) u
		WHERE g.group_id = $gid
		GROUP BY g.total_ids, g.total_blocks}),
		'20000|20|20000|t|1000',
		'open: 20 blocks of 1000 holding 1..20000 in the query\'s order');
	workers_gone($node, 'open: the workers exited');
	$s->close;
}

# ---------------------------------------------------------------------------
# 6. pgq.drop_group() of a group still materializing.
{
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('dropme', "
			  . dq(blocking_query(2_000_000, 1_000_000))
			  . ", 5000, async => true)"),
		't',
		'drop: async group created');
	my $gid = group_id($node, 'dropme');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT ($READER_WAITS) AND (SELECT count(*) > 0 FROM pgq.blocks WHERE group_id = $gid)"
		),
		'drop: the reader waits, and blocks were committed');
	is($node->safe_psql('postgres', "SELECT pgq.drop_group('dropme')"),
		't', 'drop: drop_group of the materializing group returns true');
	# the lock is still held: the reader can only end because it was stopped
	workers_gone($node, 'drop: both workers exited, the lock still held');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pgq.groups WHERE group_name = 'dropme'"),
		0, 'drop: no group');
	is(blocks_of($node, $gid), 0, 'drop: no block of the dropped group');
	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'drop: the lock holder releases its lock');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = $LOCK_KEY AND objsubid = 1"
		),
		0,
		'drop: nobody holds or waits for the lock');
}

# ---------------------------------------------------------------------------
# 7. A claim waiting on a materializing group returns no rows once the group
# is ready and nothing is left to claim.  The waiters recheck only every hour
# and wait an hour: only a wake-up can end their wait before the harness
# gives up.
{
	# Hand the queued statements to psql and wait until the session's backend
	# sleeps in a waiting claim (wait event "Extension"), or has finished
	# meanwhile: returns 'sleeping' or 'done'.
	my $sleeping_or_done = sub {
		my ($w) = @_;
		my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
		while (time() < $deadline)
		{
			return 'done' if $w->poll ne 'busy';
			return 'sleeping'
			  if $obs->query_ok(
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $w->{pid} AND wait_event_type = 'Extension';"
			  ) eq '1';
			usleep(2_000);
		}
		die 'session ' . $w->name . ' neither slept nor finished';
	};
	my $w = new_session($node, 'waiter');
	$w->query_ok("SET pgq.wait_recheck_interval = '1h';");

	# 7a. A group that will have no ids: its only row waits for the lock and
	# is then left out.
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('w0', "
			  . dq(blocking_query(1, 1, 1))
			  . ", 10, async => true)"),
		't',
		'wait, no ids: async group created');
	ok($node->poll_query_until('postgres', $READER_WAITS),
		'wait, no ids: the reader waits at its only row');
	$w->send("BEGIN; SELECT count(*) FROM pgq.claim('w0', wait => '1 hour');");
	is($sleeping_or_done->($w), 'sleeping',
		'wait, no ids: a claim on the materializing group waits');
	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'wait, no ids: lock released: the query ends');
	is($w->wait, 'done', 'wait, no ids: the waiting claim returned');
	is("$w->{result}|$w->{error}", '0|',
		'wait, no ids: with no rows: the group is ready and empty');
	$w->query_ok('COMMIT;');
	is( $node->safe_psql('postgres',
			"SELECT state, total_ids, total_blocks FROM pgq.group_stats WHERE group_name = 'w0'"
		),
		'drained|0|0',
		'wait, no ids: the group is drained, with no ids');
	workers_gone($node, 'wait, no ids: the workers exited');

	# 7b. A group of one block, committed while the reader waits at the row
	# after it, which the query then leaves out.  The reader hands over the
	# query's rows in fetches: the block's 65,536 (2^16) rows end on a fetch
	# boundary for any fetch size that is a power of two up to that (and for
	# rows one by one), so the block is complete before the reader waits.
	my $b = 65536;
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('w1', "
			  . dq(blocking_query($b + 1, $b + 1, 1))
			  . ", $b, async => true)"),
		't',
		'wait: async group created');
	my $gid = group_id($node, 'w1');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT ($READER_WAITS) AND (SELECT count(*) = 1 FROM pgq.blocks WHERE group_id = $gid)"
		),
		'wait: the reader waits after the first block, which is committed');

	my $c = new_session($node, 'claimer');
	is( $c->query_ok(
			"BEGIN; SELECT array_length(ids, 1) FROM pgq.claim('w1');"),
		$b, 'wait: a consumer claims the block');

	$w->send("BEGIN; SELECT count(*) FROM pgq.claim('w1', wait => '1 hour');");
	is($sleeping_or_done->($w), 'sleeping', 'wait: a waiting claim waits');

	$c->query_ok('COMMIT;');
	is($sleeping_or_done->($w),
		'sleeping',
		'wait: after the block was consumed it still waits (the group is materializing)');

	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'wait: lock released: the query ends');
	is($w->wait, 'done', 'wait: the waiting claim returned');
	is("$w->{result}|$w->{error}", '0|',
		'wait: with no rows: the group is ready and drained');
	$w->query_ok('COMMIT;');
	is( $node->safe_psql('postgres',
			"SELECT state, total_ids, total_blocks FROM pgq.group_stats WHERE group_name = 'w1'"
		),
		"drained|$b|1",
		'wait: the group is drained, one block');
	workers_gone($node, 'wait: the workers exited');
	$_->close for ($c, $w);
}

# ---------------------------------------------------------------------------
# 8. The query runs with the search_path of its creation, not the one in
# effect when the creating transaction commits.  "items" in public holds
# other ids: a query run with the default search_path would find those.
{
	$node->safe_psql(
		'postgres', q{
		CREATE SCHEMA s1;
		CREATE TABLE s1.items AS SELECT g AS id FROM generate_series(1, 100) g;
		CREATE TABLE public.items AS SELECT g AS id FROM generate_series(1001, 1005) g;
	});
	is( $node->safe_psql(
			'postgres', q{
		BEGIN;
		SET search_path = s1, public;
		SELECT pgq.create_group('sp', 'SELECT id FROM items ORDER BY id', 10, async => true);
		RESET search_path;
		COMMIT;}),
		't',
		'search_path: async group created with search_path s1, public');
	my ($state, $error) = end_state($node, 'sp');
	is("$state|$error", 'ready|', 'search_path: the group is ready');
	my $gid = group_id($node, 'sp');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*), min(id), max(id) FROM pgq.blocks, unnest(ids) id WHERE group_id = $gid"
		),
		'100|1|100',
		'search_path: the query read s1.items');
	workers_gone($node, 'search_path: the workers exited');
}

$holder->close;
$obs->close;
$node->stop;
unlike(slurp_file($node->logfile), qr/PANIC|TRAP:/,
	'no crash or assertion failure in the server log');

# ---------------------------------------------------------------------------
# 9. No free background worker slot.  Slots: the pgq launcher takes one (no
# maintenance passes, no logical replication launcher, no parallel workers);
# an async group's reader and writer take two while they run.
my $slots = PostgreSQL::Test::Cluster->new('slots');
$slots->init;
$slots->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
max_parallel_workers_per_gather = 0
max_logical_replication_workers = 0
max_worker_processes = 3
});
$slots->start;
$slots->safe_psql('postgres', 'CREATE EXTENSION pgq');

# A full slot table: a first group blocked on the lock holds its two slots;
# a second creation then finds too few free (none, or one: see below).
sub no_slot
{
	my ($label) = @_;
	my $h = new_session($slots, 'slot_lock_holder');
	ok( $slots->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgq launcher'"
		),
		"$label: the pgq launcher runs");
	is( $slots->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'"
		),
		0,
		"$label: no logical replication launcher");
	$h->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $slots->safe_psql(
			'postgres',
			"SELECT pgq.create_group('first', "
			  . dq(blocking_query(10, 5))
			  . ", 1, async => true)"),
		't',
		"$label: a first async group");
	ok($slots->poll_query_until('postgres', $READER_WAITS),
		"$label: its reader waits on the lock");

	my ($rc, $out, $err) = psql_full($slots,
		"\\set VERBOSITY verbose\nSELECT pgq.create_group('second', 'SELECT 1', async => true);"
	);
	isnt($rc, 0, "$label: a second async create_group fails");
	like($err, qr/ERROR:  53400: could not start a materialization worker/,
		"$label: SQLSTATE 53400, could not start a materialization worker");
	like($err, qr/HINT:.*max_worker_processes/,
		"$label: the hint names max_worker_processes");
	is( $slots->safe_psql('postgres',
			"SELECT count(*) FROM pgq.groups WHERE group_name = 'second'"),
		0, "$label: no group row left");
	ok( $slots->poll_query_until(
			'postgres',
			"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type LIKE 'pgq materialize%'"
		),
		"$label: only the first group's two workers run");

	is($h->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', "$label: lock released");
	my ($state, $error) = end_state($slots, 'first');
	is("$state|$error", 'ready|', "$label: the first group is ready");
	workers_gone($slots, "$label: its workers exited");

	# with the slots free again, the same creation works
	is( $slots->safe_psql('postgres',
			"SELECT pgq.create_group('second', 'SELECT 1', async => true)"),
		't', "$label: with free slots, the second group is created");
	($state, $error) = end_state($slots, 'second');
	is("$state|$error", 'ready|', "$label: and is ready");
	workers_gone($slots, "$label: its workers exited");
	$slots->safe_psql('postgres',
		"SELECT pgq.drop_group('first'), pgq.drop_group('second')");
	is(orphan_blocks($slots), 0, "$label: no blocks left");
	$h->close;
	return;
}

no_slot('no free slot');

# One free slot: one of the two workers can be started, the other cannot;
# the one started must not stay behind.
$slots->append_conf('postgresql.conf', "max_worker_processes = 4\n");
$slots->restart;
no_slot('one free slot');

$slots->stop;
unlike(slurp_file($slots->logfile), qr/PANIC|TRAP:/,
	'no crash or assertion failure in the second server\'s log');

done_testing();
