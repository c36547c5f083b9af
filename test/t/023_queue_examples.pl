
# The queue examples under examples/python/, run as a user would run them:
# separate programs, several at once, each given the server's connection
# string.
#
# - tasks.py: three workers (--until-empty) are started before the queue
#   exists, then "tasks.py produce --count 100 --poison" creates the queue,
#   enqueues 100 tasks (one of which fails on every attempt) and waits for
#   their results.  The producer must report "done 99, dead 1" and exit 0,
#   the workers must exit 0, and the queue must hold 99 done and 1 dead items.
#   A second run on the same queue enqueues 100 tasks of its own (its keys
#   name its run) and gets its own results, which new workers compute; the
#   second run taken up again (--run) enqueues nothing and gets the same
#   results at once.
# - log_processor.py: 30 file names delivered twice, then an overlapping
#   set; two workers (--until-empty) record each file in processed_logs in
#   the transaction that completes its item: exactly 30 rows, one per file,
#   and nothing left pending.
# - tasks.py worker: reconnects after a server restart; exits 0 on SIGTERM.
#
# The examples need psycopg 3 (Debian: python3-psycopg); without it the test
# is skipped.  Waits are for observed conditions (a process exit); the
# harness timeouts only guard against hangs.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $examples = "$FindBin::RealBin/../../examples/python";
my $tasks = "$examples/tasks.py";
my $logp = "$examples/log_processor.py";

if (system('python3 -c "import psycopg" >/dev/null 2>&1') != 0)
{
	plan skip_all =>
	  'python3 cannot import psycopg (Debian: apt-get install python3-psycopg)';
}

my $node = PostgreSQL::Test::Cluster->new('queue_examples');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0\n");
$node->start;
my $connstr = $node->connstr('postgres');
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

sub queue_counts
{
	my ($queue) = @_;
	return $node->safe_psql('postgres',
		"SELECT pending, scheduled, running, done, dead FROM pgq.queue_stats WHERE queue_name = '$queue'"
	);
}

