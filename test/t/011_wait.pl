
# Waiting claims (pgq.claim(..., wait => ...)) and pgq.notify, end to end.
#
# - A waiter wakes at the commit (or rollback, or advisory release) that made
#   a block claimable; the latency from that event to the waiter's return is
#   measured over 20 round trips per kind and printed (note), not asserted.
#   The waiters set pgq.wait_recheck_interval to an hour and wait up to 60
#   seconds: only a wake-up can give them their block.
# - The end of a session holding advisory blocks wakes a waiter.
# - Cancellation and statement_timeout end a wait; so does a client that
#   went away (its backend goes, however long that takes: no time asserted).
# - The recheck interval catches what nobody announces: a lease that runs
#   out, a retry that comes due.
# - With pgq.notify on, a psql LISTENing on a group's channel
#   (pgq.channel()) gets one notification per group per transaction, with
#   the group's name as payload; with it off, none; on channel pgq, none.
# - Without shared_preload_libraries a waiting claim still works (it polls)
#   and says so once in the server log.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('wait');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

my $obs = new_session($node, 'observer');

# A waiter: rechecks only every hour, so that a claim that returns a block
# before its 60 seconds are up was woken.
sub new_waiter
{
	my ($name, $node_) = @_;
	my $w = new_session($node_ // $node, $name);
	$w->query_ok("SET pgq.wait_recheck_interval = '1h';");
	return $w;
}

# Wait until the session sleeps in a waiting claim, or has finished.
sub sleeping_or_done
{
	my ($w, $observer) = @_;
	return PgqTest::sleeping_or_done($w, $observer // $obs);
}

# Wait up to $secs seconds for the session to finish; true if it did.
sub done_within
{
	my ($w, $secs) = @_;
	my $deadline = time() + $secs;
	while (time() < $deadline)
	{
		return 1 if $w->poll ne 'busy';
		usleep(2_000);
	}
	return 0;
}

# nearest-rank percentile of a list of numbers
sub pct
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	my $i = int($p / 100 * @v + 0.999999) - 1;
	$i = 0 if $i < 0;
	return $v[$i];
}

sub report
{
	my ($what, @ms) = @_;
	note sprintf(
		"wake-up latency, %s, %d rounds: p50 %.2f ms, p99 %.2f ms, min %.2f ms, max %.2f ms",
		$what, scalar @ms, pct(50, @ms), pct(99, @ms), pct(0, @ms),
		pct(100, @ms));
	return;
}

my $rounds = 20;
my $holder = new_session($node, 'holder');
my $waiter = new_waiter('waiter');

# ---------------------------------------------------------------------------
# Latency, transaction mode: the holder holds every block, the waiter waits,
# the holder rolls back.  Both times come from the server's clock: the
# holder's just before its ROLLBACK (sent with it in one query string), the
# waiter's once its claim has returned.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('lat_t', 'SELECT g FROM generate_series(1, $rounds) g', 1)"
);
{
	my (@ms, @got, @held);
	for my $i (1 .. $rounds)
	{
		push @held,
		  $holder->query_ok(
			"BEGIN; SELECT count(*) FROM pgq.claim('lat_t', max_blocks => 1000);");
		$waiter->send(
			"BEGIN; SELECT ids[1], extract(epoch FROM clock_timestamp()) FROM pgq.claim('lat_t', wait => '60 s');"
		);
		die 'the waiter did not wait' if sleeping_or_done($waiter) ne 'sleeping';
		my $t0 = $holder->query_ok(
			"SELECT extract(epoch FROM clock_timestamp()) \\; ROLLBACK;");
		die "waiter failed: $waiter->{error}" if $waiter->wait ne 'done';
		my ($id, $t1) = split /\|/, $waiter->{result};
		push @got, $id // '';
		push @ms, 1000 * ($t1 - $t0) if defined $t1;
		$waiter->query_ok('COMMIT;');
	}
	is_deeply(\@held, [ reverse 1 .. $rounds ],
		'transaction mode: each round the holder held every block left');
	is_deeply(\@got, [ 1 .. $rounds ],
		"transaction mode: a rollback woke the waiter $rounds times, which got the next block each time"
	);
	report('transaction mode, from ROLLBACK', @ms);
}

