
# Chaos for pgq's TAP tests (test/t/021_chaos.pl, and test/soak/chaos.sh for
# the long run): consumers of a group in each claim mode, workers of a keyed
# lease-mode queue and a producer that enqueues into it, all driven side by
# side from one loop, while the test ends sessions, kills backends, stops the
# server in immediate mode and fails over to a standby.  Every consumer
# records what it processes in the transaction that consumes it; at the end
# every id and every key must have been recorded exactly once.
#
# The clients are PgqTest::Session psql processes, each driven as a small
# state machine (one statement batch at a time, never blocking the loop), as
# a real client would run them:
#
#  transaction  BEGIN; claim (wait) | record the ids; COMMIT
#  lease        claim (wait, autocommit) | BEGIN; record the ids;
#               complete(attempt =>) | COMMIT if true, ROLLBACK if false
#  advisory     register_worker once per session | claim (wait, worker_id)
#               | BEGIN; record the ids; CASE check_worker THEN complete
#               | COMMIT if true, ROLLBACK if false; if check_worker was
#               false, register again and relock() the block
#  queue        claim one item (wait) | BEGIN; complete(attempt =>) |
#               record the key (UNIQUE) and COMMIT if true, ROLLBACK if false
#  producer     enqueue_many() batches of keyed items, with keys sent before
#               (redeliveries) and a key given twice in the batch; a batch
#               whose result it did not see is sent again after reconnecting
#
# A client whose connection is lost reconnects and carries on; lease and
# advisory consumers and queue workers keep the block or item they were
# working on and finish it in the new session (advisory: register first,
# then relock it), as a client that cannot know whether its COMMIT made it
# would.  Or, half of the time, the client is taken to have died with its
# session and forgets it: the block (item) must then come back by itself, at
# once in transaction and advisory mode, when the lease runs out in lease
# mode.  Consumers stop when pgq.group_stats says 'drained', queue workers
# when the producer is done and pgq.queue_stats has nothing pending,
# scheduled or running.
#
# Chaos actions (run by the loop, spread over the run, each once every lane
# made observed progress since the last one):
#  terminate  pg_terminate_backend() of the holders (below) and maybe one
#             more client session
#  kill9      SIGKILL of a holder's backend: the postmaster restarts every
#             session (crash recovery)
#  immediate  pg_ctl stop -m immediate, then start (crash recovery)
#  failover   stop the primary in immediate mode, promote the standby; the
#             clients move to it (and if more failovers are planned, a new
#             synchronous standby is made from it)
#  stall      the next lease consumer that claims a block waits, before
#             processing it, until the block has been claimed again by
#             another consumer (seen in pgq.blocks) or consumed: its late
#             complete() must then return false and it rolls back
#  unlock     the next advisory consumer that claims a block runs
#             pg_advisory_unlock_all() (what a pooler's DISCARD ALL does),
#             and waits until another worker has consumed the block (seen in
#             pgq.blocks), or the other workers completed 3 blocks (claims
#             take a block given back this way only once the blocks above
#             the group's hint are gone); then it processes the block: its
#             check_worker() must be false in its completing transaction, so
#             it rolls back and registers again, and its relock() must not
#             regain a block seen consumed (the at-least-once case of the
#             README: two workers processed the block, one result committed)
# Before the first four, the next client of each lane to claim something
# holds it (the transaction-mode one with its transaction open) until the
# action is done: every such action hits a claim in every claim mode.
#
# Lanes (the three groups and the queue) are kept at about the same
# progress, and keep their last blocks until the chaos is over, so that every
# action hits every lane; while a stall or a loss of locks plays out, the
# clients take no new work but what it needs.  Waiting is always for an observed condition; no
# assertion depends on time.

package PgqChaos;

use strict;
use warnings;

use Carp;
use List::Util qw(min shuffle);
use Test::More;
use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PgqTest;

our @MODES = qw(transaction lease advisory);
our @LANES = (@MODES, 'queue');
my $QUEUE = 'chaos_queue';
my $POLL_US = 2_000;
my %SERVER_ACTION = map { $_ => 1 } qw(terminate kill9 immediate failover);

# ---------------------------------------------------------------------------
# Settings from the environment (test/soak/chaos.sh sets them), with the
# defaults of the short CI run.
sub settings
{
	my %d = (
		SEED => int(rand(1 << 30)),
		IDS => 100_000,           # ids per group, one group per mode
		BLOCK_SIZE => '',         # '' = per mode, 100 to 500, from the seed
		CONSUMERS => 3,           # consumers per group
		KEYS => 2000,             # distinct keys enqueued into the queue
		BATCH => 100,             # new keys per enqueue_many() batch
		QUEUE_WORKERS => 3,
		LEASE => '3 seconds',     # lease of the lease-mode group and queue
		ROUNDS => 12,             # chaos actions of part 1
		IMMEDIATE => 2,           # of which immediate stops
		KILLS => 1,               # of which SIGKILLs of a backend
		STALLS => 2,              # of which stalled lease consumers
		UNLOCKS => 2,             # of which advisory locks lost
		FAILOVER_IDS => 20_000,   # ids per group of the failover part
		FAILOVER_KEYS => 500,
		FAILOVER_ROUNDS => 4,     # other chaos actions of the failover part
		FAILOVERS => 1,           # failovers (each to a new standby)
	);
	my %s;
	for my $k (keys %d)
	{
		my $v = $ENV{"PGQ_CHAOS_$k"};
		$s{$k} = defined $v && $v ne '' ? $v : $d{$k};
	}
	return \%s;
}

# postgresql.conf lines for the chaos clusters.
sub server_conf
{
	my $log_statement = $ENV{PGQ_CHAOS_LOG_STATEMENT} || 'none';
	return qq{
shared_preload_libraries = 'pgq'
restart_after_crash = on
max_connections = 60
shared_buffers = 32MB
# expired leases wake waiting claims at the next pass
pgq.maintenance_interval = 1
# the ids of every recorded block make the log large: PGQ_CHAOS_LOG_STATEMENT
log_statement = $log_statement
};
}

