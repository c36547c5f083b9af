/*-------------------------------------------------------------------------
 *
 * group.c
 *	  Creating, materializing and dropping groups.
 *
 * pgq.create_group() inserts the group's row with ON CONFLICT DO NOTHING: of
 * concurrent creators of one name, the first insert wins and the others wait
 * on its row until it commits, then join the finished group.  The winner
 * runs the query through an SPI cursor, read-only and as itself, and writes
 * one block at a time, so its memory does not grow with the result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "parser/analyze.h"
#include "storage/lock.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"

#include "pgq.h"
#include "blockscan.h"
#include "due.h"
#include "group.h"
#include "itemwrite.h"
#include "lease.h"
#include "materialize.h"
#include "privilege.h"
#include "queue.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/* Rows fetched from the group's query at a time. */
#define PGQ_FETCH_ROWS	2048

/* field4 of the advisory lock tags pgq takes on groups */
#define PGQ_LOCK_GROUP	20564

PG_FUNCTION_INFO_V1(pgq_create_group);
PG_FUNCTION_INFO_V1(pgq_drop_group);

/* Does the query, or any query in it, lock rows (FOR UPDATE and the like)? */
static bool
has_row_marks_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		Query	   *query = (Query *) node;

		if (query->rowMarks != NIL)
			return true;
		return query_tree_walker(query, has_row_marks_walker, context, 0);
	}
	return expression_tree_walker(node, has_row_marks_walker, context);
}

/* The id column's type, or an error if it cannot hold ids. */
static Oid
check_id_column(TupleDesc tupdesc)
{
	Oid			typid;

	if (tupdesc->natts < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("the group's query returns no column"),
				 errhint("The first column of the query must hold the ids.")));

	typid = getBaseType(TupleDescAttr(tupdesc, 0)->atttypid);
	if (typid != INT2OID && typid != INT4OID && typid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("the first column of the group's query must be smallint, integer or bigint"),
				 errdetail("Column \"%s\" is of type %s.",
						   NameStr(TupleDescAttr(tupdesc, 0)->attname),
						   format_type_be(TupleDescAttr(tupdesc, 0)->atttypid))));
	return typid;
}

/*
 * Parse and analyze a group's query, with its parameters of the types in
 * params, and check that it is one read-only query: SELECT, VALUES, or WITH
 * without data-modifying parts or row locks, whose first column can hold
 * ids.
 */
SPIPlanPtr
pgq_prepare_group_query(const char *query, const PgqQueryParams *params)
{
	SPIPlanPtr	plan;
	List	   *sources;
	CachedPlanSource *source;
	Query	   *parsed;

	plan = SPI_prepare(query, params->nparams, params->types);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for the group's query: %s",
			 SPI_result_code_string(SPI_result));

	sources = SPI_plan_get_plan_sources(plan);
	if (list_length(sources) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the group's query must be exactly one statement"),
				 errdetail("The query text holds %d statements.",
						   list_length(sources))));

	source = linitial(sources);
	parsed = list_length(source->query_list) == 1 ?
		linitial_node(Query, source->query_list) : NULL;
	if (parsed == NULL || parsed->commandType != CMD_SELECT ||
		parsed->utilityStmt != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the group's query must be a SELECT, VALUES or WITH query"),
				 errdetail("The statement is %s.",
						   GetCommandTagName(source->commandTag))));
	if (parsed->hasModifyingCTE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the group's query must not modify data"),
				 errdetail("The query has a data-modifying statement in WITH.")));
	if (has_row_marks_walker((Node *) parsed, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the group's query must not lock rows"),
				 errdetail("The query uses FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE or FOR KEY SHARE.")));
	(void) check_id_column(source->resultDesc);
	return plan;
}

/*
 * Append the ids of the temporary tables that a query, or any query in it,
 * reads: the deparsed text names them without their schema, which is
 * another one in every session.
 */
static bool
temp_tables_walker(Node *node, StringInfo buf)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		ListCell   *lc;

		foreach(lc, ((Query *) node)->rtable)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

			if (rte->rtekind == RTE_RELATION &&
				get_rel_persistence(rte->relid) == RELPERSISTENCE_TEMP)
				appendStringInfo(buf, "\n-- temporary table %u", rte->relid);
		}
		return query_tree_walker((Query *) node, temp_tables_walker,
								 (void *) buf, 0);
	}
	return expression_tree_walker(node, temp_tables_walker, (void *) buf);
}

/*
 * Settings under which a query is written back as text: every name outside
 * pg_catalog with its schema, and constants in one spelling whatever the
 * session's settings.
 */
static const char *const canonical_settings[][2] = {
	{"search_path", "pg_catalog"},
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "3"},
	{"bytea_output", "hex"},
	{"standard_conforming_strings", "on"},
	{"quote_all_identifiers", "off"},
	{"lc_monetary", "C"}
};

/*
 * Switch to canonical_settings until AtEOXact_GUC(true, the level returned),
 * under which queries and parameter values are written as text, and read
 * back from it, in one spelling.
 */
