
# Helpers for pgq's advisory-mode TAP tests (008-010): a group 'g' in
# advisory mode, worker sessions (PostgreSQL::Test::BackgroundPsql, each
# registered as a worker), claims that remember the ids of their blocks,
# processing a block exactly once, draining the group, and the checks of the
# end.  Every helper works on the group 'g' of setup_advisory_group(), whose
# ids are processed into the table "processed".
#
# The helpers of the tag ':queue' (105-106) do the same for the advisory-mode
# queue 'aq' of setup_advisory_queue(), whose items are completed into the
# table "completed".

package PgqAdvisory;

use strict;
use warnings;

use Exporter 'import';
use Test::More;

our @EXPORT = qw(
  setup_advisory_group worker_session claim record_ids process drain
  error_of not_registered stats workers check_drained
);
our @EXPORT_OK = qw(
  setup_advisory_queue item_ids n_of claim_items start_completion
  complete_item fail_item relock_ids drain_queue take_snapshot
  changed_since_snapshot queue_stats check_queue_drained
);
our %EXPORT_TAGS = (queue => \@EXPORT_OK);

my %ids_of;       # block id -> ids, as the claims returned them
my $group_blocks; # blocks of the group: no drain takes more rounds

# Create the extension, the table "processed" (no key: a second delivery of
# an id shows in the final counts) and the advisory group 'g' of the ids 1 to
# $n_ids in blocks of $block_size.  Returns the number of blocks.
sub setup_advisory_group
{
	my ($node, $n_ids, $block_size) = @_;
	$node->safe_psql('postgres', qq{
	CREATE EXTENSION pgq;
	CREATE TABLE processed (id bigint, block_id bigint);
	SELECT pgq.create_group('g', 'SELECT g FROM generate_series(1, $n_ids) g', $block_size,
	                        mode => 'advisory');
});
	$group_blocks = int(($n_ids + $block_size - 1) / $block_size);
	return $group_blocks;
}

# A background psql session registered as worker $name: returns the session
# and the worker id.
sub worker_session
{
	my ($node, $name) = @_;
	my $s = $node->background_psql('postgres');
	my $w = $s->query_safe("SELECT pgq.register_worker('$name')");
	return ($s, $w);
}

# Claim up to $n blocks as worker $w; returns the block ids.
sub claim
{
	my ($s, $w, $n) = @_;
	my @blocks;
	for my $line (split /\n/, $s->query_safe(
		"SELECT block_id, ids FROM pgq.claim('g', max_blocks => $n, worker_id => $w)"))
	{
		my ($block, $ids) = split /\|/, $line;
		$ids_of{$block} = $ids;
		push @blocks, $block;
	}
	return @blocks;
}

# Record the ids of a claimed block in "processed" (in the session's
# transaction, if one is open).
sub record_ids
{
	my ($s, $block) = @_;
	$s->query_safe(
		"INSERT INTO processed SELECT unnest('$ids_of{$block}'::bigint[]), $block");
	return;
}

# Process one held block exactly once: record its ids and complete it in one
# transaction; if pgq.complete() says the block is not ours, roll back.
sub process
{
	my ($s, $w, $block) = @_;
	$s->query_safe('BEGIN');
	record_ids($s, $block);
	my $ok = $s->query_safe("SELECT pgq.complete($block, worker_id => $w)");
	$s->query_safe($ok eq 't' ? 'COMMIT' : 'ROLLBACK');
	return $ok eq 't';
}

# Process the blocks held (@todo), then claim $batch blocks at a time and
# process them until nothing is left.  Returns the number of blocks completed
# and the number of completions refused (and rolled back).
sub drain
{
	my ($s, $w, $batch, @todo) = @_;
	my ($done, $refused, $rounds) = (0, 0, 0);
	while (@todo)
	{
		process($s, $w, $_) ? $done++ : $refused++ for @todo;
		die 'the group does not drain' if ++$rounds > $group_blocks;
		@todo = claim($s, $w, $batch);
	}
	return ($done, $refused);
}

# A statement that must fail: returns "SQLSTATE: message".
sub error_of
{
	my ($node, $sql) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $err =~ /ERROR:  ([0-9A-Z]{5}): (.*)/ ? "$1: $2" : "no error: $out";
}

# What error_of() returns for a claim or completion with the id $w of a worker
# that this session did not register.
sub not_registered
{
	my ($w) = @_;
	return qr/^55000: worker $w is not registered in this session$/;
}

# state|pending|claimed|done of the group
sub stats
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT state, pending, claimed, done FROM pgq.group_stats WHERE group_name = 'g'");
}

# worker_name|alive|blocks_held of each registered worker, one a line
sub workers
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		'SELECT worker_name, alive, blocks_held FROM pgq.workers ORDER BY worker_id');
}

