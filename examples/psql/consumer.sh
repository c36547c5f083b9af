#!/usr/bin/env bash
# A pgq consumer made of bash and psql only, for transaction-mode groups.
#
#   consumer.sh -g GROUP -t TABLE [options]      store the ids in TABLE
#   consumer.sh -g GROUP -f FUNCTION [options]   pass each block to FUNCTION
#
# It loops on one transaction per block:
#
#   BEGIN;
#   WITH claimed AS (SELECT block_id, ids
#                    FROM pgq.claim(GROUP, wait => WAIT)),
#        stored  AS (INSERT INTO TABLE (id, block_id)
#                    SELECT unnest(ids), block_id FROM claimed)
#   SELECT block_id, cardinality(ids) FROM claimed;
#   COMMIT;
#
# so the block is consumed exactly when its results commit: if anything goes
# wrong before COMMIT (an error, a lost connection, this script killed), the
# transaction rolls back and the block goes back to the group for another
# consumer.  Run as many copies as you like, on as many machines.
#
# Each block is one run of psql, so one connection: that keeps the script
# simple and makes reconnecting after a server restart automatic, and costs
# little next to blocks of thousands of ids.  For small blocks, use a client
# that keeps its connection (examples/python/consumer.py).
#
# Options:
#   -g GROUP     the group to consume (required)
#   -t TABLE     INSERT INTO TABLE (id, block_id) one row per id; TABLE is an
#                SQL name, schema-qualified if you like
#   -f FUNCTION  SELECT FUNCTION(block_id bigint, ids bigint[]) once per
#                block, in the block's transaction (its result is ignored)
#                (at least one of -t and -f; with both, both run)
#   -q QUERY     create the group from QUERY first if it does not exist;
#                every consumer may pass the same -q: the first creates the
#                group, the others join it (see pgq.create_group)
#   -b SIZE      block size for -q (default 5000)
#   -w WAIT      how long one claim waits in the server for a block (an
#                interval, default '5 seconds'); a stop request is acted on
#                when the claim returns, so this is also how long a stop
#                may take while there is nothing to claim
#   -d CONNINFO  where to connect (a libpq connection string or URI); by
#                default psql's usual PGHOST, PGPORT, PGDATABASE, PGUSER ...
#   -n NAME      this worker's name, in its output and as application_name
#                (default: host name and process id)
#   -s SECONDS   sleep that long per block inside the transaction, to make
#                the work look slow in a demo
#
# Environment: PSQL, the psql to run (default: psql from PATH).  psql must
# not need to prompt for a password: use ~/.pgpass or trust/peer
# authentication.
#
# Behaviour:
#   - Prints one line per committed block, with the group's progress.
#   - Exits 0 once the group is drained: a claim returned no block and
#     pgq.group_stats says state = 'drained' (a claim that returns nothing
#     is not enough on its own: blocks held by other consumers may still
#     come back if their transactions roll back).
#   - SIGTERM or SIGINT (Ctrl-C): finishes the block at hand, then exits 0.
#   - If the connection fails (server restart, crash, failover, network),
#     the block's transaction committed or rolled back as a whole (the block
#     and its results together); it reconnects, waiting 1, 2, 4 ... up to
#     30 seconds between attempts, and goes on.
#   - Exits 1 on an SQL error (a missing table, a group that does not
#     exist, a group in another claim mode ...), 2 on bad usage.
set -uo pipefail

usage() {
	sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 2
}

group='' table='' func='' query='' block_size=5000 wait='5 seconds' conninfo=''
name="${HOSTNAME:-localhost}-$$"
pause=
while getopts 'g:t:f:q:b:w:d:n:s:h' opt; do
	case $opt in
	g) group=$OPTARG ;;
	t) table=$OPTARG ;;
	f) func=$OPTARG ;;
	q) query=$OPTARG ;;
	b) block_size=$OPTARG ;;
	w) wait=$OPTARG ;;
	d) conninfo=$OPTARG ;;
	n) name=$OPTARG ;;
	s) pause=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 0 ] || [ -z "$group" ]; then usage; fi
[ -n "$table$func" ] || { echo "consumer.sh: give -t TABLE or -f FUNCTION (or both)" >&2; exit 2; }
case $block_size in '' | *[!0-9]*) echo "consumer.sh: -b takes a number" >&2; exit 2 ;; esac
case $pause in *[!0-9.]*) echo "consumer.sh: -s takes a number of seconds" >&2; exit 2 ;; esac

psql_bin=${PSQL:-psql}
export PGAPPNAME=$name    # shows in pg_stat_activity.application_name

say() { printf '%s: %s\n' "$name" "$*"; }

# Stop requests.  bash runs a trap only once the command in the foreground
# (psql) has finished, so the block at hand is committed first.
stop=0
trap 'stop=1; say "stop requested: finishing the block at hand"' TERM INT

