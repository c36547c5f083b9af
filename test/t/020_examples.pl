
# The client examples under examples/, run as a user would run them: as
# separate programs, several at once, each given the server's connection
# string.  Every consumer stores the ids it processes in the table
# "processed" (id, block_id, worker), in the transaction that consumes their
# block, and the checks of PgqTest.pm then say whether every id was stored
# exactly once.
#
# - examples/psql/consumer.sh (transaction mode), and
#   examples/python/consumer.py in each of the three claim modes: three
#   consumers drain a group of 20,000 ids that they create together (each
#   passes the same query: one creates the group, the others join it).  In
#   lease and advisory mode the first attempt at some blocks fails on
#   purpose, so that pgq.fail and the retries are part of the run.
# - SIGTERM: a consumer that has stored some blocks of a bigger group is sent
#   SIGTERM; it finishes the block at hand and exits 0, leaving every block
#   either consumed with all its ids stored, or pending with none of them.
# - A server restart (pg_ctl restart, fast mode) while two consumers run:
#   they reconnect and drain the group, still exactly once.
# - Lease mode, work longer than the lease: consumer.py extends the lease.
# - examples/python/listen_consumer.py, with pgq.notify = on: workers
#   started before their group exists look for it until it is, then LISTEN
#   on its channel (pgq.channel()); workers whose group has only leased
#   blocks wake up when the holder releases them; a sleeping worker stops at
#   once on SIGTERM.  They are told to look again only once an hour without
#   a notification, so only notifications can wake them up in time.
#
# The Python examples need psycopg 3 (Debian: python3-psycopg); without it
# their part is skipped.  Waits are for observed conditions (a row stored, a
# line of output, a process exit); the harness timeouts only guard against
# hangs.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $examples = "$FindBin::RealBin/../../examples";
my $psql_consumer = "$examples/psql/consumer.sh";
my $py_consumer = "$examples/python/consumer.py";
my $py_listener = "$examples/python/listen_consumer.py";

my $have_psycopg = system('python3 -c "import psycopg" >/dev/null 2>&1') == 0;
my $no_psycopg =
  "python3 cannot import psycopg (Debian: apt-get install python3-psycopg)";

my $node = PostgreSQL::Test::Cluster->new('examples');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0\n");
$node->start;
my $connstr = $node->connstr('postgres');

# "processed": what the consumers store.  No key, so that an id stored twice
# shows in the counts of check_exactly_once; "worker" is filled from the
# consumer's application_name (its --name / -n).
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE src AS SELECT g AS id FROM generate_series(1, 20000) g;
	CREATE TABLE processed (
	    id       bigint NOT NULL,
	    block_id bigint NOT NULL,
	    worker   text NOT NULL DEFAULT current_setting('application_name'));
	-- for consumer.sh -f: the work done by a SQL function
	CREATE FUNCTION store_block(block bigint, ids bigint[]) RETURNS void
	LANGUAGE sql AS $$INSERT INTO processed (id, block_id) SELECT unnest(ids), block$$;
});
my $query = 'SELECT id FROM src ORDER BY id';    # 20,000 ids
my $n_ids = 20000;
my $big_query = 'SELECT g FROM generate_series(1, 100000) g';

# ---------------------------------------------------------------------------
# Consumers: the examples run as programs in the background (start_prog,
# finish_prog and output_until are in PgqTest.pm).

sub psql_consumer
{
	my ($name, $group, @opt) = @_;
	return [ $name, 'bash', $psql_consumer, '-d', $connstr, '-n', $name,
		'-g', $group, @opt ];
}

sub py_consumer
{
	my ($name, $group, @opt) = @_;
	return [ $name, 'python3', $py_consumer, '--dsn', $connstr,
		'--name', $name, '--group', $group, '--results', 'processed', @opt ];
}

sub py_listener
{
	my ($name, $group, @opt) = @_;
	return [ $name, 'python3', $py_listener, '--dsn', $connstr,
		'--name', $name, '--group', $group, '--results', 'processed', @opt ];
}