static int
push_canonical_settings(void)
{
	int			nestlevel = NewGUCNestLevel();

	for (size_t i = 0; i < lengthof(canonical_settings); i++)
		(void) set_config_option(canonical_settings[i][0],
								 canonical_settings[i][1],
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/*
 * The query that a plan of pgq_prepare_group_query() holds, as PostgreSQL
 * reads it: parsed and analysed again (as the current role, executing
 * nothing), then written back as text, the way a view's definition is,
 * with every table, function, operator and type named with its schema.
 * Layout, comments and the case of keywords are gone; another table (under
 * another search_path, say), another function or another constant gives
 * another text.  Tables are named, not numbered, so the text stays the same
 * across a dump and restore.
 */
static char *
canonical_query(SPIPlanPtr plan, const PgqQueryParams *params)
{
	CachedPlanSource *source = linitial(SPI_plan_get_plan_sources(plan));
	RawStmt    *raw = copyObject(source->raw_parse_tree);
	Query	   *query;
	StringInfoData buf;
	int			nestlevel;

	query = parse_analyze_fixedparams(raw, source->query_string,
									  params->types, params->nparams, NULL);
	nestlevel = push_canonical_settings();
	initStringInfo(&buf);
	appendStringInfoString(&buf, pg_get_querydef(query, false));
	AtEOXact_GUC(true, nestlevel);
	(void) temp_tables_walker((Node *) query, &buf);
	return buf.data;
}

/*
 * Does pgq.groups have the column (canonical_query, params: 0.2 and later)?
 * A database not yet updated from 0.1 has not.
 */
bool
pgq_groups_have_column(const char *column)
{
	Oid			relid = get_relname_relid("groups",
										  get_namespace_oid("pgq", false));

	return get_attnum(relid, column) != InvalidAttrNumber;
}

/* What query_error_callback() needs. */
typedef struct ParamErrorArg
{
	const char *query;
	int			value;			/* the value being read, from 1; 0: none */
	Oid			type;
} ParamErrorArg;

/*
 * Report errors in the group's query as SPI does (_SPI_error_callback()):
 * a position is one in the query's text, which is shown; otherwise the
 * query is the context.  While a value of params is read, that value is.
 */
static void
query_error_callback(void *arg)
{
	ParamErrorArg *carg = (ParamErrorArg *) arg;
	int			syntaxerrposition;

	if (carg->value > 0)
	{
		errcontext("value %d of params, for $%d of type %s",
				   carg->value, carg->value, format_type_be(carg->type));
		return;
	}
	syntaxerrposition = geterrposition();
	if (syntaxerrposition > 0)
	{
		errposition(0);
		internalerrposition(syntaxerrposition);
		internalerrquery(carg->query);
	}
	else
		errcontext("SQL statement \"%s\"", carg->query);
}

/*
 * Bind the values of a group's query parameters, as PREPARE and EXECUTE
 * would: the types of $1..$n are inferred from where they appear in the
 * query (analysing it, as the current role, executing nothing), and each
 * value of the text[] values (NULL for none) is read as its parameter's
 * type, under the session's settings.  An error unless there is one value
 * per parameter and every parameter's type can be told.  A query that is
 * not one statement is left for pgq_prepare_group_query() to refuse.
 */
void
pgq_bind_group_params(const char *query, ArrayType *values,
					  PgqQueryParams *params)
{
	ErrorContextCallback context;
	ParamErrorArg carg;
	List	   *raws;
	Datum	   *texts = NULL;
	bool	   *isnull = NULL;
	int			nvalues = 0;

	memset(params, 0, sizeof(*params));
	if (values != NULL)
	{
		if (ARR_NDIM(values) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("params must be a one-dimensional array"),
					 errdetail("The array given has %d dimensions.",
							   ARR_NDIM(values))));
		deconstruct_array(values, TEXTOID, -1, false, TYPALIGN_INT,
						  &texts, &isnull, &nvalues);
	}

	carg.query = query;
	carg.value = 0;
	carg.type = InvalidOid;
	context.callback = query_error_callback;
	context.arg = &carg;
	context.previous = error_context_stack;
	error_context_stack = &context;

	raws = pg_parse_query(query);
	if (list_length(raws) != 1)
	{
		error_context_stack = context.previous;
		return;
	}
	(void) parse_analyze_varparams(linitial_node(RawStmt, raws), query,
								   &params->types, &params->nparams, NULL);
	error_context_stack = context.previous;

	if (params->nparams != nvalues)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_PARAMETER),
				 errmsg("wrong number of params for the group's query"),
				 errdetail_plural("The query has %s; params holds %d value.",
								  "The query has %s; params holds %d values.",
								  nvalues,
								  params->nparams == 0 ? "no parameters" :
								  params->nparams == 1 ? "parameter $1" :
								  psprintf("parameters $1 to $%d",
										   params->nparams),
								  nvalues),
				 nvalues == 0 ?
				 errhint("Pass the values of the query's parameters with params => ARRAY[...], one element each.") : 0));
	for (int i = 0; i < params->nparams; i++)
		if (params->types[i] == InvalidOid || params->types[i] == UNKNOWNOID)
			ereport(ERROR,
					(errcode(ERRCODE_INDETERMINATE_DATATYPE),
					 errmsg("could not determine data type of parameter $%d",
							i + 1),
					 errhint("Cast the parameter in the query, for example $%d::date.",
							 i + 1)));

	params->values = palloc0(Max(nvalues, 1) * sizeof(Datum));
	params->nulls = palloc(Max(nvalues, 1) * sizeof(char));
	error_context_stack = &context;
	for (int i = 0; i < nvalues; i++)
	{
		Oid			infunc;
		Oid			ioparam;

		carg.value = i + 1;
		carg.type = params->types[i];
		getTypeInputInfo(params->types[i], &infunc, &ioparam);
		params->values[i] =
			OidInputFunctionCall(infunc,
								 isnull[i] ? NULL : TextDatumGetCString(texts[i]),
								 ioparam, -1);
		params->nulls[i] = isnull[i] ? 'n' : ' ';
	}
	error_context_stack = context.previous;
}

/*
 * The parameter values as text[], written under canonical_settings: what
 * pgq.groups.params keeps, for the background worker to read back with
 * pgq_load_group_params(), and for joining callers to compare with.  NULL
 * for a query without parameters.
 */
static ArrayType *
canonical_params(const PgqQueryParams *params)
{
	Datum	   *elems;
	bool	   *nulls;
	int			dims[1];
	int			lbs[1] = {1};
	int			nestlevel;

	if (params->nparams == 0)
		return NULL;
	elems = palloc0(params->nparams * sizeof(Datum));
	nulls = palloc(params->nparams * sizeof(bool));
	nestlevel = push_canonical_settings();
	for (int i = 0; i < params->nparams; i++)
	{
		Oid			outfunc;
		bool		varlena;

		nulls[i] = params->nulls[i] == 'n';
		if (nulls[i])
			continue;
		getTypeOutputInfo(params->types[i], &outfunc, &varlena);
		elems[i] = CStringGetTextDatum(OidOutputFunctionCall(outfunc,
															 params->values[i]));
	}
	AtEOXact_GUC(true, nestlevel);
	dims[0] = params->nparams;
	return construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID, -1, false,
							  TYPALIGN_INT);
}

/*
 * Bind a group's stored parameters: types, a regtype[], and values, the
 * text[] of canonical_params(), read back under the same settings, so that
 * the values are those the creator bound whatever the settings now.
 */
void
pgq_load_group_params(Datum types, Datum values, PgqQueryParams *params)
{
	Datum	   *typedatums;
	Datum	   *texts;
	bool	   *isnull;
	int			ntypes;
	int			nvalues;
	int			nestlevel;

	deconstruct_array(DatumGetArrayTypeP(types), REGTYPEOID, sizeof(Oid),
					  true, TYPALIGN_INT, &typedatums, NULL, &ntypes);
	deconstruct_array(DatumGetArrayTypeP(values), TEXTOID, -1, false,
					  TYPALIGN_INT, &texts, &isnull, &nvalues);
	if (ntypes != nvalues)
		elog(ERROR, "pgq.groups holds %d parameter types and %d values",
			 ntypes, nvalues);
	params->nparams = nvalues;
	params->types = palloc(Max(nvalues, 1) * sizeof(Oid));
	params->values = palloc0(Max(nvalues, 1) * sizeof(Datum));
	params->nulls = palloc(Max(nvalues, 1) * sizeof(char));
	nestlevel = push_canonical_settings();
	for (int i = 0; i < nvalues; i++)
	{
		Oid			infunc;
		Oid			ioparam;

		params->types[i] = DatumGetObjectId(typedatums[i]);
		params->nulls[i] = isnull[i] ? 'n' : ' ';
		getTypeInputInfo(params->types[i], &infunc, &ioparam);
		params->values[i] =
			OidInputFunctionCall(infunc,
								 isnull[i] ? NULL : TextDatumGetCString(texts[i]),
								 ioparam, -1);
	}
	AtEOXact_GUC(true, nestlevel);
}

/* The types of params as a regtype[], as pgq.groups.param_types keeps them. */
static ArrayType *
param_types_array(const PgqQueryParams *params)
{
	Datum	   *elems = palloc(Max(params->nparams, 1) * sizeof(Datum));

	for (int i = 0; i < params->nparams; i++)
		elems[i] = ObjectIdGetDatum(params->types[i]);
	return construct_array(elems, params->nparams, REGTYPEOID, sizeof(Oid),
						   true, TYPALIGN_INT);
}

/*
 * Parameters as the errors of create_group show them: "$1 = '...'::type,
 * ...", from the types and the canonical_params() text of each value.
 */
