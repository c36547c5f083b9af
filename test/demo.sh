#!/usr/bin/env bash
# pgq demo: four workers share one million ids, and each id is processed
# exactly once.
#
#   sudo bash test/demo.sh
#
# Run as root on Debian 12.  It installs what is missing (PostgreSQL 15,
# its server headers, make, gcc), builds pgq with -Wall -Wextra -Werror in a
# scratch copy of this tree and installs it, then starts a throwaway
# PostgreSQL cluster that belongs to an unprivileged user (initdb refuses
# root) and listens only on a unix socket in a temporary directory.  In it:
#
#   1. a table of 1,000,000 alerts, and one group made from a query on it:
#      pgq.create_group('demo', 'SELECT alert_id FROM alerts ORDER BY
#      alert_id', block_size => 5000), that is 200 blocks of 5000 ids;
#   2. four workers, each a loop of short psql sessions that run
#      BEGIN; claim one block; store its ids in "processed"; COMMIT;
#      until the group is drained.  Worker 1 loses its connection while it
#      holds its first block, to show that such a block comes back;
#   3. a progress line every second from pgq.group_stats;
#   4. an exactly-once check: every alert is in "processed" exactly once.
#      Prints PASS, or FAIL and exits with status 1.
#
# The cluster is stopped and removed at the end.  Settings (environment):
#   KEEP=1       keep the cluster running and print how to connect to it
#   WORKERS=4    number of workers
#   WORK_MS=100  simulated processing time per block, in milliseconds
#   CRASH=0      do not make worker 1 lose its connection
set -euo pipefail

pg_major=15
pg_bin=/usr/lib/postgresql/$pg_major/bin
demo_user=pgqdemo
workers=${WORKERS:-4}
work_ms=${WORK_MS:-100}
crash=${CRASH:-1}
keep=${KEEP:-0}
n_alerts=1000000
block_size=5000

top=$(cd "$(dirname "$0")/.." && pwd)
demo_dir=
build_dir=
port=
started=0
worker_pids=()

say() { printf '\n== %s\n' "$*"; }
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 1; }

case $workers in '' | *[!0-9]* | 0) die "WORKERS must be a positive integer, not '$workers'" ;; esac
case $work_ms in '' | *[!0-9]*) die "WORK_MS must be a number of milliseconds, not '$work_ms'" ;; esac
[ "$(id -u)" -eq 0 ] || die "run it as root: sudo bash test/demo.sh"
[ -f "$top/pgq.control" ] || die "cannot find pgq.control in $top"

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for pid in "${worker_pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	if [ "$started" = 1 ]; then
		if [ "$keep" = 1 ]; then
			cat <<EOF

The cluster is still running (KEEP=1).  Connect to it as root with
    $pg_bin/psql -h $demo_dir -p $port -U $demo_user demo
Stop and remove it with
    runuser -u $demo_user -- $pg_bin/pg_ctl -D $demo_dir/data stop && rm -rf $demo_dir
EOF
		else
			if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ] &&
				[ -f "$demo_dir/server.log" ]; then
				echo "--- last lines of the server log"
				tail -n 20 "$demo_dir/server.log"
			fi
			runuser -u "$demo_user" -- "$pg_bin/pg_ctl" -D "$demo_dir/data" \
				-m fast -w stop >/dev/null 2>&1 || true
		fi
	fi
	if [ "$keep" != 1 ] && [ -n "$demo_dir" ]; then
		rm -rf "$demo_dir"
	fi
	[ -z "$build_dir" ] || rm -rf "$build_dir"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- packages -------------------------------------------------------------
say "checking packages"
if dpkg -s "postgresql-$pg_major-pgq3" >/dev/null 2>&1; then
	die "postgresql-$pg_major-pgq3 (Skytools PgQ) is installed.  It is also an
extension called pgq, with its own pgq.control: the two cannot share an
installation.  Remove it (apt-get remove postgresql-$pg_major-pgq3) or use
another machine."
fi
missing=()
for pkg in "postgresql-$pg_major" "postgresql-server-dev-$pg_major" make gcc; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
	echo "postgresql-$pg_major, postgresql-server-dev-$pg_major, make and gcc are installed"
fi

# --- build and install -------------------------------------------------------
# Built in a scratch copy, so that no root-owned files are left in the tree.
say "building pgq with -Wall -Wextra -Werror, and installing it"
build_dir=$(mktemp -d /tmp/pgq-demo-build.XXXXXX)
tar -C "$top" --exclude=./.git --exclude='./tmp_check*' --exclude=./results \
	--exclude=./log -cf - . | tar -C "$build_dir" -xf -
make -C "$build_dir" -s PG_CONFIG="$pg_bin/pg_config" clean >/dev/null
make -C "$build_dir" -s PG_CONFIG="$pg_bin/pg_config" PG_CFLAGS='-Wall -Wextra -Werror'
make -C "$build_dir" -s PG_CONFIG="$pg_bin/pg_config" install >/dev/null
echo "installed $("$pg_bin/pg_config" --pkglibdir)/pgq.so"

