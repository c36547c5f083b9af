# Hostile input: every SQL function of pgq is called a few thousand times
# with random and edge-case arguments, and nothing breaks.  This test proves:
#
#  1. The server never crashes: one psql session runs every call, its
#     backend pid is the same from start to end, and the server log has no
#     crash, TRAP or PANIC line.
#  2. Every error has a proper SQLSTATE: each call runs inside a plpgsql
#     wrapper (fz.try) that catches the error and returns its SQLSTATE; a
#     few run bare at top level instead, where psql reports it.  No call, no
#     background worker and no maintenance pass fails with an internal error
#     (class XX: the server log is scanned too), and the log has no resource
#     leak warnings.  Each offending call is printed, as it was run.
#  3. The arguments are hostile: NULLs, empty and 1 MB strings, names with
#     quotes, backslashes, semicolons, $$, SQL injection, Unicode (emoji,
#     RTL marks, combining characters, noncharacters, Latin-1 control bytes),
#     0, -1 and the int4/int8 extremes, odd intervals ('1 month', '-1 s',
#     '1000000 years', 'P1D', 'infinity', which PostgreSQL 15 refuses),
#     odd timestamps (infinity, -infinity, epoch, out of range), jsonb edge
#     cases (10000-deep arrays, 1e1000, 'null', 1 MB strings), bytea of 0
#     bytes and 1 MB, arrays with NULLs, empty, two-dimensional, with odd
#     lower bounds and 100000 elements; group queries that write, lock,
#     nest pgq calls or are not queries.  Mixed in are real objects, so that
#     calls reach the deep paths: groups of every mode, queues of both
#     modes, this session's worker ids, and ids and attempts of blocks and
#     items claimed earlier in the run, picked at call time.
#  4. Calls run in autocommit and in transaction blocks (READ COMMITTED or
#     not, READ ONLY, with savepoints), which end in COMMIT, ROLLBACK or
#     PREPARE TRANSACTION; between them the session changes settings
#     (pgq.notify, lock caps, search_path to a schema of look-alike tables
#     and operators, time zone, DateStyle), drops its advisory locks and
#     runs DISCARD ALL, and runs calls as a role that may use pgq (and
#     owns what it creates) and as one that may not (none of whose calls
#     may succeed).  A second session holds claims all along, and
#     maintenance passes run every second with a 2 second retention, so
#     groups and items disappear under the calls.  A few groups are created
#     with async => true; the test waits for their workers to finish.
#     Some units make several pgq calls in one statement, run a call in
#     a cursor (held past COMMIT or not), claim from 20 groups in one
#     transaction (more than pgq.max_groups = 16 shared entries), or create
#     groups asynchronously and commit, roll back, prepare, or undo the
#     creation with a savepoint or a later error in its statement.  Every
#     function of schema pgq, as installed, must have been called.
#  5. Afterwards pgq's tables are consistent (no block or item without its
#     group, states and times that agree, ids unique, an ordering key with
#     at most one head and none waiting without one, nothing left
#     materializing or prepared), the shared claimed counts are back to
#     what the remaining holder holds, the injection targets are intact,
#     and pgq still works end to end, in the fuzzing session itself and in
#     a new one (advisory claims too: pgq.max_locks = 30 would stop them
#     if the cluster-wide count of advisory blocks leaked).
#  6. Calls racing a drop of their group: each function that names a group
#     or an id runs while another session drops the group in an open
#     transaction, and the other way round.  None fails with an internal
#     error, and none leaves a block or item without its group.
#
# The run is reproducible from its seed, printed at the start:
# PGQ_FUZZ_SEED=n replays it (and PGQ_FUZZ_CALLS=n changes its length).
# Ids and attempts picked at call time depend on timing, so each reported
# call is printed with the values it ran with.
use strict;
use warnings;
use utf8;

use FindBin;
use lib $FindBin::RealBin;

use Encode qw(encode decode);
use MIME::Base64 qw(decode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTest;

my $seed = $ENV{PGQ_FUZZ_SEED} // 18018;
my $target_calls = $ENV{PGQ_FUZZ_CALLS} // 4000;
diag("seed $seed, about $target_calls calls (replay: PGQ_FUZZ_SEED=$seed)");
srand($seed);

my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
max_worker_processes = 16
max_prepared_transactions = 2
# few shared-memory entries, so that groups evict each other
pgq.max_groups = 16
# a cluster-wide cap on advisory blocks that the calls reach: a count that
# leaks would keep the advisory claims at the end from working
pgq.max_locks = 30
# maintenance passes, with retention, run under the calls
pgq.maintenance_interval = 1
pgq.retention = 2
log_line_prefix = '%m [%p] %e '
});
$node->start;

# ---------------------------------------------------------------------------
# Fixtures: a UTF-8 database, targets for injections, helpers in schema fz.

$node->safe_psql('postgres',
	"CREATE DATABASE fuzz TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'");

# Names of the fixtures that the fuzzing also uses as arguments.
my $weird = "fz 'q' \"dq\" \\ ; \$\$ 😀";
my %NAME = (
	tx => "'fz_tx'",
	lease => "'fz_lease'",
	lshort => "'fz_lease_short'",
	adv => "'fz_adv'",
	weird => lit($weird),
	held => "'fz_held'",
	held_adv => "'fz_held_adv'",
	q => "'fz_q'",
	qshort => "'fz_q_short'",
	qt => "'fz_qt'",
	emoji => "repeat('😀', 128)");

$node->safe_psql('fuzz', encode('UTF-8', <<'SQL'));
SET client_min_messages = warning;
CREATE EXTENSION pgq;
CREATE TABLE public.t (a int);
INSERT INTO public.t SELECT g FROM generate_series(1, 100) g;
CREATE SCHEMA fz;
CREATE TABLE fz.canary (a int);
INSERT INTO fz.canary VALUES (1), (2), (3);
CREATE SEQUENCE fz.seq;
CREATE DOMAIN fz.posint AS bigint CHECK (VALUE > 0);
CREATE FUNCTION fz.writer() RETURNS int LANGUAGE plpgsql
AS $$BEGIN INSERT INTO fz.canary VALUES (4); RETURN 4; END$$;
CREATE PROCEDURE fz.p() LANGUAGE sql AS $$SELECT 1$$;
CREATE FUNCTION fz.boom(anyelement) RETURNS boolean LANGUAGE plpgsql
AS $$BEGIN RAISE EXCEPTION 'boom'; END$$;

-- Claims the fuzzing made, with the top-level transaction that made them:
-- where later calls find real ids and attempts.
CREATE UNLOGGED TABLE fz.claimed (
    id bigint,
    attempt int,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id());
CREATE FUNCTION fz.note(id bigint, attempt int) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
AS $$INSERT INTO fz.claimed (id, attempt) VALUES (id, attempt) RETURNING id$$;

-- A real id (and attempt) of a kind, picked now, or a made-up one:
--  T claims of the current transaction   C any claim noted so far
--  L lease-mode blocks claimed           I lease-mode items running
--  A advisory blocks this session holds  W workers of this session
--  B any block   F dead-lettered block   Q any item
--  D done or dead item   P pending or scheduled item
CREATE FUNCTION fz.pick(kind text, OUT id bigint, OUT attempt int)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
AS $$
BEGIN
    CASE kind
    WHEN 'T' THEN
        SELECT c.id, c.attempt INTO id, attempt FROM fz.claimed c
        WHERE c.xid = pg_current_xact_id_if_assigned() ORDER BY random() LIMIT 1;
    WHEN 'C' THEN
        SELECT c.id, c.attempt INTO id, attempt FROM fz.claimed c
        ORDER BY random() LIMIT 1;
    WHEN 'L' THEN
        SELECT b.block_id, b.attempt INTO id, attempt FROM pgq.blocks b
        WHERE b.state = 'c' ORDER BY random() LIMIT 1;
    WHEN 'I' THEN
        SELECT i.item_id, i.attempt INTO id, attempt FROM pgq.items i
        WHERE i.state = 'c' ORDER BY random() LIMIT 1;
    WHEN 'A' THEN
        SELECT l.classid::bigint << 32 | l.objid::bigint INTO id
        FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid BETWEEN 4096 AND 12287 AND l.granted
          AND l.pid = pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_database
                            WHERE datname = current_database())
        ORDER BY random() LIMIT 1;
    WHEN 'W' THEN
        -- workers whose lock this session holds first, then any of its own
        SELECT w.worker_id INTO id FROM pgq.worker_registry w
        WHERE w.pid = pg_backend_pid()
        ORDER BY EXISTS (SELECT FROM pg_locks l
                         WHERE l.locktype = 'advisory' AND l.objsubid BETWEEN 12288 AND 20479
                           AND l.pid = pg_backend_pid()
                           AND (l.classid::bigint << 32 | l.objid::bigint) = w.worker_id)
                 AND random() < 0.9 DESC,
                 random()
        LIMIT 1;
    WHEN 'B' THEN
        SELECT b.block_id, b.attempt INTO id, attempt FROM pgq.blocks b
        ORDER BY random() LIMIT 1;
    WHEN 'F' THEN
        SELECT b.block_id, b.attempt INTO id, attempt FROM pgq.blocks b
        WHERE b.state = 'f' ORDER BY random() LIMIT 1;
    WHEN 'Q' THEN
        SELECT i.item_id, i.attempt INTO id, attempt FROM pgq.items i
        ORDER BY random() LIMIT 1;
    WHEN 'D' THEN
        SELECT i.item_id, i.attempt INTO id, attempt FROM pgq.items i
        WHERE i.state IN ('d', 'f') ORDER BY random() LIMIT 1;
    WHEN 'P' THEN
        SELECT i.item_id, i.attempt INTO id, attempt FROM pgq.items i
        WHERE i.state IN ('p', 'r') ORDER BY random() LIMIT 1;
    ELSE
        NULL;
    END CASE;
    IF id IS NULL THEN
        id := (ARRAY[0, -1, 1, 9223372036854775807, -9223372036854775808,
                     (SELECT last_value + 1 FROM pgq.block_id_seq)])
              [1 + floor(random() * 6)::int];
    END IF;
    IF attempt IS NULL AND random() < 0.8 THEN
        attempt := (ARRAY[0, 1, -1, 2147483647])[1 + floor(random() * 4)::int];
    END IF;
END
$$;

-- A bigint as SQL text that passes for a bigint argument.
CREATE FUNCTION fz.lit8(v bigint) RETURNS text
LANGUAGE sql SET search_path = pg_catalog
AS $$SELECT CASE WHEN v IS NULL THEN 'NULL'
                 WHEN v < 0 THEN quote_literal(v) || '::bigint'
                 ELSE v::text END$$;

