
# pg_dump / pg_restore of a database that uses pgq restores every group and
# queue as it was, in every state, and pgq goes on working there.
#
# The source database holds:
#  - query groups in the three claim modes, partly consumed: a transaction
#    group with some blocks done and some pending, a drained one and one of
#    no ids; a lease group (owned by another role, stored by name) with a
#    block done, one claimed under a lease (state c), one waiting for a
#    retry (r), one dead-lettered (f) and some pending; an advisory group
#    with a block done, one waiting for a retry, one dead-lettered, one held
#    by a registered worker while the dumps run, and some pending; an
#    asynchronous group whose query failed;
#  - a lease queue (owned by the other role) with items pending (keys,
#    priorities, binary data), scheduled (run_at in the future), waiting
#    for a retry, running (claimed), done with a jsonb and a bytea result,
#    and dead with their errors; a transaction queue with a done and a
#    pending item;
#  - while the dumps run, a transaction holds a transaction-mode claim
#    (rolled back afterwards: the dumps see the block as pending);
#  - the worker registry, with the live worker and one whose session ended.
#
# It is dumped three ways (pg_dump -Fc | pg_restore, plain pg_dump | psql,
# and plain with --inserts) into new databases of the same cluster.  In each
# restored database:
#  - pgq.groups, pgq.blocks and pgq.items hold exactly the source's rows,
#    every column compared as text (no column is left out: nothing in these
#    tables depends on the database they are in);
#  - pgq.group_stats and pgq.queue_stats say the same as in the source (the
#    source is read after the advisory worker's session ended and the
#    transaction-mode claim rolled back: claims held in sessions and
#    transactions are not data and are not dumped; queue_stats'
#    oldest_pending_age is compared as now() - oldest_pending_age, the
#    moment it counts from, since now() differs between two queries);
#  - owners are the same role, by name and by oid;
#  - pgq.block_id_seq, pgq.groups_group_id_seq and pgq.worker_id_seq carry
#    on from where the source's were: a new group, its blocks, new items and
#    a newly registered worker get ids above every id the source handed out;
#  - pgq.worker_registry is empty (UNLOGGED, and not dumped by design);
#  - claims in the three modes, complete (also of the restored lease claim,
#    under its restored attempt), retry of a dead-lettered block,
#    pgq.result of restored results, and enqueue of a key the queue holds
#    (the restored item's id comes back) work, and so does joining a group
#    with its query laid out otherwise; the failed group stays failed.  A restored database takes an epoch of lease claims above the
#    source's (pgq.epoch_seq is dumped, lease.c): the first lease claims of
#    blocks and items made in the source skip one attempt number, as after
#    a restart, since the source may have handed that number out after the
#    dump.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;

my $tempdir = PostgreSQL::Test::Utils::tempdir;

$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	CREATE DATABASE srcdb;
});
$node->safe_psql('srcdb', q{
	CREATE EXTENSION pgq;
	CREATE TABLE src AS SELECT g::bigint AS id FROM generate_series(1, 10) g;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;
	GRANT SELECT ON src TO alice;
});

# ---------------------------------------------------------------------------
# The source database
# ---------------------------------------------------------------------------

# Transaction mode: 5 blocks, 2 consumed; a drained group; a group of no ids.
$node->safe_psql('srcdb', q{
	SELECT pgq.create_group('tx', 'SELECT id FROM src ORDER BY id', 2);
	BEGIN; SELECT block_id FROM pgq.claim('tx'); COMMIT;
	BEGIN; SELECT block_id FROM pgq.claim('tx'); COMMIT;
	SELECT pgq.create_group('drained', 'SELECT 1', 1);
	BEGIN; SELECT block_id FROM pgq.claim('drained'); COMMIT;
	SELECT pgq.create_group('empty', 'SELECT 1 WHERE false');
});

