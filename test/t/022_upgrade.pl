# ALTER EXTENSION pgq UPDATE from 0.1 to 0.2 with live groups: a
# transaction-mode claim held open when the update starts, a lease-mode claim
# outstanding, an advisory worker holding a block in a session that stays
# open, and a queue with pending and done items.  The update waits for the
# open claim (it adds a trigger to pgq.blocks, which takes a SHARE ROW
# EXCLUSIVE lock), and finishes when that commits.  After the update every
# one of them carries on (the held claims complete, the groups drain with
# every id processed exactly once), 0.2's function exists, and the
# extension's objects are those of a fresh install of 0.2.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq VERSION '0.1';
	CREATE TABLE done (id bigint PRIMARY KEY);
	SELECT pgq.create_group('tx', 'SELECT g FROM generate_series(1, 10) g', 2);
	SELECT pgq.create_group('le', 'SELECT g FROM generate_series(11, 16) g', 2,
	                        mode => 'lease', lease => '1 hour');
	SELECT pgq.create_group('ad', 'SELECT g FROM generate_series(17, 20) g', 2,
	                        mode => 'advisory');
	SELECT pgq.create_queue('jobs');
	SELECT pgq.enqueue_many('jobs', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
	                        keys => ARRAY['one', 'two']);
});
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'pgq'"),
	'0.1', 'version 0.1 installed');
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT pgq.has_group_privilege('tx', 'consume')");
like($err, qr/function pgq.has_group_privilege\(unknown, unknown\) does not exist/,
	'0.1 has no has_group_privilege');

# live work across the update
my $tx = new_session($node, 'tx');
$tx->query_ok(q{BEGIN;
	INSERT INTO done SELECT unnest(ids) FROM pgq.claim('tx');});
my $lease = $node->safe_psql('postgres',
	q{SELECT block_id || ' ' || attempt FROM pgq.claim('le')});
my ($lease_block, $lease_attempt) = split / /, $lease;
my $adv = new_session($node, 'advisory');
my $w = $adv->query_ok('SELECT pgq.register_worker();');
my $adv_block = $adv->query_ok(
	"SELECT block_id FROM pgq.claim('ad', worker_id => $w);");
my $item = $node->safe_psql('postgres', q{
	SELECT pgq.complete(block_id, '{"r": 1}', attempt => attempt) FROM pgq.claim('jobs')
	WHERE key = 'one';
	SELECT item_id FROM pgq.items WHERE key = 'one'});
like($item, qr/^t\n\d+$/, 'a queue item is done before the update');
$item = (split /\n/, $item)[1];

my $update = new_session($node, 'update');
$update->send('ALTER EXTENSION pgq UPDATE;');
my $observer = new_session($node, 'observer');
ok( PgqTest::wait_until($observer, q{
		SELECT count(*) FROM pg_locks
		WHERE relation = 'pgq.blocks'::regclass AND NOT granted;},
		'1', $update),
	'the update waits for the open transaction-mode claim');
$tx->query_ok('COMMIT;');
is($update->wait, 'done', 'the update ends when the claim commits');
is($update->{error}, '', 'the update succeeds');
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'pgq'"),
	'0.2', 'updated to 0.2 while claims were held');
is($node->safe_psql('postgres',
		"SELECT pgq.has_group_privilege('tx', 'consume')"),
	't', "0.2's has_group_privilege works");

# the held claims carry on
is( $node->safe_psql('postgres', qq{
		INSERT INTO done SELECT unnest(ids) FROM pgq.blocks WHERE block_id = $lease_block;
		SELECT pgq.complete($lease_block, attempt => $lease_attempt)}),
	't', 'the lease claimed before the update completes after it');
is( $adv->query_ok(qq{BEGIN;
		INSERT INTO done SELECT unnest(ids) FROM pgq.blocks WHERE block_id = $adv_block;
		SELECT pgq.complete($adv_block, worker_id => $w);
		COMMIT;}),
	't', 'the advisory block claimed before the update completes after it');
is($node->safe_psql('postgres', "SELECT state, result FROM pgq.result($item)"),
	'done|{"r": 1}', 'the result stored before the update is there');

# drain everything that is left (in a transaction block, as
# transaction-mode claims require)
$node->safe_psql('postgres', q{
	BEGIN;
	DO $$
	DECLARE
	    b record;
	    w bigint := pgq.register_worker();
	BEGIN
	    LOOP
	        SELECT * INTO b FROM pgq.claim('tx');
	        EXIT WHEN NOT FOUND;
	        INSERT INTO done SELECT unnest(b.ids);
	    END LOOP;
	    FOR b IN SELECT * FROM pgq.claim('le', 10) LOOP
	        INSERT INTO done SELECT unnest(b.ids);
	        PERFORM pgq.complete(b.block_id, attempt => b.attempt);
	    END LOOP;
	    FOR b IN SELECT * FROM pgq.claim('ad', 10, worker_id => w) LOOP
	        INSERT INTO done SELECT unnest(b.ids);
	        PERFORM pgq.complete(b.block_id, worker_id => w);
	    END LOOP;
	    FOR b IN SELECT * FROM pgq.claim('jobs', 10) LOOP
	        PERFORM pgq.complete(b.block_id, '{"r": 2}', attempt => b.attempt);
	    END LOOP;
	END $$;
	COMMIT;
});
is($node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM done'),
	'20|20|1|20', 'every id of the three groups processed exactly once');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(group_name || ':' || state, ',' ORDER BY group_name)
		  FROM pgq.group_stats}),
	'ad:drained,le:drained,tx:drained', 'the groups are drained');
is($node->safe_psql('postgres',
		'SELECT pending, done FROM pgq.queue_stats'),
	'0|2', 'the queue is done');

# the updated extension has exactly the objects of a fresh 0.2
my $objects = q{
	SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\n'
	                  ORDER BY pg_describe_object(classid, objid, objsubid))
	FROM pg_depend
	WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgq')};
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION pgq');
is($node->safe_psql('fresh',
		"SELECT extversion FROM pg_extension WHERE extname = 'pgq'"),
	'0.2', 'a fresh install is 0.2');
is($node->safe_psql('postgres', $objects), $node->safe_psql('fresh', $objects),
	'the updated extension has the objects of a fresh install');

$tx->close;
$adv->close;
$update->close;
$observer->close;
$node->stop;
done_testing();