# ---------------------------------------------------------------------------
# Latency, lease mode: the holder holds every block under a lease, and
# releases one per round in a one-statement transaction; the waiter gets it
# under attempt 2 and completes it.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('lat_l', 'SELECT g FROM generate_series(1, $rounds) g', 1, mode => 'lease')"
);
{
	my (@ms, @got);
	my @held = split /\n/,
	  $holder->query_ok(
		"SELECT block_id FROM pgq.claim('lat_l', max_blocks => 1000) ORDER BY block_id;"
	  );
	is(scalar @held, $rounds, "lease mode: the holder holds all $rounds blocks");
	for my $i (1 .. $rounds)
	{
		my $b = $held[ $i - 1 ];
		$waiter->send(
			"SELECT block_id, attempt, extract(epoch FROM clock_timestamp()) FROM pgq.claim('lat_l', wait => '60 s');"
		);
		die 'the waiter did not wait' if sleeping_or_done($waiter) ne 'sleeping';
		my ($t0) = split /\|/,
		  $holder->query_ok(
			"SELECT extract(epoch FROM clock_timestamp()), pgq.release($b, attempt => 1);"
		  );
		die "waiter failed: $waiter->{error}" if $waiter->wait ne 'done';
		my ($block, $attempt, $t1) = split /\|/, $waiter->{result};
		push @got, ($block // '') . '/' . ($attempt // '');
		push @ms, 1000 * ($t1 - $t0) if defined $t1;
		$waiter->query_ok("SELECT pgq.complete($block, attempt => $attempt);")
		  if defined $attempt;
	}
	is_deeply(\@got, [ map { "$_/2" } @held ],
		"lease mode: each release woke the waiter, which got that block under attempt 2"
	);
	report('lease mode, from the release\'s commit', @ms);
}

# ---------------------------------------------------------------------------
# Latency, advisory mode: pgq.release() wakes at once, without a commit.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('lat_a', 'SELECT g FROM generate_series(1, $rounds) g', 1, mode => 'advisory')"
);
{
	my (@ms, @got);
	my $hw = $holder->query_ok("SELECT pgq.register_worker('holder');");
	my $ww = $waiter->query_ok("SELECT pgq.register_worker('waiter');");
	my @held = split /\n/,
	  $holder->query_ok(
		"SELECT block_id FROM pgq.claim('lat_a', max_blocks => 1000, worker_id => $hw) ORDER BY block_id;"
	  );
	is(scalar @held, $rounds, "advisory mode: the holder holds all $rounds blocks");
	for my $i (1 .. $rounds)
	{
		my $b = $held[ $i - 1 ];
		$waiter->send(
			"SELECT block_id, extract(epoch FROM clock_timestamp()) FROM pgq.claim('lat_a', wait => '60 s', worker_id => $ww);"
		);
		die 'the waiter did not wait' if sleeping_or_done($waiter) ne 'sleeping';
		my ($t0) = split /\|/,
		  $holder->query_ok(
			"SELECT extract(epoch FROM clock_timestamp()), pgq.release($b, worker_id => $hw);"
		  );
		die "waiter failed: $waiter->{error}" if $waiter->wait ne 'done';
		my ($block, $t1) = split /\|/, $waiter->{result};
		push @got, $block // '';
		push @ms, 1000 * ($t1 - $t0) if defined $t1;
		$waiter->query_ok("SELECT pgq.complete($block, worker_id => $ww);")
		  if defined $t1;
	}
	is_deeply(\@got, \@held,
		"advisory mode: each release woke the waiter, which got that block");
	report('advisory mode, from pgq.release()', @ms);
}