static char *
describe_params(ArrayType *types, ArrayType *values)
{
	StringInfoData buf;
	Datum	   *typedatums;
	Datum	   *texts;
	bool	   *isnull;
	int			ntypes;
	int			nvalues;

	initStringInfo(&buf);
	if (types == NULL || values == NULL)
	{
		appendStringInfoString(&buf, "no parameters");
		return buf.data;
	}
	deconstruct_array(types, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT,
					  &typedatums, NULL, &ntypes);
	deconstruct_array(values, TEXTOID, -1, false, TYPALIGN_INT, &texts,
					  &isnull, &nvalues);
	for (int i = 0; i < Min(ntypes, nvalues); i++)
		appendStringInfo(&buf, "%s$%d = %s::%s", i > 0 ? ", " : "", i + 1,
						 isnull[i] ? "NULL" :
						 quote_literal_cstr(TextDatumGetCString(texts[i])),
						 format_type_be(DatumGetObjectId(typedatums[i])));
	return buf.data;
}

/*
 * Open a cursor on the group's query, or fetch from it, with the transaction
 * read-only, so that nothing the query calls can write.  The flag behind
 * transaction_read_only is set around the one call and put back however it
 * ends: from PostgreSQL 17 on, the setting itself cannot be changed with a
 * save action inside a function, and SET LOCAL would outlive the call.
 */
static void
read_only_step(SPIPlanPtr query_plan, const PgqQueryParams *params,
			   Portal *portal)
{
	bool		save_read_only = XactReadOnly;

	XactReadOnly = true;
	PG_TRY();
	{
		if (*portal == NULL)
			*portal = SPI_cursor_open(NULL, query_plan, params->values,
									  params->nulls, false);
		else
			SPI_cursor_fetch(*portal, true, PGQ_FETCH_ROWS);
	}
	PG_FINALLY();
	{
		XactReadOnly = save_read_only;
	}
	PG_END_TRY();
}

/*
 * Run the group's query, read-only, with the values of its parameters,
 * through a cursor, and hand its ids to sink PGQ_FETCH_ROWS at a time, in
 * the query's order: only one fetch is in memory at a time.  Returns the
 * number of ids.
 */
int64
pgq_run_group_query(SPIPlanPtr query_plan, const PgqQueryParams *params,
					PgqIdSink sink, void *arg)
{
	Portal		portal = NULL;
	Oid			typid;
	int64	   *ids;
	int64		total = 0;

	ids = palloc(PGQ_FETCH_ROWS * sizeof(int64));

	read_only_step(query_plan, params, &portal);
	typid = check_id_column(portal->tupDesc);

	for (;;)
	{
		SPITupleTable *tuptable;
		uint64		nrows;

		CHECK_FOR_INTERRUPTS();

		read_only_step(query_plan, params, &portal);

		tuptable = SPI_tuptable;
		nrows = SPI_processed;
		if (nrows == 0)
			break;

		for (uint64 i = 0; i < nrows; i++)
		{
			bool		isnull;
			Datum		value;

			value = SPI_getbinval(tuptable->vals[i], tuptable->tupdesc, 1,
								  &isnull);
			if (isnull)
				ereport(ERROR,
						(errcode(ERRCODE_NOT_NULL_VIOLATION),
						 errmsg("the group's query returned a NULL id"),
						 errdetail("Row " INT64_FORMAT " of the result has NULL in its first column.",
								   total + i + 1)));
			switch (typid)
			{
				case INT2OID:
					ids[i] = DatumGetInt16(value);
					break;
				case INT4OID:
					ids[i] = DatumGetInt32(value);
					break;
				default:
					ids[i] = DatumGetInt64(value);
					break;
			}
		}
		SPI_freetuptable(tuptable);
		sink(ids, (int) nrows, arg);
		total += nrows;
	}

	SPI_cursor_close(portal);
	pfree(ids);
	return total;
}

/* Build a one-dimensional bigint[] of n ids in the current memory context. */
static ArrayType *
make_id_array(const int64 *ids, int n)
{
	Size		nbytes = ARR_OVERHEAD_NONULLS(1) + (Size) n * sizeof(int64);
	ArrayType  *array = palloc0(nbytes);

	SET_VARSIZE(array, nbytes);
	array->ndim = 1;
	array->dataoffset = 0;
	array->elemtype = INT8OID;
	ARR_DIMS(array)[0] = n;
	ARR_LBOUND(array)[0] = 1;
	/* no null bitmap: the data follows the header */
	memcpy((char *) array + ARR_OVERHEAD_NONULLS(1), ids,
		   (Size) n * sizeof(int64));
	return array;
}

/*
 * Prepare to cut ids into blocks of block_size for a group.  The buffer
 * lives in the current memory context; blocks are inserted through SPI by
 * the calls below, which the caller makes inside SPI_connect().
 */
void
pgq_block_writer_init(PgqBlockWriter *writer, int64 group_id, int block_size)
{
	writer->group_id = group_id;
	writer->block_size = block_size;
	writer->ids = palloc((Size) block_size * sizeof(int64));
	writer->n = 0;
	writer->nids = 0;
	writer->nblocks = 0;
	writer->scratch = AllocSetContextCreate(CurrentMemoryContext, "pgq block",
											ALLOCSET_DEFAULT_SIZES);
}

/*
 * Insert the buffered ids as one block; block ids follow the calls' order.
 *
 * The row goes in through the table and index AMs, as claims and enqueues
 * write (see blockscan.c and iteminsert.c), not as an SQL INSERT: for
 * small blocks the statement cost several times the row, re-reading the
 * table's CHECK constraint on every execution.  Everything is opened and
 * closed per block, since the background materializer commits between
 * batches of blocks.  The caller runs as the owner of pgq's tables.
 */
static void
write_block(PgqBlockWriter *writer)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(writer->scratch);
	Relation	rel = pgq_open_rel("blocks", RowExclusiveLock);
	Oid			seqid = pgq_rel_oid("block_id_seq");
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	int			natts = RelationGetDescr(rel)->natts;

	/* what the executor would check for an INSERT */
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot materialize a group in a read-only transaction")));
	if (natts < Anum_blocks_lease_until)
		elog(ERROR, "pgq.blocks has %d columns, expected at least %d",
			 natts, Anum_blocks_lease_until);
	estate = CreateExecutorState();
	rri = pgq_result_rel(estate, rel);

	/* a pending block, never claimed; columns added by hand stay NULL */
	slot = table_slot_create(rel, NULL);
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, natts * sizeof(bool));
	slot->tts_values[Anum_blocks_group_id - 1] = Int64GetDatum(writer->group_id);
	slot->tts_values[Anum_blocks_block_id - 1] =
		DirectFunctionCall1(nextval_oid, ObjectIdGetDatum(seqid));
	slot->tts_values[Anum_blocks_ids - 1] =
		PointerGetDatum(make_id_array(writer->ids, writer->n));
	slot->tts_values[Anum_blocks_state - 1] = CharGetDatum('p');
	slot->tts_values[Anum_blocks_attempt - 1] = Int32GetDatum(0);
	for (int i = Anum_blocks_group_id; i <= Anum_blocks_attempt; i++)
		slot->tts_isnull[i - 1] = false;
	/* the epoch that a lease claim's attempt number counts from (lease.c) */
	if (natts >= Anum_blocks_epoch)
	{
		slot->tts_values[Anum_blocks_epoch - 1] = Int32GetDatum(pgq_lease_epoch());
		slot->tts_isnull[Anum_blocks_epoch - 1] = false;
	}
	ExecStoreVirtualTuple(slot);

	table_tuple_insert(rel, slot, GetCurrentCommandId(true), 0, NULL);
