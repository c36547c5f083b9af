
# Replays the examples of docs/reference.md, so that the reference cannot
# fall behind the code: each transcript must be what psql prints when its
# statements run now.
#
# An example is a ``` block (without a language) of docs/reference.md: the
# one after the line "**Example**" of each "### pgq.NAME" section, and the
# others (under "Joining a group of another role", and the settings listing
# under "## Settings").  It is a psql transcript, as "psql -a -q" prints it:
# the statements echoed, each followed by its output.  The reference says
# how they ran (its "**Examples.**" paragraph, under Conventions): with pgq
# preloaded, in a fresh database, as a superuser, after the setup of the
# ```sql block that follows that paragraph.  This test does the same for
# each example: CREATE DATABASE, the setup (its CREATE ROLE statements once
# for the cluster), then the example's statements through one psql, whose
# output must equal the block line for line after the normalisations listed
# below (see normalise()).  A mismatch is reported as a diff (diag), so
# that the reference can be fixed by replaying the example.
#
# The statements are the block's lines that psql echoed: a line that starts
# a statement (an SQL keyword in upper case, a psql backslash command, or a
# "-- " comment; a table's rule of dashes is output) and the lines up to the
# end of that statement (";", or \gset and the like at the end of the
# line).  Everything else is output.
#
# The examples ran as the superuser "pgqdev": group_stats and queue_stats
# show it as the owner of the groups they create, so the test runs them as
# a superuser of that name.
#
# docs/queues.md and docs/claim-modes.md show ```sql blocks of statements
# without their output, which cannot be compared; they are not replayed.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# Examples that cannot be replayed as they are shown, by name, with the
# reason.  They are counted, and must still exist in the reference.
my %cannot_replay = ();

# Examples that wait for work outside their session (a background worker)
# with pg_sleep(): replayed with the statements fed to psql in parts, and
# after each part that ends with a statement matching "after", the test
# waits until "until" (run in the example's database) returns true before
# it feeds the next part, so that what follows the sleep does not depend
# on how fast the server is.
my %waits = (
	'pgq.rematerialize' => [
		{
			after => qr/^SELECT pg_sleep\(1\);$/,
			until => q{SELECT state = 'failed' FROM pgq.group_stats
					   WHERE group_name = 'alerts-a'},
		},
		{
			after => qr/^SELECT pg_sleep\(1\);$/,
			until => q{SELECT state = 'ready' FROM pgq.group_stats
					   WHERE group_name = 'alerts-a'},
		},
	],
);

# The keywords that start an SQL statement of a transcript, in upper case
# (no line of psql's output starts with one: column names are in lower case).
my $statement_re = qr/^(?:SELECT|WITH|VALUES|TABLE|INSERT|UPDATE|DELETE|
	BEGIN|START|COMMIT|ROLLBACK|ABORT|SAVEPOINT|PREPARE|EXECUTE|SET|RESET|SHOW|
	CREATE|DROP|ALTER|GRANT|REVOKE|COMMENT|TRUNCATE|LOCK|VACUUM|ANALYZE|
	LISTEN|UNLISTEN|NOTIFY|DISCARD|DO|CALL|EXPLAIN|DECLARE|FETCH|CLOSE)\b/x;

my $reference = "$FindBin::RealBin/../../docs/reference.md";
open(my $fh, '<', $reference) or die "cannot open $reference: $!";
my @lines = <$fh>;
close($fh);
chomp @lines;

