#!/usr/bin/env bash
# The long chaos run: test/t/021_chaos.pl (see its header) with hundreds of
# thousands of ids, many more kills, restarts and failovers, and more
# clients, run PGQ_CHAOS_RUNS times in a row, each with a new seed.  Stops at
# the first failing run.  The TAP output and the server logs of each run are
# kept in a directory that is printed at the end.
#
# pgq must be installed (make install).  Run as a user other than root
# (initdb refuses root); as root, the tree is copied and the test runs as
# $PGQ_TEST_USER (default pgqtest, created if needed).
#
# Settings (environment, default in brackets; PGQ_CHAOS_* go to the test):
#   PGQ_CHAOS_RUNS [1]                runs in a row
#   PGQ_CHAOS_IDS [500000]            ids per group of part 1, per mode
#   PGQ_CHAOS_KEYS [20000]            keys enqueued into the queue of part 1
#   PGQ_CHAOS_ROUNDS [60]             chaos actions of part 1, of which
#   PGQ_CHAOS_IMMEDIATE [10]            immediate stops
#   PGQ_CHAOS_KILLS [10]                SIGKILLs of a backend
#   PGQ_CHAOS_STALLS [8]                stalled lease consumers
#   PGQ_CHAOS_UNLOCKS [8]               advisory consumers losing their locks
#                                       (the rest: pg_terminate_backend)
#   PGQ_CHAOS_CONSUMERS [4]           consumers per group
#   PGQ_CHAOS_QUEUE_WORKERS [4]       queue workers
#   PGQ_CHAOS_FAILOVER_IDS [200000]   ids per group of part 2
#   PGQ_CHAOS_FAILOVER_KEYS [5000]    keys of part 2
#   PGQ_CHAOS_FAILOVERS [3]           failovers in part 2, each to a new standby
#   PGQ_CHAOS_FAILOVER_ROUNDS [16]    other chaos actions of part 2
#   PGQ_CHAOS_BLOCK_SIZE, PGQ_CHAOS_BATCH, PGQ_CHAOS_LEASE, PGQ_CHAOS_SEED,
#   PGQ_CHAOS_LOG_STATEMENT           see test/t/PgqChaos.pm
#   PG_TEST_TIMEOUT_DEFAULT [180]     the harness's hang guard, in seconds
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
test_user=${PGQ_TEST_USER:-pgqtest}
runs=${PGQ_CHAOS_RUNS:-1}

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PGQ_CHAOS_IDS=${PGQ_CHAOS_IDS:-500000}
export PGQ_CHAOS_KEYS=${PGQ_CHAOS_KEYS:-20000}
export PGQ_CHAOS_ROUNDS=${PGQ_CHAOS_ROUNDS:-60}
export PGQ_CHAOS_IMMEDIATE=${PGQ_CHAOS_IMMEDIATE:-10}
export PGQ_CHAOS_KILLS=${PGQ_CHAOS_KILLS:-10}
export PGQ_CHAOS_STALLS=${PGQ_CHAOS_STALLS:-8}
export PGQ_CHAOS_UNLOCKS=${PGQ_CHAOS_UNLOCKS:-8}
export PGQ_CHAOS_CONSUMERS=${PGQ_CHAOS_CONSUMERS:-4}
export PGQ_CHAOS_QUEUE_WORKERS=${PGQ_CHAOS_QUEUE_WORKERS:-4}
export PGQ_CHAOS_FAILOVER_IDS=${PGQ_CHAOS_FAILOVER_IDS:-200000}
export PGQ_CHAOS_FAILOVER_KEYS=${PGQ_CHAOS_FAILOVER_KEYS:-5000}
export PGQ_CHAOS_FAILOVERS=${PGQ_CHAOS_FAILOVERS:-3}
export PGQ_CHAOS_FAILOVER_ROUNDS=${PGQ_CHAOS_FAILOVER_ROUNDS:-16}

log_dir=$(mktemp -d /tmp/pgq-chaos-soak.XXXXXX)
chmod 755 "$log_dir"

if [ "$(id -u)" = 0 ]; then
	id "$test_user" >/dev/null 2>&1 || useradd --create-home "$test_user"
	work=$(mktemp -d /tmp/pgq-chaos-work.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	cp -a "$top"/. "$work"/
	chown -R "$test_user" "$work" "$log_dir"
	# the PGQ_CHAOS_* settings and the timeout go through runuser
	as_tester() {
		local vars=()
		while IFS= read -r v; do
			vars+=("$v")
		done < <(env | grep -E '^(PGQ_CHAOS_|PG_TEST_TIMEOUT_DEFAULT=|PG_CONFIG=)')
		runuser -u "$test_user" -- env "${vars[@]}" "$@"
	}
else
	work=$top
	as_tester() { "$@"; }
fi

for run in $(seq 1 "$runs"); do
	echo "=== chaos soak run $run of $runs"
	start=$(date +%s)
	status=0
	as_tester make -C "$work" installcheck REGRESS= ISOLATION= \
		PROVE_TESTS=test/t/021_chaos.pl PROVE_FLAGS=-v \
		>"$log_dir/run$run.log" 2>&1 || status=$?
	cp -r "$work/tmp_check/log" "$log_dir/run$run-logs" 2>/dev/null || true
	grep -E '^# (PGQ_CHAOS_SEED|chaos|failover)' "$log_dir/run$run.log" | grep -v 'chaos [0-9]* at' || true
	echo "=== run $run: $( [ $status = 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - start )) s; logs in $log_dir"
	if [ $status != 0 ]; then
		grep -E '^(not ok|#   )' "$log_dir/run$run.log" | head -50 || true
		exit 1
	fi
done
echo "all $runs runs passed; logs in $log_dir"