# Lease mode, created by alice: 6 blocks b1..b6.  b1 done; b2 fails, is
# retried at once and fails for good (f, 2 errors); b3 waits an hour for its
# retry (r); b4 is claimed under an hour's lease (c); b5, b6 pending.
$node->safe_psql('srcdb', q{
	SET ROLE alice;
	SELECT pgq.create_group('lease', 'SELECT g FROM generate_series(1, 12) g', 2,
	                        mode => 'lease', lease => '1 hour', max_attempts => 2);
});
$node->safe_psql('srcdb', q{
	SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('lease');
	SELECT pgq.fail(block_id, 'first failure', retry_after => '0', attempt => attempt)
	FROM pgq.claim('lease');
	SELECT pgq.fail(block_id, 'second failure', attempt => attempt) FROM pgq.claim('lease');
	SELECT pgq.fail(block_id, 'try later', retry_after => '1 hour', attempt => attempt)
	FROM pgq.claim('lease');
	SELECT block_id FROM pgq.claim('lease');
});

# Advisory mode: 5 blocks a1..a5.  A worker, whose session stays open until
# after the dumps, completes a1, fails a2 twice (f), fails a3 with an hour's
# retry (r) and holds a4; a5 pending.  Another worker registers and goes.
$node->safe_psql('srcdb', q{
	SELECT pgq.create_group('adv', 'SELECT g FROM generate_series(1, 10) g', 2,
	                        mode => 'advisory', max_attempts => 2);
});
my $worker = $node->background_psql('srcdb');
my $wid = $worker->query_safe("SELECT pgq.register_worker('live')");
# (registering clears out registrations of sessions that are gone: this one
# registers last)
$node->safe_psql('srcdb', "SELECT pgq.register_worker('gone')");
$worker->query_safe(qq{
	SELECT pgq.complete(block_id, worker_id => $wid) FROM pgq.claim('adv', worker_id => $wid);
	SELECT pgq.fail(block_id, 'adv first', retry_after => '0', worker_id => $wid)
	FROM pgq.claim('adv', worker_id => $wid);
	SELECT pgq.fail(block_id, 'adv second', worker_id => $wid)
	FROM pgq.claim('adv', worker_id => $wid);
	SELECT pgq.fail(block_id, 'adv later', retry_after => '1 hour', worker_id => $wid)
	FROM pgq.claim('adv', worker_id => $wid);
});
my $adv_held = $worker->query_safe(
	"SELECT block_id FROM pgq.claim('adv', worker_id => $wid)");
like($adv_held, qr/^\d+$/, 'the advisory worker holds a block');

# An asynchronous group whose query fails.
$node->safe_psql('srcdb', q{
	SELECT pgq.create_group('bad', 'SELECT g / 0 FROM generate_series(1, 3) g', 1,
	                        async => true);
});
ok( $node->poll_query_until('srcdb',
		"SELECT state = 'failed' FROM pgq.groups WHERE group_name = 'bad'"),
	'the asynchronous group failed');

# A lease queue, created by alice.  Each claim below finds only the item
# meant for it.
$node->safe_psql('srcdb', q{
	SET ROLE alice;
	SELECT pgq.create_queue('jobs', lease => '1 hour', max_attempts => 2,
	                        backoff => '1 hour');
	SELECT pgq.grant('jobs', 'bob', 'produce');
});
$node->safe_psql('srcdb', q{
	SELECT pgq.enqueue('jobs', '{"job": "done-json"}', key => 'done-json');
	SELECT pgq.complete(block_id, result => '{"answer": 42, "list": [1, "two", null]}',
	                    attempt => attempt)
	FROM pgq.claim('jobs');
	SELECT pgq.enqueue('jobs', data => '\x00ff10', key => 'done-bin', priority => 3);
	SELECT pgq.complete(block_id, result => '{"bin": true}',
	                    result_data => '\xdeadbeef00', attempt => attempt)
	FROM pgq.claim('jobs');
	SELECT pgq.enqueue('jobs', '{"job": "dead"}', key => 'dead');
	SELECT pgq.fail(block_id, 'item first', retry_after => '0', attempt => attempt)
	FROM pgq.claim('jobs');
	SELECT pgq.fail(block_id, 'item second', attempt => attempt) FROM pgq.claim('jobs');
	SELECT pgq.enqueue('jobs', '{"job": "retry"}', key => 'retry');
	SELECT pgq.fail(block_id, 'item later', retry_after => '1 hour', attempt => attempt)
	FROM pgq.claim('jobs');
	SELECT pgq.enqueue('jobs', '{"job": "running"}', key => 'running');
	SELECT block_id FROM pgq.claim('jobs');
	SELECT pgq.enqueue('jobs', '{"job": "later"}', key => 'later',
	                   run_at => now() + interval '1 day');
	SELECT pgq.enqueue('jobs', '{"job": "p-low"}', key => 'p-low', priority => 1);
	SELECT pgq.enqueue('jobs', '{"job": "p-high"}', key => 'p-high', priority => 9,
	                   data => '\x0102');
	SELECT pgq.enqueue('jobs', '{"job": "no key"}', priority => 5);
});

