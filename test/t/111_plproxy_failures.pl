
# The router (pgq_proxy, PL/Proxy) when a call to a partition fails in ways
# that test 110 does not make: a router cluster and one shard cluster that
# holds both partition databases of a two-partition cluster.
#
#  1. An enqueue without a key whose partition committed the item while the
#     router lost the connection (the partition's backend ended in its wait
#     for a synchronous standby that does not exist, after its commit was
#     flushed): the router must not enqueue the item again on another
#     partition, but say that the outcome is unknown (08007); a claim whose
#     completion of a block (complete =>) was so committed must not say
#     that the block was not completed.
#  2. A waiting claim whose only partition left to wait on refuses
#     connections (the others' part is drained) tries it once a slice, not
#     in a loop, and warns that it was out of reach.
#  3. The router's functions do not depend on the caller's search_path.
#  4. docs/scaling.md says truly what the router does not have, and the
#     router's functions take pgq's arguments.
#  5. Every call on ids goes to the partition the ids name.
#  6. A claim that fails on one partition gives back what others gave it.
#  7. A waiting claim returns at most max_blocks rows, and work that comes
#     to a partition it does not sleep on.
#  8. A waiting claim whose partitions all go away under it fails (08006)
#     rather than try them in a loop until its time is up.
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

my $router = start_router();

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


# ... and a claim that completes a block (complete =>) whose partition
# committed the completion while the router lost the connection: the
# router goes on to claim from the others, and must not say that the block
# was not completed
$router->safe_psql('postgres', "SELECT pgq.create_queue('cw', lease => '1 hour')");
$router->safe_psql('postgres', "SELECT pgq.enqueue('cw', '{}', key => 'c1')");
my ($cw_id, $cw_att) = split /\|/,
  $router->safe_psql('postgres', "SELECT block_id, attempt FROM pgq.claim('cw')");
$shard->adjust_conf('postgresql.conf', 'synchronous_standby_names', "'nosuch'");
$shard->reload;
$e->send(
	"SELECT count(*) FROM pgq.claim('cw', complete => $cw_id, attempt => $cw_att);");
ok(wait_until($obs, "SELECT $syncrep IS NOT NULL;", 't', $e),
	'the partition committed the completion and waits for the standby');
($first_db, $first_pid) = split /:/, $obs->query_ok($syncrep_sql);
$obs->query_ok("SELECT pg_terminate_backend($first_pid);");
$e->wait;
$shard->adjust_conf('postgresql.conf', 'synchronous_standby_names', "''");
$shard->reload;
like(
	$e->{error},
	qr/WARNING:  01000: block $cw_id may have been completed: the connection to partition ${\($cw_id >> 42)} of the pgq cluster was lost/,
	'the claim says that the block may have been completed');
is( $router->safe_psql('postgres', "SELECT state FROM pgq.result($cw_id)"),
	'done', 'it was');

# 2. a waiting claim when the only partition left to wait on is out of
#    reach: partition 0's part of the group is drained (its query has no
#    rows), partition 1 refuses connections.  The claim tries partition 1
#    once a slice, not in a loop, and says that it is out of reach.
$router->safe_psql('postgres',
	"SELECT pgq.create_group('none', 'SELECT 1 WHERE false', mode => 'lease')");
$shard->safe_psql('postgres', 'ALTER DATABASE part1 ALLOW_CONNECTIONS false');
my $log_offset = -s $shard->logfile;
my ($ret, $out, $err) = $router->psql(
	'postgres', q{
	SET pgq_proxy.wait_slice = '100ms';
	SELECT count(*) FROM pgq.claim('none', wait => '2 s');
});
is($out, '0', 'the waiting claim returns no rows at the end of its wait');
like(
	$err,
	qr/WARNING:  partitions \{1\} of the pgq cluster are unreachable/,
	'it says that partition 1 was out of reach');
my $tries = () = slurp_file($shard->logfile, $log_offset) =~
  /database "part1" is not currently accepting connections/g;
cmp_ok($tries, '<=', 2 + 2000 / 100,
	"it tried partition 1 at most once a slice ($tries times in 2 s)");
