
# pgq behind PgBouncer in transaction pooling mode (the issue "Behind a
# connection pooler").  Debian's pgbouncer runs in front of a test cluster
# with default_pool_size = 2, so that the test's clients share at most two
# server connections, and this test proves what the README promises through
# it:
#
#  1. Transaction mode: four clients drain a group exactly once (BEGIN;
#     claim; record the ids; COMMIT), and their transactions ran on at most
#     two server connections, shared between clients.
#  2. Lease mode: a claim made outside a transaction is completed later,
#     with its attempt, from another server connection; clients interleave
#     claims and completions until the group is drained.
#  3. Waiting claims (wait =>) work through it, being one statement: a
#     waiter is woken by another client's commit (a lease-mode release; in
#     transaction mode, a rollback that gives its block to the waiter, and a
#     commit that consumes the last block and ends another waiter's wait).
#  4. Queues: a waiting claim on an empty queue gets the item another client
#     enqueues; the producer's pgq.result(wait =>) returns the result with
#     which the worker completed it.
#  5. Advisory mode is detected as broken, never silently: a worker whose
#     next statement lands on another server connection gets
#     pgq.check_worker() = false, and 55000 "worker N is not registered in
#     this session" from pgq.claim and pgq.complete; the block it claimed is
#     not consumed, stays with the server connection the pooler took from
#     it (pgq.relock from the other one does not get it), and comes back
#     when pgbouncer closes that connection.  With server_reset_query =
#     DISCARD ALL and server_reset_query_always = 1 (a second pgbouncer), the
#     registration is gone after the transaction that made it, even on the
#     same server connection.  Lease mode is not affected by DISCARD ALL.
#
# Which server connection a client's statement lands on is forced, not
# hoped for: two other clients open transactions, which then hold both
# server connections of the pool; the one holding the connection to avoid
# keeps it, the other lets go, so the next statement can only run on the
# other connection.  Every statement's server connection is read with
# pg_backend_pid() in the statement itself.
#
# pgq.wait_recheck_interval is an hour and every wait is an hour: only a
# wake-up can end a wait before the sessions' timers (hang guards) give up.
#
# Skipped when /usr/sbin/pgbouncer (Debian package pgbouncer) is missing.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTest;

my $PGBOUNCER = '/usr/sbin/pgbouncer';
plan skip_all =>
  "$PGBOUNCER is missing: install the Debian package pgbouncer to run this test"
  unless -x $PGBOUNCER;

# ---------------------------------------------------------------------------
# PgqBouncer: a pgbouncer process in transaction pooling mode in front of a
# node.  It stands in for the node where PgqTest::Session wants one
# (installed_command, connstr), so that sessions connect through it.
# ---------------------------------------------------------------------------
package PgqBouncer;

use Carp;
use IPC::Run;
use Time::HiRes qw(usleep time);

my @running;