# The end of every test: each of the ids 1 to $n_ids processed exactly once
# (the first check is named 'every id processed exactly once', then $how),
# and the group drained.
sub check_drained
{
	my ($node, $n_ids, $n_blocks, $how) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is($node->safe_psql('postgres',
			'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM processed'),
		"$n_ids|$n_ids|1|$n_ids",
		'every id processed exactly once' . (defined $how ? " $how" : ''));
	is(stats($node), "drained|0|0|$n_blocks", 'the group is drained');
	return;
}

# --- advisory-mode queues

my @item_ids;      # ids of the queue's items, in enqueue order
my %n_of;          # item id -> n, its number (payload {"n": n}, 1 to 100)

# The items: 100, enqueued in one pgq.enqueue_many with payloads {"n": n};
# every fourth has an idempotency key, and three ordering keys hold several
# items each: 'ok-a' items 11-20, 'ok-b' 41-45, 'ok-c' 57, 67, 77, 87, 97.
my $n_items = 100;

sub ordering_key_of
{
	my ($n) = @_;
	return 'ok-a' if $n >= 11 && $n <= 20;
	return 'ok-b' if $n >= 41 && $n <= 45;
	return 'ok-c' if $n > 50 && $n % 10 == 7;
	return undef;
}

# Create the extension, the table "completed" (one row per completion,
# written in the completing transaction, in commit order by seq; no key: a
# second completion of an item shows in the final checks) and the
# advisory-mode queue 'aq' (max_attempts 3; a failure without retry_after
# is retried an hour later), with its 100 items.  Returns their ids.
sub setup_advisory_queue
{
	my ($node) = @_;
	my (@payloads, @keys, @okeys);
	for my $n (1 .. $n_items)
	{
		push @payloads, qq{"{\\"n\\": $n}"};
		push @keys, $n % 4 == 0 ? "key-$n" : 'NULL';
		push @okeys, ordering_key_of($n) // 'NULL';
	}
	$node->safe_psql('postgres', qq{
	CREATE EXTENSION pgq;
	CREATE TABLE completed (seq bigserial, item_id bigint, n int,
	                        worker bigint, attempt int);
	SELECT pgq.create_queue('aq', mode => 'advisory', max_attempts => 3,
	                        backoff => '1 hour', max_backoff => '1 hour');
});
	my $ids = $node->safe_psql('postgres', qq{
	SELECT pgq.enqueue_many('aq', '{@{[join ',', @payloads]}}'::jsonb[],
	                        keys => '{@{[join ',', @keys]}}',
	                        ordering_keys => '{@{[join ',', @okeys]}}')});
	$ids =~ s/^\{|\}$//g;
	@item_ids = split /,/, $ids;
	die "enqueued @{[scalar @item_ids]} items" unless @item_ids == $n_items;
	%n_of = map { $item_ids[$_ - 1] => $_ } 1 .. $n_items;
	return @item_ids;
}

# The ids of the items numbered @n.
sub item_ids
{
	return map { $item_ids[ $_ - 1 ] } @_;
}

# The number of the item $id.
sub n_of
{
	my ($id) = @_;
	return $n_of{$id};
}

# Claim up to $n items as worker $w; returns their ids.  Dies if a claim
# returns an item with the wrong payload or an attempt other than the one
# after the row's (claims write nothing, so the row's attempt is the count of
# attempts that ended).
sub claim_items
{
	my ($s, $w, $n) = @_;
	my @ids;
	for my $line (split /\n/, $s->query_safe(qq{
		SELECT c.block_id, c.payload->>'n', c.attempt = i.attempt + 1
		FROM pgq.claim('aq', $n, worker_id => $w) c
		JOIN pgq.items i ON i.item_id = c.block_id}))
	{
		my ($id, $n_item, $attempt_ok) = split /\|/, $line;
		die "item $id came with n = $n_item" unless $n_of{$id} == $n_item;
		die "item $id came with a wrong attempt" unless $attempt_ok eq 't';
		push @ids, $id;
	}
	return @ids;
}

# Start the completion of item $id held by worker $w: record it in
# "completed" and complete it with the result {"square": n * n}, in a
# transaction left open.  Returns what pgq.complete() returned ('t' or 'f').
sub start_completion
{
	my ($s, $w, $id) = @_;
	my $n = $n_of{$id};
	$s->query_safe('BEGIN');
	$s->query_safe(qq{
		INSERT INTO completed (item_id, n, worker, attempt)
		SELECT $id, $n, $w, attempt + 1 FROM pgq.items WHERE item_id = $id});
	return $s->query_safe(qq{
		SELECT pgq.complete($id, result => '{"square": @{[$n * $n]}}',
		                    worker_id => $w)});
}

