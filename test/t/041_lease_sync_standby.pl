# Attempt numbers and synchronous standbys.
#
# A promotion may choose a synchronous standby, so an attempt number must be
# durable there before it is handed out, whatever the claiming session's
# synchronous_commit says: the run's epoch (taken by the first claim after a
# start) waits for the synchronous standbys also in a session with
# synchronous_commit = local.  And when that wait is cancelled, the claim
# fails: PostgreSQL ends a cancelled wait for synchronous replication with a
# warning and goes on, which must not hand out numbers that the standby may
# not have.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	SELECT pgq.create_group('g', 'SELECT g FROM generate_series(1, 3) g', 1,
	                        mode => 'lease');
});
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'standby'");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'")
  or die 'the standby did not become synchronous';

# A new run of the primary, with the standby gone: the run's epoch is not
# taken yet, and nothing can reach the standby.
$standby->stop;
$primary->restart;

my $s = new_session($primary, 's');
my $obs = new_session($primary, 'observer');
$s->query_ok('SET synchronous_commit = local;');
$s->send("SELECT block_id, attempt FROM pgq.claim('g');");
ok( wait_until(
		$obs,
		"SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = "
		  . $s->pid . ';',
		't', $s),
	'with synchronous_commit = local, the first claim of a run waits for the synchronous standby');

# Cancel the wait: the claim fails, and no block is claimed.
$primary->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $s->pid . ')');
is($s->wait, 'done', 'the cancelled claim returns');
like($s->{error}, qr/WARNING:  canceling wait for synchronous replication/,
	'PostgreSQL warns that the wait was cancelled');
like($s->{error}, qr/ERROR:  canceling statement due to user request/,
	'the claim fails');
is($s->{result}, '', 'and hands out no attempt number');
is( $primary->safe_psql('postgres',
		"SELECT count(*) FROM pgq.blocks WHERE state = 'c'"),
	'0', 'no block is claimed');

# With the standby back, the claim goes through.
$standby->start;
$s->send("SELECT block_id, attempt FROM pgq.claim('g');");
is($s->wait, 'done', 'the claim returns once the standby is back');
is($s->{error}, '', 'without an error');
like($s->{result}, qr/^\d+\|\d+$/, 'and claims a block');
$s->close;
$obs->close;

$standby->stop;
$primary->stop;
done_testing();