sub start
{
	my ($class, $node, $name, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir_short();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $always = $opt{reset_always} ? 1 : 0;
	my $self = bless {
		name => $name,
		node => $node,
		dir => $dir,
		port => $port,
		ini => "$dir/pgbouncer.ini",
		log => "$PostgreSQL::Test::Utils::log_path/019_pgbouncer_$name.log",
		out => '',
		err => '',
	}, $class;

	PostgreSQL::Test::Utils::append_to_file("$dir/userlist.txt",
		qq{"$user" ""\n});
	my $host = $node->host;
	my $nport = $node->port;
	PostgreSQL::Test::Utils::append_to_file(
		$self->{ini}, qq{[databases]
postgres = host=$host port=$nport dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
pool_mode = transaction
default_pool_size = 2
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 50
; pgbouncer's default reset query; in transaction pooling it runs after each
; transaction only with server_reset_query_always = 1
server_reset_query = DISCARD ALL
server_reset_query_always = $always
logfile = $self->{log}
pidfile = $dir/pgbouncer.pid
});
	$self->{h} = IPC::Run::start([ $PGBOUNCER, $self->{ini} ],
		'<', \undef, '>', \$self->{out}, '2>', \$self->{err});
	push @running, $self;

	# ready once a query goes through it
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	for (;;)
	{
		my ($o, $e) = ('', '');
		IPC::Run::run(
			[
				$node->installed_command('psql'), '-XAtq',
				'-d', $self->connstr('postgres'),
				'-c', 'SELECT 1'
			],
			'<', \undef, '>', \$o, '2>', \$e);
		last if $o eq "1\n";
		$self->{h}->pump_nb;
		croak "pgbouncer $name exited: $self->{err}\n"
		  . PostgreSQL::Test::Utils::slurp_file($self->{log})
		  unless $self->{h}->pumpable;
		croak "pgbouncer $name did not come up: $e" if time() > $deadline;
		usleep(10_000);
	}
	return $self;
}

sub installed_command { return $_[0]->{node}->installed_command($_[1]); }

sub connstr
{
	my ($self, $db) = @_;
	return "host=$self->{dir} port=$self->{port} dbname=$db";
}

sub session
{
	my ($self, $name) = @_;
	return PgqTest::Session->new($self, $name);
}

sub stop
{
	my ($self) = @_;
	return unless $self->{h};
	$self->{h}->signal('TERM');    # immediate shutdown
	$self->{h}->finish;
	delete $self->{h};
	@running = grep { $_ != $self } @running;
	return;
}

END { $_->{h}->kill_kill for grep { $_->{h} } @running; }

# ---------------------------------------------------------------------------
package main;

my $node = PostgreSQL::Test::Cluster->new('bouncer');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
pgq.wait_recheck_interval = '1h'
});
$node->start;
setup_tables($node);    # the extension and the table "processed"
$node->safe_psql('postgres',
	'CREATE TABLE served (block_id bigint PRIMARY KEY, pid int NOT NULL)');

my $obs = new_session($node, 'observer');    # direct, not through pgbouncer
my $bouncer = PgqBouncer->start($node, 'tx');
note "pgbouncer in transaction pooling, pool size 2, on port $bouncer->{port}";

# Two clients that can take both server connections of the pool.
my @hogs = map { $bouncer->session("hog$_") } (1, 2);

# Make the pooler's server connection $pid unavailable: both hogs open a
# transaction, which holds both server connections of the pool; the hog on
# $pid keeps its transaction open, the other commits.  The next statement of
# any other client can then only run on the other server connection.
# Returns the hog that holds $pid; unpin() lets it go.
sub pin
{
	my ($pid) = @_;
	my @got = map { $_->query_ok('BEGIN; SELECT pg_backend_pid();') } @hogs;
	my ($keep) = grep { $got[$_] eq $pid } (0, 1);
	die "server connection $pid is not in the pool (the hogs got @got)"
	  unless defined $keep;
	$hogs[ 1 - $keep ]->query_ok('COMMIT;');
	return $hogs[$keep];
}

sub unpin { $_[0]->query_ok('COMMIT;'); return; }

# Hand the session's statements to psql and wait until a backend sleeps in a
# waiting claim or result (wait event "Extension") running a query LIKE
# $pattern, or until the session has finished: 'sleeping' or 'done'.
sub sleeping_or_done
{
	my ($s, $pattern) = @_;
	(my $lit = $pattern) =~ s/'/''/g;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 'done' if $s->poll ne 'busy';
		return 'sleeping'
		  if $obs->query_ok(
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '$lit';"
		  ) eq '1';
		usleep(2_000);
	}
	die "session " . $s->name . " neither slept nor finished";
}

