
# Materializing a large query keeps the creating backend's memory bounded:
# create_group reads the query through a cursor and writes one block at a
# time.  3,000,000 ids are 24 MB as bare int64s, and several hundred MB as
# tuples in an SPI tuptable; the backend's anonymous memory (RssAnon in
# /proc/<pid>/status: private memory, while shared buffers count in RssShmem)
# is sampled while create_group runs, and its peak must stay under 100 MB.
#
# This is a measurement, not a timing test: the elapsed time is printed only.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTest;

my $n_ids = 3_000_000;
my $bound_kb = 100 * 1024;

my $node = PostgreSQL::Test::Cluster->new('memory');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

sub rss_kb
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/status" or return undef;
	my %kb;
	while (<$fh>)
	{
		$kb{$1} = $2 if /^(RssAnon|RssShmem|VmHWM):\s+(\d+) kB/;
	}
	close $fh;
	return \%kb;
}

# Run $sql in a new session, sampling the backend's RssAnon until it ends.
sub measure
{
	my ($name, $sql) = @_;
	my $s = new_session($node, $name);
	my $pid = $s->pid;
	my %m = (base => rss_kb($pid)->{RssAnon}, peak => 0, samples => 0);

	my $t0 = time();
	$s->send($sql);
	for (;;)
	{
		my $kb = rss_kb($pid);
		if ($kb)
		{
			$m{peak} = $kb->{RssAnon} if $kb->{RssAnon} > $m{peak};
			$m{samples}++;
		}
		$m{state} = $s->poll;
		last if $m{state} ne 'busy';
		usleep(10_000);    # sampling interval
	}
	$m{elapsed} = time() - $t0;
	$m{result} = $s->{result};
	$m{error} = $s->{error};
	$s->close;
	return \%m;
}

sub measure_create_group
{
	my ($group, $block_size) = @_;
	my $n_blocks = $n_ids / $block_size;
	my $query = "SELECT g FROM generate_series(1, $n_ids) g ORDER BY g DESC";
	my $m = measure("create_$group",
		"SELECT pgq.create_group('$group', '$query', $block_size);");
	my ($state, $base, $peak, $samples, $elapsed) =
	  @$m{qw(state base peak samples elapsed)};

	is($state, 'done', "$group: create_group finished");
	is($m->{error}, '', "$group: create_group raised no error");
	is($m->{result}, 't', "$group: create_group returned true");

	diag sprintf(
		"%s: %d ids, block_size %d: RssAnon %.1f MB before, peak %.1f MB "
		  . "(%d samples), %.1f s",
		$group, $n_ids, $block_size, $base / 1024, $peak / 1024,
		$samples, $elapsed);
	cmp_ok($samples, '>', 1, "$group: memory sampled while create_group ran");
	cmp_ok($peak, '<', $bound_kb,
		"$group: peak RssAnon of the creating backend under 100 MB");

	# the group: all ids, in blocks of block_size, in the query's order
	is_deeply(
		[ @{ group_stats($node, $group) }{qw(state total_ids total_blocks pending)} ],
		[ 'ready', $n_ids, $n_blocks, $n_blocks ],
		"$group: $n_ids ids in $n_blocks blocks");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*),
		       count(*) FILTER (WHERE ids = ARRAY(
		           SELECT generate_series(first, first - $block_size + 1, -1)))
		FROM (SELECT b.ids,
		             $n_ids - (row_number() OVER (ORDER BY b.block_id) - 1)
		                      * $block_size AS first
		      FROM pgq.blocks b JOIN pgq.groups USING (group_id)
		      WHERE group_name = '$group') x}),
		"$n_blocks|$n_blocks",
		"$group: block after block, the ids are $n_ids down to 1");
	return;
}

# The control: the same query's rows all held in an SPI tuptable (PL/pgSQL's
# PERFORM fetches every row of its query), as a create_group that ran the
# query with SPI_execute would.  The sampling must see it cross the bound.
my $m = measure('control',
	"DO \$\$BEGIN PERFORM g FROM generate_series(1, $n_ids) g ORDER BY g DESC; END\$\$;"
);
is($m->{error}, '', 'control: whole result in an SPI tuptable ran');
diag sprintf(
	"control, %d rows in an SPI tuptable: RssAnon peak %.1f MB (%d samples), %.1f s",
	$n_ids, $m->{peak} / 1024, $m->{samples}, $m->{elapsed});
cmp_ok($m->{peak}, '>', $bound_kb,
	'control: the sampling sees a whole-result materialization cross the bound'
);

measure_create_group('big5000', 5000);
measure_create_group('big1000', 1000);

$node->stop;
done_testing();
