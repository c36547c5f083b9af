# Lease claims that commit asynchronously, lost in a crash.
#
# A transaction outside a transaction block whose only writes are lease
# claims commits with synchronous_commit = off, so a crash can lose a claim
# whose result the client already has.  Two things must hold all the same:
#
# - An attempt number, once handed out, is never handed out again for that
#   block: the next claim of a block whose claim was lost uses a new number,
#   and the lost claim's holder is refused (complete returns false).  This
#   covers a block's first claim lost, and a block claimed twice before the
#   crash (its lease ran out in between), of which only the first claim is
#   durable: a claim of a block claimed before waits until that earlier
#   claim is durable.  Items of lease-mode queues are held the same way.
# - A claim never weakens the durability of the caller's own writes: an
#   INSERT ... SELECT FROM pgq.claim() in autocommit commits durably.
#
# To make the loss certain, the WAL writer is stopped (SIGSTOP) before the
# claims and then killed (SIGKILL), which crash-restarts the server: WAL that
# nobody flushed is still in shared memory and is lost.  The maintenance
# worker, autovacuum and the background writer's cleaning are off, so that
# nothing else writes or flushes WAL meanwhile.  Leases of one microsecond have run out by the next statement.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leasedurability');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
autovacuum = off
bgwriter_lru_maxpages = 0
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE results (id bigint PRIMARY KEY);
	SELECT pgq.create_group('warm', 'SELECT 1', 1, mode => 'lease');
	SELECT pgq.create_group('fresh', 'SELECT g FROM generate_series(1, 2) g', 1,
	                        mode => 'lease');
	SELECT pgq.create_group('again', 'SELECT 1', 1, mode => 'lease',
	                        lease => '1 microsecond', max_attempts => 3);
	SELECT pgq.create_group('insert', 'SELECT g FROM generate_series(5, 7) g', 3,
	                        mode => 'lease');
	SELECT pgq.create_queue('jobs');
	SELECT pgq.enqueue('jobs', '{"job": 1}');
	SELECT pgq.create_queue('jobs_again', lease => '1 microsecond');
	SELECT pgq.create_group('paused', 'SELECT 1', 1, mode => 'lease');
	SELECT pgq.pause('paused');
	SELECT pgq.create_group('after', 'SELECT 1', 1, mode => 'lease');
	CREATE FUNCTION claim_write_claim() RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pgq.claim('paused');
		INSERT INTO results VALUES (100);
		PERFORM pgq.claim('after');
	END $$;
});

# The first claim of a run makes the run's epoch durable: claim once first,
# so that the claims below flush nothing themselves.
$node->safe_psql('postgres', "SELECT * FROM pgq.claim('warm')");
$node->safe_psql('postgres', 'CHECKPOINT');

# Claim from a group in autocommit: "block_id attempt".
sub claim
{
	my ($group) = @_;
	return $node->safe_psql('postgres',
		"SELECT block_id || ' ' || attempt FROM pgq.claim('$group')");
}

my $walwriter = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok(kill('STOP', $walwriter), "the WAL writer ($walwriter) is stopped");

# the caller's own write, in the claim's transaction
$node->safe_psql('postgres',
	"INSERT INTO results SELECT unnest(ids) FROM pgq.claim('insert')");

# a block claimed, its lease run out, claimed again (which flushes
# the WAL up to the first claim, and everything before)
my ($again, $again1) = split / /, claim('again');
my (undef, $again2) = split / /, claim('again');
is("$again1 $again2", '1 2', 'a block claimed twice before the crash');

# a block's first claim
my ($fresh, $fresh_attempt) = split / /, claim('fresh');
is($fresh_attempt, 1, 'a first claim before the crash: attempt 1');

# an item's first claim
my ($item, $item_attempt) = split / /, claim('jobs');
is($item_attempt, 1, 'a first claim of an item before the crash: attempt 1');

is( $node->safe_psql('postgres',
		'SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()'),
	't', 'the last claims are not flushed');

# Kill the stopped WAL writer, and wait until the server is back.
sub crash
{
	my $log_offset = -s $node->logfile;
	ok(kill('KILL', $walwriter), 'kill -9 of the WAL writer: a crash restart');
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$log_offset);
	$node->wait_for_log(qr/database system is ready to accept connections/,
		$log_offset);
	ok($node->poll_query_until('postgres', 'SELECT true'),
		'the server accepts connections again after crash recovery');
}

