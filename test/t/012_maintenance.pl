# The maintenance launcher and its per-database passes: they show up in
# pg_stat_activity, wake waiting claims when a lease runs out or a retry
# comes due (no transaction announces either), clear out registrations of
# advisory workers whose session is gone, never keep DROP DATABASE waiting,
# reload on SIGHUP and come back after SIGTERM.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('maint');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 1
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgq launcher'"),
	'the launcher runs, named in pg_stat_activity');

# A waiter whose recheck interval and wait are an hour: only a maintenance
# pass can wake it before the test harness gives up.
sub waiter
{
	my ($group) = @_;
	my $w = $node->background_psql('postgres');
	$w->query_safe("SET pgq.wait_recheck_interval = '1h'");
	return $w;
}

# a lease that runs out
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('lx', 'SELECT 1', 1, mode => 'lease',
	                        lease => '1 second');
	SELECT attempt FROM pgq.claim('lx');
});
my $w = waiter();
is($w->query_safe("SELECT attempt FROM pgq.claim('lx', wait => '1 hour')"),
	'2', 'a waiter gets the block whose lease ran out, as attempt 2');

# a retry that comes due
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('rx', 'SELECT 1', 1, mode => 'lease', max_attempts => 5);
});
my $attempt = $node->safe_psql('postgres', "SELECT attempt FROM pgq.claim('rx')");
$node->safe_psql('postgres', qq{
	SELECT pgq.fail(block_id, 'later', retry_after => '1 second', attempt => $attempt)
	FROM pgq.blocks WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'rx');
});
is($w->query_safe("SELECT attempt FROM pgq.claim('rx', wait => '1 hour')"),
	'2', 'a waiter gets the block whose retry came due');
$w->quit;

# registrations of sessions that are gone are cleared out
my $reg = $node->background_psql('postgres');
my $pid = $reg->query_safe('SELECT pg_backend_pid()');
$reg->query_safe("SELECT pgq.register_worker('gone')");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$reg->quit;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pgq.worker_registry WHERE worker_name = 'gone'"),
	'a dead registration is cleared out by a maintenance pass');

# passes hold a database only for a moment
for my $i (1 .. 3)
{
	$node->safe_psql('postgres', 'CREATE DATABASE dropme');
	$node->safe_psql('dropme', 'CREATE EXTENSION pgq');
	$node->safe_psql('postgres', 'DROP DATABASE dropme');
}
pass('DROP DATABASE of a database with pgq is not kept waiting');

# SIGHUP: turning maintenance off and on again leaves the launcher running
my $launcher = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgq launcher'");
$node->safe_psql('postgres', 'ALTER SYSTEM SET pgq.maintenance_interval = 0');
$node->reload;
$node->safe_psql('postgres', 'ALTER SYSTEM RESET pgq.maintenance_interval');
$node->reload;
is($node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgq launcher'"),
	$launcher, 'the launcher survives configuration reloads');

# SIGTERM ends the launcher at once; the postmaster starts it again
kill 'TERM', $launcher;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgq launcher' AND pid <> $launcher"),
	'after SIGTERM, a new launcher runs');

$node->stop;
my $log = slurp_file($node->logfile);
unlike($log, qr/(PANIC|TRAP:|terminated by signal (?!15)|pgq.*(could not|ERROR))/,
	'no crash, assertion or error of a pgq process in the server log');

done_testing();