# A transaction queue: one item done, one pending.
$node->safe_psql('srcdb', q{
	SELECT pgq.create_queue('txq', mode => 'transaction');
	SELECT pgq.enqueue('txq', '{"t": 1}', key => 't1');
	BEGIN;
	SELECT pgq.complete(block_id, result => '{"t": "done"}') FROM pgq.claim('txq');
	COMMIT;
	SELECT pgq.enqueue('txq', '{"t": 2}', key => 't2');
});

# The source has what this test is about.
is( $node->safe_psql('srcdb', q{
	SELECT string_agg(group_name || ':' || s, ' ' ORDER BY group_name)
	FROM (SELECT g.group_name,
	             string_agg(b.state::text || '=' || b.n, ',' ORDER BY b.state) AS s
	      FROM pgq.groups g
	      JOIN (SELECT group_id, state, count(*) AS n FROM pgq.blocks
	            GROUP BY 1, 2) b USING (group_id)
	      GROUP BY 1) x}),
	'adv:f=1,p=2,r=1 lease:c=1,f=1,p=2,r=1 tx:p=3',
	'source: blocks done, pending, claimed, waiting for a retry and dead-lettered');
is( $node->safe_psql('srcdb', q{
	SELECT string_agg(coalesce(key, '-') || ':' || state::text, ' ' ORDER BY item_id)
	FROM pgq.items}),
	'done-json:d done-bin:d dead:f retry:r running:c later:r p-low:p p-high:p -:p t1:d t2:p',
	'source: items done, dead, waiting for a retry, running, scheduled and pending');
is( $node->safe_psql('srcdb', q{
	SELECT string_agg(group_name || ':' || state, ' ' ORDER BY group_name)
	FROM pgq.group_stats}),
	'adv:ready bad:failed drained:drained empty:drained lease:ready tx:ready',
	'source: groups ready, drained and failed');
is( $node->safe_psql('srcdb',
		q{SELECT claimed FROM pgq.group_stats WHERE group_name = 'adv'}),
	'1', 'source: the advisory block is held while the dumps are taken');
is($node->safe_psql('srcdb', 'SELECT count(*) FROM pgq.worker_registry'),
	'2', 'source: two workers registered');

# A transaction-mode claim in a transaction left open while the dumps are
# taken: the dumps' snapshots still see its block, which is rolled back
# afterwards.
my $txholder = $node->background_psql('srcdb');
$txholder->query_safe("BEGIN; SELECT block_id FROM pgq.claim('tx')");
is( $node->safe_psql('srcdb',
		q{SELECT claimed FROM pgq.group_stats WHERE group_name = 'tx'}),
	'1', 'source: a transaction-mode block is held while the dumps are taken');

# ---------------------------------------------------------------------------
# Dump and restore, with the advisory worker still holding its block
# ---------------------------------------------------------------------------

my %restored = (
	restored_custom => 'pg_dump -Fc | pg_restore',
	restored_plain => 'pg_dump | psql',
	restored_inserts => 'pg_dump --inserts | psql',);

$node->command_ok(
	[
		$node->installed_command('pg_dump'), '-Fc',
		'-f', "$tempdir/srcdb.dump",
		'-d', $node->connstr('srcdb')
	],
	'pg_dump -Fc');
$node->command_ok(
	[
		$node->installed_command('pg_dump'),
		'-f', "$tempdir/srcdb.sql",
		'-d', $node->connstr('srcdb')
	],
	'pg_dump (plain)');
