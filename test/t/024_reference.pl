
# docs/reference.md against the installed extension, so that the reference
# cannot fall behind the code without a test failing.
#
# The convention this test relies on (keep it when you edit the reference):
#
#  - Every object has one heading line of exactly the form
#        ### pgq.NAME
#    with nothing else on the line: every function (one heading per name,
#    covering all its overloads), view, setting (GUC), table, sequence and
#    composite or base type of schema pgq.  Its section runs to the next "## " or
#    "### " heading.
#  - A function's section has a ```sql block with its signature: each
#    argument as "name type", followed by "DEFAULT ..." exactly when the
#    argument has a default; OUT arguments and RETURNS TABLE columns as
#    "name type"; and "RETURNS type" ("RETURNS TABLE", "RETURNS SETOF type")
#    unless the function returns a record of OUT arguments.  Types are
#    written as format_type() writes them, except timestamptz.  The section
#    also has an "**Errors**" and an "**Example**" part.
#  - A view's, a table's or a composite type's section names each column
#    in backticks (`col`), as its column table does.
#  - A setting's section names its context (`postmaster`, `sighup`,
#    `superuser`, `user`, in backticks) and, for an integer, its default,
#    minimum and maximum as pg_settings shows them (in the base unit).
#
# The test fails for an object without a heading, for a heading that names
# no object (a stale entry), and for a section that misses one of the parts
# above.  Objects come from the catalogs of a node with pgq preloaded (the
# settings pgq.max_groups, pgq.maintenance_interval and pgq.retention exist
# only then).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# the tests run from the top of the source tree; find the file from here
my $reference = "$FindBin::RealBin/../../docs/reference.md";
open(my $fh, '<', $reference) or die "cannot open $reference: $!";
my @lines = <$fh>;
close($fh);
chomp @lines;

# Sections by heading: "pgq.name" => text of the section.
my (%section, @order, $current);
for my $line (@lines)
{
	if ($line =~ /^### (pgq\.\S+)\s*$/)
	{
		$current = $1;
		die "docs/reference.md has two headings for $current"
		  if exists $section{$current};
		$section{$current} = '';
		push @order, $current;
		next;
	}
	if ($line =~ /^##/)
	{
		undef $current;
		next;
	}
	$section{$current} .= "$line\n" if defined $current;
}
ok(scalar(@order) > 0, 'docs/reference.md has ### pgq.name headings');

my $node = PostgreSQL::Test::Cluster->new('reference');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pgq'
pgq.maintenance_interval = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgq');

# Rows of a query, each split on '|'.
sub rows
{
	my ($sql) = @_;
	my $out = $node->safe_psql('postgres', $sql);
	return map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $out;
}

my %object;    # "pgq.name" => kind

# ---------------------------------------------------------------------------
# Functions: every argument of every overload.
# ---------------------------------------------------------------------------
my %functions;
for my $r (rows(q{
	SELECT p.proname, p.oid, a.ord, coalesce(a.name, ''),
	       CASE format_type(a.typ, NULL)
	           WHEN 'timestamp with time zone' THEN 'timestamptz'
	           ELSE format_type(a.typ, NULL) END,
	       coalesce(a.mode, 'i'), p.pronargs, p.pronargdefaults,
	       CASE format_type(p.prorettype, NULL)
	           WHEN 'timestamp with time zone' THEN 'timestamptz'
	           ELSE format_type(p.prorettype, NULL) END,
	       p.proretset
	FROM pg_proc p
	LEFT JOIN LATERAL ROWS FROM (
	    unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])),
	    unnest(p.proargnames),
	    unnest(p.proargmodes::text[])) WITH ORDINALITY AS a (typ, name, mode, ord)
	  ON true
	WHERE p.pronamespace = 'pgq'::regnamespace
	ORDER BY p.proname, p.oid, a.ord}))
{
	my ($name, $oid, $ord, $arg, $type, $mode, $nargs, $ndefaults, $rettype,
		$retset) = @$r;
	my $f = $functions{$name}{$oid} //= {
		nargs => $nargs,
		ndefaults => $ndefaults,
		rettype => $rettype,
		retset => $retset,
		args => [],
	};
	push @{ $f->{args} }, { name => $arg, type => $type, mode => $mode }
	  if $ord ne '';
}
$object{"pgq.$_"} = 'function' for keys %functions;