sub note_workers
{
	my ($label) = @_;
	note "$label, blocks stored per worker: "
	  . join(', ',
		split /\n/,
		$node->safe_psql(
			'postgres',
			"SELECT worker || ': ' || count(DISTINCT block_id) FROM processed GROUP BY worker ORDER BY worker"
		));
	return;
}

# Run the consumers side by side until they exit; each must exit 0 having
# seen the group drained; then every id of the group ($query) must have been
# stored exactly once.  Returns the consumers (their output in {out}).
sub drain_with
{
	my ($label, $group, $n_blocks, @cmds) = @_;
	$node->safe_psql('postgres', 'TRUNCATE processed');
	my @c = map { start_prog(@$_) } @cmds;
	for my $c (@c)
	{
		is(finish_prog($c), 0, "$label: $c->{name} exits with status 0");
		like($c->{out}, qr/is drained/, "$label: $c->{name} saw the group drained");
	}
	note_workers($label);
	check_exactly_once($node, $group, $query, $n_ids, $n_blocks, $label);
	return @c;
}

# Start one consumer on a group of 100,000 ids in blocks of 500 (made by the
# consumer's own --query / -q), wait until it has stored a block, send it
# SIGTERM: it must exit 0 and leave every block whole, stored or pending.
sub stop_with_sigterm
{
	my ($label, $group, $cmd) = @_;
	$node->safe_psql('postgres', 'TRUNCATE processed');
	my $c = start_prog(@$cmd);
	ok( $node->poll_query_until(
			'postgres', 'SELECT count(*) > 0 FROM processed'),
		"$label: the consumer stored a block");
	$c->{h}->signal('TERM');
	is(finish_prog($c), 0, "$label: exit status 0 after SIGTERM");
	like($c->{out}, qr/stopped; this worker stored \d+ blocks/,
		"$label: it says that it stopped");
	check_consistent($node, $group, $label);
	my $st = group_stats($node, $group);
	ok( $st->{done} > 0 && $st->{done} < $st->{total_blocks},
		"$label: it stopped before the end ($st->{done} of $st->{total_blocks} blocks done)"
	);
	is($st->{claimed}, 0, "$label: it left no block claimed");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(DISTINCT block_id) || '|' || count(*) FROM processed}),
		"$st->{done}|" . ($st->{done} * 500),
		"$label: the blocks done are the blocks stored, 500 ids each");
	return;
}

# Start two consumers on a group of 20,000 ids in blocks of 250, restart the
# server once one of them has stored a block, and let them drain the group.
sub restart_during
{
	my ($label, $group, $lost_re, @cmds) = @_;
	$node->safe_psql('postgres', 'TRUNCATE processed');
	my @c = map { start_prog(@$_) } @cmds;
	ok( $node->poll_query_until(
			'postgres', 'SELECT count(*) > 0 FROM processed'),
		"$label: the consumers stored a block");
	$node->restart;
	for my $c (@c)
	{
		is(finish_prog($c), 0, "$label: $c->{name} exits with status 0");
		like($c->{out}, qr/is drained/, "$label: $c->{name} saw the group drained");
	}
	ok((grep { $_->{out} =~ $lost_re } @c),
		"$label: the consumers noticed the restart and reconnected");
	note_workers($label);
	check_exactly_once($node, $group, $query, $n_ids, 80, $label);
	return;
}

# ---------------------------------------------------------------------------
# examples/psql/consumer.sh: two consumers store with -t, one with -f.
drain_with(
	'psql consumer.sh',
	'ex_psql', 40,
	psql_consumer('psql1', 'ex_psql', '-t', 'processed', '-q', $query, '-b', 500),
	psql_consumer('psql2', 'ex_psql', '-t', 'processed', '-q', $query, '-b', 500),
	psql_consumer('psql3', 'ex_psql', '-f', 'store_block', '-q', $query, '-b', 500));

