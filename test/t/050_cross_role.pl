
# Cross-role access, played from a login role with nothing but USAGE on
# schema pgq ("squatter") against another ("owner"), each in sessions of its
# own, with pgq.notify on for the cluster:
#
# - Taking a name first: the squatter creates, before the owner does, a group
#   with the owner's query text (reading, as the squatter, a temporary table
#   that shadows the owner's) and a queue with the owner's name, and grants
#   both to PUBLIC.  The owner's create_group and create_queue fail with
#   42501 and say whose they are, instead of joining; the owner, naming
#   itself as owner, is refused too.
# - Names leak: walking every id with pgq.result and pgq.complete gives the
#   squatter none of the owner's names; pgq.workers shows it none of the
#   owner's workers; its pgq.inflight of the owner's group reads nothing.
# - LISTEN: the squatter, listening on channel pgq, hears nothing of the
#   owner's queue, cannot learn the queue's channel, and its fake wake-ups on
#   pgq reach none of the owner's listeners, who hear the real ones.
# - pgq.grant(..., 'Public') grants to a role named Public, not to PUBLIC.
# - Locks: the squatter, in a transaction it keeps open, drops a group of its
#   own whose name's 32-bit hash is the owner's queue's (the key the group
#   lock once had), or a name no group has: the owner's enqueue does not
#   wait for it.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('cross_role');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
pgq.notify = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE ROLE owner LOGIN;
	CREATE ROLE squatter LOGIN;
	GRANT USAGE ON SCHEMA pgq TO owner, squatter;
	CREATE TABLE alerts AS SELECT g AS alert_id FROM generate_series(1, 100) g;
	GRANT SELECT ON alerts TO owner, squatter;
});
my %as = map { $_ => $node->connstr('postgres') . " user=$_" } qw(owner squatter);

# One-shot SQL as a role: (stdout, stderr).
sub run_as
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		connstr => $as{$role}, extra_params => ['-v', 'ON_ERROR_STOP=1']);
	return ($out, $err);
}

# A psql session acting as a role from its start.
sub session_as
{
	my ($role, $name) = @_;
	my $s = new_session($node, $name);
	$s->query_ok("SET SESSION AUTHORIZATION $role;");
	return $s;
}

# ---------------------------------------------------------------------------
# Taking a name first.
{
	my ($out, $err) = run_as('squatter', q{
		CREATE TEMP TABLE alerts AS SELECT 666 AS alert_id;
		SELECT pgq.create_group('nightly', 'SELECT alert_id FROM alerts', 10);
		SELECT pgq.create_queue('jobs');
		SELECT pgq.grant('nightly', 'public');
		SELECT pgq.grant('jobs', 'public');
		SELECT pgq.grant('jobs', 'public', 'produce');});
	is($err, '', 'the squatter takes the names nightly and jobs, for PUBLIC');

	($out, $err) = run_as('owner',
		q{SELECT pgq.create_group('nightly', 'SELECT alert_id FROM alerts', 10);});
	like($err, qr/ERROR:  group "nightly" belongs to role "squatter"/,
		"the owner's create_group does not join the squatter's look-alike group");
	like($err, qr/HINT:  If you meant to join the group of squatter, pass owner => 'squatter'/,
		'... and its hint says whose it is');
	($out, $err) = run_as('owner', q{SELECT pgq.create_queue('jobs');});
	like($err, qr/ERROR:  queue "jobs" belongs to role "squatter"/,
		"the owner's create_queue does not join the squatter's queue");
	($out, $err) = run_as('owner',
		q{SELECT pgq.create_queue('jobs', owner => 'owner');});
	like($err, qr/ERROR:  queue "jobs" belongs to role "squatter", not to "owner"/,
		'... nor when it names itself as the owner');
	is($node->safe_psql('postgres', q{
			SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
			WHERE g.group_name = 'jobs'}),
		'0', 'the squatter has nothing of the owner in its queue');
}

# ---------------------------------------------------------------------------
# Names leak.  The owner's own group and queue, an item done and one held, a
# registered worker in a session that stays.
my $owner = session_as('owner', 'owner');
$owner->query_ok(q{
	SELECT pgq.create_group('owner-secret-group', 'SELECT alert_id FROM alerts', 10);
	SELECT pgq.create_queue('owner-secret-queue');
	SELECT pgq.enqueue('owner-secret-queue', '{"secret": 1}');
	SELECT pgq.enqueue('owner-secret-queue', '{"secret": 2}');
	SELECT count(*) FROM pgq.claim('owner-secret-queue', 2);
	SELECT pgq.register_worker('owner-secret-worker');});
