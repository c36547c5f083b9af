#!/usr/bin/env bash
# Run pgq's pg_regress suite against a server running under valgrind
# (memcheck), and look for invalid reads and writes, uses of uninitialised
# values and bad frees in pgq and in the server code that pgq drives.
#
# Run by hand, as root (too slow for CI: about 10 minutes on 2 cores, most of
# it the suite under valgrind):
#
#     sudo test/valgrind.sh
#
# What it does:
#   - installs valgrind, PostgreSQL and the build tools if missing (apt);
#   - builds pgq with debug info and little optimisation (-g -Og) in a copy
#     of the tree, and installs that build in a private tree that the server
#     loads pgq from (Debian's extension_destdir; where the server has no such
#     setting, over the machine's pgq);
#   - as an unprivileged user ($PGQ_TEST_USER, default pgqtest, created if
#     missing) makes a throwaway cluster with the settings of test/pgq.conf,
#     starts the postmaster under valgrind --trace-children=yes, so that every
#     backend and background worker is checked, one log per process;
#   - runs the REGRESS list of the Makefile with pg_regress against it;
#   - stops the server and reads the valgrind logs: prints how many processes
#     ran and every error stack, those that touch pgq first;
#   - restarts the server without valgrind and makes $PGQ_VG_CLAIMS claims
#     in one session, checking that its memory does not grow with the number
#     of calls (PostgreSQL frees by memory context, so this is the leak check
#     that means something: nothing left behind per call in a long-lived
#     context).
#
# Exit status: 0 clean; 1 an error with pgq code in one of its stacks (a
# frame in pgq.so or in a function pgq_*), or memory that grows per call;
# 2 neither, but the suite failed or a process died without finishing its
# valgrind log; 3 set-up failed.  Errors whose stacks are all PostgreSQL's are listed but do not fail
# the run: Debian's server is not built with USE_VALGRIND, and raw structs
# with padding that it writes out (WAL, stats files) show up as uninitialised
# bytes; test/valgrind.supp suppresses the known ones.
#
# Limits: without USE_VALGRIND, palloc/pfree are invisible to memcheck (a
# memory context is one malloc'd block), so an overrun inside a context or a
# use after pfree is not seen; what is seen is anything outside palloc'd
# chunks, uses of uninitialised bytes (malloc'd context blocks start
# undefined), overruns of malloc'd blocks, and bad system call arguments.
# Leak checking is off: PostgreSQL frees by context, not by pointer.
#
# Settings (environment):
#   PGQ_TEST_USER        unprivileged user to run the server (pgqtest)
#   PG_MAJOR             PostgreSQL major version (15)
#   PGQ_VG_CFLAGS        compiler flags for the pgq build (-g -Og ...)
#   PGQ_VG_DIR           where to work (a new /tmp/pgq-valgrind.XXXXXX);
#                        the logs are kept there afterwards
#   PGQ_VG_TESTS         tests to run instead of the Makefile's REGRESS list
#   PGQ_VG_START_TIMEOUT seconds to wait for the server to start (900)
#   PGQ_VG_EXTRA         more valgrind options (e.g. --num-callers=60)
#   PGQ_VG_CLAIMS        claims in the memory check (100000; 0 skips it)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
test_user=${PGQ_TEST_USER:-pgqtest}
pg_major=${PG_MAJOR:-15}
pg_bin=/usr/lib/postgresql/$pg_major/bin
pg_regress=/usr/lib/postgresql/$pg_major/lib/pgxs/src/test/regress/pg_regress
cflags=${PGQ_VG_CFLAGS:--g -Og -fno-omit-frame-pointer}
start_timeout=${PGQ_VG_START_TIMEOUT:-900}
port=54329
export PG_CONFIG=$pg_bin/pg_config

say() { printf '\n=== %s\n' "$*"; }
die() { echo "valgrind.sh: $*" >&2; exit 3; }

[ "$(id -u)" = 0 ] || die "run me as root (I install packages and pgq, and run the server as $test_user)"

started=$(date +%s)