# --- throwaway cluster --------------------------------------------------------
say "starting a throwaway cluster"
if ! id "$demo_user" >/dev/null 2>&1; then
	useradd --system --user-group --no-create-home --home-dir /nonexistent \
		--shell /usr/sbin/nologin "$demo_user"
	echo "created the OS user $demo_user (initdb refuses to run as root)"
fi
demo_dir=$(mktemp -d /tmp/pgq-demo.XXXXXX)
chown "$demo_user:" "$demo_dir"
cd "$demo_dir"

# A port that no server uses, neither on TCP nor on a usual socket directory.
# The cluster listens only on a socket in $demo_dir; the port only names it.
for p in $(seq 55432 55531); do
	[ -e "/var/run/postgresql/.s.PGSQL.$p" ] && continue
	[ -e "/tmp/.s.PGSQL.$p" ] && continue
	(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
	port=$p
	break
done
[ -n "$port" ] || die "no free port between 55432 and 55531"

runuser -u "$demo_user" -- "$pg_bin/initdb" -D "$demo_dir/data" --auth=trust \
	--no-locale --encoding=UTF8 --no-sync >"$demo_dir/initdb.log" 2>&1 ||
	{ cat "$demo_dir/initdb.log"; die "initdb failed"; }
cat >>"$demo_dir/data/postgresql.conf" <<EOF

# pgq demo
shared_preload_libraries = 'pgq'
listen_addresses = ''
unix_socket_directories = '$demo_dir'
port = $port
EOF
runuser -u "$demo_user" -- "$pg_bin/pg_ctl" -D "$demo_dir/data" \
	-l "$demo_dir/server.log" -w start >/dev/null ||
	{ tail -n 20 "$demo_dir/server.log"; die "the server did not start"; }
started=1
echo "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') in $demo_dir/data,"
echo "socket $demo_dir/.s.PGSQL.$port, shared_preload_libraries = 'pgq'"

# psql as the cluster's superuser, one statement or script per call.
sql() {
	"$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$demo_dir" -p "$port" \
		-U "$demo_user" -d "${PGQ_DEMO_DB:-demo}" "$@"
}

PGQ_DEMO_DB=postgres sql -c "CREATE DATABASE demo"
sql -c "CREATE EXTENSION pgq"

# --- data and group ------------------------------------------------------------
say "creating $n_alerts alerts"
t0=$(date +%s%N)
sql <<EOF
CREATE TABLE alerts (
    alert_id bigint PRIMARY KEY,
    jd       double precision NOT NULL,   -- julian date of the observation
    ra       double precision NOT NULL,
    decl     double precision NOT NULL
);
INSERT INTO alerts
SELECT g, 2460600.5 + g / 100000.0, random() * 360, degrees(asin(2 * random() - 1))
FROM generate_series(1, $n_alerts) g;
ANALYZE alerts;

-- what the workers produce: one row per id they process
CREATE TABLE processed (
    id       bigint NOT NULL,
    block_id bigint NOT NULL,
    worker   int NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
EOF
echo "done in $(( ($(date +%s%N) - t0) / 1000000 )) ms"

say "creating the group"
query='SELECT alert_id FROM alerts ORDER BY alert_id'
echo "SELECT pgq.create_group('demo', '$query', block_size => $block_size);"
t0=$(date +%s%N)
created=$(sql -c "SELECT pgq.create_group('demo', '$query', block_size => $block_size)")
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "returned $created after $ms ms: $(sql -F ' ' -c "SELECT total_ids, 'ids in', total_blocks, 'blocks, state', state FROM pgq.group_stats WHERE group_name = 'demo'")"
again=$(sql -c "SELECT pgq.create_group('demo', '$query', block_size => $block_size)")
echo "calling it again with the same arguments returns $again: later consumers join the group"

# --- workers -------------------------------------------------------------------
# One worker: claim a block, store its ids, commit; until the group is
# drained.  "No rows" alone does not mean done: a block held by a transaction
# that then rolls back comes back, so a worker that finds nothing checks
# pgq.group_stats and stops only once nothing is pending or claimed.
work_s=$(awk "BEGIN { printf \"%.3f\", $work_ms / 1000 }")
worker() {
	local w=$1 out rc crash_now blocks=0 state
	exec >"$demo_dir/worker-$w.log" 2>&1
	while :; do
		crash_now=
		if [ "$w" = 1 ] && [ "$crash" = 1 ] && [ "$blocks" = 0 ] &&
			[ ! -e "$demo_dir/crashed" ]; then
			touch "$demo_dir/crashed"
			# the server ends this session while its transaction holds a block
			crash_now="SELECT pg_terminate_backend(pg_backend_pid());"
		fi
		rc=0
		out=$(sql 2>&1 <<EOF
BEGIN;
WITH claimed AS (SELECT block_id, ids FROM pgq.claim('demo')),
     stored AS (INSERT INTO processed (id, block_id, worker)
                SELECT unnest(ids), block_id, $w FROM claimed)
SELECT block_id, cardinality(ids) FROM claimed;
$crash_now
SELECT pg_sleep($work_s);
COMMIT;
EOF
) || rc=$?
		if [ -n "$crash_now" ]; then
			case ${out%%|*} in
			'' | *[!0-9]*) echo "worker $w: lost its connection (psql exit status $rc): $out" ;;
			*)
				echo "worker $w: lost its connection holding block ${out%%|*} (psql exit status $rc)"
				printf '%s\n' "${out%%|*}" >"$demo_dir/crashed"
				;;
			esac
			continue
		fi
		if [ "$rc" -ne 0 ]; then
			echo "worker $w: psql failed with status $rc: $out"
			return 1
		fi
		if [ -n "$out" ]; then
			blocks=$((blocks + 1))
			echo "worker $w: block ${out%%|*}, ${out#*|} ids"
			continue
		fi
		state=$(sql -c "SELECT state FROM pgq.group_stats WHERE group_name = 'demo'")
		if [ "$state" = drained ]; then
			echo "worker $w: group drained after $blocks blocks"
			return 0
		fi
		sleep 0.2
	done
}

