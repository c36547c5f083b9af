#!/usr/bin/env bash
# Run pgq's whole test suite: pg_regress, isolation specs and TAP tests.
#
# As root (a fresh Debian 12 machine, or CI): installs the packages it needs,
# builds with -Wall -Wextra -Werror, installs the extension, and runs the
# suites as an unprivileged user in a copy of the tree, since initdb refuses
# to run as root.  As another user: builds in place and runs the suites
# against the pgq already installed.
#
# Each suite starts its own throwaway instance; nothing touches a running
# server.  Ends with a line "N passed, N failed".
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
test_user=${PGQ_TEST_USER:-pgqtest}
pg_major=${PG_MAJOR:-15}
log_dir=$(mktemp -d /tmp/pgq-test-logs.XXXXXX)
chmod 755 "$log_dir"

say() { printf '\n=== %s\n' "$*"; }

install_packages() {
	local missing=()
	for pkg in "postgresql-$pg_major" "postgresql-server-dev-$pg_major" \
		libipc-run-perl python3-psycopg pgbouncer make gcc; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

run_as_tester() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u "$test_user" -- "$@"
	else
		"$@"
	fi
}

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$pg_major/bin/pg_config}

if [ "$(id -u)" = 0 ]; then
	install_packages
	# build in a copy, so that no root-owned build output is left in the tree
	work=$(mktemp -d /tmp/pgq-test.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	cp -a "$top"/. "$work"/
	say "building and installing"
	make -C "$work" -s clean >/dev/null
	make -C "$work" -s PG_CFLAGS='-Wall -Wextra -Werror'
	make -C "$work" -s install >/dev/null
	id "$test_user" >/dev/null 2>&1 || useradd --create-home "$test_user"
	chown -R "$test_user" "$work" "$log_dir"
else
	say "building (pgq must already be installed)"
	make -C "$top" -s PG_CFLAGS='-Wall -Wextra -Werror'
	work=$top
fi

# Run one suite with the other two switched off; keep going on failure so
# that every suite reports.
passed=0
failed=0
failed_suites=()
run_suite() {
	local name=$1
	shift
	say "$name"
	if run_as_tester make -C "$work" installcheck "$@" 2>&1 | tee "$log_dir/$name.log"; then
		:
	else
		failed_suites+=("$name")
	fi
}

run_suite regress ISOLATION= TAP_TESTS=
run_suite isolation REGRESS= TAP_TESTS=
run_suite tap REGRESS= ISOLATION=

# Count tests: pg_regress and isolation print one line per test ("... ok"
# or "... FAILED"); prove prints "ok N" / "not ok N" per assertion.
for suite in regress isolation; do
	p=$(grep -cE '\.\.\. +ok' "$log_dir/$suite.log" || true)
	f=$(grep -cE '\.\.\. +FAILED' "$log_dir/$suite.log" || true)
	passed=$((passed + p))
	failed=$((failed + f))
done
if grep -q '^Files=' "$log_dir/tap.log"; then
	total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$log_dir/tap.log")
	f=$(sed -n 's/^Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log_dir/tap.log" | awk '{s += $1} END {print s + 0}')
	passed=$((passed + total - f))
	failed=$((failed + f))
fi

# The Debian package (as root only: it installs packages and the .deb,
# then removes the .deb and puts back what make install had put there).
if [ "$(id -u)" = 0 ] && [ "${PGQ_SKIP_PACKAGE:-}" != 1 ]; then
	say "debian package"
	if bash "$top/test/package.sh" </dev/null 2>&1 | tee "$log_dir/package.log" &&
		tail -n 1 "$log_dir/package.log" | grep -q '^package: OK'; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failed_suites+=(package)
	fi
fi

if [ ${#failed_suites[@]} -gt 0 ]; then
	say "failed suites: ${failed_suites[*]}"
	for diffs in "$work/regression.diffs" "$work/output_iso/regression.diffs"; do
		[ -f "$diffs" ] && { echo "--- $diffs"; head -n 200 "$diffs"; }
	done
	for tap_log in "$work"/tmp_check/log/*.log; do
		[ -f "$tap_log" ] && { echo "--- $tap_log (last lines)"; tail -n 40 "$tap_log"; }
	done
	# a suite that failed without a counted failure still fails the run
	[ "$failed" -gt 0 ] || failed=1
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
