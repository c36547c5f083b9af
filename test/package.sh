#!/usr/bin/env bash
# Build the Debian package postgresql-15-pgq from debian/ and check it.
#
# As root on Debian 12 (a developer's machine or CI, with CI=true and no
# stdin): installs what the build needs from Debian's mirror, builds the
# package with dpkg-buildpackage in a copy of this tree (never in place, so no
# root-owned build output is left here), installs the .deb, checks its files,
# runs a smoke test (CREATE EXTENSION pgq; pgq.create_group ...) in a
# throwaway cluster that preloads pgq, then removes the package again.
#
# The package installs the same files as `make install` (pgq.so, its LLVM
# bitcode, pgq.control, pgq--0.1.sql): installing it overwrites a developer's
# `make install`, and removing it deletes those paths.  So every file that the
# package ships and that exists before the install is saved first and put
# back after the removal, and the dev setup is left as it was (re-running
# `make install` would restore it too).
#
# Ends with the line "package: OK", or exits non-zero with the reason.
# Environment: PG_MAJOR (default 15), PGQ_PACKAGE_KEEP=1 keeps the build
# directory (its path is printed).
set -euo pipefail

pg_major=${PG_MAJOR:-15}
pkg=postgresql-$pg_major-pgq
top=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS

say() { printf '\n=== %s\n' "$*"; }
failure=
die() {
	failure=$*
	echo "package: FAILED: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (it installs and removes packages)"
[ -f "$top/debian/control" ] || die "no debian/control in $top"

export DEBIAN_FRONTEND=noninteractive
# wait for the dpkg lock instead of failing if another apt-get is running
apt_get() { apt-get -o DPkg::Lock::Timeout=600 -y -qq "$@"; }

work=$(mktemp -d /tmp/pgq-package.XXXXXX)
# the build-time smoke test and pg_virtualenv run the server as user
# postgres, which must be able to read the build tree
chmod 755 "$work"
src=$work/pgq
backup=$work/backup
installed_by_us=
cleaned_up=

# Remove the package (if this script installed it) and put back the files it
# had replaced.  Runs at the end, and on any failure before that.
cleanup() {
	[ -z "$cleaned_up" ] || return 0
	cleaned_up=1
	local rc=0
	if [ -n "$installed_by_us" ]; then
		say "removing $pkg"
		apt_get purge "$pkg" >"$work/remove.log" 2>&1 || {
			cat "$work/remove.log"
			echo "package: could not remove $pkg" >&2
			rc=1
		}
	fi
	if [ -s "$work/saved.list" ]; then
		say "restoring the files $pkg had replaced"
		while IFS= read -r f; do
			# keep a file that someone put back meanwhile (make install)
			if [ -e "$f" ] || [ -L "$f" ]; then
				echo "kept $f (there again already)"
				continue
			fi
			if mkdir -p "$(dirname "$f")" && cp -a "$backup$f" "$f" && cmp -s "$backup$f" "$f"; then
				echo "restored $f"
			else
				echo "package: could not restore $f" >&2
				rc=1
			fi
		done <"$work/saved.list"
	fi
	if [ "${PGQ_PACKAGE_KEEP:-}" = 1 ]; then
		echo "build directory kept: $work"
	else
		rm -rf "$work"
	fi
	return $rc
}
on_exit() {
	local rc=$1
	cleanup || rc=1
	# repeat the reason after the cleanup's output, as the last line
	[ "$rc" = 0 ] || echo "package: FAILED: ${failure:-exit status $rc, see above}" >&2
	exit "$rc"
}
trap 'on_exit $?' EXIT
trap 'exit 130' INT TERM HUP

say "installing build tools and build dependencies"
apt_get update >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; die "apt-get update failed"; }
apt_get install --no-install-recommends build-essential dpkg-dev \
	debhelper postgresql-common postgresql-server-dev-all \
	"postgresql-$pg_major" >>"$work/apt.log" 2>&1 ||
	{ tail -n 40 "$work/apt.log"; die "could not install the build tools"; }