# ---------------------------------------------------------------------------
# The end of a session that holds advisory blocks wakes a waiter.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('sess_end', 'SELECT 1', 1, mode => 'advisory')");
{
	my $h = new_session($node, 'advisory_holder');
	my $hw = $h->query_ok("SELECT pgq.register_worker('h');");
	is($h->query_ok("SELECT ids FROM pgq.claim('sess_end', worker_id => $hw);"),
		'{1}', 'advisory holder claimed the only block');
	my $ww = $waiter->query_ok("SELECT pgq.register_worker('w');");
	$waiter->send(
		"SELECT ids FROM pgq.claim('sess_end', wait => '60 s', worker_id => $ww);");
	is(sleeping_or_done($waiter), 'sleeping', 'the waiter waits for it');
	$h->close;
	is($waiter->wait, 'done', 'the waiter returned');
	is($waiter->{result}, '{1}',
		'the end of the holder\'s session woke the waiter, which got the block');
	$waiter->query_ok("SELECT pgq.release(block_id, worker_id => $ww) FROM pgq.blocks b JOIN pgq.groups g USING (group_id) WHERE g.group_name = 'sess_end';");
}

# ---------------------------------------------------------------------------
# Cancellation and statement_timeout end a wait.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('cancel', 'SELECT 1', 1, mode => 'lease')");
$holder->query_ok("SELECT count(*) FROM pgq.claim('cancel');");
{
	$waiter->send("SELECT count(*) FROM pgq.claim('cancel', wait => '60 s');");
	is(sleeping_or_done($waiter), 'sleeping', 'a waiter sleeps');
	my $t0 = time();
	$obs->query_ok("SELECT pg_cancel_backend($waiter->{pid});");
	is($waiter->wait, 'done', 'the cancelled waiter returned');
	like($waiter->{error}, qr/canceling statement due to user request/,
		'pg_cancel_backend() ended the wait');
	note sprintf('cancellation ended the wait after %.1f ms',
		1000 * (time() - $t0));

	$waiter->send(
		"BEGIN; SET LOCAL statement_timeout = '500ms'; SELECT count(*) FROM pgq.claim('cancel', wait => '60 s'); ROLLBACK;"
	);
	is($waiter->wait, 'done', 'the waiter under statement_timeout returned');
	like($waiter->{error}, qr/canceling statement due to statement timeout/,
		'statement_timeout ended the wait');
	is($waiter->query_ok('SELECT 1;'), '1', 'the session goes on');
}

# ---------------------------------------------------------------------------
# A waiter whose client goes away ends its wait: its backend disappears.
# With the default recheck interval of a second it notices within about a
# second.  (No time asserted: the poll waits as long as it must.)
{
	my $w = new_session($node, 'killed_waiter');
	my $pid = $w->pid;
	$w->send("SELECT count(*) FROM pgq.claim('cancel', wait => '60 s');");
	is(sleeping_or_done($w), 'sleeping', 'a waiter sleeps');
	my $t0 = time();
	$w->{h}->signal('KILL');
	ok( $node->poll_query_until('postgres',
			"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)"),
		'the backend of a waiter whose psql was killed ends');
	note sprintf(
		'a waiter whose client was killed ended after %.0f ms (recheck interval 1s)',
		1000 * (time() - $t0));
	$w->poll;
}

# ---------------------------------------------------------------------------
# The recheck interval (default 1s) catches what nobody announces: a lease
# that runs out, a retry that comes due.
$node->safe_psql('postgres',
	"SELECT pgq.create_group('recheck', 'SELECT 1', 1, mode => 'lease', lease => '1 second')"
);
{
	my $w = new_session($node, 'rechecker');
	my ($b, $a) = split /\|/,
	  $holder->query_ok("SELECT block_id, attempt FROM pgq.claim('recheck');");
	is($a, 1, 'holder claimed the block under a 1 second lease');
	is( $w->query_ok(
			"SELECT attempt FROM pgq.claim('recheck', wait => '60 s');"),
		'2',
		'a waiter gets the block once its lease ran out (attempt 2)');
	is( $w->query_ok(
			"SELECT pgq.fail($b, 'later', retry_after => '1 second', attempt => 2);"),
		't', 'the block failed with a retry in 1 second');
	is( $w->query_ok(
			"SELECT attempt FROM pgq.claim('recheck', wait => '60 s');"),
		'3',
		'a waiter gets the block once its retry came due (attempt 3)');
	$w->close;
}