# ---------------------------------------------------------------------------
# 1. Transaction mode: four clients, two server connections, exactly once.
{
	my $query = create_src_group($node, 'tx', 'g', 500, 10);
	my @consumers = map { $bouncer->session("consumer$_") } (1 .. 4);
	my $r = run_consumers(
		'tx', \@consumers,
		work => q{INSERT INTO served (block_id, pid)
SELECT b::bigint, pg_backend_pid()
  FROM nullif(current_setting('pgqtest.block', true), '') b WHERE b IS NOT NULL;});
	is_deeply($r->{errors}, [],
		'transaction mode through pgbouncer: no client saw an error');
	check_exactly_once($node, 'tx', $query, 500, 50,
		'transaction mode through pgbouncer');

	# which client committed each block, on which server connection
	my %client_of = map { $_->[1] => $_->[0] } @{ $r->{claims} };
	my %clients_on;
	for my $row (split /\n/,
		$node->safe_psql('postgres', 'SELECT block_id, pid FROM served'))
	{
		my ($block, $pid) = split /\|/, $row;
		$clients_on{$pid}{ $client_of{$block} // "unknown($block)" } = 1;
	}
	my %clients = map { $_->[0] => 1 } @{ $r->{claims} };
	note 'server connections and the clients they served: '
	  . join('; ',
		map { "$_: " . join(', ', sort keys %{ $clients_on{$_} }) }
		  sort keys %clients_on);
	cmp_ok(scalar(keys %clients_on), '<=', 2,
		'the blocks were committed on at most 2 server connections (the pool size)'
	);
	cmp_ok(scalar(keys %clients), '>', scalar(keys %clients_on),
		'by more clients than server connections: clients shared them');
	$_->close for @consumers;
}

# ---------------------------------------------------------------------------
# 2. Lease mode: claim outside a transaction, complete with the attempt from
# another server connection.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('ls', 'SELECT g FROM generate_series(1, 6) g', 2, mode => 'lease')"
);
{
	my $a = $bouncer->session('lease_a');
	my $b = $bouncer->session('lease_b');
	my ($blk, $att, $p1) = split /\|/,
	  $a->query_ok("SELECT block_id, attempt, pg_backend_pid() FROM pgq.claim('ls');");
	is($att, 1, 'lease mode: a client claimed a block outside a transaction');
	my $hog = pin($p1);
	my ($done, $p2) = split /\|/,
	  $a->query_ok("SELECT pgq.complete($blk, attempt => $att), pg_backend_pid();");
	isnt($p2, $p1, 'its completion ran on another server connection');
	is($done, 't', 'and completed the block, its attempt being the proof');
	unpin($hog);

	# the two other blocks: both claimed, then completed the other way round
	my @held = map {
		[ $_, split /\|/, $_->query_ok("SELECT block_id, attempt FROM pgq.claim('ls');") ]
	} ($a, $b);
	my @ok = map {
		my ($s, $bl, $at) = @$_;
		$s->query_ok("SELECT pgq.complete($bl, attempt => $at);")
	} reverse @held;
	is_deeply(\@ok, [ 't', 't' ],
		'two clients claimed one block each and completed them later');
	my $st = group_stats($node, 'ls');
	is_deeply([ @$st{qw(state pending claimed done)} ],
		[ 'drained', 0, 0, 3 ], 'lease mode through pgbouncer: group drained');
	$a->close;
	$b->close;
}

# ---------------------------------------------------------------------------
# 3. Waiting claims through pgbouncer.
$node->safe_psql('postgres', q{
	SELECT pgq.create_group('wl', 'SELECT 1', 1, mode => 'lease');
	SELECT pgq.create_group('wt', 'SELECT 1', 1);
});
{
	my $h = $bouncer->session('holder');
	my $w = $bouncer->session('waiter');
	my $w2 = $bouncer->session('waiter2');

	# lease mode: the holder's release (a commit) wakes the waiter
	my ($blk, $att) = split /\|/,
	  $h->query_ok("SELECT block_id, attempt FROM pgq.claim('wl');");
	$w->send("SELECT ids, attempt FROM pgq.claim('wl', wait => '1 hour');");
	is(sleeping_or_done($w, "%pgq.claim('wl'%"), 'sleeping',
		'lease mode: a client waits in pgq.claim through pgbouncer');
	is($h->query_ok("SELECT pgq.release($blk, attempt => $att);"),
		't', 'another client releases the block');
	is($w->wait, 'done', 'the waiter returned');
	is("$w->{result}$w->{error}", '{1}|2',
		'woken by that commit, with the block (attempt 2)');

	# transaction mode: a rollback gives the block to a waiter, whose commit
	# then ends the wait of a second waiter (nothing left to claim)
	is($h->query_ok("BEGIN; SELECT ids FROM pgq.claim('wt');"),
		'{1}', 'transaction mode: a client holds the only block');
	$w->send("BEGIN; SELECT ids FROM pgq.claim('wt', wait => '1 hour');");
	is(sleeping_or_done($w, "%pgq.claim('wt'%"), 'sleeping',
		'another client waits for it');
	$h->query_ok('ROLLBACK;');
	is($w->wait, 'done', 'the waiter returned at the rollback');
	is("$w->{result}$w->{error}", '{1}', 'with the block given back');
	$w2->send("BEGIN; SELECT count(*) FROM pgq.claim('wt', wait => '1 hour');");
	is(sleeping_or_done($w2, "%pgq.claim('wt'%"), 'sleeping',
		'a third client waits while the block is held');
	$w->query_ok('COMMIT;');
	is($w2->wait, 'done', 'the commit that consumed the block ended its wait');
	is("$w2->{result}$w2->{error}", '0', 'with no rows: the group is drained');
	$w2->query_ok('COMMIT;');
	$_->close for ($h, $w, $w2);
}

