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
# time in one transaction, while before every claim session "a" commits a
# heartbeat in group ga: an extend, a release or a fail of the block it
# holds (and claims a block of ga again after the last two).  Each claim of
# b is timed by the server's clock (clock_timestamp() before and after it, in
# b's transaction): a claim that ends less than a second after the last look
# of b began trusts that look, and must not look again, however many
# heartbeats of ga committed since.  Later claims may look (the look's second
# is up), and are left out.  b claims until $N claims came within the second
# of a look, so a slow machine makes the test longer, not weaker; one that
# cannot make $N such claims in $max_claims fails it.  (Each heartbeat used
# to make every group of the database look again: every claim of b looked.)
# Then a release in ga is seen by ga's next claim at once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

# claims of b to make within a second of its last look
my $N = 60;

# b gives up after this many claims (a machine that cannot make $N claims
# within a second of a look cannot show anything)
my $max_claims = 20 * $N;

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
	                        mode => 'lease', lease => '1 hour',
	                        max_attempts => 1000000);
	SELECT pgq.create_group('gb', 'SELECT g FROM generate_series(1, $max_claims + 1) g', 1,
	                        mode => 'lease', lease => '1 hour');
});

my $sa = new_session($node, 'a');
my $sb = new_session($node, 'b');

my ($ablock, $aattempt) = split /\|/,
  $sa->query_ok(q{SELECT block_id || '|' || attempt FROM pgq.claim('ga');});
is($aattempt, '1', 'a holds a block of ga');

# One heartbeat of a in ga, committed before b's next claim: true if it
# succeeded.  After a release or a fail, which give the block back, a claims
# a block of ga again (a claim commits no SQL that changes deadlines).
my @heartbeats = ('extend', 'release', 'fail');
sub heartbeat
{
	my ($kind) = @_;
	my $sql =
		$kind eq 'extend'
	  ? "SELECT pgq.extend($ablock, '1 hour', attempt => $aattempt);"
	  : $kind eq 'release'
	  ? "SELECT pgq.release($ablock, attempt => $aattempt);"
	  : "SELECT pgq.fail($ablock, 'beat', retry_after => '0', attempt => $aattempt);";
	return 0 unless $sa->query_ok($sql) eq 't';
	return 1 if $kind eq 'extend';
	($ablock, $aattempt) = split /\|/, $sa->query_ok(
		q{SELECT block_id || '|' || attempt FROM pgq.claim('ga');});
	return defined $aattempt;
}

# One claim of b in its transaction: the server's clock before it (in
# microseconds), the blocks it took, the index scans of the transaction
# after it, and the clock after it.
my $usecs = q{(extract(epoch FROM clock_timestamp()) * 1000000)::bigint};
sub claim_b
{
	my @r = split /\n/, $sb->query_ok(qq{
SELECT $usecs;
SELECT count(*) FROM pgq.claim('gb');
SELECT pg_stat_get_xact_numscans('pgq.blocks_pkey'::regclass) || '|' || $usecs;});
	return ($r[0], $r[1], split /\|/, $r[2]);
}

# b's first claim looks for due blocks and records what it found
$sb->query_ok('BEGIN;');
my ($look_began, $first, $scans) = claim_b();
is($first, '1', 'b claims a block of gb');

my ($claims, $claimed, $within, $looked_within, $later, $looked_later) =
  (0, 0, 0, 0, 0, 0);
my @failed_beats;
while ($within < $N && $claims < $max_claims)
{
	my $kind = $heartbeats[ $claims % @heartbeats ];
	push @failed_beats, "$kind $claims" unless heartbeat($kind);
	my ($began, $got, $now_scans, $ended) = claim_b();
	$claims++;
	$claimed += $got;
	my $looked = $now_scans - $scans > 1;
	$scans = $now_scans;

	# a claim within the second of the last look trusts it, unless told that
	# gb's deadlines may have come sooner
	if ($ended - $look_began < 1_000_000)
	{
		$within++;
		$looked_within++ if $looked;
	}
	else
	{
		$later++;
		$looked_later++ if $looked;
	}
	$look_began = $began if $looked;
}
$sb->query_ok('COMMIT;');
is("@failed_beats", '', 'every heartbeat of a in ga succeeded');
is($claimed, $claims, "b claimed $claims blocks of gb, one at a time");
note "$claims claims of b: $within within a second of its last look "
  . "($looked_within looked), $later later ($looked_later looked)";
cmp_ok($within, '>=', $N,
	"b claimed $N times within a second of its last look");
is($looked_within, 0,
	"no claim of b within a second of its last look looked again, "
	  . "each after a heartbeat of ga");

# ga's claims still see a release of ga at once: a claim looks (or trusts
# a fresh look), then a's block is released, and the next claim takes it
my ($other, $oattempt) = split /\|/,
  $sa->query_ok(q{SELECT block_id || '|' || attempt FROM pgq.claim('ga');});
ok($other && $other ne $ablock, 'a claims the other block of ga');
is($sa->query_ok("SELECT pgq.release($ablock, attempt => $aattempt);"),
	't', 'a releases its first block');
is( $sa->query_ok(q{SELECT block_id || '|' || attempt FROM pgq.claim('ga');}),
	"$ablock|" . ($aattempt + 1),
	'the next claim of ga takes the released block at once');

$sa->close;
$sb->close;
$node->stop;
done_testing();
