
# The driver examples under examples/drivers/, and what docs/drivers.md says
# about each driver, checked by running them against a server:
#
# - each worker script drains query groups in two or three claim modes, two
#   workers at a time (two processes, or two workers sharing one connection
#   pool in one process), storing every id exactly once;
# - each drains a lease-mode queue of 30 items {"n": N}, completing each
#   with the result {"square": N*N}, exactly once;
# - "traps" runs what bit users of that driver and prints one line per
#   trap, which is checked here: pgjdbc's setString for an interval fails
#   with 42883 (and the cast, PGInterval and stringtype=unspecified work); a
#   fetch size, cursor or server-side cursor of 1 row over a claim of 5
#   blocks claims all 5; asyncpg wants a timedelta and cannot decode a
#   pgq.claimed row with a text jsonb codec; node-postgres's query_timeout
#   leaves the claim waiting in the server (the next query times out too,
#   an item is leased to nobody) where statement_timeout cancels it;
#   advisory mode through a pool's query() fails with 55000; postgres.js's
#   sql.array() types a bigint[] from its first element; psycopg sends a
#   list of str untyped, which pgq.claim takes for one group name unless
#   it is passed as group_names =>.
#
# pgjdbc (libpostgresql-jdbc-java, and java), asyncpg (python3-asyncpg) and
# psycopg (python3-psycopg) are Debian packages that test/run-tests.sh
# installs: under CI=true a missing one fails the test; otherwise its part is
# skipped.  node-postgres (pg) and postgres.js (postgres) come from npm only:
# their parts run when node finds them (NODE_PATH=.../node_modules), and are
# skipped otherwise, in CI too.
#
# pgjdbc speaks TCP only: the server listens on 127.0.0.1.  The scripts take
# the server from PGHOST, PGPORT, PGDATABASE.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $dir = "$FindBin::RealBin/../../examples/drivers";
my $jar = '/usr/share/java/postgresql.jar';
my $ci = ($ENV{CI} // '') eq 'true';

sub runs_ok { return system("@_ >/dev/null 2>&1") == 0; }

# driver => [whether it is there, what to install, required in CI]
my %driver = (
	pgjdbc => [
		-r $jar && runs_ok('javac', '-version') && runs_ok('java', '-version'),
		'apt-get install libpostgresql-jdbc-java default-jdk-headless', 1
	],
	asyncpg => [
		runs_ok('python3', '-c', '"import asyncpg"'),
		'apt-get install python3-asyncpg', 1
	],
	psycopg => [
		runs_ok('python3', '-c', '"import psycopg"'),
		'apt-get install python3-psycopg', 1
	],
	'node-postgres' => [
		runs_ok('node', '-e', q{"require('pg')"}),
		'npm install pg, then NODE_PATH=.../node_modules', 0
	],
	'postgres.js' => [
		runs_ok('node', '-e', q{"require('postgres')"}),
		'npm install postgres, then NODE_PATH=.../node_modules', 0
	],
);

my $node = PostgreSQL::Test::Cluster->new('drivers');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0\n"
	  . "listen_addresses = '127.0.0.1'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE src AS SELECT g AS id FROM generate_series(1, 2000) g;
	CREATE TABLE processed (id bigint NOT NULL, block_id bigint NOT NULL);
});
my $query = 'SELECT id FROM src ORDER BY id';    # 2000 ids, 20 blocks of 100

# the scripts' connection: TCP, the cluster's port, the OS user
$ENV{PGHOST} = '127.0.0.1';
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
delete $ENV{$_} for qw(PGUSER PGSERVICE PGOPTIONS);

# Compile PgqWorker.java once for the workers; "traps" runs it as a user
# would, as a single source file.
my $classes;
if ($driver{pgjdbc}[0])
{
	$classes = tempdir(CLEANUP => 1);
	system('javac', '-d', $classes, '-cp', $jar, "$dir/PgqWorker.java") == 0
	  or $driver{pgjdbc}[0] = 0;
}

