
# The router (pgq_proxy, PL/Proxy) when a call to a partition fails in ways
# that test 110 does not make: a router cluster and one shard cluster that
# holds both partition databases of a two-partition cluster.
#
#  1. An enqueue without a key whose partition committed the item while the
#     router lost the connection (the partition's backend ended in its wait
#     for a synchronous standby that does not exist, after its commit was
#     flushed): the router must not enqueue the item again on another
#     partition, but say that the outcome is unknown (08007).
#
# Every wait is for an observed condition (pg_stat_activity, a session's
# end).  Skipped when PL/Proxy (Debian package postgresql-NN-plproxy) is not
# installed for the server under test.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $router = PostgreSQL::Test::Cluster->new('router');
$router->init;
$router->start;
if ($router->safe_psql('postgres',
		"SELECT count(*) FROM pg_available_extensions WHERE name = 'plproxy'") eq '0')
{
	$router->stop;
	plan skip_all =>
	  'PL/Proxy is not installed for this server: install postgresql-NN-plproxy to run this test';
}

my $PARTS = 2;
my $shard = PostgreSQL::Test::Cluster->new('shard');
$shard->init(allows_streaming => 1);
$shard->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$shard->start;
for my $p (0 .. $PARTS - 1)
{
	$shard->safe_psql('postgres', "CREATE DATABASE part$p");
	$shard->safe_psql('part' . $p,
		"CREATE EXTENSION pgq; SELECT pgq.set_partition($p);");
}
my $servers = join(', ',
	map { "p$_ 'host=" . $shard->host . ' port=' . $shard->port . " dbname=part$_'" }
	  0 .. $PARTS - 1);
$router->safe_psql(
	'postgres', qq{
	CREATE EXTENSION pgq_proxy CASCADE;
	CREATE SERVER pgq FOREIGN DATA WRAPPER plproxy OPTIONS ($servers);
	CREATE USER MAPPING FOR PUBLIC SERVER pgq;
});
is( $router->safe_psql('postgres',
		'SELECT bool_and(reachable AND ids_ok), count(*) FROM pgq_proxy.check()'),
	"t|$PARTS",
	'both partitions are reachable and have their id ranges');

# The items of a queue on each partition, and in all.
sub items
{
	my ($queue) = @_;
	my $n = 0;
	$n += $shard->safe_psql("part$_",
		"SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id) WHERE g.group_name = '$queue'"
	) for 0 .. $PARTS - 1;
	return $n;
}

my $obs = new_session($shard, 'observer');

# The router's connections to the partitions that wait for a synchronous
# standby after their commit, as "datname:pid" rows.
my $syncrep =
  "(SELECT string_agg(datname || ':' || pid, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname LIKE 'part%' AND wait_event = 'SyncRep')";
my $syncrep_sql = "SELECT coalesce($syncrep, '');";

# 1. an enqueue without a key whose reply is lost after the commit
$router->safe_psql('postgres', "SELECT pgq.create_queue('lost')");
# an item on each partition first: it takes the partition's epoch of attempt
# numbers, which would wait for the standby before the commit
$shard->safe_psql("part$_", "SELECT pgq.enqueue('lost', '{}')") for 0 .. $PARTS - 1;
$shard->append_conf('postgresql.conf',
	"synchronous_standby_names = 'nosuch'");
$shard->reload;
my $e = new_session($router, 'enqueuer');
$e->send("\\set VERBOSITY verbose\nSELECT pgq.enqueue('lost', '{\"n\": 1}');");
ok(wait_until($obs, "SELECT $syncrep IS NOT NULL;", 't', $e),
	'the partition committed the item and waits for the standby');
my $first = $obs->query_ok($syncrep_sql);
my ($first_db, $first_pid) = split /:/, $first;
$obs->query_ok("SELECT pg_terminate_backend($first_pid);");

# The router answers, or tries another partition (which would wait too).
my $again = '';
while ($e->poll eq 'busy')
{
	my $w = $obs->query_ok($syncrep_sql);
	if ($w ne '' && $w ne $first)
	{
		$again = $w;
		last;
	}
}
$shard->adjust_conf('postgresql.conf', 'synchronous_standby_names', "''");
$shard->reload;
$e->wait;
is($again, '', 'the router did not enqueue the item on another partition');
like(
	$e->{error},
	qr/ERROR:  08007: the outcome of the enqueue on partition \d of the pgq cluster is unknown/,
	'it says that the outcome is unknown');
is(items('lost'), $PARTS + 1, 'the item was committed once');

$e->close;
$obs->close;
$shard->stop;
$router->stop;
done_testing();
