# Advisory lock tags carry a key of the extension's installation: its OID
# modulo 8192 (advisory.c).  A new installation whose OID has the key of an
# old one shares its key space, and a session from before DROP EXTENSION
# that has not called pgq since still holds its locks there.  Its worker's
# placeholder lock names an id that the new worker_id_seq hands out again:
# pgq.register_worker() must take the next id instead of failing.
#
# The test lands the new extension's OID on the old one's key: it measures
# how many OIDs CREATE EXTENSION takes before the extension's own, and moves
# the OID counter with large objects (one OID each) to just before it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('reinstall_key');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');
my $ext_oid = q{SELECT oid FROM pg_extension WHERE extname = 'pgq'};
my $old = $node->safe_psql('postgres', $ext_oid);

# the session from before: a worker, then nothing more
my $before = $node->background_psql('postgres');
is($before->query_safe('SELECT pgq.register_worker()'), '1',
	'the first installation registers worker 1');

# Create the extension again until its OID has the old key.  A try that
# misses tells how many OIDs CREATE EXTENSION takes up to the extension's
# ($before_ext, the extension's included); the next try lands.
my $before_ext = 1;
my $new;
for my $try (1 .. 5)
{
	$node->safe_psql('postgres', 'DROP EXTENSION pgq');
	my $next = $node->safe_psql('postgres', 'SELECT lo_create(0)') + 1;
	my $target = $next + $before_ext + 8192;
	$target -= ($target - $old) % 8192;
	my $n = $target - $next - ($before_ext - 1);
	my $last = $next - 1;
	$last = $node->safe_psql('postgres',
		"SELECT max(lo_create(0)::bigint) FROM generate_series(1, $n)")
	  if $n > 0;
	$node->safe_psql('postgres', 'CREATE EXTENSION pgq');
	$new = $node->safe_psql('postgres', $ext_oid);
	last if $new % 8192 == $old % 8192;
	note("try $try: extension OID $new, not $target (next $next, last $last, $n large objects)");
	$before_ext = $new - $last;
}
is($new % 8192, $old % 8192,
	"the new installation ($new) has the old one's key ($old)");
isnt($new, $old, 'and another OID');

# the old placeholder lock is where the new worker 1's would be
is( $node->safe_psql(
		'postgres', qq{
	SELECT count(*) FROM pg_locks
	WHERE locktype = 'advisory' AND objid = 1
	  AND objsubid = 4096 + 8192 + $new % 8192}),
	'1',
	'the session from before holds the lock of worker id 1 in the new key space');

my $after = $node->background_psql('postgres', on_error_stop => 0);
my $id = $after->query('SELECT pgq.register_worker()');
is($after->{stderr}, '', 'a new session registers a worker');
is($id, '2', 'with the next id');
is($after->query_safe("SELECT pgq.check_worker($id)"), 't',
	'and holds its placeholder');
is($after->query_safe('SELECT count(*) FROM pgq.worker_registry'), '1',
	'one registry row: none for the id skipped');

# the session from before learns that its worker is gone, and lets go of
# its old lock, which the next registration would find free
is($before->query_safe('SELECT pgq.check_worker(1)'), 'f',
	'the worker from before is gone');
is( $node->safe_psql(
		'postgres', qq{
	SELECT count(*) FROM pg_locks
	WHERE locktype = 'advisory' AND objid = 1
	  AND objsubid = 4096 + 8192 + $new % 8192}),
	'0',
	'and its old lock with it');

$before->quit;
$after->quit;
$node->stop;
done_testing();