# --- packages ----------------------------------------------------------------
missing=()
for pkg in valgrind "postgresql-$pg_major" "postgresql-server-dev-$pg_major" make gcc perl; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x "$pg_regress" ] || die "no pg_regress at $pg_regress"

# --- build and install pgq from a copy ---------------------------------------
if [ -n "${PGQ_VG_DIR:-}" ]; then
	work=$PGQ_VG_DIR
	mkdir -p "$work"
else
	work=$(mktemp -d /tmp/pgq-valgrind.XXXXXX)
fi
chmod 755 "$work"
src=$work/src-copy
vglogs=$work/vg
data=$work/data
out=$work/regress
rm -rf "$src" "$vglogs" "$data" "$out" "$work/inst"
mkdir -p "$src" "$vglogs" "$out"
# the copy, without build output or test instances of the tree
tar -C "$top" --exclude=./.git --exclude='./tmp_check*' --exclude=./results \
	--exclude=./output_iso -cf - . | tar -C "$src" -xf -

say "building pgq with PG_CFLAGS='$cflags' in $src"
make -C "$src" -s clean >/dev/null
make -C "$src" -s PG_CFLAGS="$cflags" >"$work/build.log" 2>&1 || {
	cat "$work/build.log"
	die "build failed"
}
# Install into a private tree when the server can load extensions from one
# (Debian's extension_destdir): the run then neither replaces nor depends on
# the pgq installed on the machine, which another install or a package purge
# could change under it.  Otherwise install over the machine's pgq.
inst=$work/inst
server_settings=$("$pg_bin/postgres" --describe-config 2>/dev/null || true)
if grep -q '^extension_destdir' <<<"$server_settings"; then
	make -C "$src" -s install DESTDIR="$inst" >/dev/null
	private_install=1
else
	make -C "$src" -s install >/dev/null
	private_install=0
fi

# the REGRESS list, as the Makefile (and so `make installcheck`) has it
if [ -n "${PGQ_VG_TESTS:-}" ]; then
	read -r -a tests <<<"$PGQ_VG_TESTS"
else
	# shellcheck disable=SC2016 # make's $($*), not the shell's
	printf 'print-%%:\n\t@echo $($*)\n' >"$work/print.mk"
	read -r -a tests <<<"$(make -s -C "$src" -f Makefile -f "$work/print.mk" print-REGRESS)"
