
# Helpers for pgq's TAP tests: background psql sessions that can be driven
# side by side without blocking, consumers that claim blocks and record their
# ids in a "processed" table in the claiming transaction, and the final
# exactly-once checks.

package PgqTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use Test::More;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(
  new_session setup_tables create_src_group group_stats consume_sql
  run_consumers hold_claims held_blocks blocks_left
  wait_until wait_for_sessions_dead check_consistent check_exactly_once
  start_prog finish_prog output_until start_router
);

# What psql says when the server ends its connection.
our $LOST_RE = qr/server closed the connection unexpectedly|connection to server was lost|no connection to the server|could not (?:send|receive) data (?:to|from) server|terminating connection/;

# How long the poll loops below wait between two looks at their sessions.
# This is a polling interval: every wait is for an observed condition.
my $POLL_US = 5_000;

# ---------------------------------------------------------------------------
# PgqTest::Session: a psql process reading statements from a pipe.
#
# send() queues statements and returns at once; poll() says whether they have
# finished (each batch is followed by a banner on stdout and stderr, as in
# PostgreSQL::Test::BackgroundPsql, whose sessions can only be waited for one
# at a time); query_ok() sends and waits.  ON_ERROR_STOP is off, so that an
# error is reported (in {error}) and the session goes on.  When the server
# ends the connection, psql (not interactive) exits as soon as it notices,
# and poll() returns 'dead'; see also lost_connection().
# ---------------------------------------------------------------------------
package PgqTest::Session;

use strict;
use warnings;

use Carp;
use IPC::Run;
use Time::HiRes qw(usleep);

sub new
{
	my ($class, $node, $name) = @_;
	my $self = bless {
		name => $name,
		node => $node,
		in => '',
		out => '',
		err => '',
		seq => 0,
		busy => 0,
		dead => 0,
	}, $class;

	# a guard against hangs, restarted before each wait, not an assertion
	$self->{timer} =
	  IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	$self->{h} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq',
			'-v', 'ON_ERROR_STOP=0',
			'-d', $node->connstr('postgres') . " application_name=$name",
			'-f', '-'
		],
		'<', \$self->{in},
		'>', \$self->{out},
		'2>', \$self->{err},
		$self->{timer});
	$self->{pid} = $self->query_ok('SELECT pg_backend_pid();');
	croak "session $name: no backend pid" unless $self->{pid} =~ /^\d+$/;
	return $self;
}

sub name { return $_[0]->{name}; }
sub pid  { return $_[0]->{pid}; }
sub is_busy { return $_[0]->{busy}; }
sub is_dead { return $_[0]->{dead}; }

# Did the last statements find the connection gone?  psql exits when it
# notices this between statements, but a statement that was running when the
# server went away may just fail, and psql goes on without a connection.
sub lost_connection
{
	my ($self) = @_;
	return 1 if $self->{dead};
	return defined $self->{error} && $self->{error} =~ $PgqTest::LOST_RE;
}

# Queue statements (each ending with a semicolon) without waiting.
sub send
{
	my ($self, $sql) = @_;
	croak "session $self->{name} is busy" if $self->{busy};
	croak "session $self->{name} is dead" if $self->{dead};
	my $tag = ++$self->{seq};
	$self->{banner} = "\@\@pgqtest $self->{name} $tag\@\@";
	$self->{in} .= "$sql\n\\echo '$self->{banner}'\n\\warn '$self->{banner}'\n";
	$self->{busy} = 1;
	$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	return;
}

# 'busy', 'done' (then {result} and {error} hold the output) or 'dead'.
sub poll
{
	my ($self) = @_;
	return 'dead' if $self->{dead};
	return 'done' unless $self->{busy};

	# pump_nb dies when psql has gone away while input is left to write
	eval { $self->{h}->pump_nb; 1 } or $self->{pump_error} = $@;
	croak "session $self->{name}: timed out waiting for psql"
	  if $self->{timer}->is_expired;

	my $b = quotemeta($self->{banner});
	if ($self->{out} =~ /\A(.*?)$b\n/s)
	{
		my $out = $1;
		if ($self->{err} =~ /\A(.*?)$b\n/s)
		{
			my $err = $1;
			$self->{out} =~ s/\A.*?$b\n//s;
			$self->{err} =~ s/\A.*?$b\n//s;
			chomp $out;
			$self->{result} = $out;
			$self->{error} = $err;
			$self->{busy} = 0;
			return 'done';
		}
	}
	if (defined $self->{pump_error} || !$self->{h}->pumpable)
	{
		$self->_reap;
		return 'dead';
	}
	return 'busy';
}

sub _reap
{
	my ($self) = @_;
	$self->{dead} = 1;
	$self->{busy} = 0;
	$self->{in} = '';
	eval { $self->{h}->finish; 1 };
	$self->{exit_code} = eval { $self->{h}->result(0) };
	# everything psql said last, for the test to look at
	$self->{result} = $self->{out};
	$self->{error} = $self->{err};
	return;
}

