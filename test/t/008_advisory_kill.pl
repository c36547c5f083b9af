# Advisory mode: an advisory-mode worker ended with pg_terminate_backend()
# gives its blocks back at once.
#
# pg_terminate_backend() ends one session: worker B stays connected, keeps
# its own blocks and picks up exactly the blocks worker A held (compare
# 009_advisory_restart.pl, where the whole server goes away).  The claimed
# count of pgq.group_stats drops by A's blocks, pgq.workers keeps A's
# registry row but shows it not alive, and in the end every id is processed
# exactly once: ids are recorded in the transaction that completes their
# block, and a completion that returns false is rolled back.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqAdvisory;

my $node = PostgreSQL::Test::Cluster->new('advkill');
$node->init;
# no maintenance passes: they would clear out the dead registrations that
# this test looks at
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$node->start;

# 200 ids, 20 blocks of 10
my $n_ids = 200;
my $n_blocks = setup_advisory_group($node, $n_ids, 10);

is(stats($node), "ready|$n_blocks|0|0", 'group ready, all blocks pending');

# --- worker A registers and claims 3 blocks
my $sa = $node->background_psql('postgres');
my $a_pid = $sa->query_safe('SELECT pg_backend_pid()');
my $wa = $sa->query_safe("SELECT pgq.register_worker('A')");
like($wa, qr/^\d+$/, "worker A registered with id $wa");
my @a_blocks = claim($sa, $wa, 3);
is(scalar @a_blocks, 3, "A claimed 3 blocks: @a_blocks");

# --- worker B registers and claims 3 others, writing nothing
my ($sb, $wb) = worker_session($node, 'B');
$sb->query_safe('BEGIN');
my @b_blocks = claim($sb, $wb, 3);
is($sb->query_safe('SELECT pg_current_xact_id_if_assigned() IS NULL'),
	't', 'an advisory claim assigns no transaction id');
$sb->query_safe('COMMIT');
is(scalar @b_blocks, 3, "B claimed 3 blocks: @b_blocks");
my %a_set = map { $_ => 1 } @a_blocks;
is(scalar(grep { $a_set{$_} } @b_blocks), 0, "B's blocks are not A's");

is(stats($node), 'ready|14|6|0', 'group_stats: 6 claimed, 14 pending');
is(workers($node), "A|t|3\nB|t|3", 'pgq.workers: A and B alive, 3 blocks each');
is($sa->query_safe("SELECT pgq.check_worker($wa)"), 't',
	'check_worker is true in the session that registered');
is($sb->query_safe("SELECT pgq.check_worker($wa)"), 'f',
	"check_worker of A's id is false in B's session");

# --- end A's session (one session only, not a crash restart)
note "ending worker A (pid $a_pid) with pg_terminate_backend(): one session ends";
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($a_pid)"),
	't', "A's backend signalled");
# wait until the backend is gone and holds no locks
$node->poll_query_until('postgres', qq{
	SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $a_pid)
	   AND NOT EXISTS (SELECT FROM pg_locks WHERE pid = $a_pid)})
  or die "backend $a_pid did not exit";
$sa->quit;

is(stats($node), 'ready|17|3|0',
	"group_stats: A's 3 blocks are no longer claimed but pending again");
is(workers($node), "A|f|0\nB|t|3",
	'pgq.workers: A is still registered but not alive; B still alive');
is($sb->query_safe("SELECT pgq.check_worker($wb)"), 't',
	'B is still registered and holds its placeholder');

# --- B picks up exactly the blocks A held
my @b_more = claim($sb, $wb, 3);
is("@b_more", "@a_blocks", "B's next claim of 3 returns exactly A's blocks");
is(stats($node), 'ready|14|6|0', 'group_stats: 6 claimed again');
is(workers($node), "A|f|0\nB|t|6", 'pgq.workers: B holds 6 blocks');

# --- drain the group with B, exactly once
my ($done, $refused) = drain($sb, $wb, 4, @b_blocks, @b_more);
note "B completed $done blocks, $refused completions refused and rolled back";
is($done, $n_blocks, "B completed all $n_blocks blocks");
is($refused, 0, 'no completion was refused');
check_drained($node, $n_ids, $n_blocks);
is(workers($node), "A|f|0\nB|t|0", 'B holds no block after the drain');
$sb->quit;

done_testing();