# ---------------------------------------------------------------------------
# 4. Queues: enqueue, waiting claim, complete with a result, waiting result.
{
	my $p = $bouncer->session('producer');
	my $w = $bouncer->session('queue_worker');
	is($p->query_ok("SELECT pgq.create_queue('jobs');"),
		't', 'a queue created through pgbouncer');
	$w->send(
		"SELECT block_id, attempt, payload FROM pgq.claim('jobs', wait => '1 hour');");
	is(sleeping_or_done($w, "%pgq.claim('jobs'%"), 'sleeping',
		'a worker waits on the empty queue');
	my $id = $p->query_ok(q{SELECT pgq.enqueue('jobs', '{"n": 7}', key => 'seven');});
	is($w->wait, 'done', 'the enqueue woke the worker');
	is("$w->{result}$w->{error}", qq{$id|1|{"n": 7}},
		'which claimed the item, attempt 1, with its payload');
	$p->send("SELECT state, result FROM pgq.result($id, wait => '1 hour');");
	is(sleeping_or_done($p, '%pgq.result(%'), 'sleeping',
		'the producer waits for the result');
	is( $w->query_ok(
			qq{SELECT pgq.complete($id, result => '{"square": 49}', attempt => 1);}),
		't',
		'the worker completes the item with a result');
	is($p->wait, 'done', 'the completion woke the producer');
	is("$p->{result}$p->{error}", 'done|{"square": 49}',
		'pgq.result returned the state and the result');
	$_->close for ($p, $w);
}

# ---------------------------------------------------------------------------
# 5a. Advisory mode, pgbouncer's default: no reset query between
# transactions.  A worker that lands on another server connection is told.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('adv', 'SELECT g FROM generate_series(1, 4) g', 1, mode => 'advisory')"
);
my $lost_block;
my $lost_pid;
{
	my $w = $bouncer->session('adv_worker');
	$w->query_ok('\set VERBOSITY verbose');
	my ($wid, $p1) = split /\|/,
	  $w->query_ok("SELECT pgq.register_worker('bounced'), pg_backend_pid();");
	is($obs->query_ok("SELECT pid, alive FROM pgq.workers WHERE worker_id = $wid;"),
		"$p1|t", 'advisory: a worker registered through pgbouncer');

	my $hog = pin($p1);
	my ($ok, $p2) = split /\|/,
	  $w->query_ok("SELECT pgq.check_worker($wid), pg_backend_pid();");
	isnt($p2, $p1, 'its next statement ran on another server connection');
	is($ok, 'f', 'where pgq.check_worker() is false');
	$w->send("SELECT block_id FROM pgq.claim('adv', worker_id => $wid);");
	$w->wait;
	like(
		$w->{error},
		qr/ERROR:\s+55000: worker $wid is not registered in this session/,
		'and pgq.claim() is refused with 55000');
	is($w->{result}, '', 'claiming nothing');
	is(group_stats($node, 'adv')->{claimed},
		0, 'no block of the group is claimed');
	is($hog->query_ok("SELECT pgq.check_worker($wid);"),
		't',
		'the registration stays with the server connection, now serving another client'
	);
	unpin($hog);

	# a claim that lands on the registration's connection works; the
	# completion that lands elsewhere is refused, and nothing is consumed
	$hog = pin($p2);
	my ($blk, $pc) = split /\|/,
	  $w->query_ok(
		"SELECT block_id, pg_backend_pid() FROM pgq.claim('adv', worker_id => $wid);");
	is($pc, $p1, 'a claim on the server connection of the registration');
	ok(defined $blk && $blk =~ /^\d+$/, 'claims a block');
	unpin($hog);
	$hog = pin($p1);
	$w->send("SELECT pgq.complete($blk, worker_id => $wid);");
	$w->wait;
	like(
		$w->{error},
		qr/ERROR:\s+55000: worker $wid is not registered in this session/,
		'its completion on the other server connection is refused with 55000');
	is($obs->query_ok("SELECT count(*) FROM pgq.blocks WHERE block_id = $blk;"),
		'1', 'the block is not consumed');
	my $st = group_stats($node, 'adv');
	is_deeply([ @$st{qw(pending claimed done)} ],
		[ 3, 1, 0 ], 'group_stats: the block is still claimed, none done');
	is( $obs->query_ok(
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $p1 AND state = 'idle in transaction';"
		),
		'1',
		'(held by the server connection the pooler gave to another client)');

	# README: register again and relock; the block is still locked by the
	# other server connection's session, so relock does not get it
	my ($wid2, $pr) = split /\|/,
	  $w->query_ok("SELECT pgq.register_worker('bounced-again'), pg_backend_pid();");
	my ($got, $pr2) = split /\|/,
	  $w->query_ok("SELECT pgq.relock(ARRAY[$blk]::bigint[], $wid2), pg_backend_pid();");
	is("$pr $pr2", "$p2 $p2", 'the worker registered again, on the other connection');
	is($got, '{}',
		'pgq.relock() there does not get the block: the other connection holds it');
	unpin($hog);
	$w->close;
	($lost_block, $lost_pid) = ($blk, $p1);
}

