#!/usr/bin/env bash
# Run pgq's whole test suite: pg_regress, isolation specs and TAP tests, on
# every PostgreSQL that CI covers.
#
# As root (a fresh Debian 12 machine, or CI): installs the packages it needs,
# builds the servers with assertions that it tests on (test/build-postgres.sh,
# cached under /var/cache/pgq-postgres), and for each target builds pgq with
# -Wall -Wextra -Werror in a copy of the tree, installs it into that server,
# and runs the suites as an unprivileged user, since initdb refuses root.
# As another user: builds in place and runs the suites against the pgq
# already installed for $PG_CONFIG.
#
# The targets (PGQ_TEST_TARGETS, in this order by default):
#   15            Debian's PostgreSQL 15 package    regress isolation tap
#   cassert-18    18 from Debian's source package   regress isolation tap injection
#   cassert-17    17 from Debian's source package   regress isolation injection
#   cassert-15    15 from Debian's source package   regress isolation
# PGQ_TEST_TARGETS=custom with PG_CONFIG runs all the suites on that server.
# The suite "injection" is the isolation specs that pause pgq at its
# injection points (ISOLATION_INJECTION in the Makefile): it runs where the
# server was built with --enable-injection-points and has the
# injection_points module (test/build-postgres.sh builds 17 and 18 so), and
# is reported as skipped, with the reason, elsewhere.
# Debian's 15 runs in a second lane beside the others (PGQ_TEST_LANES=1: one
# after the other).
# PGQ_SUITES names the suites to run (e.g. "regress tap"); PGQ_REGRESS,
# PGQ_ISOLATION, PGQ_INJECTION and PGQ_PROVE_TESTS narrow them to some tests
# (as the Makefile's REGRESS, ISOLATION, ISOLATION_INJECTION and
# PROVE_TESTS).
#
# A target fails if a test fails, or if any server log holds a failed
# assertion, a PANIC or a process ended by a signal other than a test's own
# kill -9, even when every test passed.  Each suite starts its own throwaway
# instance; nothing touches a running server.  The run prints one line per
# target and ends with a line "N passed, N failed".
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
test_user=${PGQ_TEST_USER:-pgqtest}
log_dir=$(mktemp -d /tmp/pgq-test-logs.XXXXXX)
chmod 755 "$log_dir"
start=$SECONDS

say() { printf '\n=== %s\n' "$*"; }

# the server logs' lines that fail a run: see the header
crash_lines() {
	find "$@" -type f -name '*.log' ! -name 'regress_log_*' -path '*/log/*' \
		-print0 2>/dev/null |
		xargs -0 -r grep -H -E 'TRAP: |PANIC: |terminated by signal|was terminated by exception' |
		grep -v -E 'terminated by signal 9: Killed' || true
}

run_as_tester() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u "$test_user" -- "$@"
	else
		"$@"
	fi
}

install_packages() {
	local missing=()
	for pkg in postgresql-15 postgresql-server-dev-15 libipc-run-perl \
		python3-psycopg python3-asyncpg libpostgresql-jdbc-java \
		default-jdk-headless pgbouncer postgresql-15-cron postgresql-15-plproxy \
		make gcc; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

suites_of() {
	if [ -n "${PGQ_SUITES:-}" ]; then
		echo "$PGQ_SUITES"
		return
	fi
	case $1 in
		15 | cassert-18 | custom) echo regress isolation tap injection ;;
		cassert-17 | cassert-15) echo regress isolation injection ;;
		*) echo "unknown target $1" >&2; return 1 ;;
	esac
}

# Each target appends "PASSED FAILED NAME: SUMMARY" to this file: targets
# run in two lanes at once (see below), so no shell variable sees them all.
results=$log_dir/results
: >"$results"
record() {
	echo "$1 $2 $3" >>"$results"
}

# make's arguments that run one suite with the other two switched off, one
# per line (a narrowed list of tests holds spaces)
suite_args() {
	case $1 in
		regress)
			printf '%s\n' ISOLATION= TAP_TESTS=
			[ -z "${PGQ_REGRESS:-}" ] || printf 'REGRESS=%s\n' "$PGQ_REGRESS"
			;;
		isolation)
			printf '%s\n' REGRESS= TAP_TESTS=
			[ -z "${PGQ_ISOLATION:-}" ] || printf 'ISOLATION=%s\n' "$PGQ_ISOLATION"
			;;
		tap)
			printf '%s\n' REGRESS= ISOLATION=
			[ -z "${PGQ_PROVE_TESTS:-}" ] || printf 'PROVE_TESTS=%s\n' "$PGQ_PROVE_TESTS"
			;;
		injection)
			[ -z "${PGQ_INJECTION:-}" ] || printf 'ISOLATION_INJECTION=%s\n' "$PGQ_INJECTION"
			;;
	esac
}