#if PG_VERSION_NUM >= 160000
	(void) ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL,
								 false);
#else
	(void) ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
#endif
	CommandCounterIncrement();

	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(writer->scratch);

	writer->nids += writer->n;
	writer->nblocks++;
	writer->n = 0;
}

/*
 * Add n ids, in order, writing every block that fills up.  ids need not be
 * aligned: they may point into a message queue.
 */
void
pgq_block_writer_add(PgqBlockWriter *writer, const char *ids, int n)
{
	while (n > 0)
	{
		int			room = writer->block_size - writer->n;
		int			take = Min(room, n);

		memcpy(writer->ids + writer->n, ids, (Size) take * sizeof(int64));
		writer->n += take;
		ids += (Size) take * sizeof(int64);
		n -= take;
		if (writer->n == writer->block_size)
			write_block(writer);
	}
}

/* Write the last, partly filled block, if any. */
void
pgq_block_writer_finish(PgqBlockWriter *writer)
{
	if (writer->n > 0)
		write_block(writer);
}

/* What the synchronous path's sink needs. */
typedef struct BlockSink
{
	PgqBlockWriter writer;
	const PgqScope *scope;
} BlockSink;

/*
 * A PgqIdSink that cuts ids into blocks: the synchronous path.  The query
 * runs as the caller; its blocks are written as the owner of pgq's tables.
 */
static void
block_sink(const int64 *ids, int n, void *arg)
{
	BlockSink  *sink = (BlockSink *) arg;

	pgq_become_owner(sink->scope);
	pgq_block_writer_add(&sink->writer, (const char *) ids, n);
	pgq_become_caller(sink->scope);
}

/*
 * Mark a group ready with its totals, inside SPI.  Every session's kept
 * claim plans were made for the size pgq.blocks had when it first claimed;
 * a group can grow the table a thousandfold, so they are invalidated too,
 * to be planned again for its size now once this commits.
 */
void
pgq_mark_ready(int64 group_id, int64 total_ids, int64 total_blocks)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3];
	int			rc;

	values[0] = Int64GetDatum(group_id);
	values[1] = Int64GetDatum(total_ids);
	values[2] = Int64GetDatum(total_blocks);
	rc = SPI_execute_with_args("UPDATE pgq.groups SET state = 'ready', "
							   "total_ids = $2, total_blocks = $3, "
							   "ready_at = pg_catalog.clock_timestamp() "
							   "WHERE group_id " OP("=") " $1",
							   3, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not mark group " INT64_FORMAT " ready", group_id);
	pgq_invalidate_groups();
	if (total_blocks > 0)
		pgq_invalidate_block_plans();
}

/* Have every session plan its statements on pgq.blocks again at commit. */
void
pgq_invalidate_block_plans(void)
{
	CacheInvalidateRelcacheByRelid(get_relname_relid("blocks",
													 get_namespace_oid("pgq", false)));
}

/*
 * Settings that change what a query reads or how it reads its text, kept
 * with the group (search_path has a column of its own) so that an
 * asynchronous materialization runs the query as it would have run in the
 * session that created the group.
 */
static const char *const query_settings[] = {
	"DateStyle", "IntervalStyle", "TimeZone", "extra_float_digits",
	"standard_conforming_strings", "bytea_output", "lc_monetary",
	"lc_numeric", "lc_time", "default_text_search_config"
};

/* The current values of query_settings, as text[] {name, value, ...}. */
static Datum
capture_settings(void)
{
	int			n = lengthof(query_settings);
	Datum	   *elems = palloc(2 * n * sizeof(Datum));

	for (int i = 0; i < n; i++)
	{
		elems[2 * i] = CStringGetTextDatum(query_settings[i]);
		elems[2 * i + 1] =
			CStringGetTextDatum(GetConfigOptionByName(query_settings[i],
													  NULL, false));
	}
	return PointerGetDatum(construct_array(elems, 2 * n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * Insert the group's row unless the name is taken; returns the new group's
 * id, or 0 when a group of that name exists (waiting first for its creator,
 * if it has not committed yet).  timeout is NULL for none; canonical is
 * NULL in a database still at 0.1, which has no column for it, nor for
 * parameters (have_params false); param_values and param_types are NULL
 * for a query without parameters.
 */
static int64
insert_group(text *name, PgqMode mode, text *query, const char *canonical,
			 ArrayType *param_values, ArrayType *param_types,
			 bool have_params, int block_size, Interval *lease,
			 int32 max_attempts, Interval *timeout)
{
	Oid			argtypes[12] = {TEXTOID, TEXTOID, TEXTOID, INT4OID, REGROLEOID,
	INTERVALOID, INT4OID, TEXTARRAYOID, INTERVALOID, TEXTOID, TEXTARRAYOID,
	REGTYPEARRAYOID};
	Datum		values[12];
	char		nulls[12];
	PgqGroupRef ref;
	int			rc;

	values[0] = PointerGetDatum(name);
	values[1] = CStringGetTextDatum(pgq_mode_name(mode));
	values[2] = PointerGetDatum(query);
	values[3] = Int32GetDatum(block_size);
	values[4] = ObjectIdGetDatum(pgq_caller);
	values[5] = IntervalPGetDatum(lease);
	values[6] = Int32GetDatum(max_attempts);
	memset(nulls, ' ', sizeof(nulls));
	values[7] = capture_settings();
	values[8] = IntervalPGetDatum(timeout);
	if (timeout == NULL)
		nulls[8] = 'n';
	if (canonical != NULL)
		values[9] = CStringGetTextDatum(canonical);
	if (param_values != NULL)
	{
		values[10] = PointerGetDatum(param_values);
		values[11] = PointerGetDatum(param_types);
	}
	else
		nulls[10] = nulls[11] = 'n';

#define INSERT_GROUP(column, value) \
	"INSERT INTO pgq.groups " \
	"(group_name, mode, query, block_size, owner, " \
	"search_path, lease, max_attempts, settings, " \
	"materialize_timeout" column ") " \
	"VALUES ($1, $2, $3, $4, $5, " \
	"pg_catalog.current_setting('search_path'), " \
	"$6, $7, $8, $9" value ") " \
	"ON CONFLICT (group_name) DO NOTHING " \
	"RETURNING group_id, created_at"
	if (have_params)
		rc = SPI_execute_with_args(INSERT_GROUP(", canonical_query, params, param_types",
												", $10, $11, $12"),
								   12, argtypes, values, nulls, false, 1);
	else if (canonical != NULL)
		rc = SPI_execute_with_args(INSERT_GROUP(", canonical_query", ", $10"),
								   10, argtypes, values, nulls, false, 1);
	else
		rc = SPI_execute_with_args(INSERT_GROUP("", ""),
								   9, argtypes, values, nulls, false, 1);
#undef INSERT_GROUP
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert a group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return 0;
	/* should this roll back, this backend forgets what it cached of it */
	pgq_invalidate_groups();
	pgq_group_ref_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
							 &ref);
	/* its blocks are written pending: none is in flight */
	pgq_inflight_none(&ref, pgq_block_inflight_epoch());
	return ref.group_id;
}

/*
 * Are two sets of parameters, each a regtype[] and a text[] of
 * canonical_params(), the same types and values?
 */
static bool
same_params(ArrayType *types1, ArrayType *values1, ArrayType *types2,
			ArrayType *values2)
{
	Datum	   *t1;
	Datum	   *t2;
	Datum	   *v1;
	Datum	   *v2;
	bool	   *n1;
	bool	   *n2;
	int			nt1;
	int			nt2;
	int			nv1;
	int			nv2;

	deconstruct_array(types1, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT,
					  &t1, NULL, &nt1);
	deconstruct_array(types2, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT,
					  &t2, NULL, &nt2);
	deconstruct_array(values1, TEXTOID, -1, false, TYPALIGN_INT, &v1, &n1,
					  &nv1);
	deconstruct_array(values2, TEXTOID, -1, false, TYPALIGN_INT, &v2, &n2,
					  &nv2);
	if (nt1 != nt2 || nv1 != nv2 || nt1 != nv1)
		return false;
	for (int i = 0; i < nt1; i++)
	{
		if (DatumGetObjectId(t1[i]) != DatumGetObjectId(t2[i]) ||
			n1[i] != n2[i])
			return false;
		if (!n1[i] && strcmp(TextDatumGetCString(v1[i]),
							 TextDatumGetCString(v2[i])) != 0)
			return false;
	}
	return true;
}

/*
 * Check that the parameter values of an existing group, columns 8 (params)
 * and 9 (param_types) of an SPI row, are those the caller bound: the same
 * types, and the same values as canonical_params() writes them (new_values
 * and new_types, NULL for none).
 */
static void
check_same_params(const char *groupname, HeapTuple tuple, TupleDesc tupdesc,
				  ArrayType *new_values, ArrayType *new_types)
{
	ArrayType  *old_values = NULL;
	ArrayType  *old_types = NULL;
	bool		isnull;
	Datum		datum;
	bool		same;

	datum = SPI_getbinval(tuple, tupdesc, 8, &isnull);
	if (!isnull)
		old_values = DatumGetArrayTypeP(datum);
	datum = SPI_getbinval(tuple, tupdesc, 9, &isnull);
	if (!isnull)
		old_types = DatumGetArrayTypeP(datum);
	if (old_types == NULL)
		old_values = NULL;

	if (old_values == NULL || new_values == NULL)
		same = old_values == NULL && new_values == NULL;
	else
		same = same_params(old_types, old_values, new_types, new_values);
	if (!same)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("group \"%s\" already exists with other params",
						groupname),
				 errdetail("The existing group's query has %s; here it has %s.",
						   describe_params(old_types, old_values),
						   describe_params(new_types, new_values)),
				 errhint("Use another group name, or drop the group first with pgq.drop_group().")));
}

