# pgq.max_groups bounds the shared-memory entries.  When the table is full,
# an idle group's entry makes room; when every entry has claims in flight,
# a new group is still claimed correctly, only without a hint, and claimed
# counts that cannot be known show as NULL instead of a wrong number.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.max_groups = 16
# one role fills the table here (test/t/058_quota_groups.pl caps a role)
pgq.max_groups_per_role = 16
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE processed (group_name text, id bigint,
	                        PRIMARY KEY (group_name, id));
	SELECT pgq.create_group('g' || i, 'SELECT g FROM generate_series(1, 5) g', 1)
	FROM generate_series(1, 20) i;
});

# 20 groups through a 16-entry table: idle entries are evicted
for my $i (1 .. 20)
{
	$node->safe_psql('postgres', qq{
		BEGIN;
		INSERT INTO processed SELECT 'g$i', unnest(ids) FROM pgq.claim('g$i');
		COMMIT;});
}
is($node->safe_psql('postgres',
		'SELECT count(*) FILTER (WHERE claimed = 0), count(*) FROM pgq.group_stats'),
	'20|20', 'with room made by eviction, every claimed count is known');

# one transaction holds a claim in 16 groups: the table is full of busy entries
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(
	"INSERT INTO processed SELECT 'g$_', unnest(ids) FROM pgq.claim('g$_')")
  for 1 .. 17;

is($node->safe_psql('postgres', q{
		SELECT string_agg(group_name || '=' || coalesce(claimed::text, 'NULL'), ' '
		                  ORDER BY group_name)
		FROM pgq.group_stats WHERE group_name IN ('g1', 'g16', 'g17', 'g18')}),
	'g1=1 g16=1 g17=NULL g18=0',
	'busy entries are kept; a group without one whose claim was not counted shows claimed as NULL');
is($node->safe_psql('postgres',
		"SELECT pending FROM pgq.group_stats WHERE group_name = 'g17'"),
	'4', 'the untracked claim still counts as not pending (without hint)');
$holder->query_safe('COMMIT');
$holder->quit;

# every group still drains exactly once
for my $i (1 .. 20)
{
	$node->safe_psql('postgres', qq{
		BEGIN;
		INSERT INTO processed SELECT 'g$i', unnest(ids) FROM pgq.claim('g$i', 10);
		COMMIT;});
}
is($node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE state = 'drained') FROM pgq.group_stats}),
	'20', 'every group drained');
is($node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT (group_name, id)) FROM processed'),
	'100|100', 'every id of every group processed exactly once');

# A group that gets an entry while one of its claims is counted nowhere (it
# was made when the table was full) cannot trust its count: that claim may
# be given back.  Group x has blocks x1 and x2.  "a" claims x1 while 16 busy
# groups fill the table; they finish; "b" then makes x's entry, passes over
# x1 and takes x2, which moves the hint past both, and commits.  The entry
# counts 0 although "a" holds x1: it must say that it does not know, and a
# waiting claim must wait for "a" rather than take x for exhausted.
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('h' || i, 'SELECT 1', 1) FROM generate_series(1, 16) i;
	SELECT pgq.create_group('x', 'SELECT g FROM generate_series(1, 2) g', 1);
	SELECT pgq.create_group('y', 'SELECT g FROM generate_series(1, 2) g', 1);
});
my $busy = new_session($node, 'busy');
$busy->query_ok('BEGIN;');
$busy->query_ok("SELECT count(*) FROM pgq.claim('h$_');") for 1 .. 16;
my $a = new_session($node, 'a');
is($a->query_ok("BEGIN; SELECT ids FROM pgq.claim('x');"), '{1}',
	'a claims x1 while no entry is free');
$busy->query_ok('COMMIT;');
is($node->safe_psql('postgres', q{
		BEGIN; SELECT ids FROM pgq.claim('x'); COMMIT;}),
	'{2}', 'b passes over x1, takes x2 and commits');
is($node->safe_psql('postgres',
		"SELECT coalesce(claimed::text, 'NULL') FROM pgq.group_stats WHERE group_name = 'x'"),
	'NULL', 'the entry made meanwhile does not know its count');
is($node->safe_psql('postgres', q{
		BEGIN; SELECT ids FROM pgq.claim('y'); COMMIT;
		SELECT claimed FROM pgq.group_stats WHERE group_name = 'y'}),
	"{1}\n0", 'the entry of another group made meanwhile knows its count');

my $obs = new_session($node, 'observer');
my $w = new_session($node, 'w');
$w->query_ok("SET pgq.wait_recheck_interval = '1h';");
$w->send("BEGIN; SELECT ids FROM pgq.claim('x', wait => '5 min');");
is(PgqTest::sleeping_or_done($w, $obs), 'sleeping',
	'a waiting claim does not take x for exhausted while a holds x1');
$a->query_ok('ROLLBACK;');
$w->wait;
is($w->{result}, '{1}', 'the waiting claim gets x1 when a gives it back');
$w->query_ok('COMMIT;');
is($node->safe_psql('postgres',
		"SELECT claimed FROM pgq.group_stats WHERE group_name = 'x'"),
	'0', 'once no uncounted claim is left, the count is known again');
$_->close for ($busy, $a, $obs, $w);

# Waiting claims of a group that has no entry are woken by the maintenance
# worker when a lease runs out, as those of groups with one are: the worker
# cannot tell whether they have something due, and wakes them to look.
# Group l's one block is leased for a second while busy entries fill the
# table; a claim waits for it for an hour (looking again only every hour by
# itself), so that one that returns the block was woken.
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('k' || i, 'SELECT 1', 1) FROM generate_series(1, 16) i;
	SELECT pgq.create_group('l', 'SELECT 1', 1, mode => 'lease', lease => '1 second');
});
$busy = new_session($node, 'busy');
$busy->query_ok('BEGIN;');
$busy->query_ok("SELECT count(*) FROM pgq.claim('k$_');") for 1 .. 16;
is($node->safe_psql('postgres', q{SELECT ids FROM pgq.claim('l')}),
	'{1}', 'l is leased while no entry is free');
$obs = new_session($node, 'observer');
$w = new_session($node, 'w');
$w->query_ok("SET pgq.wait_recheck_interval = '1h';");
$w->send("SELECT ids, attempt FROM pgq.claim('l', wait => '1 hour');");
is(PgqTest::sleeping_or_done($w, $obs), 'sleeping',
	'a claim of l waits while the lease runs');
$node->poll_query_until('postgres', q{
	SELECT lease_until < now() FROM pgq.blocks
	WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'l')})
  or die 'the lease did not run out';
$node->safe_psql('postgres', 'SELECT pgq.wake_maintenance()');
$w->wait;
is($w->{result}, '{1}|2',
	'the maintenance pass wakes it, and it takes the block whose lease ran out');
$busy->query_ok('COMMIT;');
$_->close for ($busy, $obs, $w);

done_testing();