say "copying the tree to $src"
mkdir "$src"
# A clean copy: the files git knows (tracked, and new files not ignored), so
# no build output (*.o, *.so, tmp_check, ...) comes along.  Outside a git
# work tree, everything but the usual build output.
if [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" = "$top" ]; then
	git -C "$top" ls-files -z -co --exclude-standard |
		while IFS= read -r -d '' f; do
			# skip files deleted from the work tree but still in the index
			if [ -e "$top/$f" ] || [ -L "$top/$f" ]; then printf '%s\0' "$f"; fi
		done |
		tar -C "$top" --null -T - -cf - | tar -C "$src" -xf -
else
	tar -C "$top" --exclude-vcs --exclude='*.o' --exclude='*.so' \
		--exclude='*.bc' --exclude='./tmp_check*' --exclude=./results \
		--exclude=./output_iso --exclude=./log --exclude=./bench/results \
		--exclude=./debian/.debhelper --exclude='./debian/postgresql-*-pgq' \
		-cf - . | tar -C "$src" -xf -
fi
[ -f "$src/debian/rules" ] || die "debian/rules did not get copied"

# the Build-Depends of debian/control itself (with the build profile in force)
apt_get build-dep "$src" >>"$work/apt.log" 2>&1 ||
	{ tail -n 40 "$work/apt.log"; die "could not install the Build-Depends"; }

say "building (dpkg-buildpackage -us -uc -b; log: build.log)"
build_start=$SECONDS
if ! (cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
	tail -n 80 "$work/build.log"
	die "dpkg-buildpackage failed"
fi
grep -E '^(### |dpkg-deb: building)' "$work/build.log" || true
echo "built in $((SECONDS - build_start)) s"

# debian/changelog should follow META.json's version (a note, not a failure)
deb_version=$(cd "$src" && dpkg-parsechangelog -S Version)
meta_version=$(sed -n 's/^   "version": "\(.*\)",$/\1/p' "$src/META.json" | head -n 1)
if [ -n "$meta_version" ] && [ "$deb_version" != "$meta_version" ]; then
	echo "note: debian/changelog is at $deb_version, META.json at $meta_version: add a debian/changelog entry (dch -v $meta_version)"
fi

debs=("$work/${pkg}"_*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || die "expected one ${pkg}_*.deb in $work, found: $(ls "$work")"
deb=${debs[0]}
echo "package: $(basename "$deb")"

# Conflicts with Skytools' PgQ, which installs its own pgq.control
conflicts=$(dpkg-deb -f "$deb" Conflicts)
case ", $conflicts," in
*", postgresql-$pg_major-pgq3,"*) echo "Conflicts: $conflicts" ;;
*) die "$pkg does not conflict with postgresql-$pg_major-pgq3 (Conflicts: $conflicts)" ;;
esac

say "saving the files $pkg will replace"
if dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed; then
	echo "note: $pkg was already installed; it is reinstalled now and removed at the end"
fi
: >"$work/saved.list"
mkdir "$backup"
dpkg-deb --fsys-tarfile "$deb" | tar -tf - | sed -e 's|^\./|/|' | grep -v '/$' |
	while IFS= read -r f; do
		[ -e "$f" ] || [ -L "$f" ] || continue
		# files of an installed copy of the package itself are not ours to keep
		owner=$(dpkg-query -S "$f" 2>/dev/null | cut -d: -f1 || true)
		[ "$owner" = "$pkg" ] && continue
		# (not cp --parents: coreutils 9.1's fails once the parents exist)
		if ! { mkdir -p "$backup$(dirname "$f")" && cp -a "$f" "$backup$f"; }; then
			# a concurrent `make install` may replace a file just now
			[ -e "$f" ] && die "could not save $f"
			echo "($f went away meanwhile: nothing to save)"
			continue
		fi
		echo "$f" >>"$work/saved.list"
		echo "saved $f${owner:+ (owned by $owner)}"
	done
[ -s "$work/saved.list" ] || echo "(none of its files exist yet)"

say "installing $(basename "$deb")"
installed_by_us=1
apt_get install --no-install-recommends "$deb" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; die "apt-get install $(basename "$deb") failed"; }
dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\n' "$pkg"

say "checking the installed files"
files=$(dpkg -L "$pkg")
# pgq.so, pgq.control, and every extension script in sql/ (pgq--0.1.sql,
# and upgrade scripts such as pgq--0.1--0.2.sql if there are any)
scripts=()
for f in "$src"/sql/pgq--*.sql; do
	if [ -f "$f" ] && [ "$(basename "$f")" != pgq--0.1.sql ]; then
		scripts+=("/usr/share/postgresql/$pg_major/extension/$(basename "$f")")
	fi
done
for f in "/usr/lib/postgresql/$pg_major/lib/pgq.so" \
	"/usr/share/postgresql/$pg_major/extension/pgq.control" \
	"/usr/share/postgresql/$pg_major/extension/pgq--0.1.sql" "${scripts[@]}"; do
	grep -qxF "$f" <<<"$files" || die "dpkg -L $pkg lacks $f"
	[ -f "$f" ] || die "$f is not on disk"
	echo "ok $f"
done
# the files on disk are the package's (md5sums), not a leftover make install
verify=$(dpkg --verify "$pkg" || true)
[ -z "$verify" ] || die "dpkg --verify $pkg: $verify"
echo "ok dpkg --verify $pkg"

say "smoke test in a throwaway cluster (pg_virtualenv, shared_preload_libraries = 'pgq')"
# pg_virtualenv -t: a temporary cluster in /tmp, run by user postgres, on a
# free port; it is dropped when psql exits
out=$(cd / && pg_virtualenv -t -v "$pg_major" -o shared_preload_libraries=pgq \
	psql -X -At -v ON_ERROR_STOP=1 -f "$src/debian/tests/smoke.sql" 2>&1) ||
	{ echo "$out"; die "smoke test failed"; }
echo "$out"
# CREATE EXTENSION, extversion (pgq.control's default_version),
# create_group (true: this caller created it), group_stats (10 ids in 2
# blocks of 5), one claimed block of 5 ids, DO, OK
default_version=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" "$src/pgq.control")
[ -n "$default_version" ] || die "no default_version in pgq.control"
expected="CREATE EXTENSION
$default_version
t
pkg|10|2|2
BEGIN
5
COMMIT
DO
pgq smoke test: OK"
[ "$(grep -v '^Creating new PostgreSQL cluster\|^Dropping cluster' <<<"$out")" = "$expected" ] ||
	die "smoke test output differs from the expected:
$expected"

cleanup || die "cleanup failed"
trap - EXIT
echo
echo "took $((SECONDS - start)) s"
echo "package: OK"
