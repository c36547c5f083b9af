# Background worker slots are shared between roles: a role with nothing but
# USAGE on schema pgq that starts asynchronous creations of a query that
# sleeps, with pgq.materialize_timeout = 0, and disconnects, gets at most
# pgq.max_materializations_per_role of them running; other roles' creations
# and pgq's maintenance still get slots; and an administrator can bound how
# long one runs (pgq.max_materialize_timeout), for every role or for one.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('quota_workers');
$node->init;
# passes only when woken (the interval is long, but maintenance is on)
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 3600
max_worker_processes = 8
max_parallel_workers_per_gather = 0
max_logical_replication_workers = 0
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;
});

my $SLEEPER = q{SELECT g FROM generate_series(1, 2) g WHERE pg_sleep(3600) IS NULL};

# alice starts three creations that would run for an hour each, and leaves
my ($ret, $out, $err) = $node->psql('postgres', qq{
	SET pgq.materialize_timeout = 0;
	SELECT pgq.create_group('s1', \$q\$$SLEEPER\$q\$, 1, async => true);
	SELECT pgq.create_group('s2', \$q\$$SLEEPER\$q\$, 1, async => true);
	SELECT pgq.create_group('s3', \$q\$$SLEEPER\$q\$, 1, async => true);},
	extra_params => [ '-U', 'alice' ]);
like($err, qr/too many asynchronous materializations of role "alice" are running/,
	"alice's third concurrent creation is refused");
like($err, qr/pgq\.max_materializations_per_role/, 'naming the setting');
is($node->safe_psql('postgres', q{
		SELECT string_agg(group_name, ',' ORDER BY group_name) FROM pgq.groups}),
	's1,s2', 'the first two run on after alice disconnected');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 2 FROM pg_stat_activity
		WHERE backend_type = 'pgq materialize reader' AND wait_event = 'PgSleep'}),
	'their readers sleep');

# another role still gets the slots it needs
is( $node->safe_psql('postgres',
		q{SELECT pgq.create_group('b1', 'SELECT 1', 1, async => true)},
		extra_params => [ '-U', 'bob' ]),
	't', "bob's asynchronous creation starts");
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'ready' FROM pgq.group_stats WHERE group_name = 'b1'}),
	"and bob's group is ready");

# and so does a maintenance pass
my $passes = q{SELECT coalesce(substring(query from 'passes done: (\d+)')::int, 0)
	FROM pg_stat_activity WHERE backend_type = 'pgq launcher'};
ok($node->poll_query_until('postgres', "SELECT ($passes) >= 1"), 'a first pass ran');
my $before = $node->safe_psql('postgres', $passes);
$node->safe_psql('postgres', 'SELECT pgq.wake_maintenance()');
ok($node->poll_query_until('postgres', "SELECT ($passes) > $before"),
	'a maintenance pass still starts');

# an administrator bounds how long alice's materializations may run
$node->safe_psql('postgres', q{
	SELECT pgq.drop_group('s1'), pgq.drop_group('s2');
	ALTER ROLE alice SET pgq.max_materialize_timeout = '100ms';});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		WHERE backend_type LIKE 'pgq materialize%'}),
	'the dropped groups\' workers exit');
($ret, $out, $err) = $node->psql('postgres', qq{
	SET pgq.max_materialize_timeout = 0;},
	extra_params => [ '-U', 'alice' ]);
like($err, qr/permission denied to set parameter "pgq\.max_materialize_timeout"/,
	'alice cannot lift the bound herself');
$node->safe_psql('postgres', qq{
	SET pgq.materialize_timeout = 0;
	SELECT pgq.create_group('s4', \$q\$$SLEEPER\$q\$, 1, async => true);},
	extra_params => [ '-U', 'alice' ]);
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'failed' FROM pgq.group_stats WHERE group_name = 's4'}),
	"alice's creation without a timeout is canceled at the bound");
like( $node->safe_psql('postgres',
		q{SELECT error FROM pgq.group_stats WHERE group_name = 's4'}),
	qr/statement timeout/, 'by the statement timeout');

done_testing();
