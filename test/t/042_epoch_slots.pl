# Epoch slots of dropped databases are freed.
#
# Each database that uses pgq takes a slot in shared memory for its run's
# epoch (64 slots).  A database that finds none free takes an epoch of its
# own in every connection, so its attempt numbers skip one per connection.
# Slots of databases dropped since are freed when the slots run out, so a
# server whose databases come and go (tests, one database per tenant) keeps
# one epoch per run.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $slots = 64;
my $node = PostgreSQL::Test::Cluster->new('epochslots');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;

# every slot taken, by databases dropped since
for my $i (1 .. $slots)
{
	$node->safe_psql('postgres', "CREATE DATABASE d$i");
	$node->safe_psql("d$i",
		"CREATE EXTENSION pgq; SELECT pgq.create_queue('q'); SELECT pgq.enqueue('q', '{}');"
	);
}
$node->safe_psql('postgres', "DROP DATABASE d$_") for 1 .. $slots;

# two connections of another database enqueue: one epoch for both
$node->safe_psql('postgres', "CREATE EXTENSION pgq; SELECT pgq.create_queue('q');");
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pgq.enqueue('q', '{}')") for 1 .. 2;
is( $node->safe_psql('postgres', 'SELECT count(DISTINCT epoch) FROM pgq.items'),
	'1', 'two connections share the run\'s epoch in a freed slot');
ok(!$node->log_contains('no epoch slot is free', $log_offset),
	'no connection took an epoch of its own');

# with every slot taken by a live database, a connection says so in the log
for my $i (1 .. $slots)
{
	$node->safe_psql('postgres', "CREATE DATABASE e$i");
	$node->safe_psql("e$i",
		"CREATE EXTENSION pgq; SELECT pgq.create_queue('q'); SELECT pgq.enqueue('q', '{}');"
	);
}
$node->safe_psql('postgres', "CREATE DATABASE late");
$node->safe_psql('late', "CREATE EXTENSION pgq; SELECT pgq.create_queue('q');");
$node->safe_psql('late', "SELECT pgq.enqueue('q', '{}')");
ok( $node->log_contains(
		qr/no epoch slot is free for database "late": this connection takes an epoch of its own/,
		$log_offset),
	'a database that finds no slot free says so in the log');

$node->stop;
done_testing();