/*
 * Check that an existing group, which the caller may join (see
 * pgq_check_join()), is the one the caller asked for.  Returns false if the
 * group is gone (dropped since the lookup found it).
 *
 * Queries are the same when they read the same, as canonical_query() writes
 * them, whatever their layout, and bind the same parameter values; a group
 * made before the update from 0.1 has no canonical text, and its query text
 * must be the same, character for character.
 */
static bool
check_existing_group(const PgqGroup *existing, PgqMode mode, text *query,
					 const char *canonical, ArrayType *param_values,
					 ArrayType *param_types, bool have_params,
					 int block_size, Interval *lease, int32 max_attempts)
{
	Interval   *old_lease;
	int32		old_max_attempts;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	const char *groupname = existing->name;
	char	   *old_mode;
	char	   *old_query;
	char	   *old_canonical = NULL;
	char	   *new_query = text_to_cstring(query);
	bool		same_text;
	int			old_block_size;
	bool		isnull;
	int			rc;

	values[0] = Int64GetDatum(existing->ref.group_id);
	/* with the fresh snapshot that found it */
	if (have_params)
		rc = pgq_execute_fresh("SELECT mode, query, block_size, lease, "
							   "max_attempts, search_path, canonical_query, "
							   "params, param_types "
							   "FROM pgq.groups "
							   "WHERE group_id " OP("=") " $1",
							   1, argtypes, values);
	else if (canonical != NULL)
		rc = pgq_execute_fresh("SELECT mode, query, block_size, lease, "
							   "max_attempts, search_path, canonical_query "
							   "FROM pgq.groups "
							   "WHERE group_id " OP("=") " $1",
							   1, argtypes, values);
	else
		rc = pgq_execute_fresh("SELECT mode, query, block_size, lease, "
							   "max_attempts, search_path "
							   "FROM pgq.groups "
							   "WHERE group_id " OP("=") " $1",
							   1, argtypes, values);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;

	tuple = SPI_tuptable->vals[0];
	tupdesc = SPI_tuptable->tupdesc;
	old_mode = SPI_getvalue(tuple, tupdesc, 1);
	old_query = SPI_getvalue(tuple, tupdesc, 2);
	old_block_size = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 3, &isnull));
	old_lease = DatumGetIntervalP(SPI_getbinval(tuple, tupdesc, 4, &isnull));
	old_max_attempts = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 5, &isnull));
	if (canonical != NULL)
		old_canonical = SPI_getvalue(tuple, tupdesc, 7);

	same_text = strcmp(old_query, new_query) == 0;
	if (old_canonical != NULL ? strcmp(old_canonical, canonical) != 0 :
		!same_text)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("group \"%s\" already exists with a different query",
						groupname),
				 same_text ?
				 errdetail("The text is that of the existing group's query, but here it names other tables, functions or constants: the existing group's query was read with search_path \"%s\".",
						   SPI_getvalue(tuple, tupdesc, 6)) :
				 errdetail("The existing group's query is \"%s\".", old_query),
				 errhint("Use another group name, or drop the group first with pgq.drop_group().")));
	if (have_params)
		check_same_params(groupname, tuple, tupdesc, param_values,
						  param_types);
	if (old_block_size != block_size)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("group \"%s\" already exists with block size %d, not %d",
						groupname, old_block_size, block_size)));
	if (strcmp(old_mode, pgq_mode_name(mode)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("group \"%s\" already exists in mode \"%s\", not \"%s\"",
						groupname, old_mode, pgq_mode_name(mode))));
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
										  IntervalPGetDatum(old_lease),
										  IntervalPGetDatum(lease))) != 0 ||
		old_max_attempts != max_attempts)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("group \"%s\" already exists with other settings",
						groupname),
				 errdetail("The existing group has lease %s and max_attempts %d.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(old_lease))),
						   old_max_attempts)));
	return true;
}

/*
 * Fill *group from a row of (group_id, mode, created_at, lease, max_attempts,
 * group_name, state, kind, backoff, max_backoff, owner, consumers,
 * producers, paused), and what the caller may do with the group.
 */
static void
group_from_tuple(HeapTuple tuple, TupleDesc tupdesc, PgqGroup *group)
{
	bool		isnull;

	group->ref.dbid = MyDatabaseId;
	group->ref.group_id = DatumGetInt64(SPI_getbinval(tuple, tupdesc, 1, &isnull));
	group->mode = pgq_parse_mode(SPI_getvalue(tuple, tupdesc, 2));
	group->ref.created_at =
		DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc, 3, &isnull));
	group->lease = *DatumGetIntervalP(SPI_getbinval(tuple, tupdesc, 4, &isnull));
	group->max_attempts = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 5, &isnull));
	strlcpy(group->name, SPI_getvalue(tuple, tupdesc, 6), sizeof(group->name));
	group->state = pgq_parse_state(SPI_getvalue(tuple, tupdesc, 7));
	group->kind = strcmp(SPI_getvalue(tuple, tupdesc, 8), "queue") == 0 ?
		PGQ_KIND_QUEUE : PGQ_KIND_QUERY;
	group->backoff = *DatumGetIntervalP(SPI_getbinval(tuple, tupdesc, 9, &isnull));
	group->max_backoff = *DatumGetIntervalP(SPI_getbinval(tuple, tupdesc, 10, &isnull));
	pgq_set_privileges(group,
					   DatumGetObjectId(SPI_getbinval(tuple, tupdesc, 11, &isnull)),
					   SPI_getbinval(tuple, tupdesc, 12, &isnull),
					   SPI_getbinval(tuple, tupdesc, 13, &isnull));
	group->paused = DatumGetBool(SPI_getbinval(tuple, tupdesc, 14, &isnull));
}