crash();

is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM results'),
	'5,6,7', 'the rows inserted in the claiming transaction survived the crash');

# The first claim's loss: the block is pending again.  Its next claim must
# not be attempt 1 again: it skips one number for the one epoch (server
# start) since the block was made.
my ($fresh_b, $fresh_new) = split / /, claim('fresh');
is($fresh_b, $fresh, 'the block whose claim was lost is claimed again');
is($fresh_new, 2, 'under a new attempt number');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($fresh, attempt => $fresh_attempt)"),
	'f', 'the holder of the lost claim is refused');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($fresh, attempt => $fresh_new)"),
	't', 'the new holder completes the block');

# The item's claim was lost the same way.
my ($item_b, $item_new) = split / /, claim('jobs');
is($item_b, $item, 'the item whose claim was lost is claimed again');
is($item_new, 2, 'under a new attempt number');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($item, attempt => $item_attempt)"),
	'f', 'the holder of the lost claim of the item is refused');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($item, attempt => $item_new)"),
	't', 'the new holder completes the item');

# The second claim was lost, the first is durable (the second waited for
# it).  The next number skips the one the lost claim had: 1 + 1 + the
# epochs since the first (1).
my ($again_b, $again_new) = split / /, claim('again');
is($again_b, $again, 'the block claimed twice is claimed again');
is($again_new, 3, 'under a number above both that were handed out');
is( $node->safe_psql('postgres',
		"SELECT tries FROM pgq.blocks WHERE block_id = $again"),
	'2', 'max_attempts counts the claims that were made: two');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($again, attempt => $again1)::text || ' ' || "
		  . "pgq.complete($again, attempt => $again2)::text"),
	'false false', 'both earlier holders are refused');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($again, attempt => $again_new)"),
	't', 'the new holder completes the block');

# An item claimed twice (its lease ran out), in a second crash.  The server
# had to flush the WAL for the claims above; it flushes nothing for these.
# The second claim first moves the expired item back to pending, so the row
# version it claims is its own: it must wait for the commit of the version
# it moved.  pg_xact keeps one commit LSN per group of 32 xids, and a claim
# that asked pg_xact about its own xid got its group's: the first claim's
# when the two claims' xids share a group.  So the second claim's xids start
# a group of their own, in which nothing has committed.
$node->safe_psql('postgres', "SELECT pgq.enqueue('jobs_again', '{\"job\": 2}')");
$node->safe_psql('postgres', 'CHECKPOINT');
$walwriter = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok(kill('STOP', $walwriter), "the WAL writer ($walwriter) is stopped");
my ($item_again, $item_again1) = split / /, claim('jobs_again');
my $next_xid;
do
{
	$next_xid = $node->safe_psql('postgres', 'SELECT txid_current() + 1');
} while ($next_xid % 32 != 0);
my (undef, $item_again2) = split / /, claim('jobs_again');
is("$item_again1 $item_again2", '1 2', 'an item claimed twice before the crash');
crash();

my ($item_again_b, $item_again_new) = split / /, claim('jobs_again');
is("$item_again_b $item_again_new", "$item_again 3",
	'the item claimed twice is claimed again, above both numbers');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($item_again, attempt => $item_again2)::text || ' ' || "
		  . "pgq.complete($item_again, attempt => $item_again_new)::text"),
	'false true', 'the holder of the lost claim is refused, the new one is not');

# A claim that claims nothing (its group is paused), then the caller's own
# write, then a claim, in one autocommit statement: the write makes the
# commit durable.  The claim of the paused group used to stay "running", so
# the second claim took the write for its own and the commit was
# asynchronous.  This run's epoch is durable already (the claims above).
$walwriter = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok(kill('STOP', $walwriter), "the WAL writer ($walwriter) is stopped");
$node->safe_psql('postgres', 'SELECT claim_write_claim()');
crash();
is($node->safe_psql('postgres', 'SELECT count(*) FROM results WHERE id = 100'),
	'1', 'a write between a claim of a paused group and a claim survived the crash');

$node->stop;
done_testing();