# Complete item $id exactly once: start_completion(), then commit if
# pgq.complete() took it, roll back if not.  Returns whether it committed.
sub complete_item
{
	my ($s, $w, $id) = @_;
	my $ok = start_completion($s, $w, $id);
	$s->query_safe($ok eq 't' ? 'COMMIT' : 'ROLLBACK');
	return $ok eq 't';
}

# Fail item $id held by worker $w (with retry_after => $retry_after, if
# given: else the queue's backoff of an hour).  Returns whether it did.
sub fail_item
{
	my ($s, $w, $id, $retry_after) = @_;
	my $after = defined $retry_after ? ", retry_after => '$retry_after'" : '';
	return $s->query_safe(qq{
		SELECT pgq.fail($id, 'attempt failed', worker_id => $w$after)}) eq 't';
}

# Relock @ids as worker $w; returns the ids regained.
sub relock_ids
{
	my ($s, $w, @ids) = @_;
	my $got = $s->query_safe(
		"SELECT pgq.relock('{" . join(',', @ids) . "}', worker_id => $w)");
	$got =~ s/^\{|\}$//g;
	return split /,/, $got;
}

# Complete the items held (@todo, which may be none), then claim $batch
# items at a time and complete them until a claim returns nothing.  Returns
# the number of items completed and the number of completions refused (and
# rolled back).
sub drain_queue
{
	my ($s, $w, $batch, @todo) = @_;
	my ($done, $refused, $rounds) = (0, 0, 0);
	while (1)
	{
		complete_item($s, $w, $_) ? $done++ : $refused++ for @todo;
		die 'the queue does not drain' if ++$rounds > $n_items + 1;
		@todo = claim_items($s, $w, $batch);
		last unless @todo;
	}
	return ($done, $refused);
}

# Keep each item's state, attempt, due_at and row version (xmin, ctid) in
# the table "snapshot".
sub take_snapshot
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
	SET client_min_messages = warning;
	DROP TABLE IF EXISTS snapshot;
	CREATE TABLE snapshot AS
	SELECT item_id, state, attempt, due_at, xmin::text AS row_xmin,
	       ctid::text AS row_ctid
	FROM pgq.items WHERE item_id BETWEEN }
		  . "$item_ids[0] AND $item_ids[-1]");
	return;
}

# The ids of the items whose row differs from the snapshot, in id order.
sub changed_since_snapshot
{
	my ($node) = @_;
	return split /\n/, $node->safe_psql('postgres', q{
	SELECT s.item_id FROM snapshot s LEFT JOIN pgq.items i USING (item_id)
	WHERE (i.state, i.attempt, i.due_at, i.xmin::text, i.ctid::text)
	      IS DISTINCT FROM (s.state, s.attempt, s.due_at, s.row_xmin, s.row_ctid)
	ORDER BY s.item_id});
}

# pending|scheduled|running|waiting|done|dead of the queue
sub queue_stats
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
	SELECT pending, scheduled, running, waiting, done, dead
	FROM pgq.queue_stats WHERE queue_name = 'aq'});
}

# The end of every queue test: each item completed exactly once (the first
# check is named 'every item completed exactly once', then $how), done with
# its result, the items of each ordering key finished in enqueue order, and
# the queue drained.
sub check_queue_drained
{
	my ($node, $how) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is($node->safe_psql('postgres',
			'SELECT count(*), count(DISTINCT item_id), min(n), max(n) FROM completed'),
		"$n_items|$n_items|1|$n_items",
		'every item completed exactly once' . (defined $how ? " $how" : ''));
	is($node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE i.state = 'd'),
		       count(*) FILTER (WHERE i.result = jsonb_build_object('square', c.n * c.n)
		                          AND (i.payload->>'n')::int = c.n
		                          AND i.attempt = c.attempt)
		FROM pgq.items i JOIN completed c USING (item_id)}),
		"$n_items|$n_items",
		'every item is done, with its result and the attempt that completed it');
	is($node->safe_psql('postgres', q{
		SELECT count(*), count(*) FILTER (WHERE seq < prev_seq OR finished_at < prev_finished)
		FROM (SELECT c.seq, i.finished_at,
		             lag(c.seq) OVER w AS prev_seq,
		             lag(i.finished_at) OVER w AS prev_finished
		      FROM pgq.items i JOIN completed c USING (item_id)
		      WHERE i.ordering_key IS NOT NULL
		      WINDOW w AS (PARTITION BY i.ordering_key ORDER BY i.item_id)) x}),
		'20|0',
		'the items of each ordering key were completed in enqueue order');
	is(queue_stats($node), "0|0|0|0|$n_items|0", 'the queue is drained');
	return;
}

1;