# ---------------------------------------------------------------------------
# NOTIFY, seen by a LISTENing psql.
{
	my $l = new_session($node, 'listener');
	$l->query_ok('LISTEN pgq;');
	my $n = new_session($node, 'notifier');
	my $npid = $n->pid;
	my %channel_of;

	# notifications psql printed since the last call, as "payload" strings
	# (the sender's pid and the payload's group's channel checked); a round
	# trip on the listener first
	my $received = sub {
		my $out = $l->query_ok('SELECT 1;');
		my @got;
		for my $line (split /\n/, $out)
		{
			next if $line eq '1';
			if ($line =~
				/^Asynchronous notification "(.*)" with payload "(.*)" received from server process with PID (\d+)\.$/
			  )
			{
				my $got = $2;
				$got .= " on channel $1"
				  unless defined $channel_of{$2} && $1 eq $channel_of{$2};
				$got .= " from pid $3" unless $3 == $npid;
				push @got, $got;
			}
			else
			{
				push @got, "unexpected: $line";
			}
		}
		return \@got;
	};

	# run $sql, which creates group $name, in a transaction of the notifier,
	# and have the listener LISTEN on the group's channel before it commits
	my $create = sub {
		my ($name, $sql) = @_;
		$n->query_ok("BEGIN; $sql");
		$channel_of{$name} = $n->query_ok("SELECT pgq.channel('$name');");
		$l->query_ok(qq{LISTEN "$channel_of{$name}";});
	};

	$create->('nf_off',
		"SELECT pgq.create_group('nf_off', 'SELECT g FROM generate_series(1, 4) g', 2, mode => 'lease');"
	);
	$n->query_ok('COMMIT;');
	$n->query_ok(
		"SELECT pgq.release(block_id, attempt => attempt) FROM pgq.claim('nf_off');");
	is_deeply($received->(), [], 'pgq.notify off: no notification');

	$n->query_ok('SET pgq.notify = on;');
	$create->('nf_l',
		"SELECT pgq.create_group('nf_l', 'SELECT g FROM generate_series(1, 4) g', 2, mode => 'lease');"
	);
	$n->query_ok('COMMIT;');
	is_deeply($received->(), ['nf_l'],
		'creating a group with blocks: one notification, payload the group name');
	$n->query_ok(
		"SELECT pgq.release(block_id, attempt => attempt) FROM pgq.claim('nf_l');");
	is_deeply($received->(), ['nf_l'], 'a lease release: one notification');

	$create->('nf_a',
		"SELECT pgq.create_group('nf_a', 'SELECT g FROM generate_series(1, 4) g', 2, mode => 'advisory');"
	);
	$n->query_ok('COMMIT;');
	my $w = $n->query_ok("SELECT pgq.register_worker('n');");
	is_deeply($received->(), ['nf_a'], 'creating an advisory group: one');
	$n->query_ok(
		"SELECT pgq.release(block_id, worker_id => $w) FROM pgq.claim('nf_a', worker_id => $w);"
	);
	is_deeply($received->(), ['nf_a'], 'an advisory release: one notification');

	$create->('nf_t',
		"SELECT pgq.release(block_id, attempt => attempt) FROM pgq.claim('nf_l', max_blocks => 2);
		 SELECT pgq.release(block_id, worker_id => $w) FROM pgq.claim('nf_a', max_blocks => 2, worker_id => $w);
		 SELECT pgq.create_group('nf_t', 'SELECT 1');");
	$n->query_ok('COMMIT;');
	is_deeply(
		$received->(),
		[qw(nf_l nf_a nf_t)],
		'one transaction, two releases in each of two groups and a creation: one notification per group'
	);

	$n->query_ok('SET pgq.notify = off;');
	$n->query_ok(
		"SELECT pgq.release(block_id, attempt => attempt) FROM pgq.claim('nf_l');");
	$n->query_ok(
		"SELECT pgq.release(block_id, worker_id => $w) FROM pgq.claim('nf_a', worker_id => $w);"
	);
	$create->('nf_off2', "SELECT pgq.create_group('nf_off2', 'SELECT 1');");
	$n->query_ok('COMMIT;');
	is_deeply($received->(), [], 'pgq.notify off again: none');
	$n->close;
	$l->close;
}

# ---------------------------------------------------------------------------
# A waiter on a transaction-mode group whose last block another
# transaction holds must return (no rows) as soon as that transaction
# commits: the commit takes its block out of the group's claimed count before
# it wakes the waiter, so the waiter sees the group exhausted.  Counted over
# 10 rounds.  The waiter's wait and recheck interval are an hour: only the
# wake-up can end it before the test harness gives up.
{
	my $overslept = 0;
	for my $i (1 .. 10)
	{
		$node->safe_psql('postgres',
			"SELECT pgq.create_group('last_$i', 'SELECT 1', 1)");
		$holder->query_ok("BEGIN; SELECT ids FROM pgq.claim('last_$i');");
		$waiter->send(
			"BEGIN; SELECT count(*) FROM pgq.claim('last_$i', wait => '1 hour');");
		die 'the waiter did not wait' if sleeping_or_done($waiter) ne 'sleeping';
		$holder->query_ok('COMMIT;');
		if (!done_within($waiter, $PostgreSQL::Test::Utils::timeout_default))
		{
			$overslept++;
			$obs->query_ok("SELECT pg_cancel_backend($waiter->{pid});");
			$waiter->wait;
		}
		elsif ($waiter->{result} ne '0' || $waiter->{error} ne '')
		{
			diag "round $i: $waiter->{result} $waiter->{error}";
		}
		$waiter->query_ok('ROLLBACK;');
	}
	note "transaction mode, last block committed: the waiter overslept in $overslept of 10 rounds";
	is($overslept, 0,
		'the commit of the last block held ends every wait at once');
}

# ---------------------------------------------------------------------------
# pgq.complete() of a lease-mode group's last block leaves the group
# unable to yield another one; README: "the end of every transaction that
# claimed, completed, ... blocks of the group wakes it".
$node->safe_psql('postgres',
	"SELECT pgq.create_group('lc', 'SELECT 1', 1, mode => 'lease')");
{
	my ($b, $a) = split /\|/,
	  $holder->query_ok("SELECT block_id, attempt FROM pgq.claim('lc');");
	$waiter->send("SELECT count(*) FROM pgq.claim('lc', wait => '1 hour');");
	is(sleeping_or_done($waiter), 'sleeping',
		'a waiter waits for the leased block');
	is($holder->query_ok("SELECT pgq.complete($b, attempt => $a);"),
		't', 'the holder completes the last block');
	my $woken = done_within($waiter, $PostgreSQL::Test::Utils::timeout_default);
	if (!$woken)
	{
		$obs->query_ok("SELECT pg_cancel_backend($waiter->{pid});");
		$waiter->wait;
	}
	ok($woken, 'the completion ends the wait at once');
}

# ---------------------------------------------------------------------------
# A lease-mode claim made in a transaction block that is still open is
# a claim that may come back (if that transaction rolls back), and a block
# that will be leased if it commits: a waiting claim must wait (the open
# claim counts as claimed in shared memory until its transaction ends).
$node->safe_psql('postgres',
	"SELECT pgq.create_group('lt', 'SELECT 1', 1, mode => 'lease')");
{
	$holder->query_ok("BEGIN; SELECT attempt FROM pgq.claim('lt');");
	$waiter->send("SELECT ids, attempt FROM pgq.claim('lt', wait => '60 s');");
	my $state = sleeping_or_done($waiter);
	if ($state eq 'done')
	{
		note "the waiter returned at once: '$waiter->{result}' $waiter->{error}";
	}
	is($state, 'sleeping',
		'a waiter waits while a lease-mode claim is in an open transaction');
	$holder->query_ok('ROLLBACK;');
	$waiter->wait;
	is($waiter->{result}, '{1}|1',
		'... and gets the block when that transaction rolls back');
}

# ---------------------------------------------------------------------------
# README: "a client that went away ends its wait".  With a recheck interval
# and a wait of an hour, the backend can only end because the sleeping
# waiter noticed that its client was gone.
{
	my $w = new_waiter('killed_waiter_1h');
	my $pid = $w->pid;
	$w->send("SELECT count(*) FROM pgq.claim('cancel', wait => '1 hour');");
	is(sleeping_or_done($w), 'sleeping', 'a waiter (recheck 1h) sleeps');
	my $t0 = time();
	$w->{h}->signal('KILL');
	ok( $node->poll_query_until('postgres',
			"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)"),
		'its backend ends after its psql was killed');
	my $secs = time() - $t0;
	note sprintf(
		'a waiter (recheck interval 1h, wait 1h) whose client was killed ended after %.1f s',
		$secs);
	$w->poll;
}

$holder->close;
$waiter->close;
$obs->close;
$node->stop;

# ---------------------------------------------------------------------------
# Without shared_preload_libraries: a waiting claim polls every 100 ms, and
# says so once in the server log.
my $plain = PostgreSQL::Test::Cluster->new('wait_nopreload');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION pgq');
$plain->safe_psql('postgres',
	"SELECT pgq.create_group('np', 'SELECT g FROM generate_series(1, 2) g', 1)");
{
	my $o = new_session($plain, 'observer');
	my $h = new_session($plain, 'holder');
	my $w = new_session($plain, 'waiter');
	my $log_offset = -s $plain->logfile;

	$h->query_ok("BEGIN; SELECT count(*) FROM pgq.claim('np', max_blocks => 2);");
	$w->send("BEGIN; SELECT ids FROM pgq.claim('np', wait => '60 s');");
	is(sleeping_or_done($w, $o), 'sleeping', 'without preload, a claim waits');
	$h->query_ok('ROLLBACK;');
	is($w->wait, 'done', 'the waiter returned');
	is($w->{result}, '{1}', 'it got the block given back (found by polling)');
	$w->query_ok('COMMIT;');

	# a second wait in the same session: the holder commits the last block
	$h->query_ok("BEGIN; SELECT count(*) FROM pgq.claim('np');");
	$w->send("BEGIN; SELECT count(*) FROM pgq.claim('np', wait => '60 s');");
	is(sleeping_or_done($w, $o), 'sleeping', 'a second waiting claim waits');
	$h->query_ok('COMMIT;');
	is($w->wait, 'done', 'it returned');
	is($w->{result}, '0', 'with no rows, the group being consumed');
	$w->query_ok('COMMIT;');

	my $log = slurp_file($plain->logfile, $log_offset);
	my $said = () = $log =~ /waiting claims poll every 100 ms/g;
	is($said, 1, 'the log says once that waiting claims poll every 100 ms');

	# another session that waits says it again: once per session
	$plain->safe_psql('postgres',
		"SELECT pgq.create_group('np2', 'SELECT 1', 1)");
	$h->query_ok("BEGIN; SELECT count(*) FROM pgq.claim('np2');");
	my $w2 = new_session($plain, 'waiter2');
	$w2->send("BEGIN; SELECT count(*) FROM pgq.claim('np2', wait => '60 s');");
	is(sleeping_or_done($w2, $o), 'sleeping', 'a waiter in another session waits');
	$h->query_ok('ROLLBACK;');
	is($w2->wait, 'done', 'it returned');
	is($w2->{result}, '1', 'with the block given back');
	$w2->query_ok('COMMIT;');
	$log = slurp_file($plain->logfile, $log_offset);
	$said = () = $log =~ /waiting claims poll every 100 ms/g;
	note "after a second session waited, the log says it $said times";

	$_->close for ($o, $h, $w, $w2);
}
$plain->stop;

done_testing();
