# The advisory lock budget is shared between roles: what one role may take
# from pgq.max_locks, and what a claim does when it runs into a limit.  Each
# case plays a role that has nothing but USAGE on schema pgq and groups of
# its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use FindBin;
use lib $FindBin::RealBin;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('quota_locks');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;
});

# Set a reloadable setting and wait until this backend's view of it (a new
# session's) shows it.
sub reload_with
{
	my ($setting, $value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $setting = $value");
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT current_setting('$setting') = '$value'")
	  or die "$setting did not become $value";
	return;
}

sub session_as
{
	my ($role) = @_;
	return $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $role ]);
}

# ---------------------------------------------------------------------------
# A claim of several blocks that reaches pgq.max_locks after it took some
# returns those, and fails only when it got none.  Here the claim takes two
# retries that came due, and the limit (the worker's placeholder lock and two
# blocks) stops it before the pending blocks.
# ---------------------------------------------------------------------------
# (the per-role limit is tested below: out of the way until then)
reload_with('pgq.max_locks_per_role', 1000);
reload_with('pgq.max_locks', 3);
my $a = session_as('alice');
$a->query_safe(q{
	SELECT pgq.create_group('short', 'SELECT g FROM generate_series(1, 10) g', 1,
	                        mode => 'advisory');
	SELECT pgq.register_worker() AS w \gset
	SELECT count(pgq.fail(block_id, 'again', retry_after => '0', worker_id => :w))
	FROM pgq.claim('short', 2, worker_id => :w);
});
is($a->query(q{SELECT count(*) FROM pgq.claim('short', 5, worker_id => :w)}),
	'2', 'a claim that reaches pgq.max_locks after two blocks returns those two');
is($a->query_safe(q{SELECT blocks_held FROM pgq.workers WHERE worker_id = :w}),
	'2', 'and holds them');
$a->query(q{SELECT count(*) FROM pgq.claim('short', 5, worker_id => :w)});
like($a->{stderr}, qr/cannot claim another advisory-mode block/,
	'a claim that gets no block at the limit is an error');
$a->quit;

# ---------------------------------------------------------------------------
# One role cannot take the whole of pgq.max_locks: pgq.max_locks_per_role
# (by default half of it) leaves the rest to the others.
# ---------------------------------------------------------------------------
reload_with('pgq.max_locks_per_role', -1);
reload_with('pgq.max_locks', 20);
$a = session_as('alice');
$a->query_safe(q{
	SELECT pgq.create_group('hoard', 'SELECT g FROM generate_series(1, 100) g', 1,
	                        mode => 'advisory');
	SELECT pgq.register_worker() AS w \gset});
is($a->query_safe(q{SELECT count(*) FROM pgq.claim('hoard', 100, worker_id => :w)}),
	'9', 'a role gets half of pgq.max_locks (its placeholder and 9 blocks)');
my $a2 = session_as('alice');
$a2->query(q{SELECT pgq.register_worker()});
like($a2->{stderr}, qr/cannot register another advisory-mode worker.*\n.*pgq\.max_locks_per_role/,
	"the role's other sessions get no more, and the error names pgq.max_locks_per_role");
$a2->quit;
my $b = session_as('bob');
$b->query_safe(q{
	SELECT pgq.create_group('bobs', 'SELECT g FROM generate_series(1, 10) g', 1,
	                        mode => 'advisory');
	SELECT pgq.register_worker() AS w \gset});
is($b->query_safe(q{SELECT count(*) FROM pgq.claim('bobs', 5, worker_id => :w)}),
	'5', 'another role still claims');
$b->quit;
$a->quit;

# an administrator sets a role's limit on its own
$node->safe_psql('postgres', 'ALTER ROLE alice SET pgq.max_locks_per_role = 3');
$a = session_as('alice');
$a->query_safe(q{SELECT pgq.register_worker() AS w \gset});
is($a->query_safe(q{SELECT count(*) FROM pgq.claim('hoard', 100, worker_id => :w)}),
	'2', 'ALTER ROLE ... SET pgq.max_locks_per_role sets one role\'s limit');