# The examples, in order: { name, line, text }; and the setup.
my (@examples, %seen, $setup, @missing);
{
	my ($heading, $block, $lang, $start, $after_example, $after_examples_para);
	my $pending_example;    # a "**Example**" line not yet followed by its block
	for my $i (0 .. $#lines)
	{
		my $line = $lines[$i];
		if (defined $block)
		{
			if ($line eq '```')
			{
				if ($lang eq '')
				{
					my $name = $heading;
					$name .= ' #' . ($seen{$heading} + 1) if $seen{$heading};
					$seen{$heading}++;
					push @examples,
					  { name => $name, line => $start, text => $block };
				}
				elsif ($lang eq 'sql' && $after_examples_para && !defined $setup)
				{
					$setup = $block;
				}
				undef $block;
			}
			else
			{
				$block .= "$line\n";
			}
			next;
		}
		if ($line =~ /^```(\w*)\s*$/)
		{
			($block, $lang, $start) = ('', $1, $i + 1);
			push @missing, $pending_example
			  if defined $pending_example && $lang ne '';
			undef $pending_example;
			next;
		}
		if ($line =~ /^#{2,3} (.*?)\s*$/)
		{
			push @missing, $pending_example if defined $pending_example;
			undef $pending_example;
			$heading = $1;
			$after_examples_para = 0;
			next;
		}
		$pending_example = $heading if $line eq '**Example**';
		$after_examples_para = 1 if $line =~ /^\*\*Examples\.\*\*/;
	}
	push @missing, $pending_example if defined $pending_example;
}
die "docs/reference.md: no ```sql setup block after \"**Examples.**\""
  unless defined $setup;
ok(scalar(@examples) > 0, 'docs/reference.md has examples');
ok(!@missing, 'every "**Example**" line is followed by a ``` block')
  or diag 'sections whose "**Example**" has no ``` block: '
  . join(', ', @missing);
for my $name (sort keys %cannot_replay)
{
	ok((grep { $_->{name} eq $name } @examples),
		"example $name, listed as not replayable, exists");
}

# The setup: CREATE ROLE once for the cluster, the rest in each database.
my @setup = grep { /\S/ } split /\n/, $setup;
my @cluster_setup = grep { /^CREATE ROLE\b/ } @setup;
my $db_setup = join("\n", grep { !/^CREATE ROLE\b/ } @setup) . "\n";

my $node = PostgreSQL::Test::Cluster->new('reference_examples');
$node->init;
# pgq's settings keep their defaults, as the settings listing shows them
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
});
$node->start;
$node->safe_psql('postgres',
	join("\n", 'CREATE ROLE pgqdev SUPERUSER LOGIN;', @cluster_setup));

# A transcript's statements: a list of statements, each a list of lines.
sub statements
{
	my ($text) = @_;
	my (@stmts, $open);
	for my $line (split /\n/, $text)
	{
		if ($open)
		{
			push @{ $stmts[-1] }, $line;
		}
		elsif ($line =~ /^--(?:\s|$)/ || $line =~ /^\\/ || $line =~ $statement_re)
		{
			push @stmts, [$line];
			$open = 1;
		}
		else
		{
			next;
		}
		# a statement ends with ";" or with a backslash command; a comment
		# or a backslash command is one line
		$open = 0
		  if $line =~ /;\s*$/
		  || $line =~ /\\g\w*(?:\s+\S+)?\s*$/
		  || $stmts[-1][0] =~ /^(?:--|\\)/;
	}
	return @stmts;
}

# The normalisations, applied to the transcript and to psql's output alike.
sub normalise
{
	my ($text) = @_;
	my @l = split /\n/, $text, -1;
	my $timestamps = 0;
	for (@l)
	{
		# psql names the input file and line before each error, notice and
		# warning; the reference leaves that out
		s/^psql:[^:]*:\d+: //;

		# timestamps (in the "at" of pgq.dead_items' errors, say): the time
		# of the run
		$timestamps +=
		  s/\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d(?::\d\d)?)?/<timestamp>/g;

		# a notification names the notifying backend's pid ...
		s/(received from server process with PID )\d+/$1<pid>/;

		# ... and the group's channel, a random name (pgq.channel), also
		# as the start of a queue's finished channel
		s/\bpgq_[0-9a-f]{32}(?=\b|_finished\b)/pgq_<channel>/g;

		# trailing spaces: psql pads the last column
		s/\s+$//;
	}
	if ($timestamps)
	{
		# A timestamp's width varies (trailing zeros of the microseconds
		# are left out), and with it psql's padding in expanded display:
		# the dashes of a record's header, the spaces before a value's "+"
		# (its newline marker).
		for (@l)
		{
			s/^(-\[ RECORD \d+ \])-+$/$1-/;
			s/\s*\+$/ +/;
		}
	}
	# psql ends each result with an empty line; a block ends at its last
	# line of output
	pop @l while @l && $l[-1] eq '';
	return join("\n", @l) . "\n";
}

# The differences between two texts, as diff -u shows them.
my $tmp = tempdir(CLEANUP => 1);
sub difference
{
	my ($expected, $got) = @_;
	for (['expected', $expected], ['replayed', $got])
	{
		open(my $f, '>', "$tmp/$_->[0]") or die "$tmp/$_->[0]: $!";
		print $f $_->[1];
		close($f);
	}
	my $diff = '';
	IPC::Run::run([ 'diff', '-u', "$tmp/expected", "$tmp/replayed" ],
		'>', \$diff);
	return $diff;
}

# Runs the statements through psql -a -q in database $db, with the waits
# of %waits; returns psql's output (stdout and stderr, as they came).
sub replay
{
	my ($db, $name, @stmts) = @_;
	my @waits = @{ $waits{$name} // [] };
	my ($in, $out) = ('', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start(
		[
			$node->installed_command('psql'), '-X', '-a', '-q',
			'-v', 'ON_ERROR_STOP=0', '-U', 'pgqdev',
			'-d', $node->connstr($db), '-f', '-'
		],
		'<', \$in, '>', \$out, '2>&1', $timer);
	for my $stmt (@stmts)
	{
		$in .= join("\n", @$stmt) . "\n";
		next unless @waits && $stmt->[0] =~ $waits[0]{after};
		my $wait = shift @waits;
		# a poll of an observed condition; the deadline guards against hangs
		my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
		until ($node->safe_psql($db, $wait->{until}) eq 't')
		{
			die "example $name: timed out waiting for: $wait->{until}"
			  if time() > $deadline;
			$h->pump_nb;
			usleep(50_000);
		}
	}
	die "example $name: a wait of %waits was not used" if @waits;
	$h->finish;
	return $out;
}

my ($replayed, $skipped) = (0, 0);
my $n = 0;
for my $ex (@examples)
{
	my $name = $ex->{name};
	$n++;
	if (exists $cannot_replay{$name})
	{
		note "example $name not replayed: $cannot_replay{$name}";
		$skipped++;
		next;
	}
	my $db = sprintf('example_%03d', $n);
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"});
	$node->safe_psql($db, $db_setup, extra_params => [ '-U', 'pgqdev' ]);
	my @stmts = statements($ex->{text});
	my $got = normalise(replay($db, $name, @stmts));
	my $expected = normalise($ex->{text});
	$replayed++;
	ok($got eq $expected,
		"example $name (docs/reference.md line $ex->{line}) replays as shown")
	  or diag "docs/reference.md, example $name (line $ex->{line}): "
	  . "what it shows (-) and what psql prints now (+):\n"
	  . difference($expected, $got);
}
note "examples: $replayed replayed, $skipped not replayable";
is($replayed + $skipped, scalar(@examples), 'every example is counted');

$node->stop;
done_testing();
