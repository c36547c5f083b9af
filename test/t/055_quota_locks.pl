# The advisory lock budget is shared between roles: what one role may take
# from pgq.max_locks, and what a claim does when it runs into a limit.  Each
# case plays a role that has nothing but USAGE on schema pgq and groups of
# its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

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
# retries that came due, and the limit stops it before the pending blocks.
# ---------------------------------------------------------------------------
reload_with('pgq.max_locks', 2);
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

done_testing();