# Why the suite "injection" cannot run on a server (nothing if it can): it
# needs injection points compiled in and the injection_points module.
injection_missing() {
	local pg_config=$1
	if ! "$pg_config" --configure | grep -q -- '--enable-injection-points'; then
		echo "built without --enable-injection-points"
	elif [ ! -f "$("$pg_config" --sharedir)/extension/injection_points.control" ]; then
		echo "the injection_points module is not installed"
	fi
}

# Count one suite's results from its log into the globals p and f:
# pg_regress and isolation print one line per test ("... ok" / "... FAILED"),
# prove prints "Files=..., Tests=N" and "Failed N/M subtests".
count_suite() {
	local suite=$1 log=$2
	p=0
	f=0
	if [ "$suite" = tap ]; then
		if grep -q '^Files=' "$log"; then
			local total
			total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$log")
			f=$(sed -n 's/^Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
			p=$((total - f))
		fi
	else
		p=$(grep -cE '\.\.\. +ok|^ok [0-9]+ ' "$log" || true)
		f=$(grep -cE '\.\.\. +FAILED|^not ok [0-9]+ ' "$log" || true)
	fi
}

# Build pgq against one server, run the target's suites, check the logs.
run_target() {
	local target=$1 pg_config=$2
	local work version line passes=0 failures=0 suite
	version=$("$pg_config" --version)
	say "$target: $version"
	if [ "$(id -u)" = 0 ]; then
		work=$(mktemp -d "/tmp/pgq-test-$target.XXXXXX")
		cp -a "$top"/. "$work"/
		make -C "$work" -s PG_CONFIG="$pg_config" clean >/dev/null
		if ! make -C "$work" -s PG_CONFIG="$pg_config" PG_CFLAGS='-Wall -Wextra -Werror' ||
			! make -C "$work" -s PG_CONFIG="$pg_config" install >/dev/null; then
			record 0 1 "$target ($version): build FAILED"
			return
		fi
		chown -R "$test_user" "$work"
	else
		work=$top
		make -C "$work" -s PG_CONFIG="$pg_config" PG_CFLAGS='-Wall -Wextra -Werror'
	fi

	line="$target ($version):"
	for suite in $(suites_of "$target"); do
		local log="$log_dir/$target-$suite.log" ok=1 goal=installcheck
		if [ "$suite" = injection ]; then
			local missing
			missing=$(injection_missing "$pg_config")
			if [ -n "$missing" ]; then
				line+=" injection skipped ($missing),"
				continue
			fi
			goal=installcheck-injection
		fi
		say "$target: $suite"
		local args=()
		mapfile -t args < <(suite_args "$suite")
		run_as_tester make -C "$work" PG_CONFIG="$pg_config" "$goal" \
			"${args[@]}" >"$log" 2>&1 || ok=0
		tail -n 25 "$log"
		count_suite "$suite" "$log"
		# a suite that failed without a counted failure still fails
		[ "$ok" = 1 ] || [ "$f" -gt 0 ] || f=1
		passes=$((passes + p))
		failures=$((failures + f))
		line+=" $suite $p/$((p + f)),"
		if [ "$ok" = 0 ]; then
			for diffs in "$work/regression.diffs" "$work/output_iso/regression.diffs" \
				"$work/output_inj/regression.diffs"; do
				[ -f "$diffs" ] && { echo "--- $diffs"; head -n 200 "$diffs"; }
			done
			for tap_log in "$work"/tmp_check/log/regress_log_*; do
				[ -f "$tap_log" ] && grep -q 'not ok' "$tap_log" &&
					{ echo "--- $tap_log (last lines)"; tail -n 40 "$tap_log"; }
			done
		fi
	done

	local crashes
	crashes=$(crash_lines "$work")
	if [ -n "$crashes" ]; then
		echo "--- $target: server logs hold a crash or a failed assertion:"
		echo "$crashes" | head -n 40
		line+=" server logs: $(echo "$crashes" | wc -l) crash lines"
		failures=$((failures + 1))
	else
		line+=" server logs clean"
	fi
	[ "$failures" = 0 ] || line+=" FAILED"
	record "$passes" "$failures" "$line"
	# keep a failed target's tree for a look; remove the others
	if [ "$(id -u)" = 0 ] && [ "$failures" = 0 ]; then
		rm -rf "$work"
	elif [ "$(id -u)" = 0 ]; then
		echo "--- $target: its tree, with the test output, stays in $work"
	fi
}

if [ -n "${PGQ_TEST_TARGETS:-}" ]; then
	targets=$PGQ_TEST_TARGETS
elif [ "$(id -u)" = 0 ]; then
	targets="15 cassert-18 cassert-17 cassert-15"
else
	targets=custom
fi

if [ "$(id -u)" = 0 ]; then
	install_packages
	id "$test_user" >/dev/null 2>&1 || useradd --create-home "$test_user"
	# Build the servers with assertions in the background, one at a time,
	# while the suites run on those already there.
	builds=()
	for target in $targets; do
		case $target in cassert-*) builds+=("${target#cassert-}") ;; esac
	done
	if [ ${#builds[@]} -gt 0 ]; then
		(
			for major in "${builds[@]}"; do
				if bash "$top/test/build-postgres.sh" "$major" \
					>"$log_dir/build-$major.path" 2>"$log_dir/build-$major.log"; then
					echo 0 >"$log_dir/build-$major.rc"
				else
					echo 1 >"$log_dir/build-$major.rc"
				fi
			done
		) &
	fi
fi

# Run some targets, one after the other.
run_lane() {
	local target major pg_config
	for target in "$@"; do
		case $target in
			15) pg_config=/usr/lib/postgresql/15/bin/pg_config ;;
			custom) pg_config=${PG_CONFIG:-pg_config} ;;
			cassert-*)
				major=${target#cassert-}
				while [ ! -f "$log_dir/build-$major.rc" ]; do sleep 5; done
				cat "$log_dir/build-$major.log"
				if [ "$(cat "$log_dir/build-$major.rc")" != 0 ]; then
					record 0 1 "$target: the server did not build"
					continue
				fi
				pg_config=$(cat "$log_dir/build-$major.path")
				;;
			*) echo "unknown target $target" >&2; return 2 ;;
		esac
		run_target "$target" "$pg_config"
	done
}

