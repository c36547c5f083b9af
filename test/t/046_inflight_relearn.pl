# Blocks waiting for a retry that the row trigger pgq.blocks_inflight did not
# see are found once it is back: after ALTER EXTENSION pgq UPDATE from 0.1
# (which has no such trigger), and after the trigger was disabled for a
# while, in a running server.
#
# Claims look for retries that came due by walking a group's blocks up to
# the highest one in flight that shared memory knows of; the trigger raises
# that bound when SQL (advisory mode's pgq.fail) makes a block wait for a
# retry.  A bound learned, or known for a new group, while the trigger was
# not there does not cover what was done meanwhile: it is learned again by
# walking the whole group.  Without that, the advisory retries made on 0.1
# stayed hidden until a restart, and waiting claims took their groups for
# exhausted (they returned no rows at once).
#
# Waiting claims recheck every second (pgq.wait_recheck_interval): what the
# last look for due blocks found is trusted for up to a second, and a retry
# made in SQL while the trigger was not there did not make anyone look again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('inflight_relearn');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
pgq.wait_recheck_interval = '1s'
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq VERSION '0.1';
	SELECT pgq.create_group('ad', 'SELECT g FROM generate_series(1, 4) g', 2,
	                        mode => 'advisory', max_attempts => 10);
	SELECT pgq.create_group('le', 'SELECT g FROM generate_series(5, 6) g', 2,
	                        mode => 'lease', lease => '1 hour',
	                        max_attempts => 10);
});
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'pgq'"),
	'0.1', 'version 0.1 installed');

# on 0.1: every block of both groups is claimed and failed, due at once
my $w = new_session($node, 'worker');
my $wid = $w->query_ok('SELECT pgq.register_worker();');
is( $w->query_ok(qq{
		SELECT count(*) FILTER (WHERE pgq.fail(block_id, 'boom', worker_id => $wid))
		FROM pgq.claim('ad', 2, worker_id => $wid);}),
	'2', 'both advisory blocks failed on 0.1');
is( $w->query_ok(q{
		SELECT count(*) FILTER (WHERE pgq.fail(block_id, 'boom', attempt => attempt))
		FROM pgq.claim('le');}),
	'1', 'the lease block failed on 0.1');
my $waiting = q{SELECT string_agg(g.group_name || ':' || b.state::text || b.attempt, ','
	                   ORDER BY g.group_name, b.block_id)
	FROM pgq.blocks b JOIN pgq.groups g USING (group_id)};
is($node->safe_psql('postgres', $waiting), 'ad:r1,ad:r1,le:r1',
	'every block waits for its retry');

$node->safe_psql('postgres', 'ALTER EXTENSION pgq UPDATE;');
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'pgq'"),
	'0.2', 'updated to 0.2 without a restart');

# a waiting claim takes both retried advisory blocks
my $claim_ad = qq{
	SELECT count(*) || ' ' || min(attempt)
	FROM pgq.claim('ad', 2, wait => '1h', worker_id => $wid);};
is($w->query_ok($claim_ad), '2 2',
	'a waiting claim takes the advisory retries made before the update');
is( $w->query_ok(qq{
		SELECT count(*) FILTER (WHERE pgq.complete(block_id, worker_id => $wid))
		FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
		WHERE g.group_name = 'ad';}),
	'2', 'and completes them');
# (its attempt number skips one: a block claimed before the update has no
# epoch, and its next number counts the epochs since the first, lease.c)
is( $w->query_ok(q{
		SELECT attempt || ' '
		       || pgq.complete(block_id, attempt => attempt)
		FROM pgq.claim('le', wait => '1h');}),
	'3 true', 'a waiting claim takes the lease retry made before the update');

# The trigger disabled for a while: a group made meanwhile, a retry made
# meanwhile.  Both are found once it is enabled again.
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('ad2', 'SELECT g FROM generate_series(1, 2) g', 2,
	                        mode => 'advisory', max_attempts => 10);
});
# ad2: claimed (its bound is known from then on), failed while disabled
is($w->query_ok(qq{SELECT count(*) FROM pgq.claim('ad2', worker_id => $wid);}),
	'1', 'ad2 claimed');
$node->safe_psql('postgres',
	'ALTER TABLE pgq.blocks DISABLE TRIGGER blocks_inflight;');
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('ad4', 'SELECT g FROM generate_series(1, 2) g', 2,
	                        mode => 'advisory', max_attempts => 10);
});
is( $w->query_ok(qq{
		SELECT pgq.fail(b.block_id, 'boom', worker_id => $wid)
		FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
		WHERE g.group_name = 'ad2';}),
	't', 'ad2 failed while the trigger is disabled');
is( $w->query_ok(qq{
		SELECT count(*) FILTER (WHERE pgq.fail(block_id, 'boom', worker_id => $wid))
		FROM pgq.claim('ad4', worker_id => $wid);}),
	'1', 'ad4, made while the trigger is disabled, claimed and failed');
$node->safe_psql('postgres',
	'ALTER TABLE pgq.blocks ENABLE ALWAYS TRIGGER blocks_inflight;');
for my $g ('ad2', 'ad4')
{
	is( $w->query_ok(qq{
			SELECT count(*) || ' ' || min(attempt)
			FROM pgq.claim('$g', wait => '1h', worker_id => $wid);}),
		'1 2',
		"a waiting claim of $g takes the retry made while the trigger was disabled");
}

$w->close;
$node->stop;
done_testing();