$shard->safe_psql('postgres', 'ALTER DATABASE part1 ALLOW_CONNECTIONS true');

# 3. the router's functions do not depend on the caller's search_path: a
#    schema ahead of pg_catalog with its own sum, bool_or and >> changes
#    neither what they return nor where they route
$router->safe_psql(
	'postgres', q{
	SELECT pgq.create_queue('sp');
	CREATE SCHEMA evil;
	CREATE FUNCTION evil.int8_42(bigint, bigint) RETURNS bigint
	    LANGUAGE sql AS 'SELECT 42::bigint';
	CREATE AGGREGATE evil.sum(bigint) (sfunc = evil.int8_42, stype = bigint);
	CREATE FUNCTION evil.yes(boolean, boolean) RETURNS boolean
	    LANGUAGE sql AS 'SELECT true';
	CREATE AGGREGATE evil.bool_or(boolean) (sfunc = evil.yes, stype = boolean);
	CREATE FUNCTION evil.zero(bigint, integer) RETURNS bigint
	    LANGUAGE sql AS 'SELECT 0::bigint';
	CREATE OPERATOR evil.>> (leftarg = bigint, rightarg = integer,
	                         function = evil.zero);
});
my $key1 = $router->safe_psql('postgres',
	"SELECT min(k) FROM (SELECT 'k' || g AS k FROM generate_series(1, 100) g) x WHERE pgq_proxy.key_partition(k, $PARTS) = 1"
);
$router->safe_psql('postgres', "SELECT pgq.enqueue('sp', '{}', key => '$key1')");
my ($sp_id, $sp_att) = split /\|/,
  $router->safe_psql('postgres', "SELECT block_id, attempt FROM pgq.claim('sp')");
is($sp_id >> 42, 1, 'the item of partition 1 is claimed');
is( $router->safe_psql(
		'postgres', qq{
	SET search_path = evil, pg_catalog;
	SELECT pgq.complete($sp_id, attempt => $sp_att);
	SELECT pgq.purge('sp'), pgq.resume('sp');
}),
	"t\n1|f",
	'complete, purge and resume under a search_path that shadows pg_catalog');

# 4. docs/scaling.md's list of what the router does not have is what the
#    catalogs say, and every function it has takes pgq's arguments (but the
#    retention arguments, which are text in the router, as documented)
my $docs = slurp_file("$FindBin::RealBin/../../docs/scaling.md");
my ($missing) =
  $docs =~ /^- Functions the router does not have \(([^)]*)\)/m;