# ---------------------------------------------------------------------------
# 5b. server_reset_query_always = 1: DISCARD ALL after every transaction.
{
	my $reset = PgqBouncer->start($node, 'reset', reset_always => 1);
	note "pgbouncer with server_reset_query_always = 1 on port $reset->{port}";
	$node->safe_psql('postgres',
		"SELECT pgq.create_group('adv2', 'SELECT 1', 1, mode => 'advisory')");
	my $w = $reset->session('reset_worker');
	$w->query_ok('\set VERBOSITY verbose');
	my ($wid, $p) = split /\|/,
	  $w->query_ok("SELECT pgq.register_worker('discarded'), pg_backend_pid();");
	# every statement so far ran alone: the pool has one server connection
	my ($ok, $p2) = split /\|/,
	  $w->query_ok("SELECT pgq.check_worker($wid), pg_backend_pid();");
	is($p2, $p, 'advisory, DISCARD ALL after each transaction: the next statement runs on the same server connection');
	is($ok, 'f', 'and pgq.check_worker() is false there');
	$w->send("SELECT block_id FROM pgq.claim('adv2', worker_id => $wid);");
	$w->wait;
	like(
		$w->{error},
		qr/ERROR:\s+55000: worker $wid is not registered in this session/,
		'pgq.claim() is refused with 55000');
	is($obs->query_ok("SELECT alive FROM pgq.workers WHERE worker_id = $wid;"),
		'f', 'pgq.workers shows the registration not alive');

	# lease mode does not mind
	$node->safe_psql('postgres',
		"SELECT pgq.create_group('ls2', 'SELECT 1', 1, mode => 'lease')");
	my ($blk, $att) = split /\|/,
	  $w->query_ok("SELECT block_id, attempt FROM pgq.claim('ls2');");
	is($w->query_ok("SELECT pgq.complete($blk, attempt => $att);"),
		't', 'a lease-mode claim is completed across DISCARD ALL');
	$w->close;
	$reset->stop;
}

# ---------------------------------------------------------------------------
# 5c. The block lost in 5a comes back when pgbouncer closes its server
# connections (here: when it stops).
$_->close for @hogs;
$bouncer->stop;
ok( $node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $lost_pid)"),
	'advisory: the server connection that held the block ended with pgbouncer');
{
	my $d = new_session($node, 'direct');
	my $wid = $d->query_ok("SELECT pgq.register_worker('direct');");
	is( $d->query_ok(
			"SELECT pgq.relock(ARRAY[$lost_block]::bigint[], $wid);"),
		"{$lost_block}",
		'and a worker on a direct connection takes the block back');
	is($d->query_ok("SELECT pgq.complete($lost_block, worker_id => $wid);"),
		't', 'and completes it');
	$d->close;
}

$obs->close;
$node->stop;
done_testing();