/*
 * Take a transaction-level lock on a group: shared by enqueues, exclusive
 * for pgq.drop_group().  An enqueue looks its queue up and inserts without
 * locking the queue's row (a row lock per enqueue would make that row hot);
 * this lock keeps a drop from deleting the queue's items while an enqueue's
 * items are yet to commit, and an enqueue that comes after a drop's commit
 * finds the queue gone.  It is a lock-manager lock, in pgq's advisory key
 * space: nothing is written.
 *
 * The key is the group's id, which no other group has: a role cannot make
 * another role's calls wait by locking a group of its own.  Callers take it
 * only once they know that the caller may act on the group, and look the
 * group up again once they hold it.
 */
static void
group_lock_tag(LOCKTAG *tag, int64 group_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (group_id >> 32),
						 (uint32) group_id, PGQ_LOCK_GROUP);
}

/* Lock a group (see group_lock_tag()) until the end of the transaction. */
void
pgq_lock_group(int64 group_id, bool exclusive)
{
	LOCKTAG		tag;

	group_lock_tag(&tag, group_id);
	(void) LockAcquire(&tag, exclusive ? ExclusiveLock : ShareLock, false,
					   false);
}

/*
 * Give back what pgq_lock_group() took, for a call that found the group gone
 * once it held the lock: a call that finds nothing holds nothing.
 */
void
pgq_unlock_group(int64 group_id, bool exclusive)
{
	LOCKTAG		tag;

	group_lock_tag(&tag, group_id);
	(void) LockRelease(&tag, exclusive ? ExclusiveLock : ShareLock, false);
}

/*
 * Fill *ref from columns col (group_id) and col + 1 (created_at) of an SPI
 * row: how statements that return groups name them.
 */
void
pgq_group_ref_from_tuple(HeapTuple tuple, TupleDesc tupdesc, int col,
						 PgqGroupRef *ref)
{
	bool		isnull;

	ref->dbid = MyDatabaseId;
	ref->group_id = DatumGetInt64(SPI_getbinval(tuple, tupdesc, col, &isnull));
	ref->created_at = DatumGetTimestampTz(SPI_getbinval(tuple, tupdesc,
														col + 1, &isnull));
}

/*
 * The columns group_from_tuple() reads, of pgq.groups as "g": every lookup
 * of a group selects them.
 */
#define GROUP_COLUMNS \
	"g.group_id, g.mode, g.created_at, g.lease, g.max_attempts, " \
	"g.group_name, g.state, g.kind, g.backoff, g.max_backoff, g.owner, " \
	"g.consumers, g.producers, g.paused "

/*
 * Run a lookup of one group by one argument, prepared once in *plan; false
 * if it finds nothing.  The row stays SPI's current result.
 *
 * Groups are read as PostgreSQL reads its catalogs, with a fresh snapshot,
 * not the transaction's: whether a group exists, is paused, and what the
 * caller may do with it is what the last committed change says, in
 * REPEATABLE READ and SERIALIZABLE too.  The group cache is filled from these
 * lookups: a row read with a snapshot older than the invalidations already
 * taken in would stay cached after the transaction, showing a revoked grant,
 * a pause or a dropped queue as they were before.
 */
static bool
lookup_by(SPIPlanPtr *plan, const char *sql, Oid argtype, Datum value,
		  PgqGroup *group)
{
	int			rc;

	if (*plan == NULL)
		*plan = pgq_keep_plan(sql, 1, &argtype);
	rc = SPI_execute_snapshot(*plan, &value, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not look up a group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	group_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, group);
	return true;
}

/* Look a group up by name, inside SPI; false if it does not exist. */
bool
pgq_find_group(text *name, PgqGroup *group)
{
	static SPIPlanPtr plan = NULL;

	return lookup_by(&plan,
					 "SELECT " GROUP_COLUMNS "FROM pgq.groups g "
					 "WHERE g.group_name " OP("=") " $1",
					 TEXTOID, PointerGetDatum(name), group);
}

/*
 * A per-backend cache of groups looked up by name, for the hot paths (claims
 * and enqueues), which would otherwise spend a statement per call on it.
 * It holds what a lookup reads, grantees included; what the caller may do
 * is worked out again on every use, since the caller and its roles change.
 *
 * Whatever changes a group's cached fields (drop, grants, pause, the end of
 * a materialization, retention) sends a relcache invalidation of pgq.groups
 * at commit (pgq_invalidate_groups()), which every backend takes in before
 * it uses the cache, and the cache is refilled with a snapshot taken after
 * that (lookup_by()): a claim or an enqueue never acts on a group changed by
 * a transaction that committed before the call started, whatever the
 * isolation level.  A change that commits during the refill sends its
 * invalidation after it became visible, so the next use empties the cache
 * again.
 */
typedef struct CachedGroup
{
	char		name[PGQ_MAX_GROUP_NAME_LEN * 4 + 1];	/* hash key */
	PgqGroup	group;
	Datum		consumers;		/* regrole[], in group_cache_cxt */
	Datum		producers;
} CachedGroup;

static HTAB *group_cache = NULL;
static MemoryContext group_cache_cxt = NULL;
static Oid	group_cache_relid = InvalidOid; /* pgq.groups, when filled */
static bool group_cache_stale = false;

/* Relcache callback: pgq.groups changed (or everything did). */
static void
group_cache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == group_cache_relid)
		group_cache_stale = true;
}

/* The cache, emptied if an invalidation came since it was last used. */
static HTAB *
group_cache_get(void)
{
	HASHCTL		ctl;

	/*
	 * Take in the invalidations committed since the transaction's start too
	 * (cheap when there are none): a claim that comes after a drop's commit,
	 * even in one long transaction, must not find the group.
	 */
	AcceptInvalidationMessages();
	if (group_cache != NULL && !group_cache_stale)
		return group_cache;
	if (group_cache_cxt == NULL)
	{
		group_cache_cxt = AllocSetContextCreate(CacheMemoryContext,
												"pgq group cache",
												ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(group_cache_callback, (Datum) 0);
	}
	MemoryContextReset(group_cache_cxt);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(((CachedGroup *) NULL)->name);
	ctl.entrysize = sizeof(CachedGroup);
	ctl.hcxt = group_cache_cxt;
	group_cache = hash_create("pgq groups by name", 64, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	group_cache_relid = get_relname_relid("groups",
										  get_namespace_oid("pgq", false));
	group_cache_stale = false;
	return group_cache;
}

/*
 * Look a group up by name through the cache, inside SPI; an error if it
 * does not exist.  Groups that are materializing are not cached: their
 * state is about to change.
 */
void
pgq_lookup_group_cached(text *name, PgqGroup *group)
{
	char		key[PGQ_MAX_GROUP_NAME_LEN * 4 + 1];
	HTAB	   *cache = group_cache_get();
	CachedGroup *entry;
	bool		found;

	text_to_cstring_buffer(name, key, sizeof(key));
	entry = hash_search(cache, key, HASH_FIND, &found);
	if (found)
	{
		*group = entry->group;
		pgq_set_privileges(group, entry->group.owner, entry->consumers,
						   entry->producers);
		return;
	}

	pgq_lookup_group(name, group);
	if (group->state == PGQ_GROUP_MATERIALIZING)
		return;
	{
		MemoryContext old = MemoryContextSwitchTo(group_cache_cxt);
		bool		isnull;

		entry = hash_search(cache, key, HASH_ENTER, &found);
		entry->group = *group;
		/* the lookup's row is still SPI's current result; detoasted copies */
		entry->consumers = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(SPI_tuptable->vals[0],
																			   SPI_tuptable->tupdesc,
																			   12, &isnull)));
		entry->producers = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(SPI_tuptable->vals[0],
																			   SPI_tuptable->tupdesc,
																			   13, &isnull)));
		MemoryContextSwitchTo(old);
	}
}

