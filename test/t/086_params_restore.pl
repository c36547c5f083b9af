
# Groups whose queries bind parameter values (create_group's params =>)
# survive pg_dump and restore, into a database where the types have other
# OIDs: pgq.groups keeps the types as regtype[] (names, qualified with their
# schema in the dump) and the values as text written under fixed settings.
#
# The source database holds a group whose query takes a timestamptz range
# and a value of an enum type of its own schema (not on the search_path),
# created in time zone Asia/Kolkata with DateStyle DMY, and an asynchronous
# group with the same kind of values.  After pg_dump | psql into a new
# database (the enum gets another OID there):
#  - params and param_types read the same as in the source, and the types
#    are the new database's (by name);
#  - a caller with the same query and values, spelled in its own time zone,
#    joins the restored group (false); other values are refused (42710);
#  - a failed asynchronous group is materialized again there by
#    pgq.rematerialize with the restored values, and holds the ids the
#    synchronous group holds.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('params_restore');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
my $tempdir = PostgreSQL::Test::Utils::tempdir;

my $query = q{SELECT id FROM app.ev WHERE at >= $1 AND at < $2 AND lvl >= $3 ORDER BY id};

$node->safe_psql('postgres', 'CREATE DATABASE srcdb');
$node->safe_psql('srcdb', qq{
	CREATE EXTENSION pgq;
	CREATE SCHEMA app;
	-- another type takes the enum's OID in the source only
	CREATE TYPE app.filler AS ENUM ('x');
	CREATE TYPE app.level AS ENUM ('low', 'mid', 'high');
	CREATE TABLE app.ev (id bigint, at timestamptz, lvl app.level);
	INSERT INTO app.ev
	SELECT g, timestamptz '2026-10-01 00:00+00' + (g - 1) * interval '1 day',
		   (ARRAY['low', 'mid', 'high'])[1 + g % 3]::app.level
	FROM generate_series(1, 92) g;
	CREATE TABLE app.flip (d int);
	INSERT INTO app.flip VALUES (0);
	SET TimeZone = 'Asia/Kolkata';
	SET DateStyle = 'SQL, DMY';
	SELECT pgq.create_group('sync', \$q\$$query\$q\$, block_size => 7,
							params => ARRAY['01/11/2026 05:30', '01/12/2026 05:30', 'mid']);
	SELECT pgq.create_group('async',
		\$q\$SELECT id / d FROM app.ev, app.flip WHERE at >= \$1 AND at < \$2 AND lvl >= \$3 ORDER BY id\$q\$,
		block_size => 7, async => true,
		params => ARRAY['01/11/2026 05:30', '01/12/2026 05:30', 'mid']);
});
$node->poll_query_until('srcdb',
	"SELECT state = 'failed' FROM pgq.groups WHERE group_name = 'async'")
  or die 'the asynchronous group did not fail';

my $src_params = $node->safe_psql('srcdb',
	'SELECT group_name, params, param_types FROM pgq.groups ORDER BY 1');
is( $src_params,
	qq(async|{"2026-11-01 00:00:00+00","2026-12-01 00:00:00+00",mid}|{"timestamp with time zone","timestamp with time zone",app.level}
sync|{"2026-11-01 00:00:00+00","2026-12-01 00:00:00+00",mid}|{"timestamp with time zone","timestamp with time zone",app.level}),
	'the source keeps the values in UTC, with their types');
my $src_ids = $node->safe_psql('srcdb', q{
	SELECT total_ids, (SELECT array_agg(u ORDER BY u) FROM pgq.blocks b, unnest(b.ids) u
					   WHERE b.group_id = g.group_id)
	FROM pgq.groups g WHERE group_name = 'sync'
});

$node->command_ok(
	[
		$node->installed_command('pg_dump'),
		'-f', "$tempdir/srcdb.sql",
		'-d', $node->connstr('srcdb')
	],
	'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
my $stderr;
is($node->psql('restored', slurp_file("$tempdir/srcdb.sql"), stderr => \$stderr),
	0, 'psql restores the dump');
unlike($stderr, qr/ERROR/, 'the restore has no errors');

isnt(
	$node->safe_psql('srcdb', q{SELECT 'app.level'::regtype::oid}),
	$node->safe_psql('restored', q{SELECT 'app.level'::regtype::oid}),
	'the enum has another OID in the restored database');
is( $node->safe_psql('restored',
		'SELECT group_name, params, param_types FROM pgq.groups ORDER BY 1'),
	$src_params,
	'the values and types are restored');
is( $node->safe_psql('restored', q{
		SELECT param_types[3] = 'app.level'::regtype FROM pgq.groups
		WHERE group_name = 'sync'
	}),
	't',
	'the restored type is the restored database\'s enum');

# joining the restored group, from another time zone
is( $node->safe_psql('restored', qq{
		SET TimeZone = 'America/Los_Angeles';
		SELECT pgq.create_group('sync', \$q\$$query\$q\$, block_size => 7,
			params => ARRAY['2026-10-31 17:00', '2026-11-30 16:00', 'mid']);
	}),
	'f',
	'the same values, spelled in another time zone, join the restored group');
my ($ret, $out, $err) = $node->psql('restored', qq{
	SELECT pgq.create_group('sync', \$q\$$query\$q\$, block_size => 7,
		params => ARRAY['2026-11-01', '2026-12-01', 'high']);
}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42710: group "sync" already exists with other params/,
	'other values are refused');

# the failed asynchronous group, materialized again in the restored
# database, binds the restored values
$node->safe_psql('restored', q{
	UPDATE app.flip SET d = 1;
	SELECT pgq.rematerialize('async');
});
$node->poll_query_until('restored',
	"SELECT state <> 'materializing' FROM pgq.groups WHERE group_name = 'async'")
  or die 'the rematerialization did not end';
is( $node->safe_psql('restored', q{
		SELECT state, total_ids, (SELECT array_agg(u ORDER BY u) FROM pgq.blocks b, unnest(b.ids) u
								  WHERE b.group_id = g.group_id)
		FROM pgq.groups g WHERE group_name = 'async'
	}),
	"ready|$src_ids",
	'the rematerialized group holds the ids of the synchronous one');

$node->stop;
done_testing();