# Ctrl-C in a terminal signals the whole process group, psql included, and
# psql would then cancel the block's transaction (which is safe: the block
# goes back to the group).  setsid, where there is one, puts psql in a session
# of its own, so that only this script gets the signal and the block is
# finished.
shield=()
command -v setsid >/dev/null 2>&1 && shield=(setsid)

# Run the psql script given on stdin.  Its output (unaligned, tuples only)
# goes to $out; psql's errors go to our stderr.  Returns psql's status:
# 0 ok, 2 the connection failed or was lost, 3 an SQL error (ON_ERROR_STOP).
out=
run_psql() {
	local args=(-X -q -A -t -w -v ON_ERROR_STOP=1
		-v group="$group" -v query="$query" -v block_size="$block_size"
		-v wait="$wait" -v pause="${pause:-0}" -f -)
	[ -n "$conninfo" ] && args+=(-d "$conninfo")
	out=$("${shield[@]}" "$psql_bin" "${args[@]}")
}

# Sleep, but wake up at once for a stop request (a trap interrupts "wait").
nap() {
	sleep "$1" &
	wait $! 2>/dev/null
	kill $! 2>/dev/null
}

# Run a psql script until it gets through: on a lost connection, reconnect
# after 1, 2, 4 ... 30 seconds.  Returns 0, or 1 on an SQL error, or 130 if a
# stop was requested while reconnecting.
backoff=1
run_until_through() {
	local script rc
	script=$(cat)
	while :; do
		run_psql <<<"$script"
		rc=$?
		case $rc in
		0) backoff=1; return 0 ;;
		2)
			[ "$stop" = 1 ] && return 130
			say "no connection to the server; trying again in ${backoff}s"
			nap "$backoff"
			[ "$stop" = 1 ] && return 130
			backoff=$((backoff * 2 > 30 ? 30 : backoff * 2))
			;;
		*) return 1 ;;
		esac
	done
}

# --- start: create or join the group, check its mode ------------------------
setup_sql=
if [ -n "$query" ]; then
	setup_sql="SELECT 'created', pgq.create_group(:'group', :'query', block_size => :'block_size'::integer);"
fi
setup_sql+="
SELECT 'mode', coalesce((SELECT mode FROM pgq.group_stats WHERE group_name = :'group'), 'none');"
run_until_through <<<"$setup_sql"
case $? in 0) ;; 130) say "stopped before starting"; exit 0 ;; *) exit 1 ;; esac
case $out in
*created\|t*) say "created group $group" ;;
*created\|f*) say "joined group $group" ;;
esac
case $out in
*mode\|transaction*) ;;
*mode\|none*) say "group $group does not exist (give -q QUERY to create it)"; exit 1 ;;
*) say "group $group is not in transaction mode (${out##*mode|}): use a consumer for its mode"; exit 1 ;;
esac

# --- one block: the transaction, then a look at the group's progress ----------
# The claim, the work and the claim's consumption are one statement in one
# transaction.  The statement prints "block|<block_id>|<number of ids>" for
# the block it claimed, or nothing when no block was claimable within WAIT.
store='' call=''
[ -n "$table" ] && store=",
     stored AS (INSERT INTO $table (id, block_id)
                SELECT unnest(ids), block_id FROM claimed)"
[ -n "$func" ] && call=", $func(block_id, ids)"
[ -n "$pause" ] && call+=", pg_sleep(:pause)"
step_sql="BEGIN;
WITH claimed AS (SELECT block_id, ids
                 FROM pgq.claim(:'group', wait => :'wait'::interval))$store
SELECT 'block', block_id, cardinality(ids)$call FROM claimed;
COMMIT;
SELECT 'stats', state, done, total_blocks, coalesce(claimed::text, '?'), pending,
       coalesce(percent_done::text, '-')
FROM pgq.group_stats WHERE group_name = :'group';"

say "consuming group $group (transaction mode)"
blocks=0 ids=0
while [ "$stop" = 0 ]; do
	run_until_through <<<"$step_sql"
	case $? in
	0) ;;
	130) break ;;
	*) say "error (see above): the block's transaction rolled back; exiting"; exit 1 ;;
	esac
	block='' n='' state=''
	while IFS='|' read -r tag a b c d e f _; do
		case $tag in
		block) block=$a n=$b ;;
		stats) state=$a done=$b total=$c held=$d pending=$e pct=$f ;;
		esac
	done <<<"$out"
	if [ -z "$state" ]; then
		say "group $group no longer exists; exiting"
		exit 1
	fi
	if [ -n "$block" ]; then
		blocks=$((blocks + 1)) ids=$((ids + n))
		say "block $block: $n ids stored; group: $done/$total blocks done ($pct%), $held claimed, $pending pending"
	elif [ "$state" = drained ]; then
		say "group $group is drained; this worker stored $blocks blocks ($ids ids)"
		exit 0
	fi
	# else: nothing was claimable within WAIT, but blocks are still held by
	# other consumers and may come back; claim (and wait) again
done
say "stopped; this worker stored $blocks blocks ($ids ids)"
exit 0
