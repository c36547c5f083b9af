# Lease heartbeats of one group do not make the claims of other groups look
# for due blocks again.
#
# Claims of a lease-mode group look for blocks whose lease ran out (a walk of
# the group's blocks in flight) only when shared memory does not know that
# nothing is due yet; what a look found is trusted for a second at most.  A
# commit that may have made one of the group's deadlines come sooner
# (pgq.release, pgq.fail, SQL by hand) makes that group's next claim look
# again.  pgq.extend moves a deadline later: it makes nobody look again, and
# neither does any change to another group.
#
# A walk is an index scan of pgq.blocks_pkey, which the claiming transaction
# counts (pg_stat_get_xact_numscans); a claim that takes a pending block
# scans the index once more.  Session "b" claims blocks of group gb one at a
# time in one transaction while session "a" extends its lease on a block of
# group ga before every claim.  Over $N claims, b may look again only as
# often as its last look grew a second old: at most once per second elapsed,
# and once more.  (Each extend used to make every group of the database look
# again: $N more scans.)  Then a release in ga is seen by ga's next claim at
# once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use POSIX qw(floor);
use PgqTest;

my $N = 40;

my $node = PostgreSQL::Test::Cluster->new('due_per_group');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pgq;
	SELECT pgq.create_group('ga', 'SELECT g FROM generate_series(1, 2) g', 1,
	                        mode => 'lease', lease => '1 hour');
	SELECT pgq.create_group('gb', 'SELECT g FROM generate_series(1, $N + 1) g', 1,
	                        mode => 'lease', lease => '1 hour');
});

my $sa = new_session($node, 'a');
my $sb = new_session($node, 'b');

my ($ablock, $aattempt) = split /\|/,
  $sa->query_ok(q{SELECT block_id, attempt FROM pgq.claim('ga');});
is($aattempt, '1', 'a holds a block of ga');

# b's first claim looks for due blocks and records what it found
$sb->query_ok(q{BEGIN; SELECT count(*) FROM pgq.claim('gb');});
my $scans = q{SELECT pg_stat_get_xact_numscans('pgq.blocks_pkey'::regclass);};
my $before = $sb->query_ok($scans);
my $start = time;
my $claimed = 0;
for my $i (1 .. $N)
{
	is( $sa->query_ok(
			"SELECT pgq.extend($ablock, '1 hour', attempt => $aattempt);"),
		't', "extend $i")
	  or last;
	$claimed += $sb->query_ok(q{SELECT count(*) FROM pgq.claim('gb');});
}
my $elapsed = time - $start;
my $scanned = $sb->query_ok($scans) - $before;
$sb->query_ok('COMMIT;');
is($claimed, $N, "b claimed $N blocks of gb, one at a time");

# one scan per block claimed, and at most one look per second (and one more)
my $looks = $scanned - $N;
my $allowed = floor($elapsed) + 1;
cmp_ok($looks, '<=', $allowed,
	"b looked for due blocks $looks times in $N claims over "
	  . sprintf('%.1f', $elapsed) . ' s, not after every extend of ga');

# ga's claims still see a release of ga at once: a claim looks (or trusts
# a fresh look), then a's block is released, and the next claim takes it
is($sa->query_ok(q{SELECT count(*) FROM pgq.claim('ga');}), '1',
	'a claims the other block of ga');
is($sa->query_ok("SELECT pgq.release($ablock, attempt => $aattempt);"),
	't', 'a releases its first block');
is( $sa->query_ok(q{SELECT block_id || '|' || attempt FROM pgq.claim('ga');}),
	"$ablock|2", 'the next claim of ga takes the released block at once');

$sa->close;
$sb->close;
$node->stop;
done_testing();