# Wait for the queued statements: 'done' or 'dead'.
sub wait
{
	my ($self) = @_;
	my $state;
	usleep($POLL_US) while ($state = $self->poll) eq 'busy';
	return $state;
}

# Run statements and return their output; fail the test on an error.
sub query_ok
{
	my ($self, $sql) = @_;
	$self->send($sql);
	my $state = $self->wait;
	croak "session $self->{name} died running: $sql\n$self->{error}"
	  if $state eq 'dead';
	croak "session $self->{name} failed running: $sql\n$self->{error}"
	  if $self->{error} ne '';
	return $self->{result};
}

# Quit psql (if still alive) and reap it.
sub close
{
	my ($self) = @_;
	return if $self->{dead};
	$self->{in} .= "\\q\n";
	$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	eval { $self->{h}->finish; 1 };
	$self->{dead} = 1;
	$self->{busy} = 0;
	return;
}

# ---------------------------------------------------------------------------
package PgqTest;

# A started cluster for pgq's router (pgq_proxy), named "router"; the test
# is skipped, the cluster stopped, where PL/Proxy (Debian package
# postgresql-NN-plproxy) is not installed for the server under test.
sub start_router
{
	my $router = PostgreSQL::Test::Cluster->new('router');
	$router->init;
	$router->start;
	if ($router->safe_psql('postgres',
			"SELECT count(*) FROM pg_available_extensions WHERE name = 'plproxy'"
		) eq '0')
	{
		$router->stop;
		plan skip_all =>
		  'PL/Proxy is not installed for this server: install postgresql-NN-plproxy to run this test';
	}
	return $router;
}

sub new_session
{
	my ($node, $name) = @_;
	return PgqTest::Session->new($node, $name);
}

# Hand the queued statements of session $w to psql and wait until its
# backend sleeps in a waiting claim (wait event type "Extension", as seen by
# session $observer), or has finished meanwhile: returns 'sleeping' or 'done'.
sub sleeping_or_done
{
	my ($w, $observer) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		my $state = $w->poll;
		return 'done' if $state ne 'busy';
		return 'sleeping'
		  if $observer->query_ok(
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $w->{pid} AND wait_event_type = 'Extension';"
		  ) eq '1';
		usleep($POLL_US);
	}
	die "session " . $w->name . " neither slept nor finished";
}

# processed: every id a consumer has processed, with the block it came in;
# the primary key turns a second delivery of an id into an error.
sub setup_tables
{
	my ($node) = @_;
	$node->safe_psql(
		'postgres', q{
		CREATE EXTENSION IF NOT EXISTS pgq;
		CREATE TABLE processed (id bigint PRIMARY KEY, block_id bigint NOT NULL);
	});
	return;
}

# A table "src" of $n_ids ids (the values of $id_expr for g from 1 to $n_ids)
# and the group $group of them, in a scrambled order, in blocks of
# $block_size; checks that the group was created.  Returns the group's query.
sub create_src_group
{
	my ($node, $group, $id_expr, $n_ids, $block_size) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$node->safe_psql('postgres',
		"CREATE TABLE src AS SELECT $id_expr AS id FROM generate_series(1, $n_ids) g"
	);
	my $query = 'SELECT id FROM src ORDER BY md5(id::text)';
	is( $node->safe_psql(
			'postgres', "SELECT pgq.create_group('$group', '$query', $block_size)"),
		't',
		'group created');
	return $query;
}

# One row of pgq.group_stats, as a hash (NULL as undef).
sub group_stats
{
	my ($node, $group) = @_;
	my @cols = qw(state total_ids total_blocks pending claimed done);
	my $out = $node->safe_psql(
		'postgres',
		"SELECT "
		  . join(", ", map { "coalesce(${_}::text, 'NULL')" } @cols)
		  . " FROM pgq.group_stats WHERE group_name = '$group'");
	my @v = split /\|/, $out, -1;
	die "no group_stats row for group $group" unless @v == @cols;
	my %h;
	@h{@cols} = map { $_ eq 'NULL' ? undef : $_ } @v;
	return \%h;
}

# One consumer step, as a client would run it: claim a block, process its ids
# (insert them into "processed"), commit.  Prints the block's id, or nothing
# when the claim returned no block.  The ids go from the claim to the insert
# through a transaction-local setting, so that the claim and the insert are
# separate statements (the insert can then be made to wait after the claim).
# $work, if given, is more SQL run after the insert, before the commit: the
# rest of the processing.
sub consume_sql
{
	my ($group, $work) = @_;
	$work = defined $work ? "$work\n" : '';
	return qq{BEGIN;
SELECT set_config('pgqtest.block', block_id::text, true),
       set_config('pgqtest.ids', ids::text, true) IS NULL
  FROM pgq.claim('$group');
INSERT INTO processed (id, block_id)
SELECT unnest(nullif(current_setting('pgqtest.ids', true), '')::bigint[]),
       nullif(current_setting('pgqtest.block', true), '')::bigint;
${work}COMMIT;};
}

