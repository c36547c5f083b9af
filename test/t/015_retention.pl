# Maintenance on demand and retention: CREATE EXTENSION starts a maintenance
# pass at once (not at the next interval, an hour away here), and so does
# pgq.wake_maintenance(); a pass notes when a group drained, and removes
# drained and failed groups, with their blocks, once pgq.retention has
# passed, but never a group that still has work, dead-lettered or not.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('retention');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 3600
pgq.retention = 0
});
$node->start;

my $passes_sql = q{
	SELECT substring(query FROM 'passes done: (\d+)')::int
	FROM pg_stat_activity WHERE backend_type = 'pgq launcher'};
ok($node->poll_query_until('postgres', "SELECT ($passes_sql) >= 1"),
	'the launcher makes its first pass at start');
my $before = $node->safe_psql('postgres', $passes_sql);

$node->safe_psql('postgres', 'CREATE DATABASE d2');
$node->safe_psql('d2', 'CREATE EXTENSION pgq');
ok($node->poll_query_until('postgres', "SELECT ($passes_sql) > $before"),
	'CREATE EXTENSION wakes the launcher for a pass');

is($node->safe_psql('d2', 'BEGIN; SELECT pgq.wake_maintenance(); ROLLBACK'),
	't', 'wake_maintenance says there is a launcher');

# Groups in every state: drained, failed (its query divides by zero),
# pending, and one whose only block is dead-lettered.
$node->safe_psql('d2', q{
	SELECT pgq.create_group('drained', 'SELECT 1', 1);
	BEGIN; SELECT block_id FROM pgq.claim('drained'); COMMIT;
	SELECT pgq.create_group('failed', 'SELECT g / 0 FROM generate_series(1, 3) g', 1,
	                        async => true);
	SELECT pgq.create_group('pending', 'SELECT 1', 1);
	SELECT pgq.create_group('dead', 'SELECT 1', 1, mode => 'lease',
	                        max_attempts => 1);
	SELECT pgq.fail(block_id, 'boom', attempt => attempt) FROM pgq.claim('dead');
});
ok( $node->poll_query_until('d2',
		"SELECT state = 'failed' FROM pgq.groups WHERE group_name = 'failed'"),
	'the async group failed');

# With retention off, a pass notes when groups finished and removes nothing.
$node->safe_psql('d2', 'SELECT pgq.wake_maintenance()');
ok( $node->poll_query_until('d2',
		"SELECT finished_at IS NOT NULL FROM pgq.groups WHERE group_name = 'drained'"),
	'a pass notes when a group drained');
is( $node->safe_psql('d2',
		q{SELECT string_agg(group_name || ':' || (finished_at IS NOT NULL), ',' ORDER BY group_name)
		  FROM pgq.groups}),
	'dead:false,drained:true,failed:true,pending:false',
	'only drained and failed groups count as finished');

$node->append_conf('postgresql.conf', 'pgq.retention = 1');
$node->reload;

# Passes until the finished groups are gone: each poll wakes the launcher at
# its commit, and the groups go once they have been finished for a second.
ok( $node->poll_query_until('d2',
		q{SELECT pgq.wake_maintenance()
		  AND NOT EXISTS (SELECT FROM pgq.groups
		                  WHERE group_name IN ('drained', 'failed'))}),
	'drained and failed groups are removed past the retention period');
is( $node->safe_psql('d2',
		'SELECT string_agg(group_name, \',\' ORDER BY group_name) FROM pgq.groups'),
	'dead,pending', 'groups with work left, dead-lettered or not, stay');
is( $node->safe_psql('d2',
		q{SELECT count(*) FROM pgq.blocks b
		  WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = b.group_id)}),
	'0', 'no block outlives its group');

# A removed group's name is free again: a late create_group makes it anew.
is($node->safe_psql('d2', q{SELECT pgq.create_group('drained', 'SELECT 1', 1)}),
	't', 'a removed name can be created again');

$node->stop;
done_testing();
