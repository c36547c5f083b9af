# The log lines of pgq's background workers say which database and which
# groups they are about: a maintenance pass that removes finished groups
# and items past retention names them (the first ten, then how many
# more), and a failed asynchronous materialization names its group and
# database, in its own line and in the context of the reader's error.
#
# Passes run on demand (pgq.wake_maintenance(); the interval is an hour),
# after the rows they remove were made old enough by hand, so that each
# removal happens in one known pass.  The log is read from the offset where
# each step starts.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('worker_logs');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 3600
pgq.retention = 3600
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE "log db"');
$node->safe_psql('log db', 'CREATE EXTENSION pgq');

# Run one pass over every database and wait for its line in the log.
sub pass_logs
{
	my ($offset, $regexp, $name) = @_;
	$node->safe_psql('log db', 'SELECT pgq.wake_maintenance()');
	my $at = $node->wait_for_log($regexp, $offset);
	ok($at, $name);
	return $at;
}

# Two finished groups (no ids: drained at once) and a queue with done items,
# all finished an hour and a minute ago.  The database's maintenance worker
# makes its first pass when it starts, at a moment of its own: the log offset
# is taken before the rows are made old, and they become old in one
# transaction, so that whichever pass sees them removes all of them.
my $offset = -s $node->logfile;
$node->safe_psql('log db', q{
	SELECT pgq.create_group('alerts b', 'SELECT 1 WHERE false');
	SELECT pgq.create_group('alerts a', 'SELECT 1 WHERE false');
	SELECT pgq.create_group('kept', 'SELECT 1', 1);
	SELECT pgq.create_queue('jobs');
	SELECT pgq.create_queue('mail');
	SELECT pgq.enqueue_many('jobs', ARRAY['{}', '{}']::jsonb[]);
	SELECT pgq.enqueue('mail', '{}');
	SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('jobs', 2);
	SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('mail');
	BEGIN;
	UPDATE pgq.items SET finished_at = now() - interval '61 minutes';
	UPDATE pgq.groups SET finished_at = now() - interval '61 minutes'
	WHERE group_name LIKE 'alerts%';
	COMMIT;
});
pass_logs($offset,
	qr/LOG:  pgq: database "log db": removed 2 finished groups past pgq.retention: "alerts a", "alerts b"\n/,
	'the retention line names the database and the removed groups');
pass_logs($offset,
	qr/LOG:  pgq: database "log db": removed 3 finished items past key retention from queues: "jobs" \(2\), "mail" \(1\)\n/,
	'the retention line names the queues and how many items each lost');
is( $node->safe_psql('log db',
		q{SELECT string_agg(group_name, ',' ORDER BY group_name) FROM pgq.groups}),
	'jobs,kept,mail', 'the finished groups are gone, the queues and the pending group stay');

# Twelve groups at once: the line names ten of them.
$offset = -s $node->logfile;
$node->safe_psql('log db', q{
	BEGIN;
	SELECT pgq.create_group(format('g%s', lpad(g::text, 2, '0')), 'SELECT 1 WHERE false')
	FROM generate_series(1, 12) g;
	UPDATE pgq.groups SET finished_at = now() - interval '61 minutes'
	WHERE group_name LIKE 'g%';
	COMMIT;
});
pass_logs($offset,
	qr/LOG:  pgq: database "log db": removed 12 finished groups past pgq.retention: "g01", "g02", "g03", "g04", "g05", "g06", "g07", "g08", "g09", "g10" and 2 more\n/,
	'a long list of groups is cut after ten names');

# A materialization whose query fails when it runs.
$offset = -s $node->logfile;
$node->safe_psql('log db', q{
	SELECT pgq.create_group('zero', 'SELECT g / 0 FROM generate_series(1, 3) g', 1,
	                        async => true)});
ok( $node->wait_for_log(
		qr/LOG:  pgq: database "log db": materialization of group "zero" failed: division by zero \(SQLSTATE 22012\)\n/,
		$offset),
	'the failed materialization names its database and group');
ok( $node->wait_for_log(
		qr/ERROR:  division by zero\n(?:.*\n)*?.*CONTEXT:  pgq materialization of group "zero" in database "log db"\n/,
		$offset),
	"the reader's error names its group and database in its context");

$node->stop;
done_testing();
