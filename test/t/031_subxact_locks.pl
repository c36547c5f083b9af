
# Claims in PL/pgSQL exception blocks that fail while they wait for a lock:
# another session holds pgq.blocks and pgq.items in ACCESS EXCLUSIVE mode, so
# each claim stops at its first look at them; lock_timeout, or a cancel
# (pg_cancel_backend) sent once the claim waits for the lock, ends it there.
# For waiting lease-mode and queue claims that is inside the subtransaction
# that each of their attempts runs in.  The exception handler must roll back
# its own block: the block's write is undone, the write before the block and
# the transaction's COMMIT stay, the session goes on, and the server does not
# crash (run-tests.sh fails a run whose server log shows a crash).
#
# sql/subxact.sql has the errors that need no second session.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTest;

my $node = PostgreSQL::Test::Cluster->new('subxact_locks');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pgq'\n");
$node->start;
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION pgq;
	CREATE TABLE sx_log (step text);
	CREATE FUNCTION sx_block(sql text) RETURNS text
	LANGUAGE plpgsql AS $$
	BEGIN
	    INSERT INTO sx_log VALUES ('in the block');
	    EXECUTE sql;
	    RETURN 'no error';
	EXCEPTION WHEN OTHERS OR query_canceled THEN
	    RETURN SQLSTATE || ': ' || SQLERRM;
	END
	$$;
	SELECT pgq.create_group('sx_lease', 'SELECT 1', mode => 'lease', lease => '1 hour');
	SELECT count(*) FROM pgq.claim('sx_lease');
	SELECT pgq.create_group('sx_tx', 'SELECT 1');
	SELECT pgq.create_group('sx_advisory', 'SELECT 1', mode => 'advisory');
	SELECT pgq.create_queue('sx_queue');
	SELECT pgq.create_queue('sx_tx_queue', mode => 'transaction');
	SELECT pgq.enqueue('sx_queue', '{}');
});
my $item = $node->safe_psql('postgres',
	q{SELECT block_id FROM pgq.claim('sx_queue')});

my $worker = new_session($node, 'worker');
my $worker_id =
  $worker->query_ok(q{SELECT pgq.register_worker('sx');});
my $locker = new_session($node, 'locker');
my $obs = new_session($node, 'observer');

my @claims = (
	q{SELECT * FROM pgq.claim('sx_lease', wait => '1 hour')},
	q{SELECT * FROM pgq.claim('sx_lease')},
	q{SELECT * FROM pgq.claim('sx_queue', wait => '1 hour')},
	q{SELECT * FROM pgq.claim('sx_queue')},
	q{SELECT * FROM pgq.claim('sx_tx', wait => '1 hour')},
	q{SELECT * FROM pgq.claim('sx_tx_queue', wait => '1 hour')},
	qq{SELECT * FROM pgq.claim('sx_advisory', wait => '1 hour', worker_id => $worker_id)},
	qq{SELECT * FROM pgq.result($item, wait => '1 hour')});

# Run one claim in a block of a transaction that wrote before it, with the
# claim stopped by $how ('lock_timeout' or 'cancel') while it waits for the
# lock; check what is left, then that the transaction commits.
sub one_case
{
	my ($claim, $how, $block) = @_;
	$locker->query_ok(
		'BEGIN; LOCK TABLE pgq.blocks, pgq.items IN ACCESS EXCLUSIVE MODE;');
	$worker->query_ok(
		$how eq 'lock_timeout'
		? q{SET lock_timeout = '100ms';}
		: q{RESET lock_timeout;});
	my $sql = $claim =~ s/'/''/gr;
	$worker->send(
		($block ? 'BEGIN; ' : '')
		  . qq{INSERT INTO sx_log VALUES ('before');
		SELECT sx_block('$sql');
		SELECT string_agg(step, ', ') FROM sx_log;});
	if ($how eq 'cancel')
	{
		ok( wait_until(
				$obs, qq{
			SELECT wait_event_type FROM pg_stat_activity WHERE pid = ${\ $worker->pid};},
				'Lock', $worker),
			"$how, $claim: waits for the lock");
		$obs->query_ok("SELECT pg_cancel_backend(${\ $worker->pid});");
	}
	is($worker->wait, 'done', "$how, $claim: the session is alive");
	my $expected_error =
	  $how eq 'cancel'
	  ? '57014: canceling statement due to user request'
	  : '55P03: canceling statement due to lock timeout';
	is($worker->{result}, "$expected_error\nbefore",
		"$how, $claim: error caught, the block's write undone");
	$locker->query_ok('ROLLBACK;');
	if ($block)
	{
		$worker->query_ok('COMMIT;');
		is($worker->{error}, '', "$how, $claim: the transaction commits");
	}
	else
	{
		is( $worker->query_ok(
				q{SELECT now() = statement_timestamp(), pg_current_xact_id_if_assigned() IS NULL;}
			),
			't|t',
			"$how, $claim: the next statement is a new transaction");
	}
	is($worker->query_ok(q{SELECT string_agg(step, ', ') FROM sx_log;}),
		'before', "$how, $claim: the write before the block stays");
	$worker->query_ok('DELETE FROM sx_log;');
	return;
}

for my $how ('lock_timeout', 'cancel')
{
	for my $claim (@claims)
	{
		# transaction-mode claims need a transaction block
		one_case($claim, $how, 1);
		one_case($claim, $how, 0) unless $claim =~ /sx_tx/;
	}
}

# nothing was claimed or lost
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(group_name || ' ' || pending || ' ' || claimed, ', '
	                  ORDER BY group_name)
	FROM pgq.group_stats WHERE group_name LIKE 'sx%'}),
	'sx_advisory 1 0, sx_lease 0 1, sx_tx 1 0',
	'the groups are as they were');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(queue_name || ' ' || pending || ' ' || running, ', '
	                  ORDER BY queue_name)
	FROM pgq.queue_stats WHERE queue_name LIKE 'sx%'}),
	'sx_queue 0 1, sx_tx_queue 0 0',
	'the queues are as they were');

$_->close for ($worker, $locker, $obs);
$node->stop;
done_testing();
