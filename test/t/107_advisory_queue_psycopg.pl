# An advisory-mode queue from psycopg.  A Python worker registers, then
# waits in pgq.claim(wait => ...) on the empty queue (seen in
# pg_stat_activity); a Python producer enqueues an item and waits for it
# with pgq.result(wait => ...).  The worker, woken by the enqueue, gets the
# item at attempt 1, checks that its claim wrote nothing (no transaction id)
# and that it holds the item (check_worker, pgq.workers), and completes it
# with a result in the same transaction; the producer reads the result.
#
# psycopg (python3-psycopg) is a Debian package that test/run-tests.sh
# installs: under CI=true a missing one fails the test; otherwise the test
# is skipped.  The scripts take the server from PGHOST, PGPORT, PGDATABASE.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use File::Temp qw(tempdir);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

if (system('python3 -c "import psycopg" >/dev/null 2>&1') != 0)
{
	fail('psycopg is missing: apt-get install python3-psycopg')
	  if ($ENV{CI} // '') eq 'true';
	plan skip_all => 'psycopg (python3-psycopg) is not installed';
}

my $node = PostgreSQL::Test::Cluster->new('aqpsycopg');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0\n"
	  . "listen_addresses = '127.0.0.1'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	SELECT pgq.create_queue('jobs', mode => 'advisory');
});

$ENV{PGHOST} = '127.0.0.1';
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
delete $ENV{$_} for qw(PGUSER PGSERVICE PGOPTIONS);

my $dir = tempdir(CLEANUP => 1);

# The worker: registers, says so, claims with a wait, and completes what it
# got with the square of its n, in the claim's transaction.
my $worker = "$dir/worker.py";
open(my $fh, '>', $worker) or die;
print $fh <<'EOF';
import json
import psycopg

conn = psycopg.connect(autocommit=True)
w = conn.execute("SELECT pgq.register_worker('py-worker')").fetchone()[0]
print("registered %d pid %d" % (w, conn.info.backend_pid), flush=True)

conn.autocommit = False
rows = conn.execute("SELECT block_id, attempt, payload FROM pgq.claim('jobs', 5, wait => '5 minutes', worker_id => %s)",
                    (w,)).fetchall()
item, attempt, payload = rows[0]
wrote_nothing = conn.execute("SELECT pg_current_xact_id_if_assigned() IS NULL").fetchone()[0]
held = conn.execute("SELECT pgq.check_worker(%s), blocks_held FROM pgq.workers WHERE worker_id = %s",
                    (w, w)).fetchone()
print("claimed %d item(s): %d attempt %d n %d, wrote nothing %s, alive %s holding %d" %
      (len(rows), item, attempt, payload["n"], wrote_nothing, held[0], held[1]), flush=True)
ok = conn.execute("SELECT pgq.complete(%s, result => %s::jsonb, worker_id => %s)",
                  (item, json.dumps({"square": payload["n"] ** 2}), w)).fetchone()[0]
conn.commit()
held = conn.execute("SELECT blocks_held FROM pgq.workers WHERE worker_id = %s", (w,)).fetchone()[0]
conn.commit()
print("completed %s, holding %d" % (ok, held), flush=True)
EOF
close($fh);

# The producer: enqueues an item, commits, and waits for its result.
my $producer = "$dir/producer.py";
open($fh, '>', $producer) or die;
print $fh <<'EOF';
import psycopg

conn = psycopg.connect()
item = conn.execute("SELECT pgq.enqueue('jobs', '{\"n\": 12}', key => 'twelve')").fetchone()[0]
conn.commit()      # the worker sees the item from here on
print("enqueued %d" % item, flush=True)
state, result, attempt = conn.execute("SELECT state, result, attempt FROM pgq.result(%s, wait => '5 minutes')",
                                      (item,)).fetchone()
conn.commit()
print("result of %d: %s %s attempt %d" % (item, state, result, attempt), flush=True)
EOF
close($fh);

my $w = PgqTest::start_prog('worker', 'python3', $worker);
ok(PgqTest::output_until($w, qr/^registered \d+ pid \d+$/m), 'the worker registered');
my ($worker_id, $pid) = $w->{out} =~ /^registered (\d+) pid (\d+)$/m;
$node->poll_query_until('postgres', qq{
	SELECT wait_event_type = 'Extension' AND query LIKE '%pgq.claim%'
	FROM pg_stat_activity WHERE pid = $pid})
  or die 'the worker did not wait in pgq.claim';

my $p = PgqTest::start_prog('producer', 'python3', $producer);
is(PgqTest::finish_prog($w), 0, 'worker: exit status 0');
is(PgqTest::finish_prog($p), 0, 'producer: exit status 0');
my ($item) = $p->{out} =~ /^enqueued (\d+)$/m;
ok(defined $item, 'the producer enqueued an item');
like($w->{out},
	qr/^claimed 1 item\(s\): $item attempt 1 n 12, wrote nothing True, alive True holding 1$/m,
	'the waiting claim got the item at attempt 1, wrote nothing and holds its lock');
like($w->{out}, qr/^completed True, holding 0$/m,
	'the worker completed it; the lock went at the commit');
like($p->{out}, qr/^result of $item: done \{'square': 144\} attempt 1$/m,
	'the producer read the result with pgq.result');
is($node->safe_psql('postgres',
		"SELECT state, result, attempt FROM pgq.item('jobs', 'twelve')"),
	'done|{"square": 144}|1', 'the item is done, with its result');
is($node->safe_psql('postgres',
		"SELECT pending, running, done FROM pgq.queue_stats WHERE queue_name = 'jobs'"),
	'0|0|1', 'nothing pending or running');

$node->stop;
done_testing();
