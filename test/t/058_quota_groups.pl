# The shared-memory group table (pgq.max_groups) is shared between roles: a
# role that holds claims in flight in many groups gets at most
# pgq.max_groups_per_role entries, so other roles' groups still get one (a
# claim hint, and a claimed count), and the counts that could not be kept
# are known again once the claims that could not be counted end, without a
# restart.  The attacker has nothing but USAGE on schema pgq.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('quota_groups');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
pgq.max_groups = 16
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;
	SET ROLE alice;
	SELECT pgq.create_group('a' || i, 'SELECT g FROM generate_series(1, 5) g', 1)
	FROM generate_series(1, 20) i;
	SET ROLE bob;
	SELECT pgq.create_group('b', 'SELECT g FROM generate_series(1, 5) g', 1);
});

# alice holds a claim in each of her 20 groups, in a transaction left open
my $alice = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
$alice->query_safe('BEGIN');
$alice->query_safe(
	'SELECT count(*) FROM generate_series(1, 20) i, '
	  . q{LATERAL pgq.claim('a' || i) c});
is( $alice->query_safe(q{
		SELECT count(*) FILTER (WHERE claimed IS NOT NULL) FROM pgq.group_stats
		WHERE group_name LIKE 'a%'}),
	'8', 'alice gets half of the table for her 20 busy groups');

my $bob = $node->background_psql('postgres', extra_params => [ '-U', 'bob' ]);
$bob->query_safe('BEGIN');
$bob->query_safe(q{SELECT count(*) FROM pgq.claim('b')});
is($node->safe_psql('postgres',
		q{SELECT claimed FROM pgq.group_stats WHERE group_name = 'b'}),
	'1', "bob's group still gets an entry: its claimed count is known");
$bob->query_safe('COMMIT');
$bob->quit;

# the claims that could not be counted end: every count is known again
$alice->query_safe('COMMIT');
$alice->quit;
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE claimed = 0), count(*) FROM pgq.group_stats}),
	'21|21', 'once they end, every claimed count is known again, without a restart');

done_testing();
