# Lease mode across a restart.  No index is kept on the deadlines: a claim
# looks for blocks whose lease ran out by walking its group up to the
# highest block in flight, a bound that shared memory keeps.  A restart
# loses it, and the first look walks the whole group to learn it again.
#
# - Leases committed before a clean restart run out and are claimed again
#   after it, oldest first, before any pending block.
# - The walk that learns the bound reads what is committed, not the changes
#   of its own transaction: a transaction that completes the highest leased
#   block, claims (which learns the bound) and rolls back leaves that block
#   leased, and a later claim takes it again.  Had the walk seen the
#   transaction's own delete, the bound would end below the block, and no
#   claim would look at it again until the next restart.
#
# Every start of the server moves the epoch that attempt numbers count from
# (lease.c), so a block's number skips one after the restart: the claims
# before it are attempt 1, the next ones 3, and a block made before the
# restart and never claimed starts at 2.
#
# Leases of one microsecond have run out by the next statement, so no wait
# is needed.  The maintenance worker is off: its passes look for due blocks
# too, and would learn the bound before the test's own claims do.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leaserestart');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

$node->safe_psql('postgres',
	"SELECT pgq.create_group('lr', 'SELECT g FROM generate_series(1, 6) g', 1,
	                         mode => 'lease', lease => '1 microsecond',
	                         max_attempts => 10)");
my $b0 = $node->safe_psql('postgres',
	"SELECT min(block_id) FROM pgq.blocks JOIN pgq.groups USING (group_id)
	 WHERE group_name = 'lr'");

# Claims of group lr, as "block - b0:attempt" in block order.
sub claimed
{
	my ($sql) = @_;
	my $out = $node->safe_psql('postgres', $sql);
	return join ' ', map { my ($b, $a) = split /\|/; ($b - $b0) . ":$a" }
	  grep { /\|/ } split /\n/, $out;
}

is( claimed("SELECT block_id, attempt FROM pgq.claim('lr', 3) ORDER BY 1"),
	'0:1 1:1 2:1',
	'three blocks leased before the restart');

$node->restart;

# The first look after the restart learns the bound, in a transaction that
# has just completed the highest leased block and then rolls back.
is( claimed(
		"BEGIN;
		 SELECT pgq.complete($b0 + 2, attempt => 1);
		 SELECT block_id, attempt FROM pgq.claim('lr');
		 ROLLBACK;"),
	'0:3',
	'after the restart, a claim takes the oldest lease that ran out');

is( claimed("SELECT block_id, attempt FROM pgq.claim('lr', 3) ORDER BY 1"),
	'0:3 1:3 2:3',
	'every lease from before the restart is claimed again, the block completed in the rolled-back transaction too'
);

is( claimed("SELECT block_id, attempt FROM pgq.claim('lr', 4) ORDER BY 1"),
	'0:4 1:4 2:4 3:2',
	'then the pending blocks');

$node->stop;
done_testing();
