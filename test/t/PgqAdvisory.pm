
# Helpers for pgq's advisory-mode TAP tests (008-010): a group 'g' in
# advisory mode, worker sessions (PostgreSQL::Test::BackgroundPsql, each
# registered as a worker), claims that remember the ids of their blocks,
# processing a block exactly once, draining the group, and the checks of the
# end.  Every helper works on the group 'g' of setup_advisory_group(), whose
# ids are processed into the table "processed".

package PgqAdvisory;

use strict;
use warnings;

use Exporter 'import';
use Test::More;

our @EXPORT = qw(
  setup_advisory_group worker_session claim record_ids process drain
  error_of not_registered stats workers check_drained
);

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

1;