# Debian's 15 and the servers with assertions run side by side: the suites
# spend most of their time waiting on servers, and two lanes fill the cores
# a single one leaves idle.  The TAP suites of both lanes take ports from one
# lock directory, so that they never pick the same one.
export PG_TEST_PORT_DIR=$log_dir/portlock
mkdir -p "$PG_TEST_PORT_DIR"
chmod 777 "$PG_TEST_PORT_DIR"
lane_a=()
lane_b=()
for target in $targets; do
	case $target in
		cassert-*) lane_b+=("$target") ;;
		*) lane_a+=("$target") ;;
	esac
done
lane_pid=
if [ ${#lane_a[@]} -gt 0 ] && [ ${#lane_b[@]} -gt 0 ] && [ "${PGQ_TEST_LANES:-2}" = 2 ]; then
	say "running ${lane_a[*]} in the background (output at the end), ${lane_b[*]} here"
	run_lane "${lane_a[@]}" >"$log_dir/lane-a.out" 2>&1 &
	lane_pid=$!
	run_lane "${lane_b[@]}"
	wait "$lane_pid" || true
	cat "$log_dir/lane-a.out"
else
	run_lane "${lane_a[@]}" "${lane_b[@]}"
fi

# The Debian package (as root only: it installs packages and the .deb,
# then removes the .deb and puts back what make install had put there).
if [ "$(id -u)" = 0 ] && [ "${PGQ_SKIP_PACKAGE:-}" != 1 ] &&
	[[ " $targets " == *" 15 "* ]]; then
	say "debian package"
	if bash "$top/test/package.sh" </dev/null 2>&1 | tee "$log_dir/package.log" &&
		tail -n 1 "$log_dir/package.log" | grep -q '^package: OK'; then
		record 1 0 "debian package: OK"
	else
		record 0 1 "debian package: FAILED"
	fi
fi

passed=$(awk '{s += $1} END {print s + 0}' "$results")
failed=$(awk '{s += $2} END {print s + 0}' "$results")
say "summary ($((SECONDS - start)) s)"
cut -d' ' -f3- "$results"
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