say "starting $workers workers (${work_ms} ms of simulated work per block)"
[ "$crash" = 1 ] && echo "worker 1 will lose its connection while it holds its first block"
for w in $(seq 1 "$workers"); do
	worker "$w" &
	worker_pids+=($!)
done

progress() {
	sql -F ' ' -c "SELECT format('%-8s pending %4s   claimed %2s   done %4s   %5s%%',
	                             state, pending, coalesce(claimed::text, '?'), done, percent_done)
	               FROM pgq.group_stats WHERE group_name = 'demo'"
}
t0=$(date +%s%N)
while :; do
	alive=0
	for pid in "${worker_pids[@]}"; do
		kill -0 "$pid" 2>/dev/null && alive=$((alive + 1))
	done
	printf '  %3ds  %s\n' $((($(date +%s%N) - t0) / 1000000000)) "$(progress)"
	[ "$alive" -gt 0 ] || break
	# the next whole second since the start, however long the query took
	tick=$((($(date +%s%N) - t0) / 1000000000 + 1))
	wait_ms=$(((t0 + tick * 1000000000 - $(date +%s%N)) / 1000000))
	[ "$wait_ms" -le 0 ] || sleep "$(awk "BEGIN { print $wait_ms / 1000 }")"
done
worker_failed=0
for i in "${!worker_pids[@]}"; do
	wait "${worker_pids[$i]}" || { worker_failed=1; echo "worker $((i + 1)) failed:"; tail -n 5 "$demo_dir/worker-$((i + 1)).log"; }
done
worker_pids=()
if [ -s "$demo_dir/crashed" ]; then
	b=$(cat "$demo_dir/crashed")
	echo "worker 1 lost its connection while holding block $b: its transaction rolled back,"
	echo "the block went back to the group, and worker $(sql -c "SELECT string_agg(DISTINCT worker::text, ', ') FROM processed WHERE block_id = $b") processed it"
fi

# --- exactly-once check --------------------------------------------------------
say "exactly-once check"
sql -P tuples_only=off -P footer=off -P format=aligned -c "
SELECT worker, count(DISTINCT block_id) AS blocks, count(*) AS ids
FROM processed GROUP BY worker ORDER BY worker"
counts=$(sql -F ' ' <<EOF
SELECT (SELECT count(*) FROM processed),
       (SELECT count(DISTINCT id) FROM processed),
       (SELECT count(*) FROM alerts a
        WHERE NOT EXISTS (SELECT FROM processed p WHERE p.id = a.alert_id)),
       state, pending, coalesce(claimed::text, 'NULL'), done
FROM pgq.group_stats WHERE group_name = 'demo';
EOF
)
read -r rows distinct_ids missing state pending claimed done_blocks <<<"$counts"
printf '  %-28s %9s   (want %s)\n' "rows in processed" "$rows" "$n_alerts"
printf '  %-28s %9s   (want %s)\n' "distinct ids in processed" "$distinct_ids" "$n_alerts"
printf '  %-28s %9s   (want 0)\n' "alerts never processed" "$missing"
printf '  %-28s %9s   (pending %s, claimed %s, done %s)\n' "group state" "$state" "$pending" "$claimed" "$done_blocks"
echo
if [ "$worker_failed" = 0 ] && [ "$rows" = "$n_alerts" ] &&
	[ "$distinct_ids" = "$n_alerts" ] && [ "$missing" = 0 ] &&
	[ "$state" = drained ]; then
	echo "PASS: each of the $n_alerts alerts was processed exactly once"
else
	echo "FAIL: see the numbers above (KEEP=1 keeps the cluster and the worker logs)"
	exit 1
fi