ok(defined $missing, 'docs/scaling.md lists what the router does not have');
$missing //= '';
my ($doc_funcs, $doc_views) = split /\bviews\b/, $missing;
my @doc_funcs = sort $doc_funcs =~ /`(\w+)`/g;
my @doc_views = sort(($doc_views // '') =~ /`(\w+)`/g);
my $reference = slurp_file("$FindBin::RealBin/../../docs/reference.md");
my ($internal) = $reference =~ /^## Internal helpers\n(.*?)^## /ms;
my %internal = map { $_ => 1 } ($internal // '') =~ /^### pgq\.(\w+)$/mg;
my $funcs_sql =
  "SELECT string_agg(DISTINCT proname, ' ' ORDER BY proname) FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace";
my $views_sql =
  "SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class WHERE relnamespace = 'pgq'::regnamespace AND relkind = 'v'";
my %router_funcs = map { $_ => 1 } split / /, $router->safe_psql('postgres', $funcs_sql);
my %router_views = map { $_ => 1 } split / /, $router->safe_psql('postgres', $views_sql);
my @part_funcs = split / /, $shard->safe_psql('part0', $funcs_sql);
my @part_views = split / /, $shard->safe_psql('part0', $views_sql);
is( join(' ', @doc_funcs),
	join(' ', grep { !$router_funcs{$_} && !$internal{$_} } @part_funcs),
	"the functions the docs say the router does not have are pgq's functions that it does not have");
is( join(' ', @doc_views),
	join(' ', grep { !$router_views{$_} } @part_views),
	"the views the docs say the router does not have are pgq's views that it does not have");
my $sig_sql =
  "SELECT string_agg(proname || '(' || pg_get_function_arguments(oid) || ')', E'\\n' ORDER BY 1) FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace AND proname = ANY ('{"
  . join(',', sort keys %router_funcs) . "}')";
(my $part_sigs = $shard->safe_psql('part0', $sig_sql)) =~
  s/pgq\.retention_interval/text/g;
is($router->safe_psql('postgres', $sig_sql),
	$part_sigs, "the router's functions take pgq's arguments, with their defaults");
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT pgq.$doc_funcs[0]();");
like($err, qr/ERROR:  42883:/, "a function the router does not have fails with 42883");
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT * FROM pgq.$doc_views[0];");
like($err, qr/ERROR:  42P01:/, "a view the router does not have fails with 42P01");

# 5. every call on ids goes to the partition the ids name: items of
#    partition 1 (a routing that sent them to partition 0 would find
#    nothing there)
$router->safe_psql('postgres',
	"SELECT pgq.create_queue('rt', lease => '1 hour', max_attempts => 1)");
$router->safe_psql('postgres',
	"SELECT pgq.enqueue_many('rt', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 8)), keys => ARRAY(SELECT k FROM (SELECT 'r' || g AS k FROM generate_series(1, 200) g) x WHERE pgq_proxy.key_partition(k, $PARTS) = 1 LIMIT 8))"
);
my @held = map { [ split /\|/ ] } split /\n/,
  $router->safe_psql('postgres',
	"SELECT block_id, attempt FROM pgq.claim('rt', 8) ORDER BY block_id");
is(scalar(grep { $_->[0] >> 42 == 1 } @held), 8, 'eight items of partition 1 are held');
my ($i1, $i2, $i3, $i4, $i5, $i6, $i7, $i8) = @held;
is( $router->safe_psql(
		'postgres', qq{
	SELECT pgq.extend($i1->[0], '2 hours', attempt => $i1->[1]);
	SELECT pgq.complete($i1->[0], '{"r": 1}', attempt => $i1->[1]);
	SELECT state, result FROM pgq.result($i1->[0]);
	SELECT string_agg(block_id || ':' || state, ',') FROM pgq.results('rt', ARRAY[$i1->[0]]);
	SELECT pgq.release($i2->[0], attempt => $i2->[1]);
	SELECT pgq.fail($i3->[0], 'e', attempt => $i3->[1]);
	SELECT pgq.retry($i3->[0]);
	SELECT pgq.complete_many(ARRAY[$i4->[0], $i5->[0]], ARRAY[$i4->[1], $i5->[1]]) = ARRAY[$i4->[0], $i5->[0]];
	SELECT pgq.release_many(ARRAY[$i6->[0], $i7->[0]], ARRAY[$i6->[1], $i7->[1]]) = ARRAY[$i6->[0], $i7->[0]];
	SELECT pgq.fail_many(ARRAY[$i8->[0]], ARRAY['e'], attempts => ARRAY[$i8->[1]]) = ARRAY[$i8->[0]];
}),
	join("\n",
		't', 't', 'done|{"r": 1}', "$i1->[0]:done", 't', 't', 't', 't', 't', 't'),
	'extend, complete, result, results, release, fail, retry, complete_many, release_many and fail_many reach partition 1'
);
is( $router->safe_psql('postgres',
		"SELECT pending, running, done, dead FROM pgq.queue_stats WHERE queue_name = 'rt'"),
	'4|0|3|1',
	'the items are where those calls put them');

# 6. a claim that fails on one partition gives back what the others gave:
#    group "half" exists on partition 0 only; a claim that starts there
#    (random() made to choose it) claims its block, then fails on
#    partition 1, and the block is pending again
$shard->safe_psql('part0',
	"SELECT pgq.create_group('half', 'SELECT g FROM generate_series(1, 4) g', 4, mode => 'lease')"
);
my $seed = $router->safe_psql('postgres', q{
	DO $$
	BEGIN
	    FOR i IN 1 .. 99 LOOP
	        PERFORM setseed(i / 100.0);
	        IF floor(random() * 2) = 0 THEN
	            PERFORM set_config('pgqtest.seed', (i / 100.0)::text, false);
	            RETURN;
	        END IF;
	    END LOOP;
	END
	$$;
	SELECT current_setting('pgqtest.seed');
});
($ret, $out, $err) = $router->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT setseed($seed);\nSELECT block_id FROM pgq.claim('half', 2);");
like($err, qr/ERROR:  42704: .*group "half" does not exist/,
	'the claim fails on the partition without the group');
is($shard->safe_psql('part0',
		"SELECT pending, claimed FROM pgq.group_stats WHERE group_name = 'half'"),
	'1|0', 'the block that partition 0 gave is pending again');

# 7. a waiting claim returns at most max_blocks rows, and work that comes
#    to a partition it is not sleeping on
$router->safe_psql('postgres', "SELECT pgq.create_queue('wq', lease => '1 hour')");
my $sleeping_expr =
  "(SELECT coalesce(min(datname), '') FROM pg_stat_activity WHERE datname LIKE 'part%' AND wait_event_type = 'Extension')";
my $sleeping_sql = "SELECT $sleeping_expr;";
# An array of $n keys $prefix || N that go to partition $p.
sub keys_of
{
	my ($prefix, $p, $n) = @_;
	return "ARRAY(SELECT k FROM (SELECT '$prefix' || g AS k FROM generate_series(1, 200) g) x WHERE pgq_proxy.key_partition(k, $PARTS) = $p ORDER BY k LIMIT $n)";
}
my $wq = new_session($router, 'wq');
$wq->send(
	"SET pgq_proxy.wait_slice = '100ms';\nSELECT count(*) FROM pgq.claim('wq', 2, wait => '1 hour');"
);
ok(wait_until($obs, "SELECT $sleeping_expr <> '';", 't', $wq),
	'the waiting claim sleeps on a partition');
(my $sleeping = $obs->query_ok($sleeping_sql)) =~ s/^part//;
$router->safe_psql('postgres',
	"SELECT pgq.enqueue_many('wq', ARRAY['{}', '{}', '{}']::jsonb[], keys => "
	  . keys_of('wq', $sleeping, 3) . ')');
$wq->wait;
is($wq->{result}, '2',
	'it returns max_blocks rows, though the partition has three');
is($router->safe_psql('postgres',
		"SELECT running, pending FROM pgq.queue_stats WHERE queue_name = 'wq'"),
	'2|1', 'and holds no more than it returned');
$router->safe_psql('postgres',
	"SELECT pgq.claim('wq', 1)");
$wq->send("SELECT count(*) FROM pgq.claim('wq', 1, wait => '1 hour');");
ok(wait_until($obs, "SELECT $sleeping_expr <> '';", 't', $wq),
	'a second waiting claim sleeps on a partition');
($sleeping = $obs->query_ok($sleeping_sql)) =~ s/^part//;
my $other = 1 - $sleeping;
$router->safe_psql('postgres',
	"SELECT pgq.enqueue('wq', '{}', key => (" . keys_of('wr', $other, 1) . ")[1])");
$wq->wait;
is($wq->{result}, '1',
	"a claim sleeping on partition $sleeping returns the item enqueued on partition $other");

# 8. a waiting claim when every partition goes away under it fails
$router->safe_psql('postgres', "SELECT pgq.create_queue('idle')");
my $w = new_session($router, 'waiter');
$w->send(
	"\\set VERBOSITY verbose\nSET pgq_proxy.wait_slice = '100ms';\nSELECT count(*) FROM pgq.claim('idle', wait => '20 s');"
);
ok( wait_until(
		$obs,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE datname LIKE 'part%' AND wait_event_type = 'Extension';",
		't', $w),
	'the waiting claim waits on a partition');
$obs->close;
$shard->stop('fast');
$w->wait;
like(
	$w->{error},
	qr/ERROR:  08006: no partition of the pgq cluster is reachable/,
	'with every partition gone, the waiting claim fails (08006)');

$e->close;
$w->close;
$router->stop;
done_testing();