$node->command_ok(
	[
		$node->installed_command('pg_dump'), '--inserts',
		'-f', "$tempdir/srcdb_inserts.sql",
		'-d', $node->connstr('srcdb')
	],
	'pg_dump --inserts');

$node->safe_psql('postgres', "CREATE DATABASE $_") for sort keys %restored;

$node->command_ok(
	[
		$node->installed_command('pg_restore'),
		'-d', $node->connstr('restored_custom'),
		"$tempdir/srcdb.dump"
	],
	'pg_restore without errors');
for my $r ([ 'restored_plain', 'srcdb.sql' ],
	[ 'restored_inserts', 'srcdb_inserts.sql' ])
{
	my ($db, $file) = @$r;
	my $stderr;
	my $ret = $node->psql($db, slurp_file("$tempdir/$file"),
		stderr => \$stderr);
	is($ret, 0, "psql runs $file");
	unlike($stderr, qr/ERROR/, "psql restores $file without errors");
}

# The transaction-mode claim rolls back, and the advisory worker goes: its
# lock is session state, not data.  From here on the source does not change.
$txholder->query_safe('ROLLBACK');
$txholder->quit;
# (psql exits before its backend has released the lock: poll.)
$worker->quit;
ok( $node->poll_query_until('srcdb',
		q{SELECT claimed = 0 FROM pgq.group_stats WHERE group_name = 'adv'}),
	'source: the advisory block is free once its worker is gone');

# ---------------------------------------------------------------------------
# The restored databases
# ---------------------------------------------------------------------------

my %compare = (
	'pgq.groups' => 'SELECT t::text FROM pgq.groups t ORDER BY group_id',
	'pgq.blocks' => 'SELECT t::text FROM pgq.blocks t ORDER BY block_id',
	'pgq.items' => 'SELECT t::text FROM pgq.items t ORDER BY item_id',
	'pgq.group_stats' =>
	  'SELECT t::text FROM pgq.group_stats t ORDER BY group_name',
	'pgq.queue_stats' => q{
		SELECT row(queue_name, mode, pending, scheduled, running, done, dead,
		           now() - oldest_pending_age, lease, max_attempts, backoff,
		           max_backoff, owner, created_at)::text
		FROM pgq.queue_stats ORDER BY queue_name},
	'pgq.block_id_seq' =>
	  'SELECT last_value, is_called FROM pgq.block_id_seq',
	'pgq.groups_group_id_seq' =>
	  'SELECT last_value, is_called FROM pgq.groups_group_id_seq',
	# worker ids must never repeat (see advisory.c): the sequence has to be
	# dumped like the other two (pg_extension_config_dump)
	'pgq.worker_id_seq' =>
	  'SELECT last_value, is_called FROM pgq.worker_id_seq',
	'the owners' => q{
		SELECT string_agg(group_name || ':' || owner::text || ':' || owner::oid,
		                  ' ' ORDER BY group_name)
		FROM pgq.groups},);
my %source = map { $_ => $node->safe_psql('srcdb', $compare{$_}) } keys %compare;
like($source{'the owners'}, qr/\blease:alice:\d+ /,
	'source: the lease group is owned by alice');
like($source{'the owners'}, qr/\bjobs:alice:\d+ /,
	'source: the queue is owned by alice');

# The ids the source handed out: every new id must be above them.
my ($src_max_group, $src_max_block, $src_max_worker) = split /\|/,
  $node->safe_psql('srcdb', q{
	SELECT (SELECT last_value FROM pgq.groups_group_id_seq),
	       (SELECT last_value FROM pgq.block_id_seq),
	       (SELECT last_value FROM pgq.worker_id_seq)});
note "source: last group id $src_max_group, last block/item id $src_max_block, "
  . "last worker id $src_max_worker";

# Ids of interest in the source, by what they are.
my %id = map { split /=/ } split /\n/, $node->safe_psql('srcdb', q{
	SELECT 'item_' || key || '=' || item_id FROM pgq.items WHERE key IS NOT NULL
	UNION ALL
	SELECT 'lease_' || b.state::text || '=' || min(b.block_id) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'lease' GROUP BY b.state
	UNION ALL
	SELECT 'tx_p=' || min(b.block_id) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'tx'
	UNION ALL
	SELECT 'adv_p=' || min(b.block_id) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'adv' AND b.state = 'p'});