# Bad usage and a group that does not exist.
{
	my $c = start_prog(@{ psql_consumer('psql_nogroup', 'no_such_group', '-t', 'processed') });
	is(finish_prog($c) >> 8, 1, 'consumer.sh: a missing group is exit status 1');
	like($c->{out}, qr/group no_such_group does not exist/, '... and says so');
	$c = start_prog(@{ psql_consumer('psql_usage', 'ex_psql') });
	is(finish_prog($c) >> 8, 2, 'consumer.sh without -t or -f: exit status 2');
}

stop_with_sigterm(
	'psql consumer.sh, SIGTERM',
	'stop_psql',
	psql_consumer('psql_stop', 'stop_psql', '-t', 'processed', '-q', $big_query, '-b', 500, '-s', '0.05'));

restart_during(
	'psql consumer.sh, server restart',
	'restart_psql',
	qr/no connection to the server; trying again/,
	map {
		psql_consumer("psql_r$_", 'restart_psql', '-t', 'processed', '-q', $query,
			'-b', 250, '-s', '0.05')
	} 1 .. 2);

# ---------------------------------------------------------------------------
# examples/python/consumer.py
SKIP:
{
	skip $no_psycopg, 1 unless $have_psycopg;

	for my $mode (qw(transaction lease advisory))
	{
		my $group = "ex_py_$mode";
		my @fail = $mode eq 'transaction' ? () : ('--simulate-failures', 3, '--retry-after', '0');
		my @c = drain_with(
			"consumer.py --mode $mode",
			$group, 40,
			map {
				py_consumer("py_${mode}_$_", $group, '--mode', $mode, '--query', $query,
					'--block-size', 500, @fail)
			} 1 .. 3);
		next if $mode eq 'transaction';
		my $out = join('', map { $_->{out} } @c);
		my $failed = () = $out =~ /attempt 1 failed: simulated failure/g;
		my $retried = () = $out =~ /ids stored \(attempt 2\)/g;
		ok($failed > 0, "consumer.py --mode $mode: $failed first attempts failed (pgq.fail)");
		is($retried, $failed, "consumer.py --mode $mode: each of them was stored at attempt 2");
		is( $node->safe_psql(
				'postgres', "SELECT failed FROM pgq.group_stats WHERE group_name = '$group'"),
			0, "consumer.py --mode $mode: no block dead-lettered");
	}

	for my $mode (qw(transaction lease advisory))
	{
		stop_with_sigterm(
			"consumer.py --mode $mode, SIGTERM",
			"stop_py_$mode",
			py_consumer("py_stop_$mode", "stop_py_$mode", '--mode', $mode,
				'--query', $big_query, '--block-size', 500, '--work-ms', 50));
	}

	for my $mode (qw(transaction lease advisory))
	{
		# a short lease: should a claim's reply be lost in the restart, its
		# block comes back soon
		my @lease = $mode eq 'lease' ? ('--lease', '5 seconds') : ();
		restart_during(
			"consumer.py --mode $mode, server restart",
			"restart_py_$mode",
			qr/lost the connection|cannot connect/,
			map {
				py_consumer("py_r${mode}_$_", "restart_py_$mode", '--mode', $mode,
					'--query', $query, '--block-size', 250, '--work-ms', 50, @lease)
			} 1 .. 2);
	}

	# work that takes longer than the lease: extended as it goes
	{
		$node->safe_psql('postgres', 'TRUNCATE processed');
		my $c = start_prog(
			@{
				py_consumer('py_extend', 'ex_extend', '--mode', 'lease',
					'--query', 'SELECT g FROM generate_series(1, 4) g',
					'--block-size', 2, '--lease', '1 second', '--work-ms', 1500)
			});
		is(finish_prog($c), 0, 'consumer.py, long work in lease mode: exit status 0');
		like($c->{out}, qr/block \d+: extended the lease/, '... the lease was extended');
		is( $node->safe_psql(
				'postgres', 'SELECT count(*), count(DISTINCT id) FROM processed'),
			'4|4', '... and the 4 ids were stored once each');
	}

	# a group in another mode than asked
	{
		my $c = start_prog(@{ py_consumer('py_wrongmode', 'ex_py_lease', '--mode', 'advisory') });
		is(finish_prog($c) >> 8, 1, 'consumer.py --mode advisory on a lease group: exit status 1');
		like($c->{out}, qr/is in lease mode, not advisory/, '... and says why');
	}
}

