# Advisory-mode queues across server restarts.  A claim of an item takes a
# session-level advisory lock and writes nothing, so every restart drops the
# claims and leaves the items as they were; the worker registry is how a
# worker finds out, and relock() how it takes its items back.
#
# The queue 'aq' has 100 items (payloads, some idempotency keys, three
# ordering keys of 10, 5 and 5 items; see PgqAdvisory.pm).  Two workers
# claim 42 items; the claims change no row (state, attempt, due_at, xmin and
# ctid are as in a snapshot taken before them).  W1 completes three (one the
# head of an ordering key, whose next item becomes pending); W2 completes
# one, fails one (retried after the queue's backoff of an hour: not due) and
# has the completion of another open when the server goes down.
#
# - Crash restart (stop in immediate mode, then start: crash recovery): the
#   old sessions and their locks are gone, the UNLOGGED registry is emptied,
#   check_worker() of an old id is false and claiming with it fails with
#   55000; the committed completions and their results survived, the open
#   one left nothing; new workers relock() their predecessors' items and get
#   back exactly those still claimable: not the completed ones, not the
#   failed one that is not due, but the one whose completion was open.
# - Clean restart (fast mode): one more completion, a failure retried at
#   once (due) and an open completion; the registry rows survive, but
#   check_worker() is false: the locks are gone; relock() regains the held
#   items and the due failure, not the failure that is not due (until its
#   retry time is brought forward).
# - Relocks write nothing either: only completions and failures changed
#   rows, through both restarts.  Every item is completed exactly once in
#   the end, with its result, each ordering key's items in enqueue order,
#   and attempts count only the failures, not the lost claims.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqAdvisory qw(:DEFAULT :queue);

my $node = PostgreSQL::Test::Cluster->new('aqrestart');
$node->init;
# no maintenance passes: they would clear out the dead registrations that
# this test looks at
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0");
$node->start;

setup_advisory_queue($node);
# pending|scheduled|running|waiting|done|dead: 17 items wait behind the
# heads of their ordering keys
is(queue_stats($node), '83|0|0|17|0|0', 'the queue has 100 items');

# Ids to numbers, and back, for readable checks.
sub ns { return join ',', map { n_of($_) } @_; }
sub sorted_ns { return join ',', sort { $a <=> $b } map { n_of($_) } @_; }

# The items changed since the snapshot, as numbers in order.
sub changed { return sorted_ns(changed_since_snapshot($node)); }

# No client session but the one asking, and no advisory lock.
sub no_sessions_no_locks
{
	return $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM pg_stat_activity
	        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()),
	       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory')});
}

# --- two workers claim; the claims write nothing
take_snapshot($node);
my ($s1, $w1) = worker_session($node, 'w1');
my ($s2, $w2) = worker_session($node, 'w2');
my @w1_claimed = claim_items($s1, $w1, 12);
my @w2_claimed = claim_items($s2, $w2, 30);
is(ns(@w1_claimed), '1,2,3,4,5,6,7,8,9,10,11,21',
	'W1 claimed 12 items, first in first, heads of ordering keys only');
is(ns(@w2_claimed), join(',', 22 .. 41, 46 .. 55),
	'W2 claimed the next 30, none of those W1 holds');
is(changed(), '', 'the claims changed no row of pgq.items');
is(queue_stats($node), '41|0|42|17|0|0', '42 items running');

my ($i1, $i4, $i11, $i22, $i24, $i30) = item_ids(1, 4, 11, 22, 24, 30);
ok(complete_item($s1, $w1, $_), 'W1 completed item ' . n_of($_))
  for ($i1, $i4, $i11);
ok(complete_item($s2, $w2, $i24), 'W2 completed item 24');
ok(fail_item($s2, $w2, $i22), 'W2 failed item 22 (retry in an hour)');
is(start_completion($s2, $w2, $i30), 't',
	'W2 completed item 30, not committed yet');
is(changed(), '1,4,11,12,22,24',
	'the completions and the failure changed their rows (and 11 handed '
	  . 'its ordering key on to 12), nothing else');
is(queue_stats($node), '42|1|37|16|4|0', 'before the crash: 37 running, 4 done');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.workers WHERE alive'),
	'2', 'both workers alive');

# --- crash restart
note 'stopping the server in immediate mode: crash recovery at the next start';
$node->stop('immediate');
$s1->quit;
$s2->quit;
$node->start;

is(no_sessions_no_locks(), '0|0',
	"after the crash: the workers' sessions and their locks are gone");
is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.worker_registry'),
	'0', 'crash recovery emptied the unlogged registry');
is($node->safe_psql('postgres',
		"SELECT pgq.check_worker($w1), pgq.check_worker($w2)"),
	'f|f', 'check_worker of the old ids is false in a new session');
like(error_of($node, "SELECT * FROM pgq.claim('aq', worker_id => $w1)"),
	not_registered($w1), 'claiming with an old id fails with 55000');
like(error_of($node, "SELECT pgq.complete($i30, worker_id => $w2)"),
	not_registered($w2), 'completing with an old id fails with 55000');
is(changed(), '1,4,11,12,22,24',
	'the crash changed no row: the open completion left nothing, the claims '
	  . 'never wrote');
is($node->safe_psql('postgres',
		'SELECT string_agg(n::text, \',\' ORDER BY n) FROM completed'),
	'1,4,11,24', 'only the committed completions are recorded');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(concat_ws('/', r.state, r.attempt, r.result, r.last_error), ' '
	                  ORDER BY i)
	FROM unnest('{$i1,$i4,$i11,$i24,$i22,$i30}'::bigint[]) WITH ORDINALITY u(id, i),
	     pgq.result(u.id) r}),
	'done/1/{"square": 1} done/1/{"square": 16} done/1/{"square": 121} '
	  . 'done/1/{"square": 576} scheduled/1/attempt failed pending/0',
	'the results and the failure survived the crash; item 30 is pending at attempt 0');