# Block id printed by a finished consume_sql step (undef if none).
sub _claimed_block
{
	my ($output) = @_;
	return undef if !defined $output || $output eq '';
	my ($block) = split /\|/, (split /\n/, $output)[0];
	return $block;
}

# Drive consumer sessions side by side: each runs consume_sql() steps one
# after the other, all at the same time.  A consumer whose claim finds
# nothing claimable stops.  Options:
#   until => sub { ... }  stop sending new steps once it returns true (it is
#                         called, with the number of blocks consumed in this
#                         run, right after new steps were handed to psql);
#                         the steps already sent finish first
#   work => SQL           passed to consume_sql()
# Returns a hash: claims => [[consumer name, block id], ...] in completion
# order, errors => [text, ...].
sub run_consumers
{
	my ($group, $consumers, %opt) = @_;
	my (@claims, @errors);
	my (%stopped, %sent);
	my $stopping = 0;
	my $sql = consume_sql($group, $opt{work});

	for (;;)
	{
		if (!$stopping)
		{
			for my $c (@$consumers)
			{
				next
				  if $stopped{ $c->name }
				  || $sent{ $c->name }
				  || $c->is_dead;
				$c->send($sql);
				$sent{ $c->name } = 1;
				$c->poll;    # hand the statements to psql
			}
		}

		# checked with the consumers' transactions under way
		$stopping = 1
		  if !$stopping && $opt{until} && $opt{until}->(scalar @claims);

		# collect every statement sent, also one that finished at once
		my $busy = 0;
		for my $c (@$consumers)
		{
			next unless $sent{ $c->name };
			my $state = $c->poll;
			delete $sent{ $c->name } if $state ne 'busy';
			if ($state eq 'busy')
			{
				$busy++;
				next;
			}
			if ($state eq 'dead')
			{
				push @errors, $c->name . " died: $c->{error}";
				next;
			}
			if ($c->lost_connection || $c->{error} ne '')
			{
				push @errors, $c->name . ": $c->{error}";
				$stopped{ $c->name } = 1;
				next;
			}
			my $block = _claimed_block($c->{result});
			if (defined $block)
			{
				push @claims, [ $c->name, $block ];
			}
			else
			{
				$stopped{ $c->name } = 1;
			}
		}

		my $active = grep { !$stopped{ $_->name } && !$_->is_dead } @$consumers;
		last if $busy == 0 && ($stopping || $active == 0);
		usleep($POLL_US);
	}

	my %per;
	$per{ $_->[0] }++ for @claims;
	note "consumers on group $group committed "
	  . scalar(@claims)
	  . " blocks ("
	  . join(', ', map { "$_: $per{$_}" } sort keys %per) . ")";
	return { claims => \@claims, errors => \@errors };
}

# Make each consumer claim a block and then wait to insert its ids: the
# $blocker session takes a SHARE lock on "processed" in a transaction that it
# leaves open, and each consumer starts a consume_sql() step.  True once all
# of them wait on that lock, each with its claim made; false after
# $PostgreSQL::Test::Utils::timeout_default seconds.
sub hold_claims
{
	my ($blocker, $group, @consumers) = @_;
	$blocker->query_ok('BEGIN; LOCK TABLE processed IN SHARE MODE;');
	$_->send(consume_sql($group)) for @consumers;
	my $n = scalar @consumers;
	my $pids = join(',', map { $_->pid } @consumers);
	return wait_until(
		$blocker, qq{
	SELECT count(*) = $n FROM pg_locks
	WHERE relation = 'processed'::regclass AND NOT granted
	  AND pid IN ($pids);}, 't', @consumers);
}

# Ids of the blocks whose rows in pgq.blocks have an xmax: while claims are
# held, the blocks deleted by the claiming transactions still in progress.
sub held_blocks
{
	my ($node) = @_;
	return split /\n/, $node->safe_psql(
		'postgres', q{
	SELECT block_id FROM pgq.blocks WHERE xmax <> '0' ORDER BY block_id});
}

# How many of @blocks are still (or again) in pgq.blocks.
sub blocks_left
{
	my ($node, @blocks) = @_;
	return $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM pgq.blocks WHERE block_id IN ('
		  . join(',', @blocks) . ')');
}