# how to run each driver's script
my %cmd = (
	pgjdbc => sub {
		return $_[0] eq 'traps'
		  ? [ 'java', '-cp', $jar, "$dir/PgqWorker.java", @_ ]
		  : [ 'java', '-cp', "$jar:$classes", 'PgqWorker', @_ ];
	},
	asyncpg => sub { return [ 'python3', "$dir/asyncpg_worker.py", @_ ] },
	psycopg => sub { return [ 'python3', "$dir/psycopg_worker.py", @_ ] },
	'node-postgres' => sub { return [ 'node', "$dir/node_pg_worker.js", @_ ] },
	'postgres.js' => sub { return [ 'node', "$dir/postgres_js_worker.js", @_ ] },
);

# the claim modes each script handles; the scripts whose one process runs
# two workers on a pool
my %modes = (
	pgjdbc => [qw(transaction lease)],
	psycopg => [qw(transaction lease)],
	asyncpg => [qw(transaction lease advisory)],
	'node-postgres' => [qw(transaction lease advisory)],
	'postgres.js' => [qw(transaction lease advisory)],
);
my %pooled = (asyncpg => 1, 'node-postgres' => 1, 'postgres.js' => 1);

# Run the command(s) to their end: each must exit 0; returns their output.
sub run_all
{
	my ($label, @cmds) = @_;
	my $n = 0;
	my @c = map { start_prog("$label #" . ++$n, @$_) } @cmds;
	my $out = '';
	for my $c (@c)
	{
		is(finish_prog($c), 0, "$c->{name}: exit status 0");
		$out .= $c->{out};
	}
	return $out;
}

# Two workers of the driver on a new group of the mode: every id once.
sub drain_group
{
	my ($drv, $mode) = @_;
	(my $group = "${drv}_$mode") =~ s/\W/_/g;
	$node->safe_psql('postgres', 'TRUNCATE processed');
	$node->safe_psql('postgres',
		"SELECT pgq.create_group('$group', '$query', block_size => 100, mode => '$mode')");
	my @cmds = $pooled{$drv}
	  ? ($cmd{$drv}->('group', $group, 2))
	  : ($cmd{$drv}->('group', $group), $cmd{$drv}->('group', $group));
	my $out = run_all("$drv, $mode group", @cmds);
	like($out, qr/group $group is drained/, "$drv, $mode group: the workers saw it drained");
	check_exactly_once($node, $group, $query, 2000, 20, "$drv, $mode group");
	return;
}

# Workers of the driver on a lease-mode queue of 30 items: each done once,
# with its result.
sub drain_queue
{
	my ($drv) = @_;
	(my $queue = "${drv}_queue") =~ s/\W/_/g;
	$node->safe_psql('postgres', 'TRUNCATE processed');
	$node->safe_psql(
		'postgres', qq{
		SELECT pgq.create_queue('$queue');
		SELECT pgq.enqueue_many('$queue',
		    (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 30) g));});
	my @cmds = $pooled{$drv}
	  ? ($cmd{$drv}->('queue', $queue, 2))
	  : ($cmd{$drv}->('queue', $queue), $cmd{$drv}->('queue', $queue));
	my $out = run_all("$drv, queue", @cmds);
	like($out, qr/queue $queue is empty/, "$drv, queue: the workers saw it empty");
	is( $node->safe_psql(
			'postgres', q{
		SELECT count(*), count(DISTINCT id), min(id), max(id) FROM processed}),
		'30|30|1|30',
		"$drv, queue: the 30 items stored once each");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FILTER (WHERE i.state = 'd'
		                          AND i.result = jsonb_build_object('square', (i.payload->>'n')::int ^ 2)),
		       count(*) FILTER (WHERE p.block_id IS NOT NULL AND (i.payload->>'n')::bigint = p.id)
		FROM pgq.items i JOIN pgq.groups g USING (group_id)
		LEFT JOIN processed p ON p.block_id = i.item_id
		WHERE g.group_name = '$queue'}),
		'30|30',
		"$drv, queue: each item done with its result, stored with its id");
	return;
}

# The driver's traps: each line that the script prints must match.
sub traps
{
	my ($drv, @expect) = @_;
	my $out = run_all("$drv, traps", $cmd{$drv}->('traps'));
	for my $e (@expect)
	{
		like($out, $e->[1], "$drv, traps: $e->[0]");
	}
	return;
}

