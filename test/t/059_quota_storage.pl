# Storage taken through queues can be bounded: a role that may write no
# table at all stores items in pgq.items through a queue of its own, as
# pgq's tables' owner.  pgq.max_queue_items and pgq.max_payload_bytes,
# superuser settings that ALTER ROLE sets for one role, bound it; the role
# cannot change them.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('quota_storage');
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
	ALTER ROLE alice SET pgq.max_queue_items = 1000;
	ALTER ROLE alice SET pgq.max_payload_bytes = '1kB';
});

sub as_role
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', $sql, extra_params => [ '-U', $role ]);
	return ($out, $err);
}

my ($out, $err) = as_role('alice',
	"SELECT pgq.create_queue('hoard');\n"
	  . q{SELECT cardinality(pgq.enqueue_many('hoard',
	                          array_fill('{}'::jsonb, ARRAY[99])));} x 10);
is($err, '', 'alice fills her queue up to 990 items');

# enqueues, one by one and in batches, that would pass the bound fail
($out, $err) = as_role('alice', q{
	SELECT pgq.enqueue_many('hoard', array_fill('{}'::jsonb, ARRAY[11]));});
like($err, qr/ERROR:  queue "hoard" is full/,
	'a batch that would pass pgq.max_queue_items is refused');
($out, $err) = as_role('alice', q{
	\set VERBOSITY verbose
	SELECT count(pgq.enqueue('hoard', '{}')) FROM generate_series(1, 20);});
like($err, qr/ERROR:  53400: queue "hoard" is full/,
	'and so is the enqueue that would pass it one at a time (53400)');
like($err, qr/pgq\.max_queue_items/, 'naming the setting');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pgq.items
		WHERE group_id = (SELECT group_id FROM pgq.groups WHERE group_name = 'hoard')}),
	'990', 'nothing of the refused enqueues is stored');
($out, $err) = as_role('alice', q{
	SELECT count(pgq.enqueue('hoard', '{}')) FROM generate_series(1, 10);});
is($out, '10', 'up to the bound it enqueues');

# items larger than pgq.max_payload_bytes are refused
($out, $err) = as_role('alice', q{
	\set VERBOSITY verbose
	SELECT pgq.create_queue('big');
	SELECT pgq.enqueue('big', data => convert_to(repeat('x', 2000), 'UTF8'));});
like($err, qr/ERROR:  54000: item is too large/,
	'an item past pgq.max_payload_bytes is refused (54000)');
($out, $err) = as_role('alice', q{
	SELECT pgq.enqueue('big', jsonb_build_object('x', repeat('x', 100))) > 0;});
is($out, 't', 'a smaller item is enqueued');

# alice cannot lift her bounds; bob has none
($out, $err) = as_role('alice', q{SET pgq.max_queue_items = 0;});
like($err, qr/permission denied to set parameter "pgq\.max_queue_items"/,
	'alice cannot lift pgq.max_queue_items');
($out, $err) = as_role('bob', q{
	SELECT pgq.create_queue('bobs');
	SELECT count(*) FROM (SELECT pgq.enqueue_many('bobs',
	                      array_fill('{}'::jsonb, ARRAY[2000]))) e;});
is($err, '', "another role's queue is not bound by alice's settings");

done_testing();