# Run $sql in the $observer session until it returns $expected, keeping the
# other sessions' statements moving meanwhile (their input is only written,
# and their output only read, while they are pumped).  Returns true on
# success, false after $PostgreSQL::Test::Utils::timeout_default seconds.
sub wait_until
{
	my ($observer, $sql, $expected, @others) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $got;
	while (time() < $deadline)
	{
		$_->poll for grep { $_->is_busy } @others;
		$got = $observer->query_ok($sql);
		return 1 if $got eq $expected;
		usleep(4 * $POLL_US);
	}
	diag "wait_until: $sql\nexpected: $expected\nlast got: $got";
	return 0;
}

# Wait until psql noticed that the server ended each session's connection;
# true if all of them lost it.
sub wait_for_sessions_dead
{
	my (@sessions) = @_;
	my $all = 1;
	for my $s (@sessions)
	{
		next if $s->is_dead;
		if (!$s->is_busy)
		{
			# an idle psql notices only when it sends something
			$s->send('SELECT 1;');
		}
		$s->wait;
		if ($s->lost_connection)
		{
			$s->close;
		}
		else
		{
			diag "session " . $s->name . " is still connected: $s->{result}";
			$all = 0;
		}
	}
	return $all;
}

# Consumption is atomic: the ids in "processed" are exactly the ids of the
# group's blocks that are no longer in pgq.blocks.  Returns the number of
# processed ids.
sub check_consistent
{
	my ($node, $group, $label) = @_;
	my $out = $node->safe_psql(
		'postgres', qq{
		WITH g AS (SELECT group_id, total_ids FROM pgq.groups
		           WHERE group_name = '$group'),
		     left_ids AS (SELECT unnest(b.ids) AS id
		                  FROM pgq.blocks b JOIN g USING (group_id))
		SELECT (SELECT count(*) FROM processed),
		       (SELECT total_ids FROM g) - (SELECT count(*) FROM left_ids),
		       (SELECT count(*) FROM processed p JOIN left_ids l USING (id))});
	my ($processed, $consumed, $overlap) = split /\|/, $out;
	is($processed, $consumed,
		"$label: processed ids = ids of the blocks no longer pending");
	is($overlap, 0, "$label: no processed id is in a block still pending");
	return $processed;
}

# Every id of the group's query processed exactly once, nothing left.
# group_stats.claimed is expected to be 0, or $claimed (undef for NULL: pgq
# not preloaded).
sub check_exactly_once
{
	my ($node, $group, $query, $expected, $blocks, $label, %opt) = @_;
	my $claimed = exists $opt{claimed} ? $opt{claimed} : 0;

	is( $node->safe_psql(
			'postgres', 'SELECT count(*), count(DISTINCT id) FROM processed'),
		"$expected|$expected",
		"$label: $expected ids processed, each once");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT (SELECT count(*) FROM (($query) EXCEPT ALL
		                              SELECT id FROM processed) a),
		       (SELECT count(*) FROM (SELECT id FROM processed EXCEPT ALL
		                              ($query)) b)}),
		'0|0',
		"$label: the processed ids are the query's ids");
	is( $node->safe_psql(
			'postgres', 'SELECT count(DISTINCT block_id) FROM processed'),
		$blocks, "$label: ids came from $blocks distinct blocks");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
		WHERE g.group_name = '$group'}),
		0, "$label: no block left in pgq.blocks");

	my $st = group_stats($node, $group);
	is_deeply(
		[ @$st{qw(state pending claimed done)} ],
		[ 'drained', 0, $claimed, $blocks ],
		"$label: group_stats says drained, 0 pending, "
		  . ($claimed // 'NULL')
		  . " claimed, $blocks done");
	return;
}

# ---------------------------------------------------------------------------
# Programs (the examples) running in the background, stdout and stderr
# together: start_prog(name, command...), output_until(prog, regex),
# finish_prog(prog) -> wait status.
# ---------------------------------------------------------------------------

sub start_prog
{
	my ($name, @cmd) = @_;
	my $c = { name => $name, out => '' };
	# a guard against hangs, not an assertion
	$c->{timer} = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	$c->{h} = IPC::Run::start(\@cmd, '<', \undef, '>&', \$c->{out},
		$c->{timer});
	return $c;
}

# Wait for the program to exit; returns its wait status (0: exited 0).
sub finish_prog
{
	my ($c) = @_;
	$c->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	if (!eval { $c->{h}->finish; 1 })
	{
		diag "$c->{name} did not exit: $@";
		$c->{h}->kill_kill;
	}
	my $status = $c->{h}->full_result(0);
	note "--- $c->{name} (wait status $status):\n$c->{out}";
	return $status;
}

# Read the program's output until it matches $re; false if it exited first.
# IPC::Run's pump waits for output, not for a time.
sub output_until
{
	my ($c, $re) = @_;
	$c->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	while ($c->{out} !~ $re)
	{
		return 0 unless $c->{h}->pumpable;
		last unless eval { $c->{h}->pump; 1 };
	}
	return $c->{out} =~ $re;
}

1;