# The signatures of a section: its ```sql blocks, whitespace collapsed.
sub signatures
{
	my ($text) = @_;
	my $sig = join(' ', $text =~ /^```sql\n(.*?)^```/msg);
	$sig =~ s/\s+/ /g;
	$sig =~ s/\( /(/g;
	$sig =~ s/ ([,)])/$1/g;
	return $sig;
}

for my $name (sort keys %functions)
{
	my $key = "pgq.$name";
	if (!ok(exists $section{$key}, "function $key has a heading"))
	{
		next;
	}
	my $text = $section{$key};
	my $sig = signatures($text);
	my @problems;
	for my $f (values %{ $functions{$name} })
	{
		# the last ndefaults input arguments have defaults
		my @inputs = grep { $_->{mode} =~ /^[ibv]$/ } @{ $f->{args} };
		my $first_default = @inputs - $f->{ndefaults};
		for my $i (0 .. $#{ $f->{args} })
		{
			my $a = $f->{args}[$i];
			my $decl = quotemeta("$a->{name} $a->{type}");
			if ($a->{mode} =~ /^[ibv]$/)
			{
				my ($pos) = grep { $inputs[$_] == $a } 0 .. $#inputs;
				if ($pos >= $first_default)
				{
					push @problems, "\"$a->{name} $a->{type} DEFAULT ...\""
					  unless $sig =~ /(?<![\w.])$decl DEFAULT /;
				}
				else
				{
					push @problems,
					  "\"$a->{name} $a->{type}\" without a default"
					  unless $sig =~ /(?<![\w.])$decl(?! DEFAULT)(?![\w\[])/;
				}
			}
			else
			{
				push @problems, "\"$a->{name} $a->{type}\" (result column)"
				  unless $sig =~ /(?<![\w.])$decl(?![\w\[])/;
			}
		}
		my $has_table = grep { $_->{mode} eq 't' } @{ $f->{args} };
		if ($has_table)
		{
			push @problems, '"RETURNS TABLE"' unless $sig =~ /RETURNS TABLE/;
		}
		elsif ($f->{retset} eq 't')
		{
			my $ret = quotemeta($f->{rettype});
			push @problems, "\"RETURNS SETOF $f->{rettype}\""
			  unless $sig =~ /RETURNS SETOF $ret(?![\w\[])/;
		}
		elsif ($f->{rettype} ne 'record')
		{
			my $ret = quotemeta($f->{rettype});
			push @problems, "\"RETURNS $f->{rettype}\""
			  unless $sig =~ /RETURNS $ret(?![\w\[])/;
		}
	}
	push @problems, '"**Errors**"' unless $text =~ /^\*\*Errors\*\*$/m;
	push @problems, '"**Example**"' unless $text =~ /^\*\*Example\*\*$/m;
	ok(!@problems, "function $key: signature, errors and example")
	  or diag "docs/reference.md, section $key lacks: "
	  . join(', ', @problems);
}

# ---------------------------------------------------------------------------
# Views, tables and composite types (and sequences): every column.
# ---------------------------------------------------------------------------
my %columns;
for my $r (rows(q{
	SELECT c.relname,
	       CASE c.relkind WHEN 'v' THEN 'view' WHEN 'S' THEN 'sequence'
	                      WHEN 'c' THEN 'type' ELSE 'table' END,
	       coalesce(a.attname, '')
	FROM pg_class c
	LEFT JOIN pg_attribute a
	  ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	     AND c.relkind <> 'S'
	WHERE c.relnamespace = 'pgq'::regnamespace
	  AND c.relkind IN ('r', 'v', 'S', 'c')
	ORDER BY c.relname, a.attnum}))
{
	my ($rel, $kind, $col) = @$r;
	$object{"pgq.$rel"} = $kind;
	push @{ $columns{"pgq.$rel"} }, $col if $col ne '';
}
# the views, from pg_views as well: the list above must hold them all
for my $r (rows(q{SELECT viewname FROM pg_views WHERE schemaname = 'pgq'}))
{
	is($object{"pgq.$r->[0]"}, 'view', "pg_views lists view pgq.$r->[0]");
}

for my $key (sort grep { $object{$_} ne 'function' } keys %object)
{
	my $kind = $object{$key};
	if (!ok(exists $section{$key}, "$kind $key has a heading"))
	{
		next;
	}
	next if $kind eq 'sequence';
	my @missing = grep { $section{$key} !~ /`\Q$_\E`/ } @{ $columns{$key} };
	ok(!@missing, "$kind $key: every column is described")
	  or diag "docs/reference.md, section $key lacks the columns: "
	  . join(', ', @missing);
}

# Base types (pgq.retention_interval): a heading, with an example.
for my $r (rows(q{
	SELECT typname FROM pg_type
	WHERE typnamespace = 'pgq'::regnamespace AND typtype = 'b'
	  AND typelem = 0}))
{
	my $key = "pgq.$r->[0]";
	$object{$key} = 'base type';
	ok(exists $section{$key} && $section{$key} =~ /^\*\*Example\*\*$/m,
		"base type $key has a heading and an example");
}

# ---------------------------------------------------------------------------
# Settings.
# ---------------------------------------------------------------------------
for my $r (rows(q{
	SELECT name, context, vartype, coalesce(boot_val, ''),
	       coalesce(min_val, ''), coalesce(max_val, '')
	FROM pg_settings WHERE name LIKE 'pgq.%' ORDER BY name}))
{
	my ($name, $context, $vartype, $boot, $min, $max) = @$r;
	$object{$name} = 'setting';
	if (!ok(exists $section{$name}, "setting $name has a heading"))
	{
		next;
	}
	my $text = $section{$name};
	my @problems;
	push @problems, "its context \"$context\""
	  unless $text =~ /`\Q$context\E`/;
	if ($vartype eq 'integer')
	{
		for my $v ([ default => $boot ], [ minimum => $min ],
			[ maximum => $max ])
		{
			push @problems, "its $v->[0] $v->[1]"
			  unless $text =~ /(?<![\w.-])\Q$v->[1]\E(?![\w.])/;
		}
	}
	ok(!@problems, "setting $name: context and range")
	  or diag "docs/reference.md, section $name lacks " . join(', ', @problems);
}

# ---------------------------------------------------------------------------
# Nothing documented that does not exist.
# ---------------------------------------------------------------------------
my @stale = grep { !exists $object{$_} } @order;
ok(!@stale, 'every pgq.name heading names an object of the extension')
  or diag "docs/reference.md documents what does not exist: "
  . join(', ', @stale);

$node->stop;

done_testing();