# A shuffled list of chaos actions: $opt{rounds} in all, with the given
# numbers of the special ones, the rest terminations; and $opt{failover}
# failovers on top, evenly spaced among them.
sub plan_actions
{
	my (%opt) = @_;
	my @a;
	for my $kind (qw(immediate kill9 stall unlock))
	{
		push @a, ($kind) x ($opt{$kind} // 0);
	}
	my $n = $opt{rounds} // 0;
	push @a, ('terminate') x ($n - @a) if $n > @a;
	@a = shuffle @a;
	my $f = $opt{failover} // 0;
	for my $i (reverse 1 .. $f)
	{
		splice @a, int($i * @a / ($f + 1) + 0.5), 0, 'failover';
	}
	return @a;
}

# A streaming standby of $primary, named $name, made synchronous: a commit
# that a client saw is on the standby too.  The standby itself has no
# synchronous standby until one is made from it.
sub make_standby
{
	my ($primary, $name) = @_;
	my $backup = "b_$name";
	$primary->backup($backup);
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, $backup, has_streaming => 1);
	$standby->append_conf('postgresql.conf', "synchronous_standby_names = ''");
	$standby->start;
	$primary->append_conf('postgresql.conf', "synchronous_standby_names = '*'");
	$primary->reload;
	$primary->poll_query_until('postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = '$name'"
	) or die "standby $name does not become synchronous";
	return $standby;
}

# ---------------------------------------------------------------------------
sub new
{
	my ($class, %opt) = @_;
	my $self = bless {
		%opt,
		slack => 0.1,         # pacing: how far a lane may run ahead
		actors => [],
		epoch => 0,           # server restarts and failovers so far
		unexpected => [],     # client errors that are not a lost connection
		violations => [],     # client-side checks that failed
		done_actions => [],
		killed_pids => {},
		stats => {},
		nodes_used => [ $opt{node} ],
		hold_wanted => {},
	}, $class;
	return $self;
}

sub group_of { return "chaos_$_[1]"; }

# A query in the observer session (connected again when needed); croaks on
# an error.
sub _q
{
	my ($self, $sql) = @_;
	for my $try (1 .. 3)
	{
		$self->{obs} //=
		  PgqTest::new_session($self->{node}, "$self->{label}_observer");
		my $s = $self->{obs};
		$s->send($sql);
		my $st = $s->wait;
		if ($st eq 'dead' || $s->lost_connection)
		{
			$s->close unless $s->is_dead;
			$self->{obs} = undef;
			next;
		}
		croak "observer: $sql\n$s->{error}" if $s->{error} ne '';
		return $s->{result};
	}
	croak "observer: lost the connection three times running: $sql";
}

# Tables, the groups and the queue, and the clients.
sub setup
{
	my ($self) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $n = $self->{ids};
	$self->_q(
		qq{
	CREATE EXTENSION pgq;
	-- ids beyond the int4 range
	CREATE TABLE src AS SELECT 5000000000 + 7 * g AS id FROM generate_series(1, $n) g;
	-- what the group consumers recorded; no key, so that an id recorded
	-- twice shows in the counts of the end
	CREATE TABLE processed (mode text NOT NULL, id bigint NOT NULL,
	                        block_id bigint NOT NULL, consumer text NOT NULL);
	-- what the queue workers recorded: each key once, or an error
	CREATE TABLE qdone (key text NOT NULL UNIQUE, item_id bigint NOT NULL,
	                    worker text NOT NULL);
});
	my $query = 'SELECT id FROM src ORDER BY md5(id::text)';
	for my $mode (@MODES)
	{
		my $g = $self->group_of($mode);
		my $bs = $self->{block_size}{$mode};
		my $extra =
		  $mode eq 'lease'
		  ? ", lease => '$self->{lease}', max_attempts => 1000"
		  : $mode eq 'advisory' ? ', max_attempts => 1000'
		  :                       '';
		is( $self->_q(
				"SELECT pgq.create_group('$g', \$\$$query\$\$, $bs, mode => '$mode'$extra);"
			),
			't',
			"$self->{label}: $mode-mode group of $n ids in blocks of $bs created");
		$self->{total_blocks}{$mode} = $self->_q(
			"SELECT total_blocks FROM pgq.group_stats WHERE group_name = '$g';");
	}
	is( $self->_q(
			"SELECT pgq.create_queue('$QUEUE', lease => '$self->{lease}', max_attempts => 1000, backoff => '1 second', max_backoff => '2 seconds');"
		),
		't',
		"$self->{label}: lease-mode queue created");
	$self->{total_blocks}{queue} = $self->{keys};

	for my $mode (@MODES)
	{
		$self->_add_actor($mode, "$self->{label}_${mode}_$_")
		  for 1 .. $self->{consumers};
	}
	$self->_add_actor('queue', "$self->{label}_qworker_$_")
	  for 1 .. $self->{queue_workers};
	$self->_add_actor('producer', "$self->{label}_producer");
	$self->{next_key} = 1;
	return;
}

sub _add_actor
{
	my ($self, $kind, $name) = @_;
	push @{ $self->{actors} },
	  {
		kind => $kind,
		lane => $kind eq 'producer' ? undef : $kind,
		name => $name,
		s => undef,
		state => 'disconnected',
		finished => 0,
	  };
	return;
}

# Count an event $name of the clients of kind $kind.
sub _stat
{
	my ($self, $name, $kind) = @_;
	$self->{stats}{$kind}{$name}++;
	return;
}

# ---------------------------------------------------------------------------
# Progress and pacing