/*
 * Have every backend drop its cached groups when this transaction commits:
 * called by whatever changes what the cache holds.
 */
void
pgq_invalidate_groups(void)
{
	CacheInvalidateRelcacheByRelid(get_relname_relid("groups",
													 get_namespace_oid("pgq", false)));
}

/* Look a group up by name, inside SPI; an error if it does not exist. */
void
pgq_lookup_group(text *name, PgqGroup *group)
{
	if (!pgq_find_group(name, group))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("group \"%s\" does not exist", text_to_cstring(name)),
				 errhint("Create it with pgq.create_group().")));
}

/*
 * Find a cached group by id, for lookups that start from a block.  A scan
 * of the cache: it holds the few groups this backend works with.
 */
static bool
group_cache_find_id(int64 group_id, PgqGroup *group)
{
	HASH_SEQ_STATUS status;
	CachedGroup *entry;

	hash_seq_init(&status, group_cache_get());
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->group.ref.group_id == group_id)
		{
			hash_seq_term(&status);
			*group = entry->group;
			pgq_set_privileges(group, entry->group.owner, entry->consumers,
							   entry->producers);
			return true;
		}
	}
	return false;
}

/* Look a group up by id, inside SPI; false if it does not exist. */
bool
pgq_find_group_id(int64 group_id, PgqGroup *group)
{
	static SPIPlanPtr plan = NULL;

	return lookup_by(&plan,
					 "SELECT " GROUP_COLUMNS
					 "FROM pgq.groups g "
					 "WHERE g.group_id " OP("=") " $1",
					 INT8OID, Int64GetDatum(group_id), group);
}

/*
 * Look up the group of a block.  False if there is no such block (consumed,
 * dropped, or never made), and for a block of a group that the caller may
 * not see: ids are handed out in sequence, and must not tell such a caller
 * which groups exist.  The block is found through the index on block_id
 * without SQL, and its group in the cache if it is there, else with a
 * statement (so inside SPI): every complete, release, fail and extend starts
 * here.
 */
bool
pgq_lookup_block(int64 block_id, PgqGroup *group)
{
	int64		group_id;

	if (!pgq_block_group_id(block_id, &group_id))
		return false;
	if (!group_cache_find_id(group_id, group) &&
		!pgq_find_group_id(group_id, group))
		return false;
	return pgq_may_see_group(group);
}

/*
 * Look up the queue of an item, as pgq_lookup_block() looks up a block's
 * group (so inside SPI).  False if there is no such item (never made, or
 * removed by retention or a drop), and, as for blocks, for an item of a
 * queue that the caller may not see.
 */
bool
pgq_lookup_item(int64 item_id, PgqGroup *group)
{
	int64		group_id;

	if (!pgq_item_group_id(item_id, &group_id))
		return false;
	if (!group_cache_find_id(group_id, group) &&
		!pgq_find_group_id(group_id, group))
		return false;
	return pgq_may_see_group(group);
}

/*
 * The materialization timeout of an asynchronous group: the argument, or
 * else pgq.materialize_timeout, at most pgq.max_materialize_timeout; NULL
 * for none.
 */
static Interval *
materialize_timeout(FunctionCallInfo fcinfo, bool async)
{
	Interval   *timeout;

	if (PG_ARGISNULL(7))
	{
		int			ms = pgq_materialize_timeout;

		if (pgq_max_materialize_timeout > 0 &&
			(ms == 0 || ms > pgq_max_materialize_timeout))
			ms = pgq_max_materialize_timeout;
		if (!async || ms == 0)
			return NULL;
		timeout = palloc0(sizeof(Interval));
		timeout->time = (int64) ms * 1000;
		return timeout;
	}
	if (!async)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout applies only to async => true"),
				 errhint("A synchronous create_group runs under the caller's statement_timeout.")));
	timeout = PG_GETARG_INTERVAL_P(7);
	pgq_check_timeout(timeout);
	if (pgq_max_materialize_timeout > 0 &&
		pgq_duration_usecs(timeout) / 1000 > pgq_max_materialize_timeout)
	{
		timeout = palloc0(sizeof(Interval));
		timeout->time = (int64) pgq_max_materialize_timeout * 1000;
	}
	return timeout;
}

/*
 * pgq.create_group(group_name, query, block_size, mode, async, lease,
 *					max_attempts, timeout, owner, params) -> boolean
 *
 * True for the caller that created the group, false for every caller that
 * found it existing with the same definition, and may join it (its own
 * role's group, or that of the role named by owner).  Synchronously, the
 * group is materialized when this returns; with async, a pair of background
 * workers materialize it once this transaction commits (see materialize.c).
 */