# ---------------------------------------------------------------------------
# examples/python/listen_consumer.py, with pgq.notify = on for the cluster.
SKIP:
{
	skip $no_psycopg, 1 unless $have_psycopg;

	$node->safe_psql('postgres',
		'ALTER SYSTEM SET pgq.notify = on; SELECT pg_reload_conf();');
	ok( $node->poll_query_until(
			'postgres', "SELECT current_setting('pgq.notify') = 'on'"),
		'pgq.notify is on');

	# workers started before their group exists
	$node->safe_psql('postgres', 'TRUNCATE processed');
	my @l = map { start_prog(@{ py_listener("listen$_", 'ex_listen', '--recheck', 3600) }) } 1 .. 3;
	for my $l (@l)
	{
		ok(output_until($l, qr/waiting for group ex_listen to be created/),
			"listen_consumer.py: $l->{name} waits for the group");
	}

	# a sleeping worker stops at once on SIGTERM (it looks again only hourly)
	my $stopped = pop @l;
	$stopped->{h}->signal('TERM');
	is(finish_prog($stopped), 0, 'listen_consumer.py: a sleeping worker exits 0 on SIGTERM');
	like($stopped->{out}, qr/stopped/, '... and says so');

	$node->safe_psql('postgres',
		"SELECT pgq.create_group('ex_listen', '$query', block_size => 500)");
	for my $l (@l)
	{
		is(finish_prog($l), 0, "listen_consumer.py: $l->{name} exits with status 0");
		like($l->{out}, qr/is drained/, "listen_consumer.py: $l->{name} saw the group drained");
	}
	note_workers('listen_consumer.py');
	check_exactly_once($node, 'ex_listen', $query, $n_ids, 40, 'listen_consumer.py');

	# lease mode: every block leased by another session, which then releases
	# them all in one statement (one notification)
	$node->safe_psql('postgres', 'TRUNCATE processed');
	$node->safe_psql('postgres',
		"SELECT pgq.create_group('ex_listen_lease', '$query', block_size => 500, mode => 'lease')");
	my $holder = new_session($node, 'holder');
	is($holder->query_ok("SELECT count(*) FROM pgq.claim('ex_listen_lease', max_blocks => 40);"),
		40, 'a session leases all 40 blocks');
	@l = map { start_prog(@{ py_listener("listen_lease$_", 'ex_listen_lease', '--recheck', 3600) }) } 1 .. 2;
	for my $l (@l)
	{
		ok(output_until($l, qr/nothing claimable in group ex_listen_lease/),
			"listen_consumer.py, lease: $l->{name} finds nothing to claim and waits");
	}
	is( $holder->query_ok(
			q{SELECT count(*) FROM (
		    SELECT pgq.release(b.block_id, attempt => b.attempt) AS ok
		    FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
		    WHERE g.group_name = 'ex_listen_lease' AND b.state = 'c') r
		  WHERE ok;}),
		40, 'the session releases them');
	for my $l (@l)
	{
		is(finish_prog($l), 0, "listen_consumer.py, lease: $l->{name} exits with status 0");
		like($l->{out}, qr/is drained/, "listen_consumer.py, lease: $l->{name} saw the group drained");
	}
	note_workers('listen_consumer.py, lease');
	check_exactly_once($node, 'ex_listen_lease', $query, $n_ids, 40, 'listen_consumer.py, lease');
	$holder->close;
}

$node->stop;
done_testing();