fi
[ ${#tests[@]} -gt 0 ] || die "no REGRESS tests found in the Makefile"

id "$test_user" >/dev/null 2>&1 || useradd --create-home "$test_user"
chown -R "$test_user" "$work"
as_tester() { (cd "$work" && runuser -u "$test_user" -- "$@"); }

# --- the cluster --------------------------------------------------------------
say "initdb in $data"
as_tester "$pg_bin/initdb" -D "$data" -A trust --no-sync >"$work/initdb.log" 2>&1 || {
	cat "$work/initdb.log"
	die "initdb failed"
}
{
	echo
	echo "# --- test/valgrind.sh"
	echo "listen_addresses = ''"
	echo "port = $port"
	echo "unix_socket_directories = '$work'"
	echo "max_connections = 20"
	# everything runs 20-50 times slower under valgrind
	echo "authentication_timeout = 600s"
	echo "fsync = off"
	echo "jit = off"
	# as pg_regress --temp-instance sets them
	echo "log_autovacuum_min_duration = 0"
	echo "log_checkpoints = on"
	echo "log_lock_waits = on"
	echo "log_line_prefix = '%m %b[%p] %q%a '"
	echo "max_prepared_transactions = 2"
	# so that a pid in a valgrind log can be matched with its test
	echo "log_connections = on"
	echo
	echo "# --- test/pgq.conf"
	cat "$src/test/pgq.conf"
	if [ "$private_install" = 1 ]; then
		echo
		echo "# --- pgq as built above, not the machine's"
		echo "extension_destdir = '$inst'"
		echo "dynamic_library_path = '$inst$("$PG_CONFIG" --pkglibdir):\$libdir'"
	fi
} >>"$data/postgresql.conf"

# --- the server under valgrind ----------------------------------------------------
# No --error-exitcode: a backend that exits with a non-zero code makes the
# postmaster reset every session as after a crash, which would hide the errors
# that follow; the logs are read instead.
supp=$src/test/valgrind.supp
# shellcheck disable=SC2054 # the comma in --error-markers is valgrind's
vg_opts=(
	--tool=memcheck
	--trace-children=yes
	--track-origins=yes
	--read-var-info=yes
	--leak-check=no
	--num-callers=40
	--error-markers=VGERROR-BEGIN,VGERROR-END
	--gen-suppressions=all
	--show-error-list=yes
	--fullpath-after="$src/"
	--log-file="$vglogs/vg.%p.log"
)
[ -f "$supp" ] && vg_opts+=(--suppressions="$supp")
# shellcheck disable=SC2206
[ -n "${PGQ_VG_EXTRA:-}" ] && vg_opts+=($PGQ_VG_EXTRA)

server_pid=
stop_server() {
	if [ -f "$data/postmaster.pid" ]; then
		as_tester "$pg_bin/pg_ctl" stop -D "$data" -m fast -t 900 >/dev/null 2>&1 || true
	fi
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		wait "$server_pid" 2>/dev/null || true
	fi
	server_pid=
}
trap stop_server EXIT

say "starting the postmaster under valgrind (logs: $vglogs)"
(cd "$work" && exec runuser -u "$test_user" -- \
	valgrind "${vg_opts[@]}" "$pg_bin/postgres" -D "$data") >"$work/postmaster.log" 2>&1 &
server_pid=$!
t0=$(date +%s)
until "$pg_bin/pg_isready" -q -h "$work" -p "$port" -U "$test_user" -d postgres; do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		tail -n 40 "$work/postmaster.log"
		die "the server did not start: see $work/postmaster.log and $vglogs"
	fi
	if [ $(($(date +%s) - t0)) -gt "$start_timeout" ]; then
		die "the server did not start in ${start_timeout}s"
	fi
	sleep 2
done
echo "up after $(($(date +%s) - t0))s"
postmaster_pid=$(head -n 1 "$data/postmaster.pid")
echo "pgq loaded from: $(awk '/pgq\.so/ { print $6 }' "/proc/$postmaster_pid/maps" | sort -u | tr '\n' ' ')"

# --- the suite --------------------------------------------------------------------
# pg_regress against the running server, as `make installcheck` does without
# its --temp-instance: it (re)creates the database contrib_regression and
# loads pgq in it (--use-existing would skip both).
say "pg_regress: ${tests[*]}"
suite_ok=1
t0=$(date +%s)
as_tester "$pg_regress" \
	--inputdir="$src" \
	--outputdir="$out" \
	--bindir="$pg_bin" \
	--host="$work" --port="$port" \
	--dbname=contrib_regression \
	--load-extension=pgq \
	"${tests[@]}" 2>&1 | tee "$work/regress.log" || suite_ok=0
grep -qE '\.\.\. +FAILED|failed \(ignored\)' "$work/regress.log" && suite_ok=0
grep -q 'All [0-9]* tests passed' "$work/regress.log" || suite_ok=0
echo "suite took $(($(date +%s) - t0))s"

say "stopping the server"
stop_server

# --- the logs ------------------------------------------------------------------------
say "valgrind logs"
set +e
perl - "$vglogs" "$work/postmaster.log" <<'PERL'
use strict;
use warnings;

my ($dir, $serverlog) = @ARGV;

# what each pid was, from the server log (log_line_prefix '%m %b[%p] %q%a ',
# log_connections)
my %what;
if (open(my $fh, '<', $serverlog)) {
	while (<$fh>) {
		next unless /^\S+ \S+ \S+ (.+?)\[(\d+)\] /;
		my ($type, $pid) = ($1, $2);
		if (/connection authorized: .*application_name=(\S+)/) {
			$what{$pid} = "$type $1";
		} elsif (!$what{$pid} || $what{$pid} eq 'not initialized') {
			$what{$pid} = $type;
		}
	}
}
sub proc { my ($pid) = @_; return $what{$pid} ? "$pid ($what{$pid})" : $pid; }

# a frame of pgq: in pgq.so, in one of its sources (--fullpath-after cuts
# the copy's path to src/...), or in a function pgq_*
my $pgq_frame = qr{
	\(in\ [^)]*/pgq\.so\)
	| \(src/[\w-]+\.[ch]:\d+\)
	| :\ pgq_\w+\ \(
}x;

my ($procs, @unfinished, %errors, %used) = (0);
opendir(my $dh, $dir) or die "no $dir\n";
for my $f (sort grep { /^vg\.\d+\.log$/ } readdir $dh) {
	my ($pid) = $f =~ /(\d+)/;
	open(my $fh, '<', "$dir/$f") or next;
	$procs++;
	my ($in, @block, $summary) = (0);
	while (my $line = <$fh>) {
		$line =~ s/^(?:==|--)\d+(?:==|--) ?//;
		# --show-error-list prints the errors again after the first summary,
		# then the suppressions used
		if ($summary) {
			if ($line =~ m{^used_suppression:\s+(\d+)\s+(\S+)\s+(?:.*/)?(\S+?)(?::\d+)?\s*$}) {
				$used{"$2 ($3)"} += $1;
			}
			next;
		}
		if ($line =~ /^ERROR SUMMARY:/) { $summary = 1; next; }
		if ($line =~ /^VGERROR-BEGIN/) { $in = 1; @block = (); next; }
		if ($line =~ /^VGERROR-END/) {
			$in = 0;
			# drop the --gen-suppressions block and blank lines
			my (@text, $skip);
			for (@block) {
				if (/^\{/) { $skip = 1; next; }
				if ($skip) { $skip = 0 if /^\}/; next; }
				next if /^\s*$/;
				push @text, $_;
			}
			my $text = join('', @text);
			# the same stack in several processes is shown once
			(my $key = $text) =~ s/0x[0-9A-Fa-f]+/0x/g;
			$key =~ s/[\d,]+ bytes/N bytes/g;
			my $e = $errors{$key} //= { text => $text, pids => [] };
			push @{ $e->{pids} }, $pid;
			next;
		}
		push @block, $line if $in;
	}
	push @unfinished, proc($pid) unless $summary;
}

# Group the stacks by what and where: the kind of error and its innermost
# pgq frame (or, with none in the stack itself, where the memory came from),
# else its innermost frame.
for my $e (values %errors) {
	my @lines = split /\n/, $e->{text};
	(my $kind = $lines[0]) =~ s/[\d,]+ bytes/N bytes/g;
	my ($main, $aux) = ('', '');
	my $in_main = 1;
	for (@lines[1 .. $#lines]) {
		$in_main = 0 if /^ \S/;    # " Address ...", " Uninitialised value was created ..."
		if ($in_main) { $main .= "$_\n" } else { $aux .= "$_\n" }
	}
	my ($how, $frame) = $main =~ /^\s+(at|by) 0x[0-9A-F]+: (.*$pgq_frame.*)$/m;
	$how = 'called from' if $how && $how eq 'by';
	if (!$frame && (($frame) = $aux =~ /^\s+(?:at|by) 0x[0-9A-F]+: (.*$pgq_frame.*)$/m)) {
		$how = 'memory from';
	}
	$e->{pgq} = $frame ? 1 : 0;
	unless ($frame) {
		($how, $frame) = $main =~ /^\s+(at) 0x[0-9A-F]+: (.*)$/m;
		# and the innermost server function with a name, if that is not it
		my ($server) = $main =~ /^\s+(?:at|by) 0x[0-9A-F]+: ([^?\s]\S*) \(in [^)]*\/postgres\)$/m;
		$frame .= ", under $server" if $frame && $server && index($frame, "$server ") != 0;
	}
	$e->{where} = "$kind\n      " . ($how // 'at') . ' ' . ($frame // '?');
	$e->{where} =~ s/\(in [^)]*\/([^\/)]+)\)/(in $1)/g;
}

my @pgq = grep { $_->{pgq} } values %errors;
my @other = grep { !$_->{pgq} } values %errors;
my $n = 0;
$n += @{ $_->{pids} } for values %errors;

sub report {
	my @errs = sort { $a->{where} cmp $b->{where} || $a->{text} cmp $b->{text} } @_;
	my %where;
	for (@errs) {
		my $w = $where{ $_->{where} } //= { stacks => 0, pids => {} };
		$w->{stacks}++;
		$w->{pids}{$_} = 1 for @{ $_->{pids} };
	}
	print "where (stacks, processes):\n";
	printf "  %s  (%d, %d)\n", $_, $where{$_}{stacks}, scalar keys %{ $where{$_}{pids} }
		for sort keys %where;
	print "\n";
	for my $e (@errs) {
		my @p = @{ $e->{pids} };
		my @shown = map { proc($_) } @p[0 .. ($#p < 4 ? $#p : 4)];
		printf "--- in %d process(es): %s%s\n", scalar @p, join(', ', @shown), @p > 5 ? ', ...' : '';
		print $e->{text}, "\n";
	}
}

print "processes checked: $procs\n";
printf "processes whose log has no final ERROR SUMMARY (killed, or still running): %d\n", scalar @unfinished;
print "  $_\n" for @unfinished;
printf "errors: %d (%d distinct stacks): %d with pgq code in the stack, %d in PostgreSQL or libraries only\n",
	$n, scalar keys %errors, scalar @pgq, scalar @other;
print "suppressed (valgrind.supp: known false positives of the server; default.supp: valgrind's own):",
	(%used ? '' : ' none'), "\n";
printf "  %6d  %s\n", $used{$_}, $_ for sort keys %used;

if (@pgq) {
	print "\n##### errors in pgq code\n\n";
	report(@pgq);
}
if (@other) {
	print "\n##### errors in PostgreSQL or libraries only\n";
	print "(no pgq frame in their stacks; may well be false positives of a server not\n";
	print " built with USE_VALGRIND, such as padding bytes written to disk: see\n";
	print " test/valgrind.supp)\n\n";
	report(@other);
}
exit(@pgq ? 1 : @unfinished ? 2 : 0);
PERL
scan=$?
set -e

# --- per-call memory, without valgrind -----------------------------------------------
# Leak checking means little in PostgreSQL, which frees by memory context; what
# matters is that a call does not leave memory behind in a context that lives
# as long as the session.  One session makes $claims claims: a third each of a
# transaction-mode group, a lease-mode group (claim and complete) and a queue
# (enqueue, claim, complete), and samples its memory contexts and the
# process's private memory (RssAnon) every tenth of the way.  Past the first
# tenth (caches warm up) neither may grow by more than the limits below.
claims=${PGQ_VG_CLAIMS:-100000}
mem_ok=1
if [ "$claims" -gt 0 ]; then
	iterations=$(((claims + 2) / 3))
	say "memory per call: $iterations x 3 claims in one session, server without valgrind"
	as_tester "$pg_bin/pg_ctl" start -D "$data" -l "$work/memloop-server.log" -w -t 300 >/dev/null
	trap stop_server EXIT
	{
		cat <<-SQL
		\set ON_ERROR_STOP on
		\pset tuples_only on
		\pset format unaligned
		CREATE EXTENSION pgq;
		SELECT pgq.create_group('tx', 'SELECT g FROM generate_series(1, $iterations) g', 1) \g /dev/null
		SELECT pgq.create_group('ls', 'SELECT g FROM generate_series(1, $iterations) g', 1, mode => 'lease') \g /dev/null
		SELECT pgq.create_queue('q') \g /dev/null
		\o /dev/null
		SQL
		# two round trips an iteration (\; sends statements together)
		L1="BEGIN \\; SELECT count(*) FROM pgq.claim('tx') \\; COMMIT \\; SELECT pgq.enqueue('q', jsonb_build_object('i', @I@));" \
		L2="SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('ls') \\; SELECT pgq.complete(block_id, '{\"ok\": true}', attempt => attempt) FROM pgq.claim('q');" \
		SAMPLE="\\o
SELECT 'mem', @I@, (SELECT sum(total_bytes) FROM pg_backend_memory_contexts), substring(pg_read_file('/proc/self/status') from 'RssAnon:\\s*(\\d+)');
\\o /dev/null" \
		awk -v n="$iterations" 'BEGIN {
			step = int(n / 10); if (step < 1) step = 1
			for (i = 1; i <= n; i++) {
				l = ENVIRON["L1"]; gsub(/@I@/, i, l); print l
				print ENVIRON["L2"]
				if (i % step == 0 || i == n) { l = ENVIRON["SAMPLE"]; gsub(/@I@/, i, l); print l }
			}
		}'
		cat <<-'SQL'
		\o
		SELECT 'done', group_name, done FROM pgq.group_stats ORDER BY 2;
		SELECT 'done', queue_name, done FROM pgq.queue_stats;
		SQL
	} >"$work/memloop.sql"
	chown "$test_user" "$work/memloop.sql"
	as_tester "$pg_bin/createdb" -h "$work" -p "$port" pgq_memloop
	t0=$(date +%s)
	if as_tester "$pg_bin/psql" -X -q -h "$work" -p "$port" -d pgq_memloop -f "$work/memloop.sql" >"$work/memloop.out" 2>&1; then
		echo "took $(($(date +%s) - t0))s"
		echo "iteration|context bytes|RssAnon kB"
		grep '^mem|' "$work/memloop.out" | cut -d'|' -f2-
		echo "claims done (group|done):"
		grep '^done|' "$work/memloop.out" | cut -d'|' -f2-
		# the first sample is the baseline: caches are warm by then
		read -r ctx0 rss0 < <(grep '^mem|' "$work/memloop.out" | head -n 1 | awk -F'|' '{ print $3, $4 }')
		read -r ctx1 rss1 < <(grep '^mem|' "$work/memloop.out" | tail -n 1 | awk -F'|' '{ print $3, $4 }')
		ctx_growth=$((ctx1 - ctx0))
		rss_growth=$((rss1 - rss0))
		echo "growth after the first tenth: memory contexts ${ctx_growth} bytes, RssAnon ${rss_growth} kB"
		# 1 MB over ~90,000 claims is ~10 bytes a claim: less than one palloc
		if [ "$ctx_growth" -gt 1048576 ] || [ "$rss_growth" -gt 16384 ]; then
			echo "memory grows with the number of calls: a per-call leak in a long-lived context?"
			mem_ok=0
		fi
		# and every call did claim something
		if [ "$(grep -c "^done|[a-z]*|$iterations\$" "$work/memloop.out")" != 3 ]; then
			echo "the loop did not claim and complete all $iterations blocks and items of each kind"
			mem_ok=0
		fi
	else
		echo "the loop failed:"
		tail -n 20 "$work/memloop.out"
		mem_ok=0
	fi
	stop_server
	trap - EXIT
fi
rm -rf "$data"

elapsed=$(($(date +%s) - started))
say "summary"
echo "work directory (valgrind logs in vg/, server log, regression diffs): $work"
echo "took ${elapsed}s"
if [ "$suite_ok" = 1 ]; then
	echo "regression suite: passed"
else
	echo "regression suite: FAILED (see $out/regression.diffs)"
fi
if [ "$claims" -gt 0 ]; then
	if [ "$mem_ok" = 1 ]; then
		echo "memory per call: no growth ($claims claims)"
	else
		echo "memory per call: FAILED (see above and $work/memloop.out)"
	fi
fi
case $scan in
0) echo "valgrind: no error in pgq code" ;;
1) echo "valgrind: ERRORS IN PGQ CODE (listed above)" ;;
2) echo "valgrind: no error in pgq code, but some process did not finish its log" ;;
*) echo "valgrind: could not read the logs"; exit 3 ;;
esac
[ "$scan" = 1 ] || [ "$mem_ok" = 0 ] && exit 1
[ "$scan" = 2 ] || [ "$suite_ok" = 0 ] && exit 2
exit 0
