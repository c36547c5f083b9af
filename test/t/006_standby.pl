# A streaming standby serves pgq.group_stats but refuses claims and group
# changes with ERRCODE_READ_ONLY_SQL_TRANSACTION; after promotion, consumers
# moved to the new primary drain what was left, each id exactly once.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE processed (id bigint PRIMARY KEY);
	SELECT pgq.create_group('g', 'SELECT g FROM generate_series(1, 1000) g', 100);
});
# consume three blocks on the primary before the standby exists
$primary->safe_psql('postgres',
	"BEGIN; INSERT INTO processed SELECT unnest(ids) FROM pgq.claim('g'); COMMIT;")
  for 1 .. 3;

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'");
$standby->start;
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres',
		'SELECT state, pending, done FROM pgq.group_stats'),
	'ready|7|3', 'the standby shows the group');

my ($ret, $out, $err) = $standby->psql('postgres', q{
	\set VERBOSITY verbose
	BEGIN; SELECT * FROM pgq.claim('g'); ROLLBACK;});
like($err, qr/ERROR:  25006: cannot claim blocks during recovery/,
	'a claim on the standby fails with read_only_sql_transaction');

($ret, $out, $err) = $standby->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT pgq.create_group('h', 'SELECT 1');});
like($err, qr/ERROR:  25006: cannot create a group during recovery/,
	'create_group on the standby fails with read_only_sql_transaction');

($ret, $out, $err) = $standby->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT pgq.drop_group('g');});
like($err, qr/ERROR:  25006: cannot drop a group during recovery/,
	'drop_group on the standby fails with read_only_sql_transaction');

# a claim left open on the primary when it goes away is not consumed
my $holder = $primary->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT * FROM pgq.claim('g');");
$primary->wait_for_catchup($standby);
$primary->stop('immediate');
$holder->quit;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';

my $drained = 0;
while (1)
{
	$standby->safe_psql('postgres', q{
		BEGIN;
		INSERT INTO processed SELECT unnest(ids) FROM pgq.claim('g');
		COMMIT;});
	my $left = $standby->safe_psql('postgres',
		'SELECT pending FROM pgq.group_stats');
	last if $left == 0;
	die 'group does not drain' if ++$drained > 20;
}
is($standby->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM processed'),
	'1000|1000|1|1000', 'every id processed exactly once across the failover');
is($standby->safe_psql('postgres', 'SELECT state FROM pgq.group_stats'),
	'drained', 'the group is drained on the new primary');
note "consumed 3 blocks before the standby, $drained claims after promotion";

done_testing();
