
# Periodic jobs with pg_cron, the recipe of docs/queues.md ("Periodic jobs
# with pg_cron"), run by pg_cron itself: a schedule enqueues through a key
# derived from its tick, so that a tick that fires twice enqueues once.
#
# pg_cron is loaded beside pgq (shared_preload_libraries = 'pg_cron,pgq',
# its jobs run in background workers).  Two jobs are scheduled, in one
# transaction, with the same schedule (every minute: Debian 12's pg_cron
# 1.4 has no seconds) and the recipe's command with a one-minute period:
# each tick fires twice, racing.  The command records which item id its
# enqueue returned.  The test waits, polling cron.job_run_details (no sleep
# stands in for the runs), until both jobs have run, and checks that:
#
#  1. every run succeeded;
#  2. the two runs of one tick got the same item id, and the queue holds
#     one item per tick, keyed with that tick: the minute at which
#     pg_cron started the run (job_run_details.start_time);
#  3. the item is claimed and completed by a worker as any other.
#
# Without a key, or with a key that is not the tick's (now() itself, say),
# each tick makes two items and check 2 fails.
#
# pg_cron comes from Debian's package postgresql-15-cron, which
# test/run-tests.sh installs: under CI=true a PostgreSQL 15 without it fails
# this test; otherwise (or on another major version, for which Debian 12 has
# no package) the test is skipped.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cron');
my $pkglibdir = $node->config_data('--pkglibdir');
my $sharedir = $node->config_data('--sharedir');
my $have_cron = -f "$pkglibdir/pg_cron.so"
  && -f "$sharedir/extension/pg_cron.control";
if (!$have_cron)
{
	my $major = $node->pg_version->major;
	if (($ENV{CI} // '') eq 'true' && $major == 15)
	{
		fail("pg_cron is not installed in $pkglibdir "
			  . "(CI=true: apt-get install postgresql-15-cron)");
		done_testing();
		exit;
	}
	plan skip_all => "pg_cron is not installed in $pkglibdir "
	  . "(Debian: apt-get install postgresql-$major-cron)";
}

$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,pgq'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 16
pgq.maintenance_interval = 0
});
$node->start;

# The recipe of docs/queues.md, with a period of one minute and a queue of
# the test's; the command also records what its enqueue returned.
my $command = q{
    INSERT INTO cron_runs (item_id, tick)
    SELECT pgq.enqueue('minutely',
                       jsonb_build_object('tick', tick),
                       key => 'minutely@' || to_char(tick AT TIME ZONE 'UTC',
                                                     'YYYY-MM-DD"T"HH24:MI"Z"')),
           tick
    FROM pg_catalog.date_bin('1 minute', now(),
                             timestamptz '2000-01-01 00:00+00') AS tick
};

$node->safe_psql('postgres', q{
	CREATE EXTENSION pgq;
	CREATE EXTENSION pg_cron;
	SELECT pgq.create_queue('minutely');
	CREATE TABLE cron_runs (item_id bigint, tick timestamptz,
							run_at timestamptz DEFAULT clock_timestamp());
});

# Both jobs become visible to pg_cron at once, so that they fire at the
# same ticks.
my $jobs = $node->safe_psql('postgres', qq{
	BEGIN;
	SELECT cron.schedule('minutely-a', '* * * * *', \$\$$command\$\$);
	SELECT cron.schedule('minutely-b', '* * * * *', \$\$$command\$\$);
	COMMIT;
});
my @jobs = split /\n/, $jobs;
is(scalar @jobs, 2, 'two jobs scheduled');
my $joblist = join(',', @jobs);

# Wait for a finished run of each job: the first tick fires both.
$node->poll_query_until('postgres', qq{
	SELECT count(DISTINCT jobid) = 2
	FROM cron.job_run_details
	WHERE jobid IN ($joblist) AND status IN ('succeeded', 'failed')
}) or die 'pg_cron did not run both jobs';
$node->safe_psql('postgres',
	"SELECT cron.unschedule(jobid) FROM cron.job WHERE jobid IN ($joblist)");

# 1. every finished run succeeded
is( $node->safe_psql('postgres', qq{
		SELECT coalesce(string_agg(status || ': ' || return_message, '; '), '')
		FROM cron.job_run_details
		WHERE jobid IN ($joblist) AND status = 'failed'
	}),
	'',
	'every run of the jobs succeeded');

# Runs that pg_cron had started when the jobs were unscheduled may still
# be running: wait for them, so that what follows sees every run.
$node->poll_query_until('postgres', qq{
	SELECT count(*) = 0 FROM cron.job_run_details
	WHERE jobid IN ($joblist) AND status NOT IN ('succeeded', 'failed')
}) or die 'runs of pg_cron did not finish';

# 2. the first tick fired twice and enqueued once
my $first = $node->safe_psql('postgres', q{
	SELECT min(tick) FROM cron_runs
});
is( $node->safe_psql('postgres', qq{
		SELECT count(*), count(DISTINCT item_id) FROM cron_runs
		WHERE tick = '$first'
	}),
	'2|1',
	'both runs of the first tick got the same item');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM cron_runs r
		WHERE (SELECT count(DISTINCT item_id) FROM cron_runs s
			   WHERE s.tick = r.tick) <> 1
	}),
	'0',
	'every tick got one item id, whichever run asked');
is( $node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)
				WHERE g.group_name = 'minutely')
			 = (SELECT count(DISTINCT tick) FROM cron_runs)
	}),
	't',
	'the queue holds one item per tick');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM cron_runs r
		JOIN pgq.items i ON i.item_id = r.item_id
		WHERE i.key <> 'minutely@' || to_char(r.tick AT TIME ZONE 'UTC',
											  'YYYY-MM-DD"T"HH24:MI"Z"')
		   OR (i.payload ->> 'tick')::timestamptz <> r.tick
	}),
	'0',
	'each item is keyed with its tick');

# The tick is the minute pg_cron started the run in: its scheduled time.
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM cron.job_run_details d
		WHERE d.jobid IN ($joblist) AND d.status = 'succeeded'
		  AND NOT EXISTS (SELECT FROM cron_runs r
						  WHERE r.tick = date_trunc('minute', d.start_time))
	}),
	'0',
	'every run enqueued for the minute pg_cron started it in');

# 3. a worker takes the first tick's item as any other
is( $node->safe_psql('postgres', qq{
		SELECT pgq.complete(block_id, attempt => attempt)
		FROM pgq.claim('minutely')
		WHERE block_id = (SELECT item_id FROM cron_runs
						  WHERE tick = '$first' LIMIT 1)
	}),
	't',
	'a worker claims and completes the item of the first tick');

$node->stop;
done_testing();