is($id{adv_p}, $adv_held, 'the held advisory block is the first pending one');

for my $db (sort keys %restored)
{
	my $how = "$restored{$db} ($db)";

	for my $what (sort keys %compare)
	{
		is($node->safe_psql($db, $compare{$what}),
			$source{$what}, "$how: $what as in the source");
	}
	is($node->safe_psql($db, 'SELECT count(*) FROM pgq.worker_registry'),
		'0', "$how: pgq.worker_registry is empty");
	is( $node->safe_psql($db, q{
		SELECT bool_and(owner = 'alice'::regrole)
		FROM pgq.groups WHERE group_name IN ('lease', 'jobs')}),
		't', "$how: the owner is the role alice");

	# A consumer joins a restored group with its query laid out otherwise:
	# the group's canonical query names its table, whose OID is another one
	# here.
	is( $node->safe_psql($db,
			q{SELECT pgq.create_group('tx', 'select id  from src  order by 1', 2)}),
		'f', "$how: a query laid out otherwise joins a restored group");

	# New ids come after the source's.
	$node->safe_psql($db,
		q{SELECT pgq.create_group('after', 'SELECT g FROM generate_series(1, 4) g', 2)});
	my ($new_group, $new_min_block, $old_max_group, $old_max_id) = split /\|/,
	  $node->safe_psql($db, q{
		SELECT g.group_id,
		       (SELECT min(block_id) FROM pgq.blocks b WHERE b.group_id = g.group_id),
		       (SELECT max(group_id) FROM pgq.groups WHERE group_name <> 'after'),
		       (SELECT max(id) FROM (SELECT block_id FROM pgq.blocks
		                             WHERE group_id <> g.group_id
		                             UNION ALL SELECT item_id FROM pgq.items) x(id))
		FROM pgq.groups g WHERE group_name = 'after'});
	cmp_ok($new_group, '>', $src_max_group,
		"$how: a new group's id is above every id the source gave a group");
	cmp_ok($new_group, '>', $old_max_group,
		"$how: a new group's id is above every restored group's");
	cmp_ok($new_min_block, '>', $src_max_block,
		"$how: a new group's blocks come after every block and item id of the source");
	cmp_ok($new_min_block, '>', $old_max_id,
		"$how: a new group's blocks come after every restored block and item");
	my $new_item = $node->safe_psql($db,
		q{SELECT pgq.enqueue('jobs', '{"job": "new"}', key => 'new')});
	cmp_ok($new_item, '>', $src_max_block,
		"$how: a new item's id is above every block and item id of the source");
	my $new_worker = $node->safe_psql($db, q{SELECT pgq.register_worker('new')});
	cmp_ok($new_worker, '>', $src_max_worker,
		"$how: a new worker's id is above every worker id of the source");

	# Enqueue of keys the queue holds: the restored items.
	is( $node->safe_psql($db, q{
		SELECT pgq.enqueue('jobs', '{"again": 1}', key => 'p-low') || ',' ||
		       pgq.enqueue('jobs', '{"again": 2}', key => 'done-json') || ',' ||
		       pgq.enqueue('jobs', '{"again": 3}', key => 'dead')}),
		"$id{'item_p-low'},$id{'item_done-json'},$id{item_dead}",
		"$how: enqueue of a restored key returns the restored item");

	# Results stored before the dump.
	is( $node->safe_psql($db, qq{
		SELECT state, result, result_data, attempt
		FROM pgq.result($id{'item_done-bin'})}),
		'done|{"bin": true}|\xdeadbeef00|1',
		"$how: pgq.result of a restored item with a bytea result");
	is( $node->safe_psql($db, qq{
		SELECT state, result FROM pgq.result($id{'item_done-json'})}),
		'done|{"list": [1, "two", null], "answer": 42}',
		"$how: pgq.result of a restored item with a jsonb result");
	is( $node->safe_psql($db, qq{
		SELECT state, attempt, last_error FROM pgq.result($id{item_dead})}),
		'dead|2|item second',
		"$how: pgq.result of a restored dead item");

	# The restored running item is completed under its restored attempt.
	is( $node->safe_psql($db, qq{
		SELECT pgq.complete($id{item_running}, result => '{"late": true}',
		                    attempt => 1)}),
		't', "$how: the restored running item completes under its attempt");
	is( $node->safe_psql($db, qq{
		SELECT state, result FROM pgq.result($id{item_running})}),
		'done|{"late": true}', "$how: and its result is there");

	# Claims: the highest priority pending item; then the next.
	is( $node->safe_psql($db, q{
		SELECT key, attempt, payload, data FROM pgq.claim('jobs')}),
		'p-high|2|{"job": "p-high"}|\x0102',
		"$how: a queue claim takes the restored item of highest priority, skipping attempt 1");
	is( $node->safe_psql($db, qq{
		SELECT pgq.complete($id{'item_p-high'}, result => '{"ok": 1}', attempt => 2)}),
		't', "$how: and completes it");
	is( $node->safe_psql($db, q{
		BEGIN;
		SELECT key, payload FROM pgq.claim('txq');
		COMMIT;}),
		't2|{"t": 2}', "$how: a transaction queue claim takes the pending item");

	# Query groups in the three modes.
	is( $node->safe_psql($db, q{
		BEGIN;
		SELECT block_id, ids FROM pgq.claim('tx');
		COMMIT;}),
		"$id{tx_p}|{5,6}",
		"$how: a transaction-mode claim takes the first pending block");
	is( $node->safe_psql($db, qq{
		SELECT pgq.complete($id{lease_c}, attempt => 1)}),
		't', "$how: the restored lease claim completes under its attempt");
	is( $node->safe_psql($db, q{SELECT attempt, ids FROM pgq.claim('lease')}),
		'2|{9,10}', "$how: a lease claim takes the first pending block, skipping attempt 1");
	is( $node->safe_psql($db, qq{SELECT pgq.retry($id{lease_f})}),
		't', "$how: a restored dead-lettered block can be retried");
	is( $node->safe_psql($db, qq{
		SELECT pgq.register_worker('w') AS w \\gset
		SELECT block_id, attempt, ids, pgq.complete(block_id, worker_id => :w)
		FROM pgq.claim('adv', worker_id => :w);}),
		"$adv_held|1|{7,8}|t",
		"$how: an advisory claim takes the block the source's worker held, and completes it");
	is( $node->safe_psql($db, q{
		SELECT string_agg(group_name || ':' || state || ':' || pending || ':'
		                  || claimed || ':' || done || ':' || failed,
		                  ' ' ORDER BY group_name)
		FROM pgq.group_stats WHERE group_name IN ('adv', 'lease', 'tx')}),
		'adv:ready:2:0:2:1 lease:ready:3:1:2:0 tx:ready:2:0:3:0',
		"$how: group_stats after the claims");

	# The failed group stays failed: a claim returns nothing.
	my ($ret, $out, $err) =
	  $node->psql($db, q{BEGIN; SELECT count(*) FROM pgq.claim('bad'); COMMIT;});
	is($out, '0', "$how: a claim of the failed group returns no rows");
	like($err, qr/WARNING:  group "bad" failed to materialize/,
		"$how: with a warning that the group failed");

	# The owner and the grants came along, by name: alice (the owner) and
	# bob (granted produce) can enqueue, and bob still cannot claim.
	like( $node->safe_psql($db, q{
		SET ROLE alice;
		SELECT pgq.enqueue('jobs', '{"by": "alice"}')}),
		qr/^\d+$/, "$how: alice can still enqueue");
	like( $node->safe_psql($db, q{
		SET ROLE bob;
		SELECT pgq.enqueue('jobs', '{"by": "bob"}')}),
		qr/^\d+$/, "$how: bob's grant came along: he can enqueue");
	my ($bret, $bout, $berr) = $node->psql($db,
		q{SET ROLE bob; SELECT count(*) FROM pgq.claim('jobs');});
	like($berr, qr/permission denied for group "jobs"/,
		"$how: and bob still may not consume");
}

$node->stop;
done_testing();