$a->query(q{SET pgq.max_locks_per_role = 100});
like($a->{stderr}, qr/permission denied to set parameter/,
	'which the role cannot change itself');
$a->quit;
$node->safe_psql('postgres', 'ALTER ROLE alice RESET pgq.max_locks_per_role');
reload_with('pgq.max_locks', -1);

# ---------------------------------------------------------------------------
# pgq.register_worker() costs the same however many locks the cluster holds:
# it does not read pg_locks.  Shown by a registration that goes through while
# another session holds pg_locks locked (one that read it would wait).
# ---------------------------------------------------------------------------
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE pg_catalog.pg_locks IN ACCESS EXCLUSIVE MODE');
my $reg = new_session($node, 'reg');
$reg->query_ok('SET ROLE alice;');
my $observer = new_session($node, 'observer');
$reg->send(q{SELECT pgq.register_worker('under_lock');});
ok( wait_until(
		$observer, qq{
	SELECT EXISTS (SELECT FROM pgq.worker_registry WHERE worker_name = 'under_lock')
	    OR EXISTS (SELECT FROM pg_stat_activity
	               WHERE pid = @{[ $reg->pid ]} AND wait_event_type = 'Lock');},
		't', $reg),
	'the registration ended or waits');
is( $observer->query_ok(
		q{SELECT count(*) FROM pgq.worker_registry WHERE worker_name = 'under_lock';}),
	'1',
	'a registration does not wait for a lock on pg_locks');
$locker->query_safe('COMMIT');
$locker->quit;
is($reg->wait, 'done', 'the registration returned');
like($reg->{result}, qr/^\d+$/, 'with an id');

# ---------------------------------------------------------------------------
# Placeholder locks count against the limits on advisory locks: one session
# cannot fill the lock table with registrations.
# ---------------------------------------------------------------------------
$node->safe_psql('postgres',
	'ALTER ROLE alice SET pgq.max_locks_per_session = 5');
$a = session_as('alice');
$a->query(q{
	DO $$
	BEGIN
		FOR i IN 1 .. 6 LOOP
			PERFORM pgq.register_worker('many');
		END LOOP;
	END $$;});
like($a->{stderr}, qr/cannot register another advisory-mode worker/,
	'the sixth registration of a session passes its limit and is refused');
like($a->{stderr}, qr/pgq\.max_locks_per_session/, 'naming the setting');
is($a->query(q{
	SELECT count(pgq.register_worker('one')) FROM generate_series(1, 5)}),
	'5', 'the registrations of the transaction that failed were given back');
$a->query(q{SELECT pgq.register_worker('one')});
like($a->{stderr}, qr/cannot register another advisory-mode worker/,
	'and a sixth does not');
$a->quit;

# ---------------------------------------------------------------------------
# Placeholders taken under an earlier installation of the extension, which
# a session lets go of at its next call, are given back to the limits.  The
# session registers as often as the limits let it, before and after the
# extension is created again.
# ---------------------------------------------------------------------------
my $reg_pid = $reg->pid;
$reg->close;
$observer->close;
$node->poll_query_until('postgres', qq{
	SELECT NOT EXISTS (SELECT FROM pg_stat_activity
	                   WHERE usename = 'alice' OR pid = $reg_pid)})
  or die 'the sessions that registered did not end';
reload_with('pgq.max_locks', 4);
$node->safe_psql('postgres', q{
	CREATE FUNCTION register_all() RETURNS integer LANGUAGE plpgsql AS $$
	DECLARE
		n integer := 0;
	BEGIN
		LOOP
			BEGIN
				PERFORM pgq.register_worker('all');
			EXCEPTION WHEN configuration_limit_exceeded THEN
				RETURN n;
			END;
			n := n + 1;
		END LOOP;
	END $$;});
$a = session_as('alice');
my $before = $a->query_safe('SELECT register_all()');
cmp_ok($before, '>', 0, 'registrations up to a limit');
$node->safe_psql('postgres', q{
	DROP EXTENSION pgq;
	CREATE EXTENSION pgq;
	GRANT USAGE ON SCHEMA pgq TO alice, bob;});
is($a->query_safe('SELECT register_all()'), $before,
	'as many after the extension was created again');
$a->quit;

done_testing();