# ---------------------------------------------------------------------------
# tasks.py
{
	# the workers wait for the queue to be created, then for its tasks; the
	# poisoned task is retried at once (--retry-after 0), then dead
	my @w = map {
		start_prog("worker$_", 'python3', $tasks, 'worker', '--dsn', $connstr,
			'--queue', 'ex_tasks', '--until-empty', '--retry-after', '0')
	} 1 .. 3;
	my $p = start_prog('producer', 'python3', $tasks, 'produce', '--dsn',
		$connstr, '--queue', 'ex_tasks', '--count', 100, '--poison');
	is(finish_prog($p), 0, 'tasks.py produce: exit status 0');
	like($p->{out}, qr/^done 99, dead 1$/m, 'tasks.py produce: done 99, dead 1');
	for my $w (@w)
	{
		is(finish_prog($w), 0, "tasks.py worker: $w->{name} exits with status 0");
		like($w->{out}, qr/queue ex_tasks is empty/,
			"tasks.py worker: $w->{name} saw the queue empty");
	}
	my $out = join('', map { $_->{out} } @w);
	my $done = () = $out =~ /: done \(attempt/g;
	my $failed = () = $out =~ /attempt \d failed: /g;
	is($done, 99, 'tasks.py workers: 99 tasks completed between them');
	is($failed, 2, 'tasks.py workers: the poisoned task failed twice (max_attempts 2)');
	is(queue_counts('ex_tasks'), '0|0|0|99|1', 'tasks.py: the queue has 99 done, 1 dead');
	my $right_sums = q{
		SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
		WHERE g.group_name = 'ex_tasks' AND i.state = 'd'
		  AND i.result = jsonb_build_object('sum',
		                     3 * substring(i.key FROM '/task-(\d+)$')::int)};
	is($node->safe_psql('postgres', $right_sums),
		99, 'tasks.py: each done task holds its right sum');
	my ($run1) = $p->{out} =~ /run (\S+): enqueued tasks/;
	ok(defined $run1, 'tasks.py produce: names its run');

	# a second run on the same queue: tasks of its own, done by new workers
	@w = map {
		start_prog("worker2_$_", 'python3', $tasks, 'worker', '--dsn', $connstr,
			'--queue', 'ex_tasks', '--until-empty', '--retry-after', '0')
	} 1 .. 2;
	my $p2 = start_prog('producer, second run', 'python3', $tasks, 'produce',
		'--dsn', $connstr, '--queue', 'ex_tasks', '--count', 100, '--poison');
	is(finish_prog($p2), 0, 'tasks.py produce, second run: exit status 0');
	like($p2->{out}, qr/^done 99, dead 1$/m, 'tasks.py produce, second run: done 99, dead 1');
	my ($run2) = $p2->{out} =~ /run (\S+): enqueued tasks/;
	ok(defined $run2 && $run2 ne $run1, 'tasks.py produce: the second run has another id');
	is(finish_prog($_), 0, "tasks.py worker: $_->{name} exits with status 0") for @w;
	$out = join('', map { $_->{out} } @w);
	$done = () = $out =~ /: done \(attempt/g;
	is($done, 99, "tasks.py workers: the second run's 99 tasks were computed again");
	is(queue_counts('ex_tasks'), '0|0|0|198|2',
		'tasks.py: the queue holds both runs: 198 done, 2 dead');
	is($node->safe_psql('postgres', $right_sums),
		198, 'tasks.py: each done task of both runs holds its right sum');
	is( $node->safe_psql('postgres', q{
			SELECT count(DISTINCT split_part(key, '/', 1)) FROM pgq.items}),
		2, 'tasks.py: the keys name two runs');

	# the second run taken up again: nothing new, the same results at once
	my $p3 = start_prog('producer, second run again', 'python3', $tasks,
		'produce', '--dsn', $connstr, '--queue', 'ex_tasks', '--count', 100,
		'--poison', '--run', $run2);
	is(finish_prog($p3), 0, 'tasks.py produce --run: exit status 0');
	like($p3->{out}, qr/^done 99, dead 1$/m, 'tasks.py produce --run: done 99, dead 1');
	is(queue_counts('ex_tasks'), '0|0|0|198|2', 'tasks.py produce --run: enqueued nothing');
}

# ---------------------------------------------------------------------------
# log_processor.py
{
	my @files = map { "/nonexistent/logs/app-$_.log" } 1 .. 30;
	my @deliveries = (
		[ 'first delivery', @files ],
		[ 'redelivery', @files ],
		[ 'overlapping redelivery', @files[ 10 .. 29 ], @files[ 0 .. 4 ] ]);
	for my $d (@deliveries)
	{
		my ($label, @f) = @$d;
		my $c = start_prog($label, 'python3', $logp, '--dsn', $connstr,
			'--queue', 'ex_logs', '--deliver', @f);
		is(finish_prog($c), 0, "log_processor.py --deliver, $label: exit status 0");
		my $new = $label eq 'first delivery' ? 30 : 0;
		like($c->{out}, qr/delivered ${\ scalar @f} files, $new new/,
			"log_processor.py --deliver, $label: $new new");
	}
	is(queue_counts('ex_logs'), '30|0|0|0|0', 'log_processor.py: 30 items pending');

	my @w = map {
		start_prog("logworker$_", 'python3', $logp, '--dsn', $connstr,
			'--queue', 'ex_logs', '--until-empty')
	} 1 .. 2;
	for my $w (@w)
	{
		is(finish_prog($w), 0, "log_processor.py: $w->{name} exits with status 0");
		like($w->{out}, qr/queue ex_logs is empty/,
			"log_processor.py: $w->{name} saw the queue empty");
	}
	is( $node->safe_psql(
			'postgres',
			'SELECT count(*), count(DISTINCT file), sum(lines) FROM processed_logs'),
		'30|30|' . (30 * length('/nonexistent/logs/app-1.log') + 21),
		'log_processor.py: 30 files recorded, each once, with their "lines"');
	is(queue_counts('ex_logs'), '0|0|0|30|0',
		'log_processor.py: nothing pending, 30 items done');

	# delivered again after processing: still nothing new
	my $c = start_prog('late redelivery', 'python3', $logp, '--dsn', $connstr,
		'--queue', 'ex_logs', '--deliver', @files[ 0 .. 9 ]);
	is(finish_prog($c), 0, 'log_processor.py --deliver, late redelivery: exit status 0');
	like($c->{out}, qr/delivered 10 files, 0 new/,
		'log_processor.py --deliver, late redelivery: nothing new');
	is(queue_counts('ex_logs'), '0|0|0|30|0', 'log_processor.py: still 30 items done');
}

# ---------------------------------------------------------------------------
# tasks.py worker: a server restart while it waits, then SIGTERM while it
# waits for tasks.
{
	my $w = start_prog('restarted', 'python3', $tasks, 'worker', '--dsn',
		$connstr, '--queue', 'ex_restart', '--until-empty');
	ok(output_until($w, qr/waiting for queue ex_restart to be created/),
		'tasks.py worker: waits for its queue');
	$node->restart;
	my $p = start_prog('producer2', 'python3', $tasks, 'produce', '--dsn',
		$connstr, '--queue', 'ex_restart', '--count', 10);
	is(finish_prog($p), 0, 'tasks.py produce after a restart: exit status 0');
	like($p->{out}, qr/^done 10, dead 0$/m, '... done 10, dead 0');
	is(finish_prog($w), 0, 'tasks.py worker across a restart: exit status 0');
	like($w->{out}, qr/lost the connection|cannot connect/,
		'... it noticed the restart and reconnected');

	$w = start_prog('sigterm', 'python3', $tasks, 'worker', '--dsn', $connstr,
		'--queue', 'ex_restart');
	ok(output_until($w, qr/waiting for tasks/), 'tasks.py worker: waits for tasks');
	$w->{h}->signal('TERM');
	is(finish_prog($w), 0, 'tasks.py worker: exit status 0 after SIGTERM');
	like($w->{out}, qr/stopped; this worker completed 0 tasks/, '... and says so');
}

$node->stop;
done_testing();
