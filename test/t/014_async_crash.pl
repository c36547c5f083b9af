
# An asynchronous materialization cut off in the middle.  The writer holds a
# session-level lock while it works; once the writer is gone without having
# finished (the server crashed and restarted, stopped in immediate mode, or
# the writer was terminated), a maintenance pass finds the group
# 'materializing' with no live writer and marks it 'failed', with an error
# that says the materialization was interrupted.  Blocks committed before
# stay in pgq.blocks, but claims of the failed group return no rows (with a
# warning), also waiting ones; no materialization worker is left running,
# and nothing panics.
#
# The group's query is held in the middle without sleeping: its row
# 1,000,000 takes a shared advisory lock that a test session holds, so the
# reader waits there (seen in pg_locks) while the writer commits the blocks
# of the rows before.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $LOCK_KEY = 4242;
my $QUERY = 'SELECT g FROM generate_series(1, 2000000) g WHERE CASE WHEN g = 1000000 '
  . "THEN pg_advisory_xact_lock_shared($LOCK_KEY)::text = '' ELSE true END";

my $WORKERS = q{(SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type LIKE 'pgq materialize%')};

my $node = PostgreSQL::Test::Cluster->new('async_crash');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 1
restart_after_crash = on
max_parallel_workers_per_gather = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

# Start an async group of $QUERY and wait until its reader waits on the lock
# that $holder holds and some blocks are committed.  Returns the group's id
# and the number of its blocks at that point.
sub start_blocked_group
{
	my ($group, $holder) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$holder->query_ok("SELECT pg_advisory_lock($LOCK_KEY);");
	is( $node->safe_psql(
			'postgres',
			"SELECT pgq.create_group('$group', \$q\$$QUERY\$q\$, 5000, async => true)"),
		't',
		"$group: async group created");
	my $gid = $node->safe_psql('postgres',
		"SELECT group_id FROM pgq.groups WHERE group_name = '$group'");
	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT count(*) > 0
		FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.backend_type = 'pgq materialize reader'
		  AND l.locktype = 'advisory' AND l.classid = 0 AND l.objid = $LOCK_KEY
		  AND l.objsubid = 1 AND NOT l.granted
		  AND (SELECT count(*) > 0 FROM pgq.blocks WHERE group_id = $gid)}),
		"$group: the reader waits in the middle, blocks are committed");
	my ($blocks, $state) = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT (SELECT count(*) FROM pgq.blocks WHERE group_id = $gid), state
		FROM pgq.groups WHERE group_id = $gid});
	is($state, 'materializing', "$group: the group is materializing");
	note "$group: $blocks blocks committed before the interruption";
	return ($gid, $blocks);
}

# The ending every interruption must have.
sub check_interrupted
{
	my ($group, $gid, $blocks_before) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	ok( $node->poll_query_until(
			'postgres',
			"SELECT state <> 'materializing' FROM pgq.groups WHERE group_id = $gid"),
		"$group: a maintenance pass ended the materialization");
	my ($state, $stats_state, $error) = split /\|/, $node->safe_psql(
		'postgres', qq{
		SELECT g.state, s.state, coalesce(g.error, '')
		FROM pgq.groups g JOIN pgq.group_stats s USING (group_name)
		WHERE g.group_id = $gid}), 3;
	is("$state|$stats_state", 'failed|failed', "$group: the group failed");
	like($error, qr/interrupted/, "$group: its error says interrupted");
	note "$group: error: $error";

	cmp_ok(
		$node->safe_psql('postgres',
			"SELECT count(*) FROM pgq.blocks WHERE group_id = $gid"),
		'>=', $blocks_before,
		"$group: the blocks committed before are still there");

	# a waiting claim too: an hour, rechecking every hour, so that only
	# "the group failed" can end it before the harness gives up
	for my $wait ('', ", wait => '1 hour'")
	{
		my ($out, $err);
		my $rc = $node->psql(
			'postgres', qq{SET pgq.wait_recheck_interval = '1h';
			BEGIN;
			SELECT count(*) FROM pgq.claim('$group'$wait);
			COMMIT;},
			stdout => \$out,
			stderr => \$err,
			on_error_stop => 1,
			timeout => $PostgreSQL::Test::Utils::timeout_default);
		my $what = $wait ? 'a waiting claim' : 'a claim';
		is("$rc|$out", '0|0', "$group: $what returns no rows");
		like($err, qr/WARNING:.*"\Q$group\E".*fail/,
			"$group: $what warns that the group failed");
	}
	ok($node->poll_query_until('postgres', "SELECT $WORKERS = 0"),
		"$group: no materialization worker runs");
	return;
}

# ---------------------------------------------------------------------------
# 1. kill -9 of a backend: the postmaster ends every process, the workers
# too, and reinitializes.
{
	my $holder = new_session($node, 'holder1');
	my ($gid, $blocks) = start_blocked_group('crash', $holder);
	my $victim = new_session($node, 'victim');
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $victim->pid), 'crash: kill -9 of a backend');
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	$node->wait_for_log(qr/database system is ready to accept connections/,
		$log_offset);
	ok($node->poll_query_until('postgres', 'SELECT true'),
		'crash: the server accepts connections again');
	ok(wait_for_sessions_dead($holder, $victim),
		'crash: the sessions were ended');
	check_interrupted('crash', $gid, $blocks);
}

# ---------------------------------------------------------------------------
# 2. An immediate stop and a start: crash recovery.
{
	my $holder = new_session($node, 'holder2');
	my ($gid, $blocks) = start_blocked_group('immediate', $holder);
	$node->stop('immediate');
	$node->start;
	ok(wait_for_sessions_dead($holder), 'immediate: the session was ended');
	check_interrupted('immediate', $gid, $blocks);
}

# ---------------------------------------------------------------------------
# 3. pg_terminate_backend() of the writer: the reader goes too, though it
# waits on a lock that is still held.
{
	my $holder = new_session($node, 'holder3');
	my ($gid, $blocks) = start_blocked_group('terminated', $holder);
	my $writer = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgq materialize writer'"
	);
	like($writer, qr/^\d+$/, 'terminated: one writer');
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($writer)"),
		't', 'terminated: pg_terminate_backend() of the writer');
	ok($node->poll_query_until('postgres', "SELECT $WORKERS = 0"),
		'terminated: the writer and the reader exited, the lock still held');
	check_interrupted('terminated', $gid, $blocks);
	is($holder->query_ok("SELECT pg_advisory_unlock($LOCK_KEY);"),
		't', 'terminated: the lock holder releases its lock');
	$holder->close;
}

$node->stop;
unlike(slurp_file($node->logfile), qr/PANIC|TRAP:/,
	'no PANIC or assertion failure in the server log');

done_testing();