Datum
pgq_create_group(PG_FUNCTION_ARGS)
{
	text	   *name;
	text	   *query;
	int32		block_size;
	PgqMode		mode;
	bool		async;
	Interval   *lease;
	int32		max_attempts;
	Interval   *timeout;
	Oid			owner;
	char	   *query_string;
	ArrayType  *param_values;
	PgqQueryParams params;
	ArrayType  *stored_values = NULL;
	ArrayType  *stored_types = NULL;
	bool		have_params;
	int64		group_id;
	SPIPlanPtr	plan;
	char	   *canonical = NULL;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_arg_not_null(fcinfo, 1, "query");
	pgq_check_arg_not_null(fcinfo, 2, "block_size");
	pgq_check_arg_not_null(fcinfo, 3, "mode");
	pgq_check_arg_not_null(fcinfo, 4, "async");
	pgq_check_arg_not_null(fcinfo, 5, "lease");
	pgq_check_arg_not_null(fcinfo, 6, "max_attempts");

	name = PG_GETARG_TEXT_PP(0);
	query = PG_GETARG_TEXT_PP(1);
	block_size = PG_GETARG_INT32(2);
	pgq_check_name(name);
	if (block_size < 1 || block_size > PGQ_MAX_BLOCK_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("block_size must be between 1 and %d", PGQ_MAX_BLOCK_SIZE),
				 errdetail("The block size given is %d.", block_size)));
	mode = pgq_parse_mode(text_to_cstring(PG_GETARG_TEXT_PP(3)));
	async = PG_GETARG_BOOL(4);
	lease = PG_GETARG_INTERVAL_P(5);
	max_attempts = PG_GETARG_INT32(6);
	pgq_check_lease(lease);
	if (max_attempts < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be at least 1"),
				 errdetail("The value given is %d.", max_attempts)));
	timeout = materialize_timeout(fcinfo, async);
	/* owner => (since 0.2) */
	owner = PG_NARGS() > 8 && !PG_ARGISNULL(8) ? PG_GETARG_OID(8) : InvalidOid;
	/* params => (since 0.2) */
	param_values = PG_NARGS() > 9 && !PG_ARGISNULL(9) ?
		PG_GETARG_ARRAYTYPE_P(9) : NULL;
	pgq_check_not_in_recovery("create a group");

	pgq_enter(&scope);
	SPI_connect();

	/*
	 * The query is parsed, checked and read as the caller, with its rights,
	 * before anything else: a query that cannot run is refused here and
	 * now, and a caller that joins compares what its own query reads with
	 * what the group's does.
	 */
	pgq_become_caller(&scope);
	query_string = text_to_cstring(query);
	pgq_bind_group_params(query_string, param_values, &params);
	plan = pgq_prepare_group_query(query_string, &params);
	if (pgq_groups_have_column("canonical_query"))
		canonical = canonical_query(plan, &params);
	have_params = pgq_groups_have_column("params");
	if (params.nparams > 0)
	{
		stored_values = canonical_params(&params);
		stored_types = param_types_array(&params);
	}
	pgq_become_owner(&scope);

	for (;;)
	{
		PgqGroup	existing;

		CHECK_FOR_INTERRUPTS();
		group_id = insert_group(name, mode, query, canonical, stored_values,
								stored_types, have_params, block_size, lease,
								max_attempts, timeout);
		if (group_id != 0)
		{
			pgq_check_create_owner(name, PGQ_KIND_QUERY, owner);
			break;
		}

		/*
		 * Joining a group is for those who may consume it, and whose group
		 * it is or who named its owner; nobody else learns anything of its
		 * definition.
		 */
		if (!pgq_find_group(name, &existing))
			continue;			/* dropped between our insert and our look */
		pgq_check_join(&existing, PGQ_KIND_QUERY, owner);
		if (check_existing_group(&existing, mode, query, canonical,
								 stored_values, stored_types, have_params,
								 block_size, lease, max_attempts))
		{
			pgq_report_join(&existing);
			SPI_finish();
			pgq_leave(&scope);
			PG_RETURN_BOOL(false);
		}
	}

	/* the query runs as the caller, with its rights */
	pgq_become_caller(&scope);
	if (async)
	{
		pgq_become_owner(&scope);
		pgq_start_materialization(group_id);
	}
	else
	{
		BlockSink	sink;
		int64		total_ids;

		sink.scope = &scope;
		pgq_block_writer_init(&sink.writer, group_id, block_size);
		total_ids = pgq_run_group_query(plan, &params, block_sink, &sink);
		pgq_become_owner(&scope);
		pgq_block_writer_finish(&sink.writer);
		Assert(total_ids == sink.writer.nids);
		pgq_mark_ready(group_id, total_ids, sink.writer.nblocks);
		if (sink.writer.nblocks > 0)
			pgq_notify_group(text_to_cstring(name));
	}

	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(true);
}

/*
 * Run a statement that changes a group, or drops it with its blocks and
 * items, inside SPI, with a fresh snapshot: the one its lookup used
 * (lookup_by()).  In REPEATABLE READ or SERIALIZABLE, the transaction's
 * snapshot may predate the group's creation, or items that a drop waited
 * for (pgq_lock_group_name()), which the statement would then miss: a grant
 * or a pause would change nothing, and the items would outlive their queue.
 * As a foreign key's check does (ri_PerformCheck()), rows that the
 * transaction's snapshot cannot see make the statement fail with a
 * serialization failure instead of being acted on unseen.
 */
int
pgq_execute_fresh(const char *sql, int nargs, Oid *argtypes, Datum *values)
{
	SPIPlanPtr	plan;
	int			rc;

	plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s",
			 SPI_result_code_string(SPI_result));
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  IsolationUsesXactSnapshot() ?
							  GetTransactionSnapshot() : InvalidSnapshot,
							  false, true, 0);
	SPI_freeplan(plan);
	return rc;
}

/*
 * pgq.drop_group(group_name) -> boolean
 *
 * Deleting the blocks waits for every transaction that holds one of them;
 * false if there was no such group.  Should the drop be undone, the blocks
 * it had locked become claimable again: the group's hint is reset then.  If
 * it commits, the group's shared state goes.
 */
Datum
pgq_drop_group(PG_FUNCTION_ARGS)
{
	Oid			argtype;
	Datum		value;
	PgqGroupRef group;
	PgqGroup	dropped;
	PgqScope	scope;
	bool		isnull;
	int			rc;
	const char *const *classes;
	int			nclasses;
	StringInfoData sql;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	pgq_check_not_in_recovery("drop a group");

	pgq_enter(&scope);
	SPI_connect();

	/*
	 * Check, lock, then check again: whoever may not drop the group must not
	 * hold it up for others either.  The delete is of the group found,
	 * should another of the same name have taken its place meanwhile.
	 */
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (!pgq_find_group(PG_GETARG_TEXT_PP(0), &dropped))
		{
			SPI_finish();
			pgq_leave(&scope);
			PG_RETURN_BOOL(false);
		}
		pgq_check_privilege(&dropped, PGQ_PRIV_ADMIN);
		pgq_lock_group(dropped.ref.group_id, true);

		argtype = INT8OID;
		value = Int64GetDatum(dropped.ref.group_id);
		rc = pgq_execute_fresh("DELETE FROM pgq.groups "
							   "WHERE group_id " OP("=") " $1 "
							   "RETURNING group_id, created_at, owner, "
							   "consumers, producers, group_name",
							   1, &argtype, &value);
		if (rc != SPI_OK_DELETE_RETURNING)
			elog(ERROR, "could not delete group: %s", SPI_result_code_string(rc));
		if (SPI_processed > 0)
			break;
		/* dropped by another transaction meanwhile */
		pgq_unlock_group(dropped.ref.group_id, true);
	}
	pgq_group_ref_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
							 &group);

	/* only the owner may drop; an error undoes the delete */
	strlcpy(dropped.name, SPI_getvalue(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 6),
			sizeof(dropped.name));
	pgq_set_privileges(&dropped,
					   DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc,
													  3, &isnull)),
					   SPI_getbinval(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 4, &isnull),
					   SPI_getbinval(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 5, &isnull));
	pgq_check_privilege(&dropped, PGQ_PRIV_ADMIN);
	pgq_invalidate_groups();

	pgq_xact_remember_drop(&group);
	value = Int64GetDatum(group.group_id);
	rc = pgq_execute_fresh("DELETE FROM pgq.blocks "
						   "WHERE group_id " OP("=") " $1",
						   1, &argtype, &value);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not delete blocks: %s", SPI_result_code_string(rc));

	/*
	 * One statement for every state of item: a row that a concurrent
	 * transaction moves from one state to another is rechecked in its new
	 * state, which the statement also covers, once that transaction ends.
	 */
	nclasses = pgq_item_classes(&classes);
	initStringInfo(&sql);
	appendStringInfoString(&sql, "DELETE FROM pgq.items "
						   "WHERE group_id " OP("=") " $1 AND (");
	for (int i = 0; i < nclasses; i++)
		appendStringInfo(&sql, "%s(%s)", i > 0 ? " OR " : "", classes[i]);
	appendStringInfoChar(&sql, ')');
	rc = pgq_execute_fresh(sql.data, 1, &argtype, &value);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not delete items: %s", SPI_result_code_string(rc));

	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(true);
}
