# A role that keeps a transaction open on rows of its own groups and items
# must not hold up the maintenance pass, which serves every role and every
# database: the pass skips what is locked, goes on with the rest, and takes
# up the skipped rows at a later pass.  The attacker is a role with nothing
# but USAGE on schema pgq.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('quota_maint');
$node->init;
# no passes until everything is in place (see below)
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
pgq.retention = 1
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;
});

sub as_role
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE $role; $sql");
}

# Each role has a drained group, a group whose asynchronous creation failed
# (so its finished_at is set), and a queue with a done item.
my %item;
for my $r (qw(alice bob))
{
	as_role($r, qq{
		SELECT pgq.create_group('${r}_drained', 'SELECT 1', 1);
		BEGIN;
		SELECT count(*) FROM pgq.claim('${r}_drained');
		COMMIT;
		SELECT pgq.create_group('${r}_failed',
		                        'SELECT (g / 0)::bigint FROM generate_series(1, 3) g',
		                        1, async => true);
		SELECT pgq.create_queue('${r}_queue');});
	$item{$r} = as_role($r, "SELECT pgq.enqueue('${r}_queue', '{}')");
	as_role($r, qq{
		BEGIN;
		SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('${r}_queue');
		COMMIT;});
}
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 2 FROM pgq.groups
		WHERE group_name LIKE '%_failed' AND state = 'failed'}),
	'the failed groups failed');

# alice keeps a transaction open that holds locks on the rows of her drained
# group, her failed group and her done item
my $alice = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
$alice->query_safe(qq{
	BEGIN;
	SELECT pgq.pause('alice_drained');
	SELECT pgq.pause('alice_failed');
	SELECT pgq.retry($item{alice});
});

# Passes start now, one a second: the launcher reloads and runs one at once.
$node->safe_psql('postgres', 'ALTER SYSTEM SET pgq.maintenance_interval = 1');
$node->reload;

sub passes
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(substring(query from 'passes done: (\d+)')::int, 0)
		FROM pg_stat_activity WHERE backend_type = 'pgq launcher'});
}

ok( $node->poll_query_until('postgres', q{
		SELECT NOT EXISTS (SELECT FROM pgq.groups WHERE group_name LIKE 'bob_%'
		                   AND kind = 'query')}),
	"bob's drained and failed groups are removed while alice holds her rows");
ok( $node->poll_query_until('postgres', qq{
		SELECT NOT EXISTS (SELECT FROM pgq.items WHERE item_id = $item{bob})}),
	"bob's done item is removed");
my $before = passes();
ok( $node->poll_query_until('postgres', qq{
		SELECT coalesce(substring(query from 'passes done: (\\d+)')::int, 0) >= $before + 2
		FROM pg_stat_activity WHERE backend_type = 'pgq launcher'}),
	'passes go on while alice holds her rows');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(group_name, ',' ORDER BY group_name) FROM pgq.groups
		WHERE group_name LIKE 'alice_%'}),
	'alice_drained,alice_failed,alice_queue',
	"alice's locked groups are skipped");
is($node->safe_psql('postgres', "SELECT count(*) FROM pgq.items WHERE item_id = $item{alice}"),
	'1', "alice's locked item is skipped");

# once she lets go, a later pass removes them
$alice->query_safe('COMMIT');
$alice->quit;
ok( $node->poll_query_until('postgres', q{
		SELECT NOT EXISTS (SELECT FROM pgq.groups WHERE group_name LIKE 'alice_%'
		                   AND kind = 'query')}),
	"alice's groups are removed once her transaction ends");

done_testing();