my %traps = (
	pgjdbc => [
		[
			'setString for an interval fails with 42883',
			qr/^setString interval: 42883 ERROR: function pgq\.claim\(character varying, wait => character varying\) does not exist$/m
		],
		[ 'a ?::interval cast works', qr/^cast \?::interval: claimed 1$/m ],
		[ 'PGInterval works', qr/^PGInterval: claimed 1$/m ],
		[ 'stringtype=unspecified works', qr/^stringtype=unspecified: claimed 1$/m ],
		[
			'a fetch size of 1 claims all 5 blocks',
			qr/^fetch size 1, max_blocks 5: read 1 row, 5 blocks claimed$/m
		],
	],
	asyncpg => [
		[
			'an interval as a str is refused',
			qr/^interval as str: DataError: invalid input for query argument \$2: '1 second'/m
		],
		[
			'a text jsonb codec cannot decode a pgq.claimed row',
			qr/^text jsonb codec, SELECT pgq\.claim\(\.\.\.\): UnsupportedClientFeatureError: cannot decode type "pgq"\."claimed": text encoding of composite types is not supported$/m
		],
		[ '... before the claim ran', qr/^\.\.\. claimed meanwhile: 0$/m ],
		[
			'SELECT * decodes with it',
			qr/^text jsonb codec, SELECT \* FROM pgq\.claim\(\.\.\.\): 1 row$/m
		],
		[
			'a cursor of 1 row claims all 5 blocks',
			qr/^cursor, max_blocks 5: read 1 row, 5 blocks claimed$/m
		],
	],
	psycopg => [
		[
			'a server-side cursor of 1 row claims all 5 blocks',
			qr/^server-side cursor, max_blocks 5: read 1 row, 5 blocks claimed$/m
		],
		[ '... and its COMMIT consumes all 5', qr/^\.\.\. and after COMMIT, 5 blocks consumed$/m ],
		[
			'an error in a pipeline ...',
			qr/^pipeline, a lease claim then an error: 22012 division by zero$/m
		],
		[ '... undoes the lease claim before it', qr/^\.\.\. blocks claimed after it: 0$/m ],
		[
			'a list of names passed positionally is one group name',
			qr/^a list, positionally: 42704 group "\{psycopg_trap_a,psycopg_trap_b\}" does not exist$/m
		],
		[
			'... and as group_names => a list of several',
			qr/^a list, as group_names => %s: claimed from psycopg_trap_b$/m
		],
	],
	'node-postgres' => [
		[
			'query_timeout gives up on the client side',
			qr/^query_timeout 500 ms, wait 3 s: the client gave up: Query read timeout$/m
		],
		[
			'... the next query times out too',
			qr/^query_timeout: the next query failed too: Query read timeout/m
		],
		[ '... and an item is leased to nobody', qr/^query_timeout: items leased to nobody: 1$/m ],
		[
			'statement_timeout cancels the claim in the server',
			qr/^statement_timeout 500 ms, wait 3 s: 57014 canceling statement due to statement timeout$/m
		],
		[ '... and nothing is leased', qr/^statement_timeout: items leased to nobody: 0$/m ],
		[
			'advisory mode through pool.query() fails with 55000',
			qr/^advisory through pool\.query\(\): 55000 worker \d+ is not registered in this session$/m
		],
	],
	'postgres.js' => [
		[
			'sql.array() of bigint strings is text[]',
			qr/^sql\.array\(ids\): 42883 function pgq\.complete_many\(text\[\], text\[\]\) does not exist$/m
		],
		[
			'sql.array(ids, 20) works',
			qr/^sql\.array\(ids, 20\), sql\.array\(attempts, 23\): completed 2$/m
		],
		[
			'a cursor of 1 row claims all 5 blocks',
			qr/^cursor\(1\), max_blocks 5: read 1 row, 5 blocks claimed$/m
		],
		[
			'advisory mode through the pool fails with 55000',
			qr/^advisory through the pool: 55000 worker \d+ is not registered in this session$/m
		],
	],
);

for my $drv ('pgjdbc', 'asyncpg', 'psycopg', 'node-postgres', 'postgres.js')
{
	my ($have, $install, $required) = @{ $driver{$drv} };
	if (!$have)
	{
		if ($ci && $required)
		{
			fail("$drv is not installed (CI=true: $install)");
		}
		else
		{
			SKIP: { skip "$drv is not installed ($install)", 1; }
		}
		next;
	}
	note "--- $drv";
	traps($drv, @{ $traps{$drv} });
	drain_group($drv, $_) for @{ $modes{$drv} };
	drain_queue($drv);
}

$node->stop;
done_testing();
