
# Hearing when work is finished, from psycopg: a producer enqueues a batch
# and waits for it with pgq.results (first for any item, then for all),
# while two worker processes claim and finish the items (completing most,
# dead-lettering every tenth), and a listener hears the queue's finished
# channel (pgq.notify_finished).  Then a batch of 10,000 items, completed
# by one worker in batches while the producer waits for all of them in one
# call.
#
# Checked: the waits end with every item finished (for "any", at least
# one), with the results the workers stored; the listener heard every
# finished item once, as done or dead as it is, and nothing else.
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

my $node = PostgreSQL::Test::Cluster->new('finished');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pgq'\npgq.maintenance_interval = 0\n"
	  . "listen_addresses = '127.0.0.1'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	SELECT pgq.create_queue('jobs', max_attempts => 1);
	SELECT pgq.notify_finished('jobs');
	SELECT pgq.create_queue('big');
});

$ENV{PGHOST} = '127.0.0.1';
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
delete $ENV{$_} for qw(PGUSER PGSERVICE PGOPTIONS);

my $dir = tempdir(CLEANUP => 1);

# The producer: listens, enqueues N items, says so, waits for any and then
# for all of them, and reports what it saw and heard.
my $producer = "$dir/producer.py";
open(my $fh, '>', $producer) or die;
print $fh <<'EOF';
import json, sys
import psycopg
from psycopg import sql

queue, n = sys.argv[1], int(sys.argv[2])
listener = psycopg.connect(autocommit=True)
heard = []
listener.add_notify_handler(lambda note: heard.append(json.loads(note.payload)))
channel = listener.execute("SELECT pgq.channel(%s, finished => true)", (queue,)).fetchone()[0]
listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

conn = psycopg.connect()
payloads = [json.dumps({"n": i}) for i in range(1, n + 1)]
ids = conn.execute("SELECT pgq.enqueue_many(%s, %s::jsonb[])", (queue, payloads)).fetchone()[0]
conn.commit()      # the workers see the items from here on
print("enqueued", flush=True)

rows = conn.execute("SELECT block_id, state FROM pgq.results(%s, %s, wait => '5 minutes', wait_for => 'any')",
                    (queue, ids)).fetchall()
conn.commit()
print("any: rows %d finished %d" % (len(rows), sum(r[1] in ("done", "dead") for r in rows)))

rows = conn.execute("SELECT block_id, state, result, last_error FROM pgq.results(%s, %s, wait => '5 minutes')",
                    (queue, ids)).fetchall()
conn.commit()
n_of = {i: k + 1 for k, i in enumerate(ids)}
done = [r for r in rows if r[1] == "done"]
dead = [r for r in rows if r[1] == "dead"]
right = sum(1 for r in done if r[2] == {"square": n_of[r[0]] ** 2})
print("all: rows %d in order %s done %d dead %d results right %d" %
      (len(rows), [r[0] for r in rows] == ids, len(done), len(dead), right))

# every notification was queued when its commit made the items finished:
# one round trip brings them all
listener.execute("SELECT 1")
h_done = [i for p in heard for i in p.get("done", [])]
h_dead = [i for p in heard for i in p.get("dead", [])]
print("heard: done %d dead %d once %s as finished %s" %
      (len(h_done), len(h_dead), len(set(h_done + h_dead)) == len(h_done + h_dead),
       sorted(h_done) == sorted(r[0] for r in done) and sorted(h_dead) == sorted(r[0] for r in dead)))
EOF
close($fh);

# A worker: claims with a wait and finishes what it gets (every tenth item
# fails, on its only attempt: dead), in batches with complete_many, until
# the queue has n finished items.
my $worker = "$dir/worker.py";
open($fh, '>', $worker) or die;
print $fh <<'EOF';
import json, sys
import psycopg

queue, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conn = psycopg.connect(autocommit=True)
while True:
    rows = conn.execute("SELECT block_id, attempt, payload FROM pgq.claim(%s, %s, wait => '1 s')",
                        (queue, batch)).fetchall()
    ok = [r for r in rows if r[2]["n"] % 10 != 0 or queue == "big"]
    for r in rows:
        if r not in ok:
            conn.execute("SELECT pgq.fail(%s, 'no tens', attempt => %s)", (r[0], r[1]))
    if ok:
        conn.execute("SELECT pgq.complete_many(%s, %s, %s::jsonb[])",
                     ([r[0] for r in ok], [r[1] for r in ok],
                      [json.dumps({"square": r[2]["n"] ** 2}) for r in ok]))
    finished = conn.execute("""SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
                               WHERE g.group_name = %s AND i.state IN ('d', 'f')""", (queue,)).fetchone()[0]
    if finished >= n:
        break
print("worker done", flush=True)
EOF
close($fh);

# --- 200 items, two workers, a listener
my $p = PgqTest::start_prog('producer', 'python3', $producer, 'jobs', 200);
ok(PgqTest::output_until($p, qr/^enqueued$/m), 'the producer enqueued');
my @w = map { PgqTest::start_prog("worker $_", 'python3', $worker, 'jobs', 200, 7) } 1 .. 2;
is(PgqTest::finish_prog($_), 0, "$_->{name}: exit status 0") for @w;
is(PgqTest::finish_prog($p), 0, 'producer: exit status 0');
like($p->{out}, qr/^any: rows 200 finished [1-9]\d*$/m,
	'waiting for any: at least one item finished');
like($p->{out}, qr/^all: rows 200 in order True done 180 dead 20 results right 180$/m,
	'waiting for all: every item done with its result, or dead');
like($p->{out}, qr/^heard: done 180 dead 20 once True as finished True$/m,
	'the listener heard every finished item once, as it finished');

# --- 10,000 items in one wait, completed in batches of 500
$p = PgqTest::start_prog('producer, 10000', 'python3', $producer, 'big', 10000);
ok(PgqTest::output_until($p, qr/^enqueued$/m), 'the producer enqueued 10,000');
@w = (PgqTest::start_prog('worker, 10000', 'python3', $worker, 'big', 10000, 500));
is(PgqTest::finish_prog($w[0]), 0, 'worker, 10000: exit status 0');
is(PgqTest::finish_prog($p), 0, 'producer, 10000: exit status 0');
like($p->{out},
	qr/^all: rows 10000 in order True done 10000 dead 0 results right 10000$/m,
	'waiting for all of 10,000: every item done with its result');
like($p->{out}, qr/^heard: done 0 dead 0 /m,
	'a queue without notify_finished sends nothing');

$node->stop;
done_testing();