-- The call template with its placeholders filled in:
-- @@Xn.id@@ and @@Xn.att@@ (a pick of kind X, the same for the same Xn),
-- @@K@@ (a queue name and key of a real item) and @@G@@ (a group's id and
-- creation time).
CREATE FUNCTION fz.expand(tpl text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
AS $$
DECLARE
    q text := tpl;
    tag text;
    r record;
    s text;
BEGIN
    FOR tag IN SELECT DISTINCT m[1]
               FROM regexp_matches(tpl, '@@([A-Z][0-9])\.(?:id|att)@@', 'g') m
    LOOP
        SELECT * INTO r FROM fz.pick(left(tag, 1));
        q := replace(q, '@@' || tag || '.id@@', fz.lit8(r.id));
        q := replace(q, '@@' || tag || '.att@@',
                     CASE WHEN r.attempt IS NULL THEN 'NULL'
                          WHEN r.attempt < 0 THEN '(' || r.attempt || ')'
                          ELSE r.attempt::text END);
    END LOOP;
    IF strpos(q, '@@K@@') > 0 THEN
        SELECT quote_literal(g.group_name) || ', ' || quote_literal(i.key) INTO s
        FROM pgq.items i JOIN pgq.groups g USING (group_id)
        WHERE i.key IS NOT NULL ORDER BY random() LIMIT 1;
        q := replace(q, '@@K@@', coalesce(s, '''fz_q'', ''no such key'''));
    END IF;
    IF strpos(q, '@@G@@') > 0 THEN
        SELECT g.group_id || ', ' ||
               quote_literal(to_char(g.created_at AT TIME ZONE 'UTC',
                                     'YYYY-MM-DD HH24:MI:SS.US') || '+00')
               || '::timestamptz' INTO s
        FROM pgq.groups g ORDER BY random() LIMIT 1;
        q := replace(q, '@@G@@', coalesce(s, '1, now()'));
    END IF;
    RETURN q;
END
$$;

CREATE FUNCTION fz.b64(t text) RETURNS text
LANGUAGE sql SET search_path = pg_catalog
AS $$SELECT translate(encode(convert_to(t, 'UTF8'), 'base64'), E'\n', '')$$;

-- Run one call, catching its error: "fz <n> <SQLSTATE> <call> <message>
-- <first row>", base64-encoded.  The call is announced first, so that the
-- one running when the server went away can be named.  No SET clause: the
-- call runs with the session's settings, search_path included.
CREATE FUNCTION fz.try(n int, tpl text) RETURNS text LANGUAGE plpgsql
AS $$
DECLARE
    q text;
    st text := '00000';
    msg text := '';
    res text := '';
    rec record;
BEGIN
    q := fz.expand(tpl);
    RAISE NOTICE 'fzq % %', n, fz.b64(q);
    BEGIN
        EXECUTE q INTO rec;
        res := left(rec::text, 200);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    END;
    RETURN 'fz' || chr(9) || n || chr(9) || st || chr(9) || fz.b64(q)
        || chr(9) || fz.b64(left(msg, 1000)) || chr(9) || fz.b64(coalesce(res, ''));
END
$$;

-- Look-alikes of pgq's tables, of operators and functions it uses: a
-- search_path that puts them first must change nothing.
CREATE SCHEMA fz_evil;
CREATE TABLE fz_evil.groups (group_id bigint, group_name text, mode text);
CREATE TABLE fz_evil.blocks (group_id bigint, block_id bigint, ids bigint[]);
CREATE TABLE fz_evil.items (group_id bigint, item_id bigint, key text);
CREATE FUNCTION fz_evil.yes(bigint, bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR fz_evil.= (LEFTARG = bigint, RIGHTARG = bigint,
                           FUNCTION = fz_evil.yes);
CREATE OPERATOR fz_evil.>= (LEFTARG = bigint, RIGHTARG = bigint,
                            FUNCTION = fz_evil.yes);
CREATE FUNCTION fz_evil.yes(text, text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR fz_evil.= (LEFTARG = text, RIGHTARG = text,
                           FUNCTION = fz_evil.yes);
CREATE FUNCTION fz_evil.clock_timestamp() RETURNS timestamptz
LANGUAGE sql AS $$SELECT '-infinity'::timestamptz$$;
CREATE FUNCTION fz_evil.nextval(regclass) RETURNS bigint
LANGUAGE sql AS 'SELECT 1::bigint';
CREATE FUNCTION fz_evil.current_setting(text) RETURNS text
LANGUAGE sql AS $$SELECT 'fz_evil'$$;
CREATE FUNCTION fz_evil.current_user() RETURNS name
LANGUAGE sql AS $$SELECT 'nobody'::name$$;

-- Roles the calls also run as: one that may use pgq, one that may not.
-- The helpers above that read pgq's tables are SECURITY DEFINER.
CREATE ROLE fz_user;
CREATE ROLE fz_nobody;
GRANT USAGE ON SCHEMA pgq TO fz_user;
GRANT USAGE ON SCHEMA fz, fz_evil TO PUBLIC;
GRANT SELECT ON public.t TO fz_user;
SQL

# The fixtures every few calls bring back (a drop or retention may have
# removed them): groups of each mode, queues of both modes.
my @fixture_sql = (
	"SELECT pgq.create_group($NAME{tx}, 'SELECT g FROM generate_series(1, 300) g', 3)",
	"SELECT pgq.create_group($NAME{lease}, 'SELECT g FROM generate_series(1, 300) g', 3, mode => 'lease', max_attempts => 3)",
	"SELECT pgq.create_group($NAME{lshort}, 'SELECT g FROM generate_series(1, 100) g', 2, mode => 'lease', lease => '1 ms', max_attempts => 2)",
	"SELECT pgq.create_group($NAME{adv}, 'SELECT g FROM generate_series(1, 300) g', 3, mode => 'advisory', max_attempts => 2)",
	"SELECT pgq.create_group($NAME{weird}, 'SELECT g FROM generate_series(1, 50) g', 1, mode => 'lease')",
	"SELECT pgq.create_queue($NAME{q}, max_attempts => 3)",
	"SELECT pgq.create_queue($NAME{qshort}, lease => '1 ms', max_attempts => 2, backoff => '0', max_backoff => '0')",
	"SELECT pgq.create_queue($NAME{qt}, mode => 'transaction', max_attempts => 2, backoff => '0')",
	"SELECT pgq.create_queue($NAME{emoji})");

# The holder: another session that keeps two transaction-mode claims (in
# an open transaction) and two advisory claims for the whole run.
$node->safe_psql('fuzz', q{
	SELECT pgq.create_group('fz_held', 'SELECT g FROM generate_series(1, 30) g', 3);
	SELECT pgq.create_group('fz_held_adv', 'SELECT g FROM generate_series(1, 30) g', 3,
	                        mode => 'advisory');
});
$node->safe_psql('fuzz', q{
	SELECT pgq.create_queue('fz_q', max_attempts => 3);
	SELECT pgq.grant('fz_q', 'fz_user', 'produce');
	SELECT pgq.grant('fz_q', 'fz_user', 'consume');
	SELECT pgq.create_group('fz_lease', 'SELECT g FROM generate_series(1, 300) g', 3,
	                        mode => 'lease', max_attempts => 3);
	SELECT pgq.grant('fz_lease', 'public');
});
# The functions of schema pgq: each must be called.
my @pgq_functions = split /\n/, $node->safe_psql('fuzz', q{
	SELECT DISTINCT proname FROM pg_proc
	WHERE pronamespace = 'pgq'::regnamespace ORDER BY 1});

my $holder = $node->background_psql('fuzz');
my $holder_w = $holder->query_safe("SELECT pgq.register_worker('holder')");
is( $holder->query_safe(
		"SELECT count(*) FROM pgq.claim('fz_held_adv', 2, worker_id => $holder_w)"),
	'2', 'the holder claims two advisory-mode blocks');
$holder->query_safe('BEGIN');
is($holder->query_safe("SELECT count(*) FROM pgq.claim('fz_held', 2)"),
	'2', 'the holder claims two transaction-mode blocks, in an open transaction');

# ---------------------------------------------------------------------------
# Argument pools: SQL expressions.

sub lit
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}
sub pick { return $_[ int(rand(scalar @_)) ]; }
sub chance { return rand() < $_[0]; }

my @group_names = @NAME{qw(tx lease lshort adv weird held held_adv)};
my @queue_names = @NAME{qw(q qshort qt emoji)};
my @new_names = ((map { "'fz_new_$_'" } 0 .. 7), (map { "'fz_async_$_'" } 0 .. 3));
my @hostile_names = (
	'NULL', "''", "' '", "'x'", "'no such group'", "'FZ_TX'", "'fz_tx '",
	"repeat('n', 128)", "repeat('n', 129)", "repeat('😀', 129)",
	"repeat('x', 1048576)", q{repeat(E'e\u0301', 64)},
	q{repeat(E'e\u0301', 65)}, "repeat(chr(173), 128)",
	lit("O'Brien"), lit('"dq"'), lit('back\\slash'), lit('semi;colon'),
	lit('$$'), lit('$fz$'), lit("x'); DROP TABLE t; --"),
	lit("'; DROP TABLE fz.canary; --"),
	lit("\"; DROP SCHEMA pgq CASCADE; --"),
	lit("\x{202E}kcatta\x{202C}"), lit("%s%s%s%n%x"), lit("\t\n\r\x0b"),
	lit("\x01\x02\x1f\x7f"), lit("\x{FEFF}"), lit("\x{10FFFF}\x{FFFE}"),
	lit("مرحبا"), lit("שלום עולם"), lit("名前"), lit("NULL"),
	q{convert_from(decode('0102030405060708090a0b0c0d0e0f10' || repeat('fe', 10), 'hex'), 'LATIN1')},
	"chr(1114111)", "chr(0)", q{E'\\\\'}, "'fz_tx'::varchar(3)", "1",
	"'fz_tx' || repeat(' ', 100)", "upper('fz_tx')", "'\@\@B0.id\@\@'");

# Group queries: some valid (fast), the others refused or failing.
my @queries = (
	(map { lit($_) } (
		'SELECT g FROM generate_series(1, 300) g',
		'SELECT a FROM public.t', 'TABLE public.t', 'SELECT 1',
		'VALUES (1), (2), (3)', 'SELECT g::smallint FROM generate_series(1, 10) g',
		'SELECT g::fz.posint FROM generate_series(1, 10) g',
		'SELECT 9223372036854775807', 'SELECT (-9223372036854775807 - 1)',
		'WITH x AS (SELECT 1 AS a) SELECT a FROM x',
		'SELECT g FROM generate_series(1, 0) g', q{SELECT a, 'extra' FROM public.t},
		'SELECT g FROM generate_series(1, 1000) g ORDER BY random()',
		'SELECT block_id FROM pgq.blocks', 'SELECT item_id FROM pgq.items',
		'SELECT group_id FROM pgq.groups', 'SELECT 1 AS "😀"',
		'SELECT g FROM generate_series(1, 5) g, generate_series(1, 5)',
		'SELECT count(*) FROM public.t',
		'SELECT worker_id FROM pgq.worker_registry',
		q{SELECT block_id FROM pgq.claim('fz_adv', 2, worker_id => @@W0.id@@)},
		q{SELECT (pgq.result(@@Q0.id@@)).attempt},
		q{SELECT claimed FROM pgq.inflight(@@G@@)},
		q{SELECT pgq.wake_maintenance()::int},
		'', ' ', ';', 'SELECT 1; SELECT 2', 'SELEC 1', q{SELECT 'a'},
		'SELECT 1.5', 'SELECT NULL::int', 'VALUES (1), (NULL)', 'SELECT 1/0',
		'SELECT g / 0 FROM generate_series(1, 3) g',
		'SELECT 2147483647 + g FROM generate_series(1, 2) g',
		'SELECT 0::fz.posint', 'SELECT fz.writer()', q{SELECT nextval('fz.seq')},
		'INSERT INTO fz.canary VALUES (9) RETURNING a',
		'DELETE FROM fz.canary RETURNING a',
		'WITH d AS (DELETE FROM fz.canary RETURNING a) SELECT a FROM d',
		'SELECT a FROM fz.canary FOR UPDATE',
		'SELECT a FROM public.t WHERE a IN (SELECT a FROM public.t FOR KEY SHARE)',
		'DROP TABLE fz.canary', "x'); DROP TABLE t; --", 'SELECT 1 INTO fz.made',
		'EXPLAIN SELECT 1', 'COMMIT', 'ROLLBACK', 'BEGIN', 'SAVEPOINT s',
		'SELECT $1', 'SELECT $$', 'CALL fz.p()', 'DO $$BEGIN END$$', 'SELECT',
		'SELECT FROM public.t', 'SELECT NULL', 'VALUES (1::bigint, NULL)',
		q{SELECT pgq.drop_group('fz_tx')::int},
		q{SELECT pgq.enqueue('fz_q', '1')},
		q{SELECT pgq.create_group('fz_nested', 'SELECT 1')::int},
		q{SELECT pgq.register_worker()},
		q{SELECT block_id FROM pgq.claim('fz_lease')},
		q{SELECT block_id FROM pgq.claim('fz_tx')},
		q{SELECT block_id FROM pgq.claim('fz_q')},
		q{SELECT pg_try_advisory_lock(20561)::int},
		q{SELECT pgq.complete(@@L0.id@@, attempt => @@L0.att@@)::int})),
	"repeat('SELECT 1 UNION ALL ', 1000) || 'SELECT 1'",
	"'SELECT 1' || repeat(' ', 1048576)",
	"'SELECT 1 -- ' || repeat('x', 1048576)",
	"'SELECT ' || repeat('(', 10000) || '1' || repeat(')', 10000)",
	'NULL', "'\x{202E}SELECT 1'");

my @modes = ('NULL', "'transaction'", "'lease'", "'advisory'", "''",
	"'LEASE'", "'lease '", "'queue'", lit("advisory'; --"),
	"repeat('x', 1048576)", "'\x{1F600}'");

my @int4s = ('NULL', '0', '1', '-1', '2', '3', '5', '100', '10000', '10001',
	'32767', '32768', '1000000', '1000001', '2147483647',
	'(-2147483647 - 1)', '2147483648', "'7'", "'abc'", '1.5', "'1e3'");
my @int8s = ('NULL', '0', '-1', '1', '2147483647', '(-2147483647 - 1)',
	'2147483648', '9223372036854775807', '(-9223372036854775807 - 1)',
	'9223372036854775808', "'1'", "'abc'",
	'(SELECT last_value + 1 FROM pgq.block_id_seq)',
	'(SELECT last_value FROM pgq.block_id_seq)',
	'(SELECT max(worker_id) + 1 FROM pgq.worker_registry)');

my @intervals = ('NULL', "'0'", "'1 us'", "'1 ms'", "'1 s'", "'5 minutes'",
	"'-1 s'", "'-1 us'", "'1 month'", "'-1 month'", "'1 mon -30 days'",
	"'366 days'", "'367 days'", "'366 days 1 us'", "'365 days 24:00:00'",
	"'8784 hours'", "'8784 hours 1 us'", "'1 day -24 hours'", "'-366 days'",
	"'1000000 years'", "'-1000000 years'", "'P1D'", "'PT0.5S'", "'P0D'",
	"'\@ 1 minute ago'", "'2147483647 days'", "'-2147483648 days'",
	"'2147483647 hours'", "'178000000 years'", "'infinity'", "'-infinity'",
	"'00:00:00.000001'", "'0.5 ms'", "'999 ms'", "'1 millennium'", "'-0'",
	"'abc'", "''", "interval '1 s' * 1e10", "make_interval(days => 366)",
	"make_interval(secs => 1e-6)", "interval '1 year' - interval '365 days'");

# Waits that never wait longer than a millisecond: all others are refused.
my @waits = ('NULL', "'0'", "'1 us'", "'1 ms'", "'-1 s'", "'-1 ms'",
	"'1000000 years'", "'-1000000 years'", "'P0D'", "'PT0.001S'",
	"'infinity'", "'-infinity'", "'2147483647 days'", "'-2147483648 days'",
	"'1 month -1 month'", "'abc'", "'178000000 years'");

my @timestamps = ('NULL', "'infinity'", "'-infinity'", "'epoch'", 'now()',
	"now() + '1 ms'", "now() + '1 hour'", "now() - '1 day'",
	"'4713-01-01 00:00:00+00 BC'", "'294276-12-31 23:59:59.999999+00'",
	"'294277-01-01'", "'2000-02-30'", 'clock_timestamp()', "'today'",
	"'tomorrow'", "'yesterday'", "'1999-12-31 23:59:60'", "'abc'",
	"'2038-01-19 03:14:08+00'", "to_timestamp('NaN')");

my @jsonbs = ('NULL', "'null'", "'null'::jsonb", "'{}'", "'[]'", "'0'",
	"'-0'", "'1e1000'", "'-1e-1000'",
	"'123456789012345678901234567890123456789'", "'true'", q{'"x"'},
	q{'"😀"'}, q{'"\u0000"'}, q{'"\u202e"'},
	q{'{"a": {"b": [1, 2, {"c": null}]}}'}, q{'{"a": 1, "a": 2}'},
	"to_jsonb(repeat('x', 1048576))",
	"(repeat('[', 100) || repeat(']', 100))::jsonb",
	"(repeat('[', 1000) || repeat(']', 1000))::jsonb",
	"(repeat('[', 10000) || repeat(']', 10000))::jsonb",
	"(SELECT jsonb_object_agg(g::text, g) FROM generate_series(1, 10000) g)",
	"'not json'", "'{'", "''", lit(q{{"inj": "x'); DROP TABLE t; --"}}),
	"'1'::json", "to_jsonb('infinity'::timestamptz)", "'NaN'");
my @byteas = ('NULL', "''::bytea", q{'\x'::bytea}, q{'\x00'::bytea},
	"decode(repeat('00', 1048576), 'hex')", "decode(repeat('ff00', 512), 'hex')",
	q{'\xdeadbeef'::bytea}, "convert_to('😀', 'UTF8')", "'abc'", q{'\x0'},
	"sha256('x')");
my @texts = (@hostile_names, "'boom'", "'error: ' || now()",
	"repeat('e', 1048576)", "repeat('😀', 100000)");
my @keys = ('NULL', "''", "'k1'", "'k2'", "'k' || floor(random() * 20)::int",
	"repeat('k', 1024)", "repeat('k', 1025)", "repeat('é', 512)",
	"repeat('é', 513)", "repeat('😀', 256)", "repeat('😀', 257)",
	lit("x'); DROP TABLE t; --"), "repeat('x', 1048576)", lit("\x{202E}"),
	lit('$$'), lit("a\\b"), "'NULL'", "lower('K1')");
my @priorities = ('NULL', '0', '1', '-1', '32767', '32768', '100',
	'2147483647', '(-2147483647 - 1)', "'abc'");

# ---------------------------------------------------------------------------
# Calls.  Each generator returns (function, SQL).  Placeholders @@Xn...@@
# are filled in by fz.expand at call time (see there).

my $tag_no = 0;
sub tag { my ($kind) = @_; return $kind . ($tag_no++ % 10); }

# A block or item id and an attempt: real ones of a kind (and the kind), or
# hostile ones.
sub id_att
{
	my @kinds = @_;
	if (chance(0.78))
	{
		my $kind = pick(@kinds);
		my $t = tag($kind);
		my $att = "\@\@$t.att\@\@";
		$att = pick("$att + 1", "$att - 1", 'NULL', '0', pick(@int4s))
		  if chance(0.12);
		return ("\@\@$t.id\@\@", $att, $kind);
	}
	return (pick(@int8s), pick(@int4s), '');
}

sub worker_arg
{
	return chance(0.75) ? '@@' . tag('W') . '.id@@' : pick(@int8s);
}

sub name_arg
{
	my (%o) = @_;
	my $r = rand();
	my @first = $o{queue} ? @queue_names : @group_names;
	my @second = $o{queue} ? @group_names : @queue_names;
	@first = grep { !/fz_held/ } @first if $o{nodrop};
	return pick(@first) if $r < 0.5;
	return pick(@second) if $r < 0.6;
	return pick(@new_names) if $r < 0.7;
	return pick(@hostile_names);
}

# f(required..., [name => value]...): optional arguments named, a random
# subset; sometimes all of them positionally.
sub call
{
	my ($fn, $req, $opt) = @_;
	my @args = @$req;
	if (chance(0.12))
	{
		push @args, map { $_->[1] } @$opt;
	}
	else
	{
		for my $o (@$opt)
		{
			push @args, "$o->[0] => $o->[1]" if chance($o->[2] // 0.5);
		}
	}
	return "pgq.$fn(" . join(', ', @args) . ')';
}

my $async_budget = 14;

# owner => of create_group and create_queue
my @owners = ('current_user::regrole', "'fz_user'", "'fz_nobody'", 'NULL',
	"'pg_monitor'", "'public'", "''", "'\"fz_user\"'", '0::regrole');

sub gen_create_group
{
	my $async = pick('false', 'NULL', "'no'", "'maybe'");
	if ($async_budget > 0 && chance(0.06))
	{
		$async = 'true';
		$async_budget--;
	}
	my $c = call('create_group', [ name_arg(), pick(@queries) ], [
		[ 'block_size', pick(@int4s, '1', '3', '5', '5000'), 0.7 ],
		[ 'mode', pick(@modes, "'lease'", "'advisory'", "'transaction'"), 0.6 ],
		[ 'async', $async, $async eq 'true' ? 1 : 0.3 ],
		[ 'lease', pick(@intervals), 0.4 ],
		[ 'max_attempts', pick(@int4s, '1', '3'), 0.4 ],
		[ 'timeout', pick(@intervals), 0.2 ],
		[ 'owner', pick(@owners), 0.2 ] ]);
	return ('create_group', "SELECT $c");
}

sub gen_drop_group
{
	return ('drop_group', 'SELECT ' . call('drop_group', [ name_arg(nodrop => 1) ], []));
}

sub gen_claim
{
	my $queue = chance(0.4);
	my $name = name_arg(queue => $queue);
	my $c = call('claim', [$name], [
		[ 'max_blocks', pick(@int4s, '1', '2', '3', '5'), 0.6 ],
		[ 'wait', pick(@waits), 0.3 ],
		[ 'worker_id', worker_arg(), $name eq $NAME{adv} ? 0.9 : 0.4 ] ]);
	my $sql = pick(
		("SELECT fz.note(c.block_id, c.attempt) FROM $c c") x 5,
		"SELECT * FROM $c", "SELECT $c", "SELECT count(*) FROM $c");
	return ('claim', $sql);
}

# pgq.claim over a list of names: real groups and queues of every mode,
# unknown and hostile names, duplicates, NULLs, odd arrays
sub gen_claim_list
{
	my $n = pick(1, 2, 3, 5);
	my $names = array_of('text', $n, sub { name_arg(queue => chance(0.6)) });
	$names = "ARRAY[" . join(', ', ($queue_names[0]) x 2) . "]" if chance(0.05);
	my $c = call('claim', ["group_names => $names"], [
		[ 'max_blocks', pick(@int4s, '1', '2', '3', '5'), 0.6 ],
		[ 'wait', pick(@waits), 0.3 ],
		[ 'worker_id', worker_arg(), 0.5 ] ]);
	my $sql = pick(
		("SELECT fz.note(c.block_id, c.attempt) FROM $c c") x 5,
		"SELECT * FROM $c", "SELECT count(*), min(c.group_name) FROM $c c");
	return ('claim(list)', $sql);
}

sub gen_complete
{
	my ($id, $att, $kind) = id_att(qw(L L I I T T A C B Q D));
	my $c = call('complete', [$id], [
		[ 'result', pick(@jsonbs), 0.3 ],
		[ 'attempt', $att, 0.75 ],
		[ 'worker_id', worker_arg(), $kind eq 'A' ? 0.9 : 0.3 ],
		[ 'result_data', pick(@byteas), 0.2 ] ]);
	return ('complete', "SELECT $c");
}

sub gen_release
{
	my ($id, $att, $kind) = id_att(qw(L L I I A A C B Q));
	my $c = call('release', [$id], [
		[ 'attempt', $att, 0.75 ],
		[ 'worker_id', worker_arg(), $kind eq 'A' ? 0.9 : 0.3 ] ]);
	return ('release', "SELECT $c");
}

sub gen_fail
{
	my ($id, $att, $kind) = id_att(qw(L L I I T T A A C B Q));
	my $c = call('fail', [$id], [
		[ 'error', pick(@texts), 0.6 ],
		[ 'retry_after', pick(@intervals, "'0'", "'1 ms'"), 0.4 ],
		[ 'attempt', $att, 0.75 ],
		[ 'worker_id', worker_arg(), $kind eq 'A' ? 0.9 : 0.3 ] ]);
	return ('fail', "SELECT $c");
}

sub gen_extend
{
	my ($id, $att) = id_att(qw(L L I I C B Q A));
	my $c = call('extend', [ $id, pick(@intervals, ("'5 minutes'") x 5) ],
		[ [ 'attempt', $att, 0.8 ] ]);
	return ('extend', "SELECT $c");
}

# An array of n elements made by $elem, as type[], or an odd one.
sub array_of
{
	my ($type, $n, $elem) = @_;
	my $r = rand();
	return 'NULL' if $r < 0.05;
	return "'{}'::${type}[]" if $r < 0.1;
	return "ARRAY[NULL]::${type}[]" if $r < 0.14;
	if ($r < 0.19)
	{
		my @e = map { $elem->() } 1 .. 4;
		return "ARRAY[[$e[0], $e[1]], [$e[2], $e[3]]]::${type}[]";
	}
	return "'{}'::${type}[]" if $n == 0;
	return "ARRAY[" . join(', ', map { $elem->() } 1 .. $n) . "]::${type}[]";
}

sub gen_complete_many
{
	my $r = rand();
	my ($ids, $atts, $results);
	if ($r < 0.1)
	{
		# every lease-mode claim at once, in one order
		my $which = pick('pgq.blocks', 'pgq.items');
		my $key = $which eq 'pgq.blocks' ? 'block_id' : 'item_id';
		$ids = "(SELECT coalesce(array_agg($key ORDER BY $key), '{}') FROM $which WHERE state = 'c')";
		$atts = "(SELECT coalesce(array_agg(attempt ORDER BY $key), '{}') FROM $which WHERE state = 'c')";
	}
	elsif ($r < 0.15)
	{
		$ids = '(SELECT array_agg(g) FROM generate_series(1, 100000) g)';
		$atts = "(SELECT array_agg(1) FROM generate_series(1, 100000) g)";
	}
	elsif ($r < 0.2)
	{
		$ids = "'[-5:-4]={1,2}'::bigint[]";
		$atts = "'[7:8]={1,1}'::int[]";
	}
	else
	{
		my $n = pick(0, 1, 2, 3, 5);
		my (@i, @a);
		for (1 .. $n)
		{
			my ($id, $att) = id_att(qw(L L I I C B Q));
			push @i, $id;
			push @a, $att;
		}
		my @ii = @i;
		my @aa = @a;
		$ids = array_of('bigint', $n, sub { shift(@ii) // pick(@int8s) });
		$atts = chance(0.85)
		  ? array_of('int', $n, sub { shift(@aa) // pick(@int4s) })
		  : array_of('int', pick(0, 1, 2, 7), sub { pick(@int4s) });
		$results = array_of('jsonb', chance(0.8) ? $n : pick(0, 1, 9),
			sub { chance(0.7) ? "'{\"r\": 1}'" : pick(@jsonbs) })
		  if chance(0.4);
	}
	my @args = ($ids);
	push @args, chance(0.2) ? $atts : "attempts => $atts" if chance(0.9);
	push @args, "results => $results" if defined $results && @args == 2;
	return ('complete_many', 'SELECT pgq.complete_many(' . join(', ', @args) . ')');
}

# Ids of held claims of every mode (some stale, some unknown), and their
# attempts, for the batch forms of release and fail: (ids, attempts) as
# array expressions, or odd arrays.
sub many_ids_atts
{
	my @kinds = @_;
	my $r = rand();
	if ($r < 0.08)
	{
		return ('(SELECT array_agg(g) FROM generate_series(1, 100000) g)',
			'(SELECT array_agg(1) FROM generate_series(1, 100000) g)');
	}
	if ($r < 0.13)
	{
		return ("'[-5:-4]={1,2}'::bigint[]", "'[7:8]={1,1}'::int[]");
	}
	my $n = pick(0, 1, 2, 3, 5);
	my (@i, @a);
	for (1 .. $n)
	{
		my ($id, $att) = id_att(@kinds);
		push @i, $id;
		push @a, $att;
	}
	my $ids = array_of('bigint', $n, sub { shift(@i) // pick(@int8s) });
	my $atts = chance(0.85)
	  ? array_of('int', $n, sub { shift(@a) // pick(@int4s) })
	  : array_of('int', pick(0, 1, 2, 7), sub { pick(@int4s) });
	return ($ids, $atts, $n);
}

sub gen_release_many
{
	my ($ids, $atts) = many_ids_atts(qw(L L I I A A C B Q T));
	my @args = ($ids);
	push @args, chance(0.2) ? $atts : "attempts => $atts" if chance(0.8);
	push @args, 'worker_id => ' . worker_arg() if chance(0.5);
	return ('release_many', 'SELECT pgq.release_many(' . join(', ', @args) . ')');
}

sub gen_fail_many
{
	my ($ids, $atts, $n) = many_ids_atts(qw(L L I I T T A A C B Q));
	$n //= pick(0, 1, 3);
	my @args = ($ids);
	push @args, 'errors => '
	  . array_of('text', chance(0.8) ? $n : pick(0, 1, 9), sub { pick(@texts) })
	  if chance(0.6);
	push @args, 'retry_after => ' . pick(@intervals, "'0'", "'1 ms'") if chance(0.4);
	push @args, "attempts => $atts" if chance(0.8);
	push @args, 'worker_id => ' . worker_arg() if chance(0.5);
	push @args, 'error_data => '
	  . array_of('bytea', chance(0.8) ? $n : pick(0, 1, 9), sub { pick(@byteas) })
	  if chance(0.2);
	return ('fail_many', 'SELECT pgq.fail_many(' . join(', ', @args) . ')');
}

sub gen_item
{
	my $args = chance(0.6) ? '@@K@@'
	  : join(', ', name_arg(queue => 1), pick(@keys));
	return ('item', pick("SELECT * FROM pgq.item($args)",
		"SELECT pgq.item($args)", "SELECT count(*) FROM pgq.item($args)"));
}

sub gen_register_worker
{
	my $c = chance(0.3) ? 'pgq.register_worker()'
	  : 'pgq.register_worker(' . pick(@texts, "'fz'", "'fz'") . ')';
	return ('register_worker', "SELECT $c");
}

sub gen_check_worker
{
	return ('check_worker', 'SELECT pgq.check_worker(' . worker_arg() . ')');
}

sub gen_relock
{
	my $n = pick(0, 1, 2, 3, 4);
	my $ids = array_of('bigint', $n, sub {
		chance(0.6) ? '@@' . tag(pick(qw(A A B C))) . '.id@@' : pick(@int8s)
	});
	$ids = '(SELECT array_agg(g) FROM generate_series(1, 1000) g)' if chance(0.03);
	my $w = chance(0.1) ? pick(@int8s) : worker_arg();
	return ('relock', chance(0.85) ? "SELECT pgq.relock($ids, $w)"
		: "SELECT pgq.relock(block_ids => $ids, worker_id => $w)");
}

# a queue's retention settings (pgq.retention_interval)
my @retentions = ('NULL', "'infinity'", "'+Infinity '", "'0'", "'1 s'",
	"'2 s'", "'1 hour'", "interval '3 days'", "'-1 s'", "'-infinity'",
	"'1001 years'", "'1 mon -40 days'", "'forever'", "''", "'1 day'::text");

sub gen_create_queue
{
	my $c = call('create_queue', [ name_arg(queue => 1) ], [
		[ 'mode', pick(@modes, "'lease'", "'transaction'"), 0.5 ],
		[ 'lease', pick(@intervals), 0.3 ],
		[ 'max_attempts', pick(@int4s, '3', '1'), 0.4 ],
		[ 'backoff', pick(@intervals, "'0'", "'10 seconds'"), 0.4 ],
		[ 'max_backoff', pick(@intervals, "'0'", "'1 hour'"), 0.4 ],
		[ 'owner', pick(@owners), 0.2 ],
		[ 'retention', pick(@retentions), 0.2 ],
		[ 'key_retention', pick(@retentions), 0.2 ] ]);
	return ('create_queue', "SELECT $c");
}

sub gen_set_retention
{
	my $c = call('set_retention', [ name_arg(queue => 1, nodrop => 1) ], [
		[ 'retention', pick(@retentions), 0.9 ],
		[ 'key_retention', pick(@retentions), 0.9 ] ]);
	return ('set_retention', "SELECT $c");
}

# the type's I/O functions, called directly (recv cannot be: 42846)
sub gen_retention_interval
{
	my $v = pick(@retentions);
	return @{ pick(
		[ 'retention_interval_in', "SELECT pgq.retention_interval_in($v)" ],
		[ 'retention_interval_out', "SELECT pgq.retention_interval_out($v)" ],
		[ 'retention_interval_send', "SELECT pgq.retention_interval_send($v)" ],
		[ 'retention_interval_recv', 'SELECT pgq.retention_interval_recv(NULL::internal)' ],
		[ 'retention_interval_in', "SELECT $v::pgq.retention_interval" ]) };
}

sub small_payload
{
	return chance(0.7)
	  ? "jsonb_build_object('v', " . int(rand(1000)) . ')'
	  : pick(@jsonbs);
}

sub gen_enqueue
{
	my $c = call('enqueue', [ name_arg(queue => 1) ], [
		[ 'payload', small_payload(), 0.8 ],
		[ 'key', pick(@keys, "'k' || floor(random() * 50)::int"), 0.5 ],
		[ 'priority', pick(@priorities), 0.3 ],
		[ 'run_at', pick(@timestamps), 0.2 ],
		[ 'data', pick(@byteas), 0.25 ],
		[ 'ordering_key', pick(@keys, "'o' || floor(random() * 5)::int"), 0.3 ] ]);
	return ('enqueue', "SELECT $c");
}

sub gen_enqueue_many
{
	my $n = pick(0, 1, 2, 3, 5, 50, 1000);
	my $big = $n >= 50;
	my ($payloads, $keys, $data, $okeys);
	my $m = chance(0.9) ? $n : pick(0, 1, 4);
	if (chance(0.85))
	{
		$payloads = $big
		  ? "(SELECT array_agg(jsonb_build_object('g', g)) FROM generate_series(1, $m) g)"
		  : array_of('jsonb', $m, \&small_payload);
	}
	if (chance(0.45))
	{
		$keys = $big
		  ? "(SELECT array_agg('k' || (g % 37)) FROM generate_series(1, $m) g)"
		  : array_of('text', $m, sub { pick(@keys, "'k' || floor(random() * 50)::int") });
	}
	if (chance(0.3) || !defined $payloads)
	{
		$data = $big
		  ? "(SELECT array_agg(decode(md5(g::text), 'hex')) FROM generate_series(1, $m) g)"
		  : array_of('bytea', $m, sub { pick(@byteas) });
	}
	if (chance(0.3))
	{
		$okeys = $big
		  ? "(SELECT array_agg(CASE WHEN g % 3 > 0 THEN 'o' || (g % 7) END) FROM generate_series(1, $m) g)"
		  : array_of('text', $m, sub { pick(@keys, "'o' || floor(random() * 5)::int") });
	}
	my $c = call('enqueue_many', [ name_arg(queue => 1) ], [
		[ 'payloads', $payloads // 'NULL', defined $payloads ? 0.95 : 0.05 ],
		[ 'keys', $keys // 'NULL', defined $keys ? 0.95 : 0.05 ],
		[ 'priority', pick(@priorities), 0.2 ],
		[ 'run_at', pick(@timestamps), 0.2 ],
		[ 'data', $data // 'NULL', defined $data ? 0.95 : 0.05 ],
		[ 'ordering_keys', $okeys // 'NULL', defined $okeys ? 0.95 : 0.05 ] ]);
	return ('enqueue_many', "SELECT $c");
}

sub gen_retry
{
	my ($id) = id_att(qw(D D F F Q B P));
	return ('retry', "SELECT pgq.retry($id)");
}

sub gen_retry_key
{
	my $args = chance(0.6) ? '@@K@@'
	  : join(', ', name_arg(queue => 1), pick(@keys));
	return ('retry(key)', "SELECT pgq.retry($args)");
}

sub gen_result
{
	my ($id) = id_att(qw(Q Q D D I P T B));
	my $c = call('result', [$id], [ [ 'wait', pick(@waits), 0.4 ] ]);
	return ('result', pick("SELECT * FROM $c", "SELECT $c"));
}

sub gen_results
{
	my @kinds = qw(Q Q D D I P T B);
	my $ids = array_of('bigint', pick(0, 1, 3, 10),
		sub { (id_att(@kinds))[0] });
	my $c = call('results', [ name_arg(queue => 1), $ids ], [
		[ 'wait', pick(@waits), 0.4 ],
		[ 'wait_for', pick("'any'", "'all'", "'all'", @texts), 0.4 ] ]);
	return ('results', pick("SELECT * FROM $c", "SELECT count(*) FROM $c"));
}

sub gen_notify_finished
{
	my $c = call('notify_finished', [ name_arg(queue => 1, nodrop => 1) ],
		[ [ 'enabled', pick('true', 'true', 'false', 'NULL'), 0.7 ] ]);
	return ('notify_finished', "SELECT $c");
}

# only partition 0 (the range the fuzzed database has anyway) and bad ones
sub gen_set_partition
{
	return ('set_partition',
		'SELECT pgq.set_partition(' . pick('0', '-1', '64', 'NULL') . ')');
}

sub gen_wake_maintenance
{
	return ('wake_maintenance', 'SELECT pgq.wake_maintenance()');
}

sub gen_inflight
{
	my $args = chance(0.6) ? '@@G@@'
	  : join(', ', pick(@int8s), pick(@timestamps));
	return ('inflight', pick("SELECT * FROM pgq.inflight($args)",
		"SELECT pgq.inflight($args)"));
}

sub gen_views
{
	return ('views', pick('SELECT * FROM pgq.group_stats',
		'SELECT * FROM pgq.queue_stats', 'SELECT * FROM pgq.dead_items',
		'SELECT * FROM pgq.workers'));
}

my @roles = ("'fz_user'", "'fz_nobody'", "'public'", "'PUBLIC'", "'Public'",
	'current_user', "''", 'NULL', "'no_such_role'", q{'"fz_user"'},
	"'pg_monitor'", "repeat('r', 1048576)", "'fz_user; DROP TABLE t'",
	lit("x'); DROP TABLE t; --"), "'-'", "'0'", "'😀'", "'fz_user '");
my @privileges = ("'consume'", "'produce'", "'admin'", "'CONSUME'", "''",
	'NULL', "'all'", "'consume '", "repeat('c', 1048576)", "'😀'",
	lit("consume'; --"));

sub gen_grant
{
	my $fn = pick('grant', 'revoke');
	my $c = call($fn, [ name_arg(), pick(@roles, "'fz_user'", "'public'") ],
		[ [ 'privilege', pick(@privileges, "'consume'", "'produce'"), 0.6 ] ]);
	return ($fn, "SELECT $c");
}

my @regroles = ("'fz_user'::regrole", "'fz_nobody'::regrole",
	'current_user::regrole', 'NULL', '0::oid::regrole', "'-'::regrole",
	'4294967295::oid::regrole', "'no_such_role'::regrole",
	"'pg_monitor'::regrole", '10::oid::regrole');

sub regrole_array
{
	return pick("'{-}'::regrole[]", '(SELECT array_agg(oid::regrole) FROM pg_roles)',
		"'[3:4]={fz_user,-}'::regrole[]") if chance(0.2);
	return array_of('regrole', pick(0, 1, 2, 3), sub { pick(@regroles) });
}

sub gen_may_see
{
	return ('may_see', 'SELECT pgq.may_see(' . join(', ', pick(@regroles),
		regrole_array(), regrole_array()) . ')');
}

# the row trigger function called directly (refused, 39P01), or an UPDATE
# of pgq.blocks that changes no row (one that did could wait for a row lock
# of the other session, which waits for this one)
sub gen_blocks_inflight
{
	return ('blocks_inflight', pick('SELECT pgq.blocks_inflight()',
		'UPDATE pgq.blocks SET lease_until = lease_until WHERE block_id < 0'
		  . ' RETURNING block_id'));
}

# the same for pgq.items' row trigger
sub gen_items_inflight
{
	return ('items_inflight', pick('SELECT pgq.items_inflight()',
		'UPDATE pgq.items SET due_at = due_at WHERE item_id < 0'
		  . ' RETURNING item_id'));
}

sub gen_pause
{
	my $fn = pick('pause', 'resume', 'resume');
	return ($fn, "SELECT pgq.$fn(" . name_arg(nodrop => 1) . ')');
}

sub gen_purge
{
	my $c = call('purge', [ name_arg(nodrop => 1) ], [
		[ 'older_than', pick(@intervals, "'0'", "'1 s'"), 0.5 ],
		[ 'dead', pick('true', 'false', 'NULL', "'maybe'"), 0.5 ] ]);
	return ('purge', "SELECT $c");
}

sub gen_rematerialize
{
	my $name = chance(0.6) ? pick("'fz_async_fail'", "'fz_async_fail'", map { "'fz_async_$_'" } 0 .. 3)
	  : name_arg(nodrop => 1);
	return ('rematerialize', "SELECT pgq.rematerialize($name)");
}

sub gen_channel
{
	return ('channel', 'SELECT pgq.channel(' . name_arg()
		  . (chance(0.3) ? ', finished => ' . pick('true', 'false', 'NULL') : '') . ')');
}

sub gen_has_group_privilege
{
	return ('has_group_privilege', 'SELECT pgq.has_group_privilege('
		  . name_arg() . ', ' . pick(@privileges, "'consume'", "'admin'") . ')');
}

# Several pgq calls in one statement: a claim and what its holder does
# next, repeated calls, one call's result as another's argument.
sub gen_compound
{
	my $lease = pick(@NAME{qw(lease lshort weird q qshort emoji)});
	my $n = pick(1, 3, 10);
	my $sql = pick(
		"SELECT pgq.complete(c.block_id, attempt => c.attempt) FROM pgq.claim($lease, $n) c",
		"SELECT pgq.fail(c.block_id, 'e', attempt => c.attempt) FROM pgq.claim($lease, $n) c",
		"SELECT pgq.release(c.block_id, attempt => c.attempt) FROM pgq.claim($lease, $n) c",
		"SELECT pgq.extend(c.block_id, '1 min', attempt => c.attempt), pgq.complete(c.block_id, attempt => c.attempt) FROM pgq.claim($lease, $n) c",
		"SELECT pgq.complete_many(array_agg(c.block_id), array_agg(c.attempt)) FROM pgq.claim($lease, $n) c",
		"SELECT pgq.complete(c.block_id, worker_id => \@\@W0.id\@\@), pgq.release(c.block_id, worker_id => \@\@W0.id\@\@) FROM pgq.claim($NAME{adv}, $n, worker_id => \@\@W0.id\@\@) c",
		"SELECT pgq.relock(array_agg(c.block_id), \@\@W0.id\@\@) FROM pgq.claim($NAME{adv}, $n, worker_id => \@\@W0.id\@\@) c",
		"SELECT (SELECT count(*) FROM pgq.claim(v.g, 2)) FROM generate_series(1, 5), (VALUES ($NAME{tx}), ($NAME{qt})) v(g)",
		"SELECT pgq.claim($lease) FROM generate_series(1, 5)",
		"SELECT pgq.enqueue($NAME{q}, to_jsonb(g), key => 'c' || g) FROM generate_series(1, 20) g",
		"SELECT * FROM pgq.result(pgq.enqueue($NAME{qshort}, '1'), wait => '1 ms')",
		"SELECT pgq.drop_group(v.n), pgq.create_group(v.n, 'SELECT 1') FROM (VALUES ('fz_new_1'), ('fz_new_1'), ('fz_new_2')) v(n)",
		"SELECT pgq.create_group('fz_new_3', 'SELECT 1') FROM generate_series(1, 3)",
		"SELECT pgq.retry(i.item_id) FROM pgq.items i WHERE i.state IN ('d', 'f') LIMIT 5",
		"SELECT pgq.retry(b.block_id) FROM pgq.blocks b WHERE b.state = 'f' LIMIT 5",
		"SELECT pgq.pause(v.g), pgq.resume(v.g) FROM (VALUES ($NAME{tx}), ($NAME{q})) v(g)",
		"SELECT pgq.check_worker(w), pgq.register_worker() FROM (SELECT \@\@W0.id\@\@ AS w) x");
	return ('compound', $sql);
}

# function => [generator, weight]; a function missing from the installed
# extension is left out (the coverage check below names the reverse).
my %generator_of = (
	create_group => [ \&gen_create_group, 8 ], drop_group => [ \&gen_drop_group, 3 ],
	claim => [ \&gen_claim, 16 ], 'claim(list)' => [ \&gen_claim_list, 6 ],
	complete => [ \&gen_complete, 10 ],
	complete_many => [ \&gen_complete_many, 5 ], release => [ \&gen_release, 6 ],
	fail => [ \&gen_fail, 8 ], extend => [ \&gen_extend, 5 ],
	register_worker => [ \&gen_register_worker, 2 ],
	check_worker => [ \&gen_check_worker, 3 ], relock => [ \&gen_relock, 4 ],
	create_queue => [ \&gen_create_queue, 5 ], enqueue => [ \&gen_enqueue, 9 ],
	enqueue_many => [ \&gen_enqueue_many, 5 ], retry => [ \&gen_retry, 3 ],
	'retry(key)' => [ \&gen_retry_key, 2 ], result => [ \&gen_result, 5 ],
	release_many => [ \&gen_release_many, 3 ],
	fail_many => [ \&gen_fail_many, 3 ], item => [ \&gen_item, 2 ],
	results => [ \&gen_results, 3 ],
	notify_finished => [ \&gen_notify_finished, 2 ],
	wake_maintenance => [ \&gen_wake_maintenance, 1 ],
	set_partition => [ \&gen_set_partition, 1 ],
	inflight => [ \&gen_inflight, 2 ], grant => [ \&gen_grant, 3 ],
	may_see => [ \&gen_may_see, 1 ], pause => [ \&gen_pause, 2 ],
	purge => [ \&gen_purge, 2 ], rematerialize => [ \&gen_rematerialize, 1 ],
	has_group_privilege => [ \&gen_has_group_privilege, 1 ],
	channel => [ \&gen_channel, 1 ],
	blocks_inflight => [ \&gen_blocks_inflight, 1 ],
	items_inflight => [ \&gen_items_inflight, 1 ],
	set_retention => [ \&gen_set_retention, 1 ],
	retention_interval_in => [ \&gen_retention_interval, 1 ]);
my %installed = map { $_ => 1 } @pgq_functions;
my @generators = (
	(map { [ $generator_of{$_}[0], $generator_of{$_}[1] ] }
	  grep { my $f = $_; $f =~ s/\(.*//; $installed{$f} } sort keys %generator_of),
	[ \&gen_views, 2 ], [ \&gen_compound, 4 ]);
my $total_weight = 0;
$total_weight += $_->[1] for @generators;

sub gen_any
{
	my $r = rand($total_weight);
	for my $g (@generators)
	{
		return $g->[0]->() if ($r -= $g->[1]) < 0;
	}
	return $generators[-1][0]->();
}

# ---------------------------------------------------------------------------
# The script: one psql session runs every call.

my @script;
my @calls;    # n => { fn, tpl, raw }
my $unit = 0;

sub add_call
{
	my ($raw, $fn, $tpl) = @_;
	my $n = scalar @calls;
	my $q = "\$fz$n\$";
	die "template holds its own quote" if index($tpl, $q) >= 0;
	push @calls, { fn => $fn, tpl => $tpl, raw => $raw };
	if (!$raw)
	{
		push @script, "SELECT fz.try($n, $q$tpl$q);";
		return;
	}
	if ($raw eq 'cursor')
	{
		# in a cursor, declared at top level, maybe held past COMMIT: the
		# call runs at the first FETCH, or at COMMIT
		my $hold = chance(0.5);
		my $fetch = !$hold || chance(0.5);
		push @script, 'BEGIN;',
		  "\\set fzq 'SELECT NULL'", "\\set fzq64 notrun",
		  "SELECT 'DECLARE fzc NO SCROLL CURSOR " . ($hold ? 'WITH HOLD ' : '')
		  . "FOR ' || q AS fzq, fz.b64(q) AS fzq64 FROM fz.expand($q$tpl$q) AS q \\gset",
		  "\\echo fzraw $n :fzq64", "\\o /dev/null", "SELECT :'fzq' \\gexec";
		push @script, 'FETCH 2 FROM fzc;' if $fetch;
		push @script, "\\echo fzrawst $n :SQLSTATE", "\\o";
		add_end(pick('COMMIT;', 'COMMIT;', 'ROLLBACK;'));
		push @script, 'CLOSE fzc;' if $hold;
		return;
	}
	# At top level: an error aborts the transaction, as for a client.
	push @script,
	  "\\set fzq 'SELECT NULL'", "\\set fzq64 notrun",
	  "SELECT q AS fzq, fz.b64(q) AS fzq64 FROM fz.expand($q$tpl$q) AS q \\gset",
	  "\\echo fzraw $n :fzq64", "\\o /dev/null", "SELECT :'fzq' \\gexec",
	  "\\echo fzrawst $n :SQLSTATE", "\\o";
}

sub add_end
{
	my ($sql) = @_;
	my $u = $unit++;
	push @script, $sql, "\\echo fzend $u :SQLSTATE";
}

sub restore_unit
{
	add_call(0, 'create_group', $_) for @fixture_sql[0 .. 4];
	add_call(0, 'create_queue', $_) for @fixture_sql[5 .. 8];
	add_call(0, 'resume', 'SELECT count(pgq.resume(group_name)) FROM pgq.groups WHERE paused')
	  if $installed{resume};
	# a group whose creation fails, for pgq.rematerialize
	add_call(0, 'create_group', "SELECT pgq.create_group('fz_async_fail', 'SELECT g / 0 FROM generate_series(1, 3) g', async => true)");
	add_call(0, 'register_worker', "SELECT pgq.register_worker('fz')")
	  if @calls < 20 || chance(0.3);
	for my $q (@queue_names)
	{
		add_call(0, 'enqueue_many',
			"SELECT pgq.enqueue_many($q, (SELECT array_agg(jsonb_build_object('u', $unit, 'i', g)) FROM generate_series(1, 10) g), (SELECT array_agg(CASE WHEN g % 2 = 0 THEN 'r$unit-' || g END) FROM generate_series(1, 10) g))"
		);
	}
	for my $g (@NAME{qw(lease lshort weird q qshort emoji)})
	{
		add_call(0, 'claim',
			"SELECT fz.note(c.block_id, c.attempt) FROM pgq.claim($g, 3) c");
	}
	add_call(0, 'claim',
		"SELECT fz.note(c.block_id, c.attempt) FROM pgq.claim($NAME{adv}, 3, worker_id => \@\@W0.id\@\@) c"
	);
}

# An asynchronous creation that starts workers (most async => true calls
# above are refused before), and claims while it may still run.
my @async_queries = (
	'SELECT g FROM generate_series(1, 20000) g', 'SELECT a FROM public.t',
	'SELECT g / 0 FROM generate_series(1, 3) g', 'SELECT block_id FROM pgq.blocks',
	q{SELECT block_id FROM pgq.claim('fz_adv', worker_id => 1)},
	'SELECT g FROM generate_series(1, 0) g', 'SELECT 0::fz.posint');
my $async_units = 0;

sub async_unit
{
	my $name = "'fz_async_" . int(rand(4)) . "'";
	my $create = "pgq.create_group($name, " . lit(pick(@async_queries)) . ', '
	  . pick(1, 7, 100) . ', mode => ' . pick("'transaction'", "'lease'", "'advisory'")
	  . ', async => true' . (chance(0.3) ? ", timeout => '1 ms'" : '') . ')';
	# committed, rolled back, undone by a savepoint or by an error later
	# in its statement, or prepared
	my $how = pick(qw(bare block block savepoint boom prepare));
	my $timeout = chance(0.2);
	push @script, 'SET pgq.materialize_timeout = 1;' if $timeout;
	if ($how eq 'bare')
	{
		add_call(0, 'create_group', "SELECT $create");
	}
	elsif ($how eq 'block')
	{
		push @script, 'BEGIN;';
		add_call(0, 'create_group', "SELECT $create");
		add_end(pick('COMMIT;', 'COMMIT;', 'ROLLBACK;'));
	}
	elsif ($how eq 'savepoint')
	{
		push @script, 'BEGIN;', 'SAVEPOINT fzs;';
		add_call(0, 'create_group', "SELECT $create");
		push @script, 'ROLLBACK TO SAVEPOINT fzs;';
		add_end('COMMIT;');
	}
	elsif ($how eq 'boom')
	{
		add_call(0, 'create_group', "SELECT * FROM $create c WHERE fz.boom(c)");
	}
	else
	{
		my $gid = "fz_prep_$unit";
		push @script, 'BEGIN;';
		add_call(0, 'create_group', "SELECT $create");
		add_end("PREPARE TRANSACTION '$gid';");
		add_end(pick('COMMIT', 'ROLLBACK') . " PREPARED '$gid';");
	}
	push @script, 'RESET pgq.materialize_timeout;' if $timeout;
	my $block = chance(0.5);
	push @script, 'BEGIN;' if $block;
	for (1 .. 1 + int(rand(3)))
	{
		add_call(0, 'claim', "SELECT fz.note(c.block_id, c.attempt) FROM pgq.claim($name, "
			  . pick(1, 5) . ", wait => '1 ms', worker_id => \@\@W0.id\@\@) c");
	}
	add_end('COMMIT;') if $block;
	add_call(0, 'drop_group', "SELECT pgq.drop_group($name)") if chance(0.3);
	add_call(0, 'rematerialize', "SELECT pgq.rematerialize($name)")
	  if $installed{rematerialize} && chance(0.5);
	$async_units++;
}

# One transaction with claims in 20 groups, more than the shared table has
# entries for (pgq.max_groups = 16).
my $many_sql = q{SELECT count(*) FROM generate_series(0, 19) i, pgq.create_group('fz_many_' || i, 'SELECT g FROM generate_series(1, 6) g', 2, mode => CASE WHEN i % 3 = 2 THEN 'lease' ELSE 'transaction' END)};

sub many_unit
{
	add_call(0, 'create_group', $many_sql);
	push @script, 'BEGIN;';
	for my $i (0 .. 19)
	{
		add_call(0, 'claim', "SELECT fz.note(c.block_id, c.attempt) FROM pgq.claim('fz_many_$i') c");
	}
	add_call(0, 'drop_group', "SELECT pgq.drop_group('fz_many_" . int(rand(20)) . "')")
	  if chance(0.5);
	add_call(0, gen_any()) for 1 .. 3;
	add_end(pick('COMMIT;', 'ROLLBACK;'));
}

# Session settings, each for a few calls.
my @settings = (
	[ 'SET pgq.notify = on', 'RESET pgq.notify' ],
	[ 'LISTEN pgq', 'UNLISTEN *' ],
	[ 'SET pgq.max_locks_per_session = 1', 'RESET pgq.max_locks_per_session' ],
	[ 'SET pgq.max_locks_per_session = 3', 'RESET pgq.max_locks_per_session' ],
	[ 'SET pgq.wait_recheck_interval = 1', 'RESET pgq.wait_recheck_interval' ],
	[ 'SET pgq.materialize_timeout = 1', 'RESET pgq.materialize_timeout' ],
	[ 'SET search_path = fz_evil, pg_catalog, public', 'RESET search_path' ],
	[ "SET default_transaction_isolation = 'repeatable read'",
		'RESET default_transaction_isolation' ],
	[ 'SET default_transaction_read_only = on',
		'RESET default_transaction_read_only' ],
	[ "SET TimeZone = 'Pacific/Kiritimati'", 'RESET TimeZone' ],
	[ "SET IntervalStyle = 'iso_8601'", 'RESET IntervalStyle' ],
	[ "SET DateStyle = 'SQL, DMY'", 'RESET DateStyle' ],
	[ "SET bytea_output = 'escape'", 'RESET bytea_output' ],
	[ 'SET extra_float_digits = -15', 'RESET extra_float_digits' ],
	[ 'SET synchronous_commit = off', 'RESET synchronous_commit' ],
	[ "SET lock_timeout = '1ms'", 'RESET lock_timeout' ],
	[ 'SET ROLE fz_user', 'RESET ROLE' ],
	[ 'SET ROLE fz_user', 'RESET ROLE' ],
	[ 'SET SESSION AUTHORIZATION fz_user', 'RESET SESSION AUTHORIZATION' ],
	[ 'SET ROLE fz_nobody', 'RESET ROLE' ],
	[ 'SELECT pg_advisory_unlock_all()', undef ],
	[ 'DISCARD ALL', undef ]);

push @script, 'SET client_min_messages = notice;',
  "SELECT setseed(" . (($seed % 1000) / 1000) . ');',
  q{SELECT 'fzpid' || chr(9) || pg_backend_pid();};
my $next_restore = 0;
while (@calls < $target_calls)
{
	if (@calls >= $next_restore)
	{
		restore_unit();
		$next_restore = @calls + 100 + int(rand(60));
	}
	push @script, q{SELECT 'fzpid' || chr(9) || pg_backend_pid();}
	  if chance(0.01);

	if (chance(0.006) && $async_units < 16)
	{
		async_unit();
		next;
	}
	if (chance(0.002))
	{
		many_unit();
		next;
	}

	my $r = rand();
	if ($r < 0.42)
	{
		add_call(0, gen_any());
	}
	elsif ($r < 0.82)
	{
		my $begin = pick(('BEGIN') x 8, 'START TRANSACTION',
			'BEGIN ISOLATION LEVEL READ COMMITTED',
			'BEGIN ISOLATION LEVEL REPEATABLE READ',
			'BEGIN ISOLATION LEVEL SERIALIZABLE', 'BEGIN READ ONLY');
		push @script, "$begin;";
		my $k = 1 + int(rand(6));
		my $sp = chance(0.15) ? int(rand($k)) : -1;
		for my $i (0 .. $k - 1)
		{
			push @script, 'SAVEPOINT fzs;' if $i == $sp;
			if ($i == 0 && chance(0.5))
			{
				# a claim in transaction mode, for what follows to use
				my $g = pick($NAME{tx}, $NAME{qt}, $NAME{held}, $NAME{tx}, $NAME{qt});
				add_call(0, 'claim',
					"SELECT fz.note(c.block_id, c.attempt) FROM pgq.claim($g, "
					  . pick(1, 2, 3) . ') c');
			}
			else
			{
				add_call(0, gen_any());
			}
		}
		push @script, pick('ROLLBACK TO SAVEPOINT fzs;', 'RELEASE SAVEPOINT fzs;')
		  if $sp >= 0;
		my $e = rand();
		if ($e < 0.58) { add_end('COMMIT;'); }
		elsif ($e < 0.88) { add_end('ROLLBACK;'); }
		elsif ($e < 0.93)
		{
			my $gid = "fz_prep_$unit";
			add_end("PREPARE TRANSACTION '$gid';");
			add_end(pick('COMMIT', 'ROLLBACK') . " PREPARED '$gid';");
		}
		else
		{
			add_call(1, gen_any());
			add_end(pick('COMMIT;', 'ROLLBACK;'));
		}
	}
	elsif ($r < 0.88)
	{
		add_call(1, gen_any());
	}
	elsif ($r < 0.9)
	{
		add_call('cursor', gen_any());
	}
	else
	{
		my $s = pick(@settings);
		push @script, "$s->[0];";
		if (defined $s->[1])
		{
			my $first = @calls;
			add_call(0, gen_any()) for 1 .. 1 + int(rand(4));
			if ($s->[0] =~ /fz_nobody/)
			{
				$_->{nobody} = 1 for @calls[ $first .. $#calls ];
			}
			push @script, "$s->[1];";
		}
	}
}

# The end, in the same session: pgq still works in it.
push @script, 'RESET ALL;', 'SELECT pg_advisory_unlock_all();',
  q{SELECT 'fzpid' || chr(9) || pg_backend_pid();},
  q{SELECT 'fzfinal' || chr(9) || 'tx' || chr(9) || pgq.create_group('fz_final_tx', 'SELECT g FROM generate_series(1, 10) g', 5);},
  'BEGIN;',
  q{SELECT 'fzfinal' || chr(9) || 'tx_claim' || chr(9) || string_agg(array_to_string(ids, ','), ';' ORDER BY block_id) FROM pgq.claim('fz_final_tx', 5);},
  'COMMIT;',
  q{SELECT pgq.create_group('fz_final_lease', 'SELECT 7', 1, mode => 'lease');},
  q{SELECT block_id AS fb, attempt AS fa FROM pgq.claim('fz_final_lease') \gset},
  q{SELECT 'fzfinal' || chr(9) || 'lease' || chr(9) || :fa || ',' || pgq.complete(:fb, attempt => :fa);},
  q{SELECT pgq.create_group('fz_final_adv', 'SELECT 8', 1, mode => 'advisory');},
  q{SELECT pgq.register_worker('final') AS fw \gset},
  q{SELECT block_id AS ab FROM pgq.claim('fz_final_adv', worker_id => :fw) \gset},
  q{SELECT 'fzfinal' || chr(9) || 'advisory' || chr(9) || pgq.complete(:ab, worker_id => :fw);},
  q{SELECT pgq.create_queue('fz_final_q');},
  q{SELECT pgq.enqueue('fz_final_q', '{"final": true}') AS qi \gset},
  q{SELECT block_id AS qb, attempt AS qa FROM pgq.claim('fz_final_q') \gset},
  'BEGIN;',
  q{SELECT 'fzfinal' || chr(9) || 'queue' || chr(9) || (:qb = :qi) || ',' || pgq.complete(:qb, '{"ok": 1}', attempt => :qa);},
  q{SELECT 'fzfinal' || chr(9) || 'result' || chr(9) || state || ',' || result::text FROM pgq.result(:qi);},
  'COMMIT;',
  q{SELECT 'fzpid' || chr(9) || pg_backend_pid();},
  q{\echo fzdone};

my $script = encode('UTF-8', join("\n", @script) . "\n");
my $ncalls = scalar @calls;
my $nraw = grep { $_->{raw} } @calls;
diag("$ncalls calls ($nraw at top level) in $unit transaction ends");

my $start = time();
my ($out, $err) = ('', '');
# psql exits when its server process dies; feeding it then fails too.
my $ret = eval {
	$node->psql('fuzz', $script,
		stdout => \$out, stderr => \$err, on_error_stop => 0);
};
my $psql_error = $@;
my $elapsed = time() - $start;
diag(sprintf('the calls took %.1f s', $elapsed));

# ---------------------------------------------------------------------------
# What happened to each call.

my (%res, %ends, @pids, %final);
my $done = 0;
for my $line (split /\n/, $out)
{
	if ($line =~ /^fz\t(\d+)\t(\w+)\t([^\t]*)\t([^\t]*)\t([^\t]*)$/)
	{
		$res{$1} = {
			state => $2,
			sql => decode_base64($3),
			msg => decode_base64($4),
			row => decode_base64($5) };
	}
	elsif ($line =~ /^fzraw (\d+) (\S+)$/)
	{
		$res{$1}{sql} = $2 eq 'notrun' ? undef : decode_base64($2);
	}
	elsif ($line =~ /^fzrawst (\d+) (\w+)$/)
	{
		$res{$1}{state} = $2 if defined $res{$1}{sql};
	}
	elsif ($line =~ /^fzend (\d+) (\w+)$/) { $ends{$1} = $2; }
	elsif ($line =~ /^fzpid\t(\d+)$/) { push @pids, $1; }
	elsif ($line =~ /^fzfinal\t(\w+)\t(.*)$/) { $final{$1} = $2; }
	elsif ($line eq 'fzdone') { $done = 1; }
}

# The call that was running when psql stopped, if it stopped early.
sub last_started
{
	my ($last) = $err =~ /.*NOTICE:  fzq (\d+ \S+)/s;
	my @raw = $out =~ /^fzraw (\d+ \S+)$/mg;
	my $best;
	for my $cand (grep { defined } $last, $raw[-1])
	{
		my ($n, $b64) = split / /, $cand;
		$best = [ $n, decode_base64($b64) ] if !$best || $n > $best->[0];
	}
	return $best ? "call $best->[0] ($calls[$best->[0]]{fn}): "
	  . shorten($best->[1]) : 'none';
}

sub shorten
{
	my ($s) = @_;
	return '(not run)' if !defined $s;
	$s = decode('UTF-8', $s, Encode::FB_DEFAULT) if !utf8::is_utf8($s);
	$s = substr($s, 0, 400) . '...(' . length($s) . ' characters)'
	  if length($s) > 420;
	return encode('UTF-8', $s);
}

ok(defined $ret && $ret == 0 && $done, 'psql ran every call to the end')
  or diag('psql exited with ' . shorten($ret // $psql_error) . '; the last call started: '
	  . last_started() . "\nstderr ends with: " . shorten(substr($err, -1000)));
if (!$done)
{
	# The server may be down (TAP clusters do not restart after a crash):
	# what follows needs it.  The log says what happened.
	check_log();
	$node->start if $node->psql('postgres', 'SELECT 1') != 0;
	$node->stop;
	done_testing();
	exit 0;
}
ok(@pids >= 2 && !grep({ $_ ne $pids[0] } @pids),
	'one backend ran every call') or diag("backend pids: @pids");

my @missing = grep { !defined $res{$_} || !defined $res{$_}{state} }
  grep { !$calls[$_]{raw} } 0 .. $#calls;
is(scalar @missing, 0, 'every wrapped call returned its SQLSTATE')
  or diag('no result for calls ' . join(', ', @missing[ 0 .. ($#missing < 9 ? $#missing : 9) ])
	  . '; the first: ' . shorten($calls[ $missing[0] ]{tpl}));

my @internal;
for my $n (0 .. $#calls)
{
	my $r = $res{$n};
	next if !$r || !defined $r->{state} || $r->{state} !~ /^XX/;
	push @internal, $n;
	diag("call $n ($calls[$n]{fn}) failed with SQLSTATE $r->{state}: "
		  . shorten($r->{msg} // '(see the server log)') . "\n    the call: "
		  . shorten($r->{sql}));
}
my @bad_ends = grep { $ends{$_} =~ /^XX/ } keys %ends;
is(scalar @internal + scalar @bad_ends, 0,
	'no call, COMMIT, ROLLBACK or PREPARE failed with an internal error (class XX)');

# A summary: per function, calls, successes and the commonest SQLSTATEs.
my %by_fn;
for my $n (0 .. $#calls)
{
	my $st = $res{$n}{state} // 'notrun';
	$by_fn{ $calls[$n]{fn} }{$st}++;
	$by_fn{ $calls[$n]{fn} }{_n}++;
	# a first row that is not false, NULL or an empty array
	$by_fn{ $calls[$n]{fn} }{_true}++
	  if $st eq '00000' && ($res{$n}{row} // '') !~ /^(\((f|"?\{\}"?|,*)\))?$/;
}
for my $fn (sort keys %by_fn)
{
	my $s = $by_fn{$fn};
	my @st = sort { $s->{$b} <=> $s->{$a} } grep { !/^_/ } keys %$s;
	note(sprintf('%-16s %5d calls, %4d ok (%4d with a result): %s', $fn,
		$s->{_n}, $s->{'00000'} // 0, $s->{_true} // 0,
		join(' ', map { "$_:$s->{$_}" } grep { $_ ne '00000' } @st[ 0 .. ($#st < 8 ? $#st : 8) ])));
}
my @uncalled = grep { my $f = $_; !grep { /^\Q$f\E\b/ && $by_fn{$_}{_n} } keys %by_fn }
  @pgq_functions;
is("@uncalled", '', 'every function of schema pgq was called');

my @nobody_ok = grep { $calls[$_]{nobody} && ($res{$_}{state} // '') eq '00000' } 0 .. $#calls;
is(scalar @nobody_ok, 0, 'no call made as a role without USAGE on schema pgq succeeded')
  or diag('for example: ' . shorten($res{ $nobody_ok[0] }{sql}));

my %states;
$states{ $res{$_}{state} // 'notrun' }++ for 0 .. $#calls;
diag('SQLSTATEs: ' . join(' ', map { "$_:$states{$_}" }
	  sort { $states{$b} <=> $states{$a} } keys %states));

is_deeply(
	\%final,
	{
		tx => 'true',
		tx_claim => '1,2,3,4,5;6,7,8,9,10',
		lease => '1,true',
		advisory => 'true',
		queue => 'true,true',
		result => 'done,{"ok": 1}'
	},
	'after the calls, pgq works in the same session: groups of each mode and a queue'
);

# ---------------------------------------------------------------------------
# The holder's claims are intact, and shared counts agree once it is done.

is( $node->safe_psql('fuzz', q{
		SELECT string_agg(group_name || ':' || coalesce(claimed::text, 'NULL'), ','
		                  ORDER BY group_name)
		FROM pgq.group_stats WHERE group_name IN ('fz_held', 'fz_held_adv')}),
	'fz_held:2,fz_held_adv:2',
	'the holder still holds its claims, and nobody else holds any of them');
is( $node->safe_psql('fuzz', q{
		SELECT count(*) FROM pgq.group_stats
		WHERE mode IN ('transaction', 'advisory')
		  AND group_name NOT IN ('fz_held', 'fz_held_adv')
		  AND claimed <> 0}),
	'0', 'no other group counts a claim of a session that is gone');
$holder->query_safe('COMMIT');
$holder->quit;

ok( $node->poll_query_until('fuzz', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		WHERE backend_type LIKE 'pgq materialize%'}),
	'the asynchronous creations are over');

is( $node->safe_psql('fuzz', q{
		SELECT count(*) FROM pgq.groups g, pgq.inflight(g.group_id, g.created_at) f
		WHERE f.claimed <> 0 OR f.own <> 0}),
	'0', 'with every session gone, no group counts a claim in shared memory');

# ---------------------------------------------------------------------------
# pgq's tables are consistent.

my $violations = $node->safe_psql('fuzz', q{
	SELECT what || ': ' || n FROM (
	SELECT 'blocks without their group' AS what, count(*) AS n FROM pgq.blocks b
	WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = b.group_id)
	UNION ALL
	SELECT 'items without their queue', count(*) FROM pgq.items i
	WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = i.group_id)
	UNION ALL
	SELECT 'blocks of queues', count(*) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id) WHERE g.kind <> 'query'
	UNION ALL
	SELECT 'items of query groups', count(*) FROM pgq.items i
	JOIN pgq.groups g USING (group_id) WHERE g.kind <> 'queue'
	UNION ALL
	SELECT 'ids that name a block and an item', count(*) FROM pgq.blocks b
	JOIN pgq.items i ON i.item_id = b.block_id
	UNION ALL
	SELECT 'block ids used twice', count(*) FROM
	(SELECT block_id FROM pgq.blocks GROUP BY block_id HAVING count(*) > 1) d
	UNION ALL
	SELECT 'item ids used twice', count(*) FROM
	(SELECT item_id FROM pgq.items GROUP BY item_id HAVING count(*) > 1) d
	UNION ALL
	SELECT 'blocks in a state their mode does not have', count(*) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id)
	WHERE (g.mode = 'transaction' AND b.state <> 'p')
	   OR (g.mode = 'advisory' AND b.state = 'c')
	UNION ALL
	SELECT 'claimed or retrying blocks without a deadline', count(*) FROM pgq.blocks
	WHERE state IN ('c', 'r') AND lease_until IS NULL
	UNION ALL
	SELECT 'blocks with attempts out of range', count(*) FROM pgq.blocks b
	JOIN pgq.groups g USING (group_id)
	WHERE b.attempt < 0 OR coalesce(b.tries, b.attempt) > g.max_attempts
	UNION ALL
	SELECT 'blocks without ids, or with more than the block size', count(*)
	FROM pgq.blocks b JOIN pgq.groups g USING (group_id)
	WHERE cardinality(b.ids) = 0 OR cardinality(b.ids) > g.block_size
	UNION ALL
	SELECT 'ready groups with more blocks than they made', count(*) FROM pgq.groups g
	WHERE g.kind = 'query' AND g.state = 'ready'
	  AND (g.total_blocks IS NULL OR g.total_ids IS NULL
	       OR (SELECT count(*) FROM pgq.blocks b WHERE b.group_id = g.group_id)
	          > g.total_blocks)
	UNION ALL
	SELECT 'groups still materializing', count(*) FROM pgq.groups
	WHERE state = 'materializing'
	UNION ALL
	SELECT 'queues that are not ready', count(*) FROM pgq.groups
	WHERE kind = 'queue' AND state <> 'ready'
	UNION ALL
	SELECT 'items whose state and finish time disagree', count(*) FROM pgq.items
	WHERE (state IN ('d', 'f')) <> (finished_at IS NOT NULL)
	UNION ALL
	SELECT 'items whose state and due time disagree', count(*) FROM pgq.items
	WHERE (state IN ('c', 'r') AND due_at IS NULL)
	   OR (state IN ('p', 'd', 'f') AND due_at IS NOT NULL)
	UNION ALL
	SELECT 'items waiting without an ordering key, or with a bad one', count(*)
	FROM pgq.items
	WHERE (state = 'w' AND ordering_key IS NULL)
	   OR ordering_key = '' OR octet_length(ordering_key) > 1024
	UNION ALL
	SELECT 'ordering keys with more than one head', count(*) FROM
	(SELECT FROM pgq.items WHERE state IN ('p', 'c', 'r')
	 AND ordering_key IS NOT NULL
	 GROUP BY group_id, ordering_key HAVING count(*) > 1) h
	UNION ALL
	SELECT 'ordering keys whose items wait without a head', count(*) FROM
	(SELECT FROM pgq.items WHERE ordering_key IS NOT NULL
	 GROUP BY group_id, ordering_key
	 HAVING bool_or(state = 'w') AND NOT bool_or(state IN ('p', 'c', 'r'))) s
	UNION ALL
	SELECT 'heads behind a waiting item of their key', count(*)
	FROM pgq.items h JOIN pgq.items w
	  ON w.group_id = h.group_id AND w.ordering_key = h.ordering_key
	WHERE h.state IN ('p', 'c', 'r') AND w.state = 'w' AND w.item_id < h.item_id
	UNION ALL
	SELECT 'items with negative attempts', count(*) FROM pgq.items WHERE attempt < 0
	UNION ALL
	SELECT 'unfinished items without payload or data', count(*) FROM pgq.items
	WHERE payload IS NULL AND data IS NULL AND state NOT IN ('d', 'f')
	UNION ALL
	SELECT 'items past retention with a result or errors', count(*) FROM pgq.items
	WHERE payload IS NULL AND data IS NULL
	  AND (result IS NOT NULL OR result_data IS NOT NULL
	       OR last_error IS NOT NULL OR errors IS NOT NULL)
	UNION ALL
	SELECT 'items with a bad key or priority', count(*) FROM pgq.items
	WHERE key = '' OR octet_length(key) > 1024 OR priority > 32767
	UNION ALL
	SELECT 'group_stats rows with negative counts', count(*) FROM pgq.group_stats
	WHERE pending < 0 OR claimed < 0 OR done < 0 OR failed < 0
	UNION ALL
	SELECT 'queue_stats rows with negative counts', count(*) FROM pgq.queue_stats
	WHERE pending < 0 OR scheduled < 0 OR running < 0 OR done < 0 OR dead < 0
	UNION ALL
	SELECT 'prepared transactions left', count(*) FROM pg_prepared_xacts
	) v WHERE n <> 0});
is($violations, '', "pgq's tables are consistent after the calls");

is( $node->safe_psql('fuzz', q{
		SELECT (SELECT count(*) FROM fz.canary) || ',' || (SELECT count(*) FROM public.t)
		       || ',' || (to_regclass('fz.made') IS NULL)}),
	'3,100,true', 'no injection ran: the tables it aimed at are as they were');
is( $node->safe_psql('fuzz', q{
		SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'pgq') || ',' ||
		       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		        WHERE n.nspname = 'pgq' AND c.relname IN ('groups', 'blocks', 'items'))}),
	'1,3', 'the extension and its tables are there');

# A new session: every mode and a queue, end to end.
is( $node->safe_psql('fuzz', q{
		SELECT pgq.create_group('after_tx', 'SELECT g FROM generate_series(1, 4) g', 2);
		BEGIN;
		SELECT string_agg(array_to_string(ids, ','), ';' ORDER BY block_id)
		FROM pgq.claim('after_tx', 5);
		COMMIT;
		SELECT pgq.create_group('after_lease', 'SELECT 5', 1, mode => 'lease');
		SELECT pgq.complete(block_id, attempt => attempt) FROM pgq.claim('after_lease');
		SELECT pgq.create_group('after_adv', 'SELECT 6', 1, mode => 'advisory');
		SELECT pgq.complete(block_id, worker_id => w) FROM pgq.register_worker() w,
		       pgq.claim('after_adv', worker_id => w);
		SELECT pgq.create_queue('after_q');
		SELECT pgq.enqueue('after_q', '{"n": 1}') > 0;
		BEGIN;
		SELECT pgq.complete(block_id, '"r"', attempt => attempt)
		FROM pgq.claim('after_q');
		SELECT state || ' ' || result FROM pgq.result(
		    (SELECT max(item_id) FROM pgq.items i JOIN pgq.groups g USING (group_id)
		     WHERE g.group_name = 'after_q'));
		COMMIT;}),
	"t\n1,2;3,4\nt\nt\nt\nt\nt\nt\nt\ndone \"r\"",
	'after the calls, pgq works in a new session');

# ---------------------------------------------------------------------------
# Calls racing a drop of their group: one session drops the group in an open
# transaction while another calls a function on it, and the other way
# round.  Neither may fail with an internal error, and no block or item may
# outlive its group.  Sessions are synchronised on what pg_stat_activity
# shows: the second statement has either finished or waits for a lock.

# race_c sets the races up and watches them.
my ($race_a, $race_b, $race_c) = map {
	my $s = PgqTest::new_session($node, $_);
	$s->query_ok("\\c fuzz");
	$s->query_ok('SET client_min_messages = warning;');
	$s->{pid} = $s->query_ok('SELECT pg_backend_pid();');
	$s;
} qw(race_a race_b race_c);

# Wait until the session's statement is done, or waits for a lock.
sub settle
{
	my ($s) = @_;
	while ($s->poll eq 'busy')
	{
		last if $race_c->query_ok(
			"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $s->{pid};")
		  eq 't';
		usleep(5_000);
	}
}

my $race_no = 0;

# A fresh group of a kind, for one race: returns its name, and an item's or
# block's id and attempt where the kind has one.
sub race_group
{
	my ($kind) = @_;
	my $g = 'race_' . $race_no++;
	if ($kind eq 'failed')
	{
		$race_c->query_ok(
			"SELECT pgq.create_group('$g', 'SELECT g / 0 FROM generate_series(1, 3) g', async => true);");
		usleep(5_000)
		  while $race_c->query_ok("SELECT state FROM pgq.groups WHERE group_name = '$g';")
		  ne 'failed';
		return ($g);
	}
	if ($kind =~ /^lease/)
	{
		$race_c->query_ok(
			"SELECT pgq.create_group('$g', 'SELECT g FROM generate_series(1, 4) g', 1, mode => 'lease');");
	}
	else
	{
		$race_c->query_ok("SELECT pgq.create_queue('$g'); SELECT pgq.enqueue('$g', '1', key => 'k');");
	}
	return ($g) if $kind !~ /_/;
	my ($id, $att) = split /\|/,
	  $race_c->query_ok("SELECT block_id, attempt FROM pgq.claim('$g');");
	$race_c->query_ok("SELECT pgq.complete($id, attempt => $att);")
	  if $kind eq 'queue_done';
	return ($g, $id, $att);
}

my @races = (
	[ 'enqueue', 'queue', sub { "SELECT pgq.enqueue('$_[0]', '1')" } ],
	[ 'enqueue_many', 'queue', sub { "SELECT pgq.enqueue_many('$_[0]', ARRAY['1', '2']::jsonb[], ARRAY['a', NULL])" } ],
	[ 'enqueue of a taken key', 'queue', sub { "SELECT pgq.enqueue('$_[0]', '1', key => 'k')" } ],
	[ 'claim of a queue', 'queue', sub { "SELECT count(*) FROM pgq.claim('$_[0]', 5)" } ],
	[ 'claim of a lease-mode group', 'lease', sub { "SELECT count(*) FROM pgq.claim('$_[0]', 5)" } ],
	[ 'claim over a list', 'queue', sub { "SELECT count(*) FROM pgq.claim(ARRAY['$_[0]'], 5)" } ],
	[ 'waiting claim over a list', 'queue', sub { "SELECT count(*) FROM pgq.claim(ARRAY['$_[0]'], 5, wait => '50 ms')" } ],
	[ 'complete', 'queue_claimed', sub { "SELECT pgq.complete($_[1], '1', attempt => $_[2])" } ],
	[ 'complete of a block', 'lease_claimed', sub { "SELECT pgq.complete($_[1], attempt => $_[2])" } ],
	[ 'complete_many', 'queue_claimed', sub { "SELECT pgq.complete_many(ARRAY[$_[1]], ARRAY[$_[2]])" } ],
	[ 'fail', 'queue_claimed', sub { "SELECT pgq.fail($_[1], 'e', attempt => $_[2])" } ],
	[ 'fail of a block', 'lease_claimed', sub { "SELECT pgq.fail($_[1], 'e', attempt => $_[2])" } ],
	[ 'release', 'queue_claimed', sub { "SELECT pgq.release($_[1], attempt => $_[2])" } ],
	[ 'extend', 'lease_claimed', sub { "SELECT pgq.extend($_[1], '1 hour', attempt => $_[2])" } ],
	[ 'result', 'queue_claimed', sub { "SELECT state FROM pgq.result($_[1])" } ],
	[ 'release_many', 'queue_claimed', sub { "SELECT pgq.release_many(ARRAY[$_[1]], ARRAY[$_[2]])" } ],
	[ 'fail_many', 'lease_claimed', sub { "SELECT pgq.fail_many(ARRAY[$_[1]], ARRAY['e'], attempts => ARRAY[$_[2]])" } ],
	[ 'item', 'queue_claimed', sub { "SELECT state FROM pgq.item('$_[0]', 'k')" } ],
	[ 'retry', 'queue_done', sub { "SELECT pgq.retry($_[1])" } ],
	[ 'retry by key', 'queue_done', sub { "SELECT pgq.retry('$_[0]', 'k')" } ],
	[ 'create_queue joining', 'queue', sub { "SELECT pgq.create_queue('$_[0]')" } ],
	[ 'create_group joining', 'lease', sub { "SELECT pgq.create_group('$_[0]', 'SELECT g FROM generate_series(1, 4) g', 1, mode => 'lease')" } ],
	[ 'drop_group', 'queue', sub { "SELECT pgq.drop_group('$_[0]')" } ],
	[ 'grant', 'queue', sub { "SELECT pgq.grant('$_[0]', 'fz_user')" } ],
	[ 'revoke', 'queue', sub { "SELECT pgq.revoke('$_[0]', 'fz_user')" } ],
	[ 'pause', 'queue', sub { "SELECT pgq.pause('$_[0]')" } ],
	[ 'resume', 'queue', sub { "SELECT pgq.resume('$_[0]')" } ],
	[ 'purge', 'queue_done', sub { "SELECT pgq.purge('$_[0]', dead => true)" } ],
	[ 'rematerialize', 'failed', sub { "SELECT pgq.rematerialize('$_[0]')" } ],
	[ 'has_group_privilege', 'queue', sub { "SELECT pgq.has_group_privilege('$_[0]', 'consume')" } ]);

my $orphans_sql = q{
	SELECT (SELECT count(*) FROM pgq.blocks b
	        WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = b.group_id))
	     + (SELECT count(*) FROM pgq.items i
	        WHERE NOT EXISTS (SELECT FROM pgq.groups g WHERE g.group_id = i.group_id))};
my $orphans = $race_c->query_ok("$orphans_sql;");
my (@race_internal, @race_orphans);
for my $race (@races)
{
	my ($what, $kind, $make) = @$race;
	my $fn = $what =~ /^(\w+)/ ? $1 : $what;
	next if !$installed{$fn};
	for my $drop_first (1, 0)
	{
		my ($g, @rest) = race_group($kind);
		my $call = $make->($g, @rest);
		my $try = "SELECT fz.try(0, \$fzrace\$$call\$fzrace\$);";
		my $out;
		if ($drop_first)
		{
			$race_a->query_ok("BEGIN; SELECT pgq.drop_group('$g');");
			$race_b->send($try);
			settle($race_b);
			$race_a->query_ok('COMMIT;');
			$race_b->wait;
			$out = $race_b->{result};
		}
		else
		{
			$out = $race_b->query_ok("BEGIN; $try");
			$race_a->send("SELECT pgq.drop_group('$g');");
			settle($race_a);
			$race_b->query_ok('COMMIT;');
			$race_a->wait;
		}
		my $order = $drop_first ? 'after a drop' : 'before a drop';
		my ($state) = ($out // '') =~ /^fz\t0\t(\w+)\t/m;
		push @race_internal, "$what $order: SQLSTATE $state, "
		  . decode_base64((split /\t/, $out // "")[4] // "")
		  if !defined $state || $state =~ /^XX/;
		my $now = $race_c->query_ok("$orphans_sql;");
		push @race_orphans, "$what $order: " . ($now - $orphans) . ' left behind'
		  if $now != $orphans;
		$orphans = $now;
	}
}
$_->close for $race_a, $race_b, $race_c;
is(join("\n", @race_internal), '', 'no call racing a drop of its group fails with an internal error');
is(join("\n", @race_orphans), '', 'no call racing a drop of its group leaves a block or item behind');

# ---------------------------------------------------------------------------
# The server log: no crash, no internal error, no leak.

check_log();

sub check_log
{
	my $log = slurp_file($node->logfile);
	my @crash = $log =~ /^.*(?:terminated by signal|was terminated by|PANIC|TRAP:|server process .* exited with exit code [^01]|all server processes terminated).*$/mg;
	is(scalar @crash, 0, 'the server log shows no crash')
	  or diag(shorten(join("\n", $log =~ /^.*(?:terminated by signal|Failed process was running).*$/mg)));
	my @xx = $log =~ /^.*\] XX\w{3} .*$/mg;
	is(scalar @xx, 0, 'the server log shows no internal error (class XX), of calls or workers')
	  or diag(shorten(join("\n", @xx[ 0 .. ($#xx < 9 ? $#xx : 9) ])));
	my @leaks = $log =~ /^.*WARNING: .*(?:leak|non-empty SPI stack|still active|not closed).*$/mg;
	is(scalar @leaks, 0, 'the server log shows no leak warnings')
	  or diag(shorten(join("\n", @leaks[ 0 .. ($#leaks < 9 ? $#leaks : 9) ])));
}

$node->stop;
done_testing();