is($node->safe_psql('postgres', "SELECT state, result FROM pgq.item('aq', 'key-4')"),
	'done|{"square": 16}', 'the item of key-4 is done, found by its key');
is(queue_stats($node), '79|1|0|16|4|0', 'after the crash: nothing running');

# --- new workers take their predecessors' items back
my ($n1s, $n1) = worker_session($node, 'n1');
my ($n2s, $n2) = worker_session($node, 'n2');
cmp_ok($n1, '>', $w2, "new worker ids ($n1, $n2) do not repeat old ones");

my @n1_held = relock_ids($n1s, $n1, @w1_claimed);
my @n2_held = relock_ids($n2s, $n2, @w2_claimed);
is(ns(@n1_held), '2,3,5,6,7,8,9,10,21',
	"relock by n1 regains W1's items but the completed ones");
is(ns(@n2_held), join(',', 23, 25 .. 41, 46 .. 55),
	"relock by n2 regains W2's items but the completed one and the failure "
	  . 'that is not due; item 30, whose completion was open, is back');
is(ns(relock_ids($n2s, $n2, @n1_held)), '',
	'relock of the items that n1 holds regains nothing');
is(ns(relock_ids($n1s, $n1, $i1, $i22)), '',
	'relock of a completed item and of a failure not due regains nothing');
is(ns(relock_ids($n1s, $n1, @n1_held)), ns(@n1_held),
	'a relock of items held returns them');
is(changed(), '1,4,11,12,22,24', 'the relocks changed no row');
is(queue_stats($node), '42|1|37|16|4|0', 'after relock: 37 running again');
is(workers($node), "n1|t|9\nn2|t|28", 'pgq.workers: n1 and n2 alive with the items');

# --- clean restart: one more completion, a due failure, an open completion
my ($i2, $i23, $i26) = item_ids(2, 23, 26);
ok(complete_item($n1s, $n1, $i2), 'n1 completed item 2');
ok(fail_item($n2s, $n2, $i23, '0'), 'n2 failed item 23, retried at once');
is(start_completion($n2s, $n2, $i26), 't',
	'n2 completed item 26, not committed yet');
is(changed(), '1,2,4,11,12,22,23,24', 'item 2 and item 23 changed');

note 'restarting the server cleanly (fast mode)';
$node->restart;
$n1s->quit;
$n2s->quit;

is(no_sessions_no_locks(), '0|0',
	"after the clean restart: the workers' sessions and their locks are gone");
is($node->safe_psql('postgres',
		'SELECT string_agg(worker_id::text, \',\' ORDER BY worker_id) FROM pgq.worker_registry'),
	"$n1,$n2", 'the registry rows survive a clean restart');
is($node->safe_psql('postgres',
		"SELECT pgq.check_worker($n1), pgq.check_worker($n2)"),
	'f|f', 'check_worker is false: the locks are gone');
is($node->safe_psql('postgres',
		'SELECT string_agg(alive::text || \'/\' || blocks_held, \',\') FROM pgq.workers'),
	'false/0,false/0', 'pgq.workers shows them not alive');
like(error_of($node, "SELECT * FROM pgq.claim('aq', worker_id => $n1)"),
	not_registered($n1),
	'claiming with an id from before the clean restart fails with 55000');
is(changed(), '1,2,4,11,12,22,23,24', 'the restart changed no row');
is(queue_stats($node), '78|1|0|16|5|0',
	'after the clean restart: nothing running, the due failure pending');

my ($m1s, $m1) = worker_session($node, 'm1');
my ($m2s, $m2) = worker_session($node, 'm2');
cmp_ok($m1, '>', $n2, "new worker ids ($m1, $m2) after the clean restart");
my @m1_held = relock_ids($m1s, $m1, @n1_held);
my @m2_held = relock_ids($m2s, $m2, @w2_claimed);
is(ns(@m1_held), '3,5,6,7,8,9,10,21', "relock by m1 regains n1's items but item 2");
is(ns(@m2_held), join(',', 23, 25 .. 41, 46 .. 55),
	"relock by m2 of W2's items regains the same as n2's: the failure of "
	  . 'item 23 is due, that of item 22 is not');
is(changed(), '1,2,4,11,12,22,23,24', 'the relocks changed no row');
is(queue_stats($node), '42|1|36|16|5|0', 'after relock: 36 running');

# instead of waiting an hour, bring the retry of item 22 forward
$node->safe_psql('postgres', "UPDATE pgq.items SET due_at = now() WHERE item_id = $i22");
my @regained = relock_ids($m2s, $m2, $i22);
is(ns(@regained), '22', 'once due, the failed item 22 is regained');
push @m2_held, @regained;

# --- drain, exactly once
my ($done1, $refused1) = drain_queue($m1s, $m1, 7, @m1_held);
my ($done2, $refused2) = drain_queue($m2s, $m2, 7, @m2_held);
note "m1 completed $done1 items, m2 $done2; "
  . ($refused1 + $refused2) . ' completions refused and rolled back';
is($done1 + $done2, 95, 'm1 and m2 completed every item not completed before');
is($refused1 + $refused2, 0, 'no completion was refused');
check_queue_drained($node, 'across both restarts');
is($node->safe_psql('postgres', qq{
	SELECT string_agg((payload->>'n') || '/' || attempt, ',' ORDER BY item_id)
	FROM pgq.items WHERE item_id IN (SELECT item_id FROM snapshot) AND attempt <> 1}),
	'22/2,23/2', 'attempts count the two failures, not the claims the restarts lost');
$m1s->quit;
$m2s->quit;

done_testing();