# Share of a lane's blocks (keys) whose commit a client saw.
sub _frac
{
	my ($self, $lane) = @_;
	return 1 if $self->_lane_finished($lane);
	return ($self->{acked_count}{$lane} // 0) / $self->{total_blocks}{$lane};
}

sub _lane_finished
{
	my ($self, $lane) = @_;
	return !grep { ($_->{lane} // '') eq $lane && !$_->{finished} }
	  @{ $self->{actors} };
}

# While chaos actions remain, a lane keeps its last blocks (10%, and at least
# four per client): no lane ends before the chaos does.  But a stall or a
# loss of locks needs claims: the one that takes it up, the one that takes a
# stalled block whose lease ran out, and the claims of the three blocks that
# the others complete while an advisory consumer that lost its locks waits.
sub _held
{
	my ($self, $lane) = @_;
	return 0 unless $self->{actions_left};
	return 0 if $self->_needs_claims($lane);
	my $total = $self->{total_blocks}{$lane};
	my $clients = grep { ($_->{lane} // '') eq $lane } @{ $self->{actors} };
	my $reserve = 4 * $clients;
	$reserve = int(0.1 * $total) if int(0.1 * $total) > $reserve;
	return ($self->{acked_count}{$lane} // 0) >= $total - $reserve;
}

sub _needs_claims
{
	my ($self, $lane) = @_;
	my $acked = $self->{acked_count}{$lane} // 0;
	if ($lane eq 'lease')
	{
		return 1 if $self->{stall_wanted};
		return scalar grep {
			$_->{state} eq 'stalled'
			  && $_->{wait}{expired}
			  && !$_->{wait}{reclaimed}
		} @{ $self->{actors} };
	}
	if ($lane eq 'advisory')
	{
		return 1 if $self->{unlock_wanted};
		return scalar grep {
			$_->{state} eq 'unlocked' && $acked < $_->{wait}{acked} + 3
		} @{ $self->{actors} };
	}
	return 0;
}

# Is a stall (lease) or a loss of advisory locks asked for or under way
# (until the client's completing transaction says what it must)?
sub _waits_for
{
	my ($self, $lane) = @_;
	# (one that no client can take up any more fails a check of the end)
	return 0 if $self->_lane_finished($lane);
	if ($lane eq 'lease')
	{
		return 1 if $self->{stall_wanted};
		return scalar grep { $_->{state} eq 'stalled' || $_->{stall_check} }
		  @{ $self->{actors} };
	}
	if ($lane eq 'advisory')
	{
		return 1 if $self->{unlock_wanted};
		return scalar grep {
			$_->{state} =~ /^(?:unlocking|unlocked)$/ || $_->{expect_lost}
		} @{ $self->{actors} };
	}
	return 0;
}

# The lanes still running that do not keep their last blocks.
sub _free_lanes
{
	my ($self) = @_;
	return grep { !$self->_lane_finished($_) && !$self->_held($_) } @LANES;
}

# The progress of the slowest of them.
sub _min_frac
{
	my ($self) = @_;
	my @f = map { $self->_frac($_) } $self->_free_lanes;
	return @f ? min(@f) : 1;
}

# May a client of $lane take new work?  Lanes are kept close together, so
# that every chaos action hits every claim mode.
sub _may_take
{
	my ($self, $lane) = @_;
	# while a stall or a loss of locks plays out (it takes a lease's time),
	# only the claims that it needs are made, so that the run does not move
	# on without the chaos
	if (grep { $self->_waits_for($_) } @LANES)
	{
		return $self->_needs_claims($lane);
	}
	return 0 if $self->_held($lane);
	return 1 if $self->{hold_wanted}{$lane};
	return $self->_frac($lane) <= $self->_min_frac + $self->{slack};
}

sub _ack
{
	my ($self, $a, $what) = @_;
	$self->{acked_count}{ $a->{lane} }++;
	$self->{progress_since_action}{ $a->{lane} }++;
	push @{ $self->{acked}{ $a->{lane} } }, "$what $a->{name}";
	return;
}

# ---------------------------------------------------------------------------
# The clients

sub _send
{
	my ($self, $a, $state, $sql) = @_;
	$a->{state} = $state;
	$a->{waiting} = 1;
	$a->{s}->send($sql);
	$a->{s}->poll;    # hand it to psql (it may even finish here)
	return 1;
}

sub _violation
{
	my ($self, $a, $msg) = @_;
	push @{ $self->{violations} }, "$a->{name}: $msg";
	diag "VIOLATION: $a->{name}: $msg";
	return;
}

# Connect (again).  Returns true if something happened.
sub _connect
{
	my ($self, $a) = @_;
	return 0 if time() < ($a->{retry_at} // 0);
	my $s = eval { PgqTest::new_session($self->{node}, $a->{name}) };
	if (!$s)
	{
		# the server is up whenever the loop runs (chaos actions wait for
		# it), so this should not happen; tried again, and counted
		$self->_stat('connections refused', $a->{kind});
		$a->{retry_at} = time() + 0.2;
		$a->{last_connect_error} = $@;
		return 0;
	}
	$a->{s} = $s;
	$a->{state} = 'idle';
	$a->{expect_lost} = 0;
	$self->_stat('sessions', $a->{kind});
	if ($a->{kind} eq 'advisory')
	{
		if (defined $a->{w})
		{
			# a new session cannot hold the old worker's placeholder lock
			return $self->_send($a, 'oldcheck',
				"SELECT pgq.check_worker($a->{w});");
		}
		return $self->_register($a);
	}
	return 1;
}

sub _register
{
	my ($self, $a, $prefix) = @_;
	return $self->_send($a, 'registering',
		($prefix // '') . "SELECT pgq.register_worker('$a->{name}');");
}

# The connection is gone (or the session had an unexpected error and is
# given up): forget the session; what the client keeps depends on its kind.
sub _lost
{
	my ($self, $a) = @_;
	$self->_stat('connections lost', $a->{kind});
	$a->{s}->close unless $a->{s}->is_dead;
	$a->{s} = undef;
	$a->{waiting} = 0;
	$a->{state} = 'disconnected';
	# a transaction-mode claim dies with its transaction; the others keep
	# their block, unless the client died too
	if ($a->{inhand} && ($a->{kind} eq 'transaction' || rand() < 0.5))
	{
		$self->_stat('blocks forgotten with the session', $a->{kind})
		  if $a->{kind} ne 'transaction';
		$a->{inhand} = undef;
	}
	# expectations hold only within one session
	delete $a->{stall_check};
	delete $a->{expect_gone};
	return;
}

# Drive one client one step further.  Returns true if something happened.
sub _drive
{
	my ($self, $a) = @_;
	return 0 if $a->{finished};
	return $self->_connect($a) if !$a->{s};
	my $s = $a->{s};
	if ($s->is_dead)
	{
		$self->_lost($a);
		return 1;
	}
	if ($a->{waiting})
	{
		my $st = $s->poll;
		return 0 if $st eq 'busy';
		$a->{waiting} = 0;
		if ($st eq 'dead' || $s->lost_connection)
		{
			$self->_lost($a);
			return 1;
		}
		if ($s->{error} ne '')
		{
			push @{ $self->{unexpected} },
			  "$a->{name} ($a->{state}): $s->{error}";
			diag "unexpected error: $a->{name} ($a->{state}): $s->{error}";
			$self->_lost($a);
			return 1;
		}
		$self->_result($a, $s->{result});
		return 1;
	}
	return 0 if $a->{state} =~ /^(?:stalled|unlocked|held)$/;
	return $self->_next($a);
}

# The statement that records the ids of the block in hand.
sub _ids_sql
{
	my ($self, $a, $mode) = @_;
	my $in = $a->{inhand};
	$self->{processing}{$mode}{ $in->{b} }++;
	return
	    "INSERT INTO processed (mode, id, block_id, consumer) "
	  . "SELECT '$mode', unnest('$in->{ids}'::bigint[]), $in->{b}, '$a->{name}';";
}

# The client is idle: send its next statements.
sub _next
{
	my ($self, $a) = @_;
	my $k = $a->{kind};

	if ($k eq 'producer')
	{
		if (!$a->{batch})
		{
			if ($self->{next_key} > $self->{keys})
			{
				$a->{finished} = 1;
				$a->{s}->close;
				$a->{s} = undef;
				return 1;
			}
			# a little ahead of the queue's workers, not more
			my $enq = $self->{next_key} - 1;
			return 0
			  if $enq / $self->{keys} > $self->_min_frac + 0.25
			  && !$self->{hold_wanted}{queue};
			$a->{batch} = $self->_new_batch;
		}
		else
		{
			$self->_stat('batches sent again', 'producer');
			$self->{redelivered}{$_}++ for @{ $a->{batch} };
		}
		my @k = @{ $a->{batch} };
		my $payloads = join ', ', map { qq{'{"key": "$_"}'} } @k;
		my $keys = join ', ', map { "'$_'" } @k;
		return $self->_send($a, 'enqueuing',
			"SELECT pgq.enqueue_many('$QUEUE', ARRAY[$payloads]::jsonb[], ARRAY[$keys]::text[]);"
		);
	}

	return $self->_work($a) if $a->{inhand};
	return 0 unless $self->_may_take($a->{lane});

	my $g = $k eq 'queue' ? $QUEUE : $self->group_of($k);
	if ($k eq 'transaction')
	{
		return $self->_send($a, 'claiming',
			"BEGIN;\nSELECT block_id, ids FROM pgq.claim('$g', wait => '5 s');");
	}
	elsif ($k eq 'lease')
	{
		return $self->_send($a, 'claiming',
			"SELECT block_id, attempt, ids FROM pgq.claim('$g', wait => '5 s');");
	}
	elsif ($k eq 'advisory')
	{
		return $self->_send($a, 'claiming',
			"SELECT block_id, ids FROM pgq.claim('$g', worker_id => $a->{w}, wait => '5 s');"
		);
	}
	return $self->_send($a, 'claiming',
		"SELECT block_id, attempt, key FROM pgq.claim('$g', wait => '1 s');");
}

# The next batch of the producer: new keys, some keys it sent before, and
# one key twice.
sub _new_batch
{
	my ($self) = @_;
	my $from = $self->{next_key};
	my $to = min($from + $self->{batch} - 1, $self->{keys});
	$self->{next_key} = $to + 1;
	my @b = map { "k$_" } $from .. $to;
	if ($from > 1)
	{
		my @old = map { 'k' . (1 + int(rand($from - 1))) }
		  1 .. int($self->{batch} / 10) + 1;
		$self->{redelivered}{$_}++ for @old;
		push @b, @old;
	}
	push @b, $b[0];
	$self->{redelivered}{ $b[0] }++;
	return \@b;
}

# Process the block (item) in hand.
sub _work
{
	my ($self, $a) = @_;
	my $k = $a->{kind};
	my $in = $a->{inhand};
	if ($k eq 'transaction')
	{
		# only after a hold: the claim's transaction is still open
		return $self->_send($a, 'committing',
			$self->_ids_sql($a, 'transaction') . "\nCOMMIT;");
	}
	elsif ($k eq 'lease')
	{
		return $self->_send($a, 'completing',
			"BEGIN;\n"
			  . $self->_ids_sql($a, 'lease')
			  . "\nSELECT pgq.complete($in->{b}, attempt => $in->{a});");
	}
	elsif ($k eq 'advisory')
	{
		return $self->_send($a, 'completing',
			"BEGIN;\n"
			  . $self->_ids_sql($a, 'advisory')
			  . "\nSELECT CASE WHEN pgq.check_worker($a->{w}) THEN CASE WHEN pgq.complete($in->{b}, worker_id => $a->{w}) THEN 't' ELSE 'f' END ELSE 'lost' END;"
		);
	}
	$self->{processing}{queue}{ $in->{key} }++;
	return $self->_send($a, 'completing',
		"BEGIN;\nSELECT pgq.complete($in->{b}, result => '{\"by\": \"$a->{name}\"}', attempt => $in->{a});"
	);
}

# A claim returned a block (item): hold it for the next chaos action, stall,
# drop the advisory locks, or process it.
sub _claimed
{
	my ($self, $a, $id) = @_;
	my $lane = $a->{lane};
	my $in = $a->{inhand};
	$self->{claims}{$lane}{$id}++;
	# a stalled block claimed again: no more claims needed for it
	$_->{wait}{reclaimed} = 1 for grep {
		$lane eq 'lease' && $_->{state} eq 'stalled' && $_->{inhand}{b} == $id
	} @{ $self->{actors} };
	if ($self->{hold_wanted}{$lane})
	{
		delete $self->{hold_wanted}{$lane};
		$a->{state} = 'held';
		$a->{held_epoch} = $self->{epoch};
		return;
	}
	if ($lane eq 'lease' && $self->{stall_wanted})
	{
		$self->{stall_wanted}--;
		$a->{state} = 'stalled';
		$a->{wait} = { epoch => $self->{epoch}, next_look => 0 };
		note "$self->{label}: $a->{name} stalls holding block $in->{b} attempt $in->{a}";
		return;
	}
	if ($lane eq 'advisory' && $self->{unlock_wanted})
	{
		$self->{unlock_wanted}--;
		note "$self->{label}: $a->{name} loses its advisory locks holding block $in->{b}";
		return $self->_send($a, 'unlocking', 'SELECT pg_advisory_unlock_all();');
	}
	return $self->_work($a);
}

# A statement batch finished without error: move on.
sub _result
{
	my ($self, $a, $out) = @_;
	my $k = $a->{kind};
	my $st = $a->{state};

	if ($st eq 'enqueuing')
	{
		my ($ids) = $out =~ /^\{([\d,]*)\}$/
		  or croak "unexpected enqueue_many output: $out";
		my @ids = split /,/, $ids;
		my @keys = @{ $a->{batch} };
		$self->_violation($a,
			    'enqueue_many returned '
			  . scalar(@ids)
			  . ' ids for '
			  . scalar(@keys) . ' keys')
		  if @ids != @keys;
		for my $i (0 .. $#keys)
		{
			my $key = $keys[$i];
			my $id = $ids[$i] // 'none';
			my $known = $self->{key_id}{$key};
			$self->_violation($a, "key $key had item $known, now $id")
			  if defined $known && $known ne $id;
			$self->{key_id}{$key} //= $id;
		}
		$a->{batch} = undef;
		$self->_stat('batches acknowledged', 'producer');
		$a->{state} = 'idle';
		return;
	}
	if ($st eq 'oldcheck')
	{
		$self->_violation($a, "check_worker($a->{w}) is true in a new session")
		  unless $out eq 'f';
		return $self->_register($a);
	}
	if ($st eq 'registering')
	{
		$out =~ /^(\d+)$/ or croak "unexpected register_worker output: $out";
		$a->{w} = $1;
		$self->_stat('registrations', 'advisory');
		if ($a->{inhand})
		{
			return $self->_send($a, 'relocking',
				"SELECT pgq.relock('{$a->{inhand}{b}}', $a->{w});");
		}
		$a->{state} = 'idle';
		return;
	}
	if ($st eq 'relocking')
	{
		if ($out eq "{$a->{inhand}{b}}")
		{
			$self->_violation($a,
				"relock regained block $a->{inhand}{b}, which was seen consumed")
			  if delete $a->{expect_gone};
			$self->_stat('blocks relocked', 'advisory');
			$self->{claims}{advisory}{ $a->{inhand}{b} }++;
		}
		elsif ($out eq '{}')
		{
			# consumed meanwhile, or another worker has it
			delete $a->{expect_gone};
			$self->_stat('blocks not regained by relock', 'advisory');
			$a->{inhand} = undef;
		}
		else
		{
			croak "unexpected relock output: $out";
		}
		$a->{state} = 'idle';
		return;
	}
	if ($st eq 'claiming')
	{
		if ($out eq '')
		{
			$self->_stat('empty claims', $k);
			if ($k eq 'queue')
			{
				if ($self->_producer_finished)
				{
					return $self->_send($a, 'checking',
						"SELECT pending + scheduled + running FROM pgq.queue_stats WHERE queue_name = '$QUEUE';"
					);
				}
				$a->{state} = 'idle';
				return;
			}
			return $self->_send($a, 'checking',
				($k eq 'transaction' ? "ROLLBACK;\n" : '')
				  . "SELECT state FROM pgq.group_stats WHERE group_name = '"
				  . $self->group_of($k) . "';");
		}
		croak "unexpected claim output: $out" if $out =~ /\n/;
		my @f = split /\|/, $out;
		if ($k eq 'transaction' || $k eq 'advisory')
		{
			$a->{inhand} = { b => $f[0], ids => $f[1] };
			return $self->_claimed($a, $f[0]);
		}
		if ($k eq 'lease')
		{
			$a->{inhand} = { b => $f[0], a => $f[1], ids => $f[2] };
			$self->{max_attempt} = $f[1]
			  if $f[1] > ($self->{max_attempt} // 0);
			return $self->_claimed($a, $f[0]);
		}
		$a->{inhand} = { b => $f[0], a => $f[1], key => $f[2] };
		return $self->_claimed($a, $f[2]);
	}
	if ($st eq 'unlocking')
	{
		$a->{expect_lost} = 1;
		$self->_stat('advisory locks dropped', 'advisory');
		$a->{state} = 'unlocked';
		$a->{wait} = {
			epoch => $self->{epoch},
			next_look => 0,
			acked => $self->{acked_count}{advisory} // 0
		};
		return;
	}
	if ($st eq 'checking')
	{
		if (($k eq 'queue' && $out eq '0') || ($k ne 'queue' && $out eq 'drained'))
		{
			$a->{finished} = 1;
			$a->{s}->close;
			$a->{s} = undef;
			return;
		}
		$a->{state} = 'idle';
		return;
	}
	if ($st eq 'completing')
	{
		my $in = $a->{inhand};
		if ($k eq 'advisory')
		{
			my $expect_lost = $a->{expect_lost};
			$a->{expect_lost} = 0;
			if ($out eq 'lost')
			{
				$self->_stat('check_worker false, rolled back', 'advisory');
				return $self->_register($a, "ROLLBACK;\n");
			}
			$self->_violation($a,
				"check_worker($a->{w}) was true after pg_advisory_unlock_all()")
			  if $expect_lost;
		}
		if (my $sc = delete $a->{stall_check})
		{
			$self->_violation($a,
				"complete($in->{b}, attempt => $in->{a}) was true after the block was seen $sc->{seen}"
			) if $out eq 't' && $sc->{epoch} == $self->{epoch};
			$self->_stat('stalled completions refused', 'lease')
			  if $out eq 'f';
		}
		if ($out eq 't')
		{
			return $self->_send($a, 'committing',
				$k eq 'queue'
				? "INSERT INTO qdone (key, item_id, worker) VALUES ('$in->{key}', $in->{b}, '$a->{name}');\nCOMMIT;"
				: 'COMMIT;');
		}
		croak "unexpected completion output: $out" unless $out eq 'f';
		$self->_stat('completions refused, rolled back', $k);
		$a->{inhand} = undef;
		return $self->_send($a, 'rollingback', 'ROLLBACK;');
	}
	if ($st eq 'committing')
	{
		my $in = $a->{inhand};
		$self->_ack($a, $k eq 'queue' ? $in->{key} : $in->{b});
		$a->{inhand} = undef;
		$a->{state} = 'idle';
		return;
	}
	if ($st eq 'rollingback')
	{
		$a->{state} = 'idle';
		return;
	}
	croak "$a->{name}: result in unknown state $st";
}

sub _producer_finished
{
	my ($self) = @_;
	return !grep { $_->{kind} eq 'producer' && !$_->{finished} }
	  @{ $self->{actors} };
}

# A stalled lease consumer goes on once its block was claimed again by
# another consumer (a higher attempt) or consumed, an advisory consumer that
# lost its locks once its block was consumed by another, as seen in
# pgq.blocks; either goes on at once if the server restarted since (its
# session is gone).
sub _check_waits
{
	my ($self) = @_;
	my $did = 0;
	for my $a (grep { $_->{state} =~ /^(?:stalled|unlocked)$/ }
		@{ $self->{actors} })
	{
		my $in = $a->{inhand};
		my $lease = $a->{state} eq 'stalled';
		my $kind = $lease ? 'stalls' : 'lock losses';
		if ($a->{wait}{epoch} != $self->{epoch})
		{
			delete $a->{wait};
			$self->_stat("$kind cut short by a restart", $a->{kind});
			$self->_resume($a);
			$did = 1;
			next;
		}
		next if time() < $a->{wait}{next_look};
		$a->{wait}{next_look} = time() + 0.1;    # a polling interval
		# the block's attempt (-1: consumed), and whether its lease ran out
		my ($now, $expired) = split /\|/, $self->_q(
			"SELECT coalesce(b.attempt, -1), coalesce(b.lease_until <= now(), false) "
			  . "FROM (SELECT) x LEFT JOIN pgq.blocks b ON b.block_id = $in->{b};");
		$a->{wait}{expired} = 1 if $expired eq 't';
		my $seen;
		if ($now == -1)
		{
			$seen = 'consumed';
		}
		elsif ($lease && $now > $in->{a})
		{
			$seen = "claimed again (attempt $now)";
		}
		elsif (!$lease
			&& ($self->{acked_count}{advisory} // 0) >= $a->{wait}{acked} + 3)
		{
			$seen = 'not taken by the others while they completed 3 blocks';
		}
		else
		{
			next;
		}
		note "$self->{label}: $a->{name} goes on with block $in->{b}"
		  . ($lease ? " attempt $in->{a}" : '')
		  . ", $seen";
		if ($lease)
		{
			$a->{stall_check} = { epoch => $a->{wait}{epoch}, seen => $seen };
		}
		elsif ($now == -1)
		{
			$a->{expect_gone} = 1;
		}
		delete $a->{wait};
		$self->_stat($kind . ($now == -1 ? ', block consumed by another' : ''),
			$a->{kind});
		$self->_resume($a);
		$did = 1;
	}
	return $did;
}

# A held or stalled client goes on with its block.
sub _resume
{
	my ($self, $a) = @_;
	$a->{state} = 'idle';
	return unless $a->{s};
	if ($a->{s}->poll eq 'dead')
	{
		$self->_lost($a);
		return;
	}
	$self->_work($a);
	return;
}

# ---------------------------------------------------------------------------
# Chaos actions

sub _live_actors
{
	my ($self) = @_;
	return grep { $_->{s} && !$_->{s}->is_dead && !$_->{finished} }
	  @{ $self->{actors} };
}

sub _holders
{
	my ($self) = @_;
	return grep { $_->{state} eq 'held' } @{ $self->{actors} };
}

sub _describe
{
	my ($a) = @_;
	my $what =
	    $a->{state} eq 'held' ? 'holding '
	  . ($a->{kind} eq 'queue' ? "item $a->{inhand}{b}" : "block $a->{inhand}{b}")
	  : $a->{state};
	return "$a->{name} ($what)";
}

sub _do_action
{
	my ($self, $kind) = @_;
	my $node = $self->{node};
	my $at = sprintf '%.0f%%', 100 * $self->_min_frac;
	my @holders = $self->_holders;
	my $what;

	if ($kind eq 'terminate')
	{
		my %h = map { $_->{name} => 1 } @holders;
		my @others = shuffle grep { !$h{ $_->{name} } } $self->_live_actors;
		my @v = (@holders, @others[ 0 .. min($#others, int(rand(2)) - 1) ]);
		return 0 unless @v;
		my $pids = join ',', map { $_->{s}->pid } @v;
		my $n = $self->_q(
			"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid IN ($pids);"
		);
		$what = "pg_terminate_backend of $n sessions: "
		  . join(', ', map { _describe($_) } @v);
	}
	elsif ($kind eq 'kill9')
	{
		my @v = shuffle grep { kill(0, $_->{s}->pid) } @holders;
		@v = shuffle grep { kill(0, $_->{s}->pid) } $self->_live_actors
		  unless @v;
		return 0 unless @v;
		my $v = $v[0];
		my $pid = $v->{s}->pid;
		my $offset = -s $node->logfile;
		kill('KILL', $pid) or return 0;
		$self->{killed_pids}{$pid} = 1;
		# (both from the offset before the kill: wait_for_log returns the
		# end of what it read, which may already hold the second line)
		$node->wait_for_log(
			qr/all server processes terminated; reinitializing/, $offset);
		$node->wait_for_log(
			qr/database system is ready to accept connections/, $offset);
		$node->poll_query_until('postgres', 'SELECT true')
		  or die 'the server does not come back after the SIGKILL';
		$self->{epoch}++;
		$what = 'SIGKILL of the backend of ' . _describe($v)
		  . ", pid $pid: crash restart; holders: "
		  . join(', ', map { _describe($_) } @holders);
	}
	elsif ($kind eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
		$self->{epoch}++;
		$what = 'immediate stop and start; holders: '
		  . join(', ', map { _describe($_) } @holders);
	}
	elsif ($kind eq 'failover')
	{
		my $standby = $self->{standby} or croak 'failover without a standby';
		$node->stop('immediate');
		$standby->promote;
		$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
		  or die 'the standby was not promoted';
		$self->{node} = $standby;
		$self->{standby} = undef;
		push @{ $self->{nodes_used} }, $standby;
		$self->{epoch}++;
		$self->{failovers}++;
		$what = 'failover: ' . $node->name . ' stopped (immediate), '
		  . $standby->name . ' promoted, clients move to it; holders: '
		  . join(', ', map { _describe($_) } @holders);
		if (grep { $_ eq 'failover' } @{ $self->{actions} }[ 1 .. $#{ $self->{actions} } ])
		{
			my $next = "$self->{label}_standby" . ($self->{failovers} + 1);
			$self->{standby} = make_standby($standby, $next);
			$what .= "; new standby $next";
		}
	}
	elsif ($kind eq 'stall')
	{
		$self->{stall_wanted}++;
		$what = 'the next lease claim stalls until its block is claimed again';
	}
	elsif ($kind eq 'unlock')
	{
		$self->{unlock_wanted}++;
		$what = 'the next advisory claimer loses its locks (pg_advisory_unlock_all) '
		  . 'and waits until another worker consumed its block';
	}
	else
	{
		croak "unknown chaos action $kind";
	}
	$self->_check_atomic($kind) if $kind =~ /^(?:kill9|immediate|failover)$/;
	push @{ $self->{done_actions} }, $kind;
	note "$self->{label}: chaos "
	  . scalar(@{ $self->{done_actions} })
	  . " at $at: $what";
	# the holders go on (those whose session is gone find out now)
	$self->_resume($_) for @holders;
	return 1;
}

# After a crash or a failover: consumption was atomic.  In one snapshot, the
# ids recorded in each mode are exactly the ids of the group's blocks no
# longer in pgq.blocks, and the keys recorded are those of the items done.
sub _check_atomic
{
	my ($self, $kind) = @_;
	for my $mode (@MODES)
	{
		my $g = $self->group_of($mode);
		my $got = $self->_q(
			qq{
		WITH left_ids AS (SELECT unnest(b.ids) AS id
		                  FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
		                  WHERE g.group_name = '$g')
		SELECT (SELECT count(*) FROM processed WHERE mode = '$mode')
		       + (SELECT count(*) FROM left_ids) - $self->{ids},
		       (SELECT count(*) FROM processed p JOIN left_ids l USING (id)
		        WHERE p.mode = '$mode');});
		push @{ $self->{violations} },
		  "after $kind, $mode: recorded + left - all ids | recorded ids still in a block = $got, not 0|0"
		  if $got ne '0|0';
	}
	my $got = $self->_q(
		qq{
	WITH i AS (SELECT i.key, i.state FROM pgq.items i JOIN pgq.groups g USING (group_id)
	           WHERE g.group_name = '$QUEUE')
	SELECT (SELECT count(*) FROM qdone) - (SELECT count(*) FROM i WHERE state = 'd'),
	       (SELECT count(*) FROM qdone q LEFT JOIN i USING (key)
	        WHERE i.state IS DISTINCT FROM 'd');});
	push @{ $self->{violations} },
	  "after $kind, queue: recorded - done | recorded keys not done = $got, not 0|0"
	  if $got ne '0|0';
	$self->{atomic_checks}++;
	return;
}

# ---------------------------------------------------------------------------
# Run the clients until every group is drained and every key processed, with
# the chaos actions @actions spread over the run.
sub run
{
	my ($self, @actions) = @_;
	$self->{actions} = \@actions;    # what is left, the next one first
	my $n_actions = @actions;
	$self->{actions_left} = $n_actions;
	my $last_progress = time();
	my $progress = '';
	my $k = 0;
	my $armed = 0;
	$self->{progress_since_action} = {};

	for (;;)
	{
		my $events = 0;
		for my $a (@{ $self->{actors} })
		{
			$events++ if $self->_drive($a);
		}
		$events++ if $self->_check_waits;

		if (@actions)
		{
			# the next action is due at its share of the run, once every
			# lane made progress since the last one (a lane that keeps its
			# last blocks for the chaos to come does not count; when all
			# do, the actions go on regardless)
			my @free = $self->_free_lanes;
			# (the last at 85%: lanes keep their last 10% for the chaos)
			my $due = 0.85 * ($k + 1) / ($n_actions + 1);
			my $moved = !grep { !$self->{progress_since_action}{$_} } @free;
			# a stall or a loss of locks plays out before the next action
			my $waiting = grep { $self->_waits_for($_) } @LANES;
			if (!$armed && !$waiting
				&& (($self->_min_frac >= $due && $moved) || !@free))
			{
				$armed = 1;
				if ($SERVER_ACTION{ $actions[0] })
				{
					# first, a client of each lane holds a claim
					$self->{hold_wanted} = { map { $_ => 1 } @free };
				}
				$events++;
			}
			# lanes that ended or keep their last blocks hold nothing
			delete $self->{hold_wanted}{$_}
			  for grep { $self->_lane_finished($_) || $self->_held($_) }
			  keys %{ $self->{hold_wanted} };
			if ($armed && !%{ $self->{hold_wanted} })
			{
				if ($self->_do_action($actions[0]))
				{
					shift @actions;
					$self->{actions_left} = scalar @actions;
					$k++;
					$self->{progress_since_action} = {};
					$armed = 0;
					$events++;
				}
			}
		}

		last unless grep { !$_->{finished} } @{ $self->{actors} };

		# a hang guard, not an assertion: commits seen, batches enqueued,
		# clients finished or chaos actions done
		my $now = join ',', (map { $self->{acked_count}{$_} // 0 } @LANES),
		  $self->{next_key}, scalar(@actions),
		  scalar(grep { $_->{finished} } @{ $self->{actors} });
		if ($now ne $progress)
		{
			$progress = $now;
			$last_progress = time();
		}
		elsif (time() - $last_progress > $PostgreSQL::Test::Utils::timeout_default)
		{
			diag "no progress for $PostgreSQL::Test::Utils::timeout_default s:\n"
			  . join("\n",
				map {
					"$_->{name}: $_->{state}"
					  . ($_->{finished} ? ' (finished)' : '')
					  . ($_->{last_connect_error}
						? " last connect error: $_->{last_connect_error}"
						: '')
				} @{ $self->{actors} });
			diag 'group_stats: ' . (eval { $self->_q('SELECT * FROM pgq.group_stats;') } // $@);
			diag 'queue_stats: ' . (eval { $self->_q('SELECT * FROM pgq.queue_stats;') } // $@);
			die 'the chaos run does not end';
		}
		usleep($POLL_US) unless $events;
	}
	$self->{left_actions} = [@actions];
	return;
}

# ---------------------------------------------------------------------------
# The checks of the end.
sub check
{
	my ($self) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $l = $self->{label};
	my $n = $self->{ids};

	is_deeply($self->{left_actions}, [], "$l: every chaos action was carried out");
	is_deeply($self->{unexpected}, [],
		"$l: the clients saw no error but lost connections");
	is_deeply($self->{violations}, [], "$l: no client-side check failed");
	is($self->{stall_wanted} // 0, 0,
		"$l: every stall asked for was taken up by a lease consumer");
	is($self->{unlock_wanted} // 0, 0,
		"$l: every loss of advisory locks asked for was taken up by a consumer");
	my %n;
	$n{$_}++ for @{ $self->{done_actions} };
	is($self->{stats}{lease}{'stalled completions refused'} // 0,
		$n{stall} // 0,
		"$l: each stalled lease consumer's late complete() returned false, and it rolled back"
	);
	is($self->{stats}{advisory}{'check_worker false, rolled back'} // 0,
		$n{unlock} // 0,
		"$l: each advisory consumer that lost its locks found check_worker() false, and rolled back"
	);

	for my $mode (@MODES)
	{
		my $g = $self->group_of($mode);
		my $blocks = $self->{total_blocks}{$mode};
		# recorded rows, distinct ids, rows whose id is one of the group's,
		# distinct blocks
		my ($rows, $distinct, $ours, $nblocks) = split /\|/, $self->_q(
			qq{
			SELECT count(*), count(DISTINCT id),
			       (SELECT count(*) FROM processed JOIN src USING (id) WHERE mode = '$mode'),
			       count(DISTINCT block_id)
			FROM processed WHERE mode = '$mode';});
		is("$rows|$distinct", "$n|$n", "$l $mode: $n ids recorded, each once");
		if ($rows != $distinct)
		{
			diag "$l $mode: ids recorded more than once: " . $self->_q(
				qq{
			SELECT string_agg(format('%s (%s times, blocks %s, by %s)', id, n, b, c), '; ')
			FROM (SELECT id, count(*) n, string_agg(block_id::text, ',') b,
			             string_agg(consumer, ',') c
			      FROM processed WHERE mode = '$mode'
			      GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT 10) d;});
		}
		is($ours, $n, "$l $mode: the recorded ids are the group's ids");
		is($nblocks, $blocks, "$l $mode: ids came from $blocks distinct blocks");
		is( $self->_q(
				"SELECT state, pending, claimed, done, failed, "
				  . "(SELECT count(*) FROM pgq.blocks b JOIN pgq.groups g USING (group_id) WHERE g.group_name = '$g') "
				  . "FROM pgq.group_stats WHERE group_name = '$g';"),
			"drained|0|0|$blocks|0|0",
			"$l $mode: group_stats says drained, $blocks blocks done, none failed, none left in pgq.blocks"
		);
		$self->_check_acked($mode,
			"SELECT DISTINCT block_id || ' ' || consumer FROM processed WHERE mode = '$mode';"
		);
		# at least once, on the clients' side: every block was processed
		is(scalar(keys %{ $self->{processing}{$mode} }),
			$blocks,
			"$l $mode: the clients processed every block at least once");
	}

	# the queue
	my $keys = $self->{keys};
	my $items = qq{(SELECT i.* FROM pgq.items i JOIN pgq.groups g USING (group_id)
	               WHERE g.group_name = '$QUEUE')};
	is( $self->_q(
			qq{SELECT count(*), count(DISTINCT key),
			count(*) FILTER (WHERE key ~ '^k[0-9]+\$' AND substr(key, 2)::int BETWEEN 1 AND $keys)
			FROM qdone;}),
		"$keys|$keys|$keys",
		"$l queue: each of the $keys keys processed once");
	is( $self->_q(
			"SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE state = 'd') FROM $items i;"
		),
		"$keys|$keys|$keys",
		"$l queue: $keys items, one per key (redeliveries added nothing), all done"
	);
	is( $self->_q(
			"SELECT pending, scheduled, running, done, dead FROM pgq.queue_stats WHERE queue_name = '$QUEUE';"
		),
		"0|0|0|$keys|0",
		"$l queue: nothing pending, scheduled or running, nothing dead");
	is( $self->_q(
			"SELECT count(*) FROM qdone q LEFT JOIN $items i USING (key) WHERE i.item_id IS DISTINCT FROM q.item_id;"
		),
		0,
		"$l queue: each key was recorded with its item");
	my %db_id = map { split /\|/ }
	  split /\n/, $self->_q("SELECT key, item_id FROM $items i;");
	my @moved = grep { ($db_id{$_} // '') ne $self->{key_id}{$_} }
	  keys %{ $self->{key_id} };
	is(scalar(@moved), 0,
		"$l queue: every key the producer saw enqueued kept its item id");
	$self->_check_acked('queue', "SELECT key || ' ' || worker FROM qdone;");
	$self->{obs}->close if $self->{obs};
	$self->{obs} = undef;
	return;
}

# Every commit that a client saw survived, by that client.
sub _check_acked
{
	my ($self, $lane, $sql) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my %db = map { $_ => 1 } split /\n/, $self->_q($sql);
	my @acked = @{ $self->{acked}{$lane} // [] };
	my @missing = grep { !$db{$_} } @acked;
	diag "$self->{label} $lane: commits seen by clients but lost: "
	  . join(', ', @missing[ 0 .. min(9, $#missing) ])
	  if @missing;
	is(scalar(@missing), 0,
		"$self->{label} $lane: all "
		  . scalar(@acked)
		  . ' commits that the clients saw survived');
	return;
}

# The server logs: no PANIC, no failed assertion, no process ended by a
# signal other than the SIGKILLs the test sent.
sub check_logs
{
	my ($self) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my (@panic, @trap, @signal, %counts);
	for my $node (@{ $self->{nodes_used} })
	{
		my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
		for my $line (split /\n/, $log)
		{
			push @panic, $line if $line =~ /PANIC:/;
			push @trap, $line
			  if $line =~ /TRAP:|failed Assert|Assertion .* failed/;
			if ($line =~ /\(PID (\d+)\) was terminated by signal (\d+)/)
			{
				push @signal, $line
				  unless $2 == 9 && $self->{killed_pids}{$1};
			}
			$counts{$1}++ if $line =~ /\b(ERROR|FATAL|WARNING):/;
			$counts{'exited with exit code'}++
			  if $line =~ /exited with exit code [1-9]/;
		}
	}
	my $l = $self->{label};
	is_deeply(\@panic, [], "$l: no PANIC in the server log");
	is_deeply(\@trap, [], "$l: no assertion failure in the server log");
	is_deeply(\@signal, [],
		"$l: no server process ended by a signal but the SIGKILLs sent");
	note "$l: server log: "
	  . join(', ', map { "$counts{$_} $_" } sort keys %counts);
	return;
}

# What the run did.
sub report
{
	my ($self) = @_;
	my $l = $self->{label};
	my %n;
	$n{$_}++ for @{ $self->{done_actions} };
	note "$l: chaos actions: " . join(', ', map { "$n{$_} $_" } sort keys %n);
	note "$l: SIGKILLed backends: " . join(', ', sort keys %{ $self->{killed_pids} })
	  if %{ $self->{killed_pids} };
	for my $lane (@LANES)
	{
		my $claims = $self->{claims}{$lane} // {};
		my $proc = $self->{processing}{$lane} // {};
		my $retried = grep { $claims->{$_} > 1 } keys %$claims;
		my $twice = grep { $proc->{$_} > 1 } keys %$proc;
		note "$l $lane: "
		  . ($self->{acked_count}{$lane} // 0)
		  . " commits seen by clients; $retried "
		  . ($lane eq 'queue' ? 'items' : 'blocks')
		  . " claimed more than once (retried), $twice processed more than once by clients";
	}
	note "$l lease: highest attempt seen: " . ($self->{max_attempt} // 0);
	note "$l: consumption checked atomic after "
	  . ($self->{atomic_checks} // 0)
	  . ' crashes or failovers';
	note "$l queue: "
	  . scalar(keys %{ $self->{redelivered} // {} })
	  . ' keys sent more than once by the producer';
	for my $kind (sort keys %{ $self->{stats} })
	{
		my $s = $self->{stats}{$kind};
		note "$l $kind: " . join(', ', map { "$s->{$_} $_" } sort keys %$s);
	}
	return;
}

1;