my $holder = session_as('owner', 'holder');
$holder->query_ok(q{BEGIN; SELECT count(*) FROM pgq.claim('owner-secret-group');});
{
	my $max = $node->safe_psql('postgres', q{SELECT pg_catalog.pg_sequence_last_value('pgq.block_id_seq')});
	my $squatter = session_as('squatter', 'squatter');
	my @said;
	for my $id (1 .. $max + 5)
	{
		for my $sql ("SELECT * FROM pgq.result($id);",
			"SELECT pgq.complete($id, attempt => 1);",
			"SELECT pgq.retry($id);")
		{
			$squatter->send($sql);
			$squatter->wait;
			push @said, "$squatter->{result}\n$squatter->{error}";
		}
	}
	my $said = join("\n", @said);
	unlike($said, qr/owner-secret|permission denied/,
		"walking ids 1 to $max, pgq.result, complete and retry name none of the owner's groups");
	like($said, qr/does not exist/, '... they say that the ids do not exist');

	is($squatter->query_ok(q{SELECT count(*) FROM pgq.workers WHERE worker_name LIKE 'owner%';}),
		'0', "pgq.workers shows the squatter none of the owner's workers");
	my ($gid, $created) = split /\|/, $node->safe_psql('postgres',
		q{SELECT group_id, created_at FROM pgq.groups WHERE group_name = 'owner-secret-group'});
	is($squatter->query_ok(qq{SELECT claimed FROM pgq.inflight($gid, '$created');}),
		'0', "pgq.inflight gives the squatter nothing of the owner's group");
	is($owner->query_ok(qq{SELECT claimed FROM pgq.inflight($gid, '$created');}),
		'1', '... and the owner its claim');
	$holder->query_ok('ROLLBACK;');
	$holder->close;
	$squatter->close;
}

# ---------------------------------------------------------------------------
# LISTEN.  Notifications psql printed, as "channel payload" strings.
sub heard
{
	my ($s) = @_;
	my $out = $s->query_ok('SELECT 1;');
	return [ map { /^Asynchronous notification "(.*)" with payload "(.*)" received/ ? "$1 $2" : () }
		  split /\n/, $out ];
}
{
	is($node->safe_psql('postgres', 'SHOW pgq.notify'), 'on',
		'pgq.notify is on, as postgresql.conf says');
	my $eavesdropper = session_as('squatter', 'eavesdropper');
	$eavesdropper->query_ok('LISTEN pgq;');
	$eavesdropper->send(q{SELECT pgq.channel('owner-secret-queue');});
	$eavesdropper->wait;
	like($eavesdropper->{error}, qr/permission denied for group "owner-secret-queue"/,
		"the squatter cannot learn the owner's queue's channel");

	my $listener = session_as('owner', 'listener');
	my $channel = $listener->query_ok(q{SELECT pgq.channel('owner-secret-queue');});
	$listener->query_ok(qq{LISTEN "$channel";});

	$owner->query_ok(q{SELECT pgq.enqueue('owner-secret-queue', '{"secret": 3}');});
	is_deeply(heard($listener), ["$channel owner-secret-queue"],
		"the owner's listener hears the enqueue on the queue's channel");
	is_deeply(heard($eavesdropper), [], 'the squatter, listening on pgq, hears nothing');

	$eavesdropper->query_ok(q{SELECT pg_notify('pgq', 'owner-secret-queue');});
	is_deeply(heard($listener), [], "the squatter's fake wake-up on pgq reaches no listener of the owner");
	$eavesdropper->close;
	$listener->close;
}

# ---------------------------------------------------------------------------
# pgq.grant(..., 'Public')
{
	my ($out, $err) = run_as('owner', q{SELECT pgq.grant('owner-secret-queue', 'Public');});
	like($err, qr/role "Public" does not exist/, "pgq.grant(..., 'Public') names a role, not PUBLIC");
	($out, $err) = run_as('squatter', q{SELECT count(*) FROM pgq.claim('owner-secret-queue');});
	like($err, qr/permission denied/, '... and the squatter still may not claim');
}

# ---------------------------------------------------------------------------
# Locks.  Two names whose hashtext() collide: the owner's queue, and a group
# of the squatter's.
{
	my ($victim, $colliding) = split /\|/, $node->safe_psql('postgres', q{
		SELECT min(n), max(n)
		FROM (SELECT 'q' || g AS n FROM generate_series(1, 300000) g) s
		GROUP BY hashtext(n) HAVING count(*) > 1 ORDER BY 1 LIMIT 1});
	ok(defined $colliding, "names $victim and $colliding share a 32-bit hash");
	run_as('owner', qq{SELECT pgq.create_queue('$victim');});
	run_as('squatter', qq{SELECT pgq.create_queue('$colliding');});
	my $observer = new_session($node, 'observer');
	my $squatter = session_as('squatter', 'squatter-locks');

	# Does the owner's enqueue finish while the squatter's transaction is
	# open?  False if it is seen waiting for a lock instead.
	my $enqueue_finishes = sub {
		my $pid = $owner->pid;
		$owner->send(qq{SELECT pgq.enqueue('$victim', '{}') > 0;});
		while ($owner->poll eq 'busy')
		{
			return 0
			  if $observer->query_ok(
				qq{SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $pid;}) eq 't';
			usleep(5_000);
		}
		return $owner->{error} eq '';
	};

	$squatter->query_ok(qq{BEGIN; SELECT pgq.drop_group('$colliding');});
	ok($enqueue_finishes->(),
		"the squatter dropping its own group of a colliding name holds up no enqueue of the owner's");
	$squatter->query_ok('COMMIT;');
	$owner->wait;

	$squatter->query_ok(qq{BEGIN; SELECT pgq.drop_group('$colliding');});
	ok($enqueue_finishes->(),
		'... nor does its drop of a colliding name that no group has');
	$squatter->query_ok('COMMIT;');
	$owner->wait;
	$squatter->close;
	$observer->close;
}

$owner->query_ok('SELECT pg_advisory_unlock_all();');
$owner->close;
$node->stop;
done_testing();
