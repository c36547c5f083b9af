# A lease claim of a block that its own transaction gave back (pgq.release,
# or pgq.fail with a retry at once), lost in a crash with the claim before.
#
# lease.c's first rule: a claim of a block that was claimed before waits
# until the commit that wrote the block's current row version is durable,
# so that at most one number per block is not durable at any time.  When
# the current row version is the claiming transaction's own (it released
# the block first), that commit is its own and not yet made: the claim
# before, whose holder released it, is that of the version before, and the
# new claim must wait for that one.  It waits for nothing instead.  With
# synchronous_commit off (the caller's choice for its own writes; the
# numbers must not repeat all the same), both the first claim and the
# release-and-claim are lost in a crash, and the next claim hands out the
# second number again: the holder that released and claimed in one
# transaction, whose commit it saw, completes the new holder's block.
#
# As in 040_lease_durability.pl, the WAL writer is stopped (SIGSTOP) before
# the claims and killed (SIGKILL) to crash-restart the server.  pg_xact
# keeps one commit LSN per group of 32 xids, and a claim that asks about
# its own xid gets its group's: the release-and-claim's xid starts a group
# of its own, in which nothing has committed.  Found by the ninth read of
# issue 21.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leaseownreclaim');
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
	SELECT pgq.create_group('warm', 'SELECT 1', 1, mode => 'lease');
	SELECT pgq.create_group('own', 'SELECT 1', 1, mode => 'lease',
	                        lease => '1 microsecond');
});

# The first claim of a run makes the run's epoch durable: claim once first,
# so that the claims below flush nothing themselves.
$node->safe_psql('postgres', "SELECT * FROM pgq.claim('warm')");
$node->safe_psql('postgres', 'CHECKPOINT');

my $walwriter = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
ok(kill('STOP', $walwriter), "the WAL writer ($walwriter) is stopped");

# the first claim, in autocommit: asynchronous
my ($block, $first) = split / /,
  $node->safe_psql('postgres',
	"SELECT block_id || ' ' || attempt FROM pgq.claim('own')");
is($first, 1, 'the first claim: attempt 1');

# its holder releases it and claims it again, in one transaction whose
# xid starts a group of 32 of its own
my $next_xid;
do
{
	$next_xid = $node->safe_psql('postgres', 'SELECT txid_current() + 1');
} while ($next_xid % 32 != 0);
my $second = $node->safe_psql('postgres', qq{
	SET synchronous_commit = off;
	BEGIN;
	SELECT pgq.release($block, attempt => $first) \\gset
	SELECT attempt FROM pgq.claim('own');
	COMMIT;
});
is($second, 2, 'released and claimed again in one transaction: attempt 2');
is( $node->safe_psql('postgres',
		'SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()'),
	't', 'the claims are not flushed');

my $log_offset = -s $node->logfile;
ok(kill('KILL', $walwriter), 'kill -9 of the WAL writer: a crash restart');
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->wait_for_log(qr/database system is ready to accept connections/,
	$log_offset);
ok($node->poll_query_until('postgres', 'SELECT true'),
	'the server accepts connections again after crash recovery');

# Both claims were lost (with the first claim made durable by the second,
# only the second is, and the block is due again: its lease was one
# microsecond).  The next number must be above both that were handed out.
my ($block_b, $third) = split / /,
  $node->safe_psql('postgres',
	"SELECT block_id || ' ' || attempt FROM pgq.claim('own')");
is($block_b, $block, 'the block is claimed again');
cmp_ok($third, '>', $second, 'under a number above both that were handed out');
is( $node->safe_psql('postgres',
		"SELECT pgq.complete($block, attempt => $second)"),
	'f', 'the holder that released and claimed again is refused');

$node->stop;
done_testing();
