#!/usr/bin/env bash
# Build a PostgreSQL server with assertions from Debian's own source package.
#
#   test/build-postgres.sh MAJOR      prints the installation's pg_config
#
# Debian 12 ships PostgreSQL 15 as packages; its mirror also carries the
# source packages of newer majors (17 in trixie, 18 in sid).  This script
# reads the mirror from the machine's apt configuration, looks the source
# package up in the suite's Sources index, downloads the upstream tarball
# from the pool (the index may name a patch release the pool no longer has:
# then the newest older one that exists is taken), checks its SHA-256 where
# the index has it, and builds it with --enable-cassert --enable-debug
# --enable-tap-tests, plus the contrib modules pgq's tests use.  From 17 on
# also with --enable-injection-points and the injection_points test module,
# for the isolation specs that pause pgq inside a claim (ISOLATION_INJECTION
# in the Makefile).
#
# The result goes to $PGQ_PG_CACHE/MAJOR (default /var/cache/pgq-postgres),
# which later runs on the same machine reuse.  Run as root: it installs the
# build dependencies with apt-get.  Progress goes to stderr; stdout is only
# the path of pg_config, for callers to capture.
set -euo pipefail

major=${1:?usage: build-postgres.sh MAJOR}
cache=${PGQ_PG_CACHE:-/var/cache/pgq-postgres}
prefix=$cache/$major
jobs=${PGQ_BUILD_JOBS:-$(nproc)}
configure_opts=(--enable-cassert --enable-debug --enable-tap-tests
	--without-icu --without-zstd --without-lz4)
contrib=(amcheck dblink pageinspect)
# injection points (and the module that drives them) came in 17
modules=()
if [ "$major" -ge 17 ] 2>/dev/null; then
	configure_opts+=(--enable-injection-points)
	modules+=(injection_points)
fi

log() { printf 'build-postgres %s: %s\n' "$major" "$*" >&2; }

case $major in
	15) suite=bookworm ;;
	17) suite=trixie ;;
	18) suite=sid ;;
	*) log "no Debian suite is known to carry PostgreSQL $major"; exit 2 ;;
esac

# A finished build leaves a stamp naming what it was built from and how: if
# both still match, there is nothing to do.
stamp=$prefix/.pgq-build
want_stamp="configure ${configure_opts[*]}; contrib ${contrib[*]}"
[ ${#modules[@]} = 0 ] || want_stamp+="; modules ${modules[*]}"
if [ -x "$prefix/bin/pg_config" ] && [ -f "$stamp" ] &&
	[ "$(sed -n 2p "$stamp")" = "$want_stamp" ]; then
	log "cached: $(sed -n 1p "$stamp")"
	echo "$prefix/bin/pg_config"
	exit 0
fi

# The mirror: the first Debian archive in apt's sources (deb822 or one-line
# format) that carries the distribution's main suite, not its security one.
mirror_from_apt() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			/^[[:space:]]*$/ { if (uri != "" && suites ~ /(^| )bookworm( |$)/) { print uri; exit } uri = ""; suites = "" ; next }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { $1 = ""; suites = $0 " " }
			END { if (uri != "" && suites ~ /(^| )bookworm( |$)/) print uri }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
			if ($(i + 1) == "bookworm") print $i }' "$f"
	done
}
mirror=$(mirror_from_apt | head -n 1)
mirror=${mirror%/}
if [ -z "$mirror" ]; then
	log "found no Debian mirror for bookworm in /etc/apt"
	exit 1
fi
log "mirror $mirror, suite $suite"

if [ "$(id -u)" = 0 ]; then
	deps=(gcc make bison flex libreadline-dev zlib1g-dev pkg-config perl
		libipc-run-perl xz-utils bzip2)
	missing=()
	for pkg in "${deps[@]}"; do
		dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
fi

work=$(mktemp -d /tmp/pgq-pgbuild.XXXXXX)
trap 'rm -rf "$work"' EXIT

# apt's own downloader: it honours apt's proxy settings and checks a hash.
fetch() {
	/usr/lib/apt/apt-helper -qq download-file "$@" >/dev/null 2>&1
}

fetch "$mirror/dists/$suite/main/source/Sources.xz" "$work/Sources.xz" ||
	{ log "cannot download the $suite Sources index"; exit 1; }
xz -dc "$work/Sources.xz" >"$work/Sources"
awk -v pkg="postgresql-$major" 'BEGIN { RS = "" } $0 ~ "^Package: " pkg "\n" { print; exit }' \
	"$work/Sources" >"$work/stanza"
if [ ! -s "$work/stanza" ]; then
	log "postgresql-$major is not in the $suite Sources index"
	exit 1
fi
dir=$(sed -n 's/^Directory: //p' "$work/stanza")
version=$(sed -n 's/^Version: //p' "$work/stanza")
upstream=${version%%-*}
log "index: postgresql-$major $version in $dir"

# SHA-256 of a file, from the index's Checksums-Sha256 field, if listed.
index_sha256() {
	awk -v file="$1" '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 }
		on && $3 == file { print $1 }' "$work/stanza"
}

# Try the index's release, then older patch releases of the same major.
tarball=
patch=${upstream#*.}
while [ "$patch" -ge 0 ]; do
	candidate="postgresql-${major}_${major}.${patch}.orig.tar.bz2"
	sum=$(index_sha256 "$candidate")
	if [ -n "$sum" ]; then
		if fetch "$mirror/$dir/$candidate" "$work/$candidate" "SHA256:$sum"; then
			log "downloaded $candidate, SHA-256 checked against the index"
			tarball=$candidate
			break
		fi
	elif fetch "$mirror/$dir/$candidate" "$work/$candidate"; then
		log "downloaded $candidate; the index lists no checksum for it (it names $upstream)"
		tarball=$candidate
		break
	fi
	patch=$((patch - 1))
done
if [ -z "$tarball" ]; then
	log "no upstream tarball of PostgreSQL $major in $mirror/$dir"
	exit 1
fi

log "building $tarball into $prefix (${configure_opts[*]})"
tar -xjf "$work/$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'postgresql-*')
rm -rf "$prefix"
mkdir -p "$cache"
(
	cd "$src"
	./configure --prefix="$prefix" "${configure_opts[@]}" >"$work/configure.log" 2>&1 ||
		{ tail -n 30 "$work/configure.log" >&2; exit 1; }
	make -s -j"$jobs" >"$work/make.log" 2>&1 ||
		{ tail -n 40 "$work/make.log" >&2; exit 1; }
	make -s install >>"$work/make.log" 2>&1
	for module in "${contrib[@]}"; do
		make -s -C "contrib/$module" install >>"$work/make.log" 2>&1
	done
	for module in ${modules[@]+"${modules[@]}"}; do
		make -s -C "src/test/modules/$module" install >>"$work/make.log" 2>&1
	done
	# PGXS runs isolation specs and TAP tests with these, from pgxs/src/test
	make -s -C src/test/isolation install >>"$work/make.log" 2>&1
	make -s -C src/test/perl install >>"$work/make.log" 2>&1
) || { log "build failed"; exit 1; }
printf '%s\n%s\n' "${tarball%.orig.tar.bz2} from $mirror/$dir" "$want_stamp" >"$stamp"
log "built $("$prefix/bin/pg_config" --version)"
echo "$prefix/bin/pg_config"
