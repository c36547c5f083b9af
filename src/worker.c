/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  Background maintenance: a launcher, and a short pass per database.
 *
 * When pgq is preloaded, a launcher worker (connected to no database) wakes
 * every pgq.maintenance_interval, lists the databases that accept
 * connections, and runs one maintenance pass in each, one database at a
 * time, in a dynamic worker that connects to it.  A pass does what no
 * transaction announces:
 *
 *	- wakes the waiting claims of groups whose leases ran out or whose
 *	  retries came due (they would otherwise wait for their recheck);
 *	- marks failed the asynchronous materializations whose writer is gone;
 *	- removes drained and failed groups once pgq.retention has passed;
 *	- applies each queue's retention to its finished items: past retention
 *	  it drops their payloads, data, results and errors and keeps their
 *	  keys, past key_retention it removes them (see apply_queue_retention());
 *	- clears out advisory-worker registrations whose session is gone.
 *
 * A pass holds its database only for a moment, and the launcher none at
 * all: DROP DATABASE is never kept waiting for long.  Databases without the
 * extension cost one catalog lookup per pass.  A pass uses one worker slot,
 * only while it runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "parser/scansup.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "pgq.h"
#include "advisory.h"
#include "due.h"
#include "group.h"
#include "materialize.h"
#include "shmem.h"
#include "wait.h"
#include "worker.h"
#include "xact.h"

static int	pgq_maintenance_interval = 10;	/* seconds */
static int	pgq_retention = 7 * 24 * 3600;	/* seconds, 0 for forever */

/* At most this many group names in one log line; then how many more. */
#define PGQ_LOG_NAMES	10

/* A database for the launcher to visit. */
typedef struct PassDatabase
{
	Oid			oid;
	NameData	name;
} PassDatabase;

/* The database of this maintenance pass, for its log lines. */
static char pass_database[NAMEDATALEN];

/* Wake the launcher when the current transaction commits. */
static bool wake_at_commit = false;
static bool wake_callback_registered = false;

PG_FUNCTION_INFO_V1(pgq_wake_maintenance);
PG_FUNCTION_INFO_V1(pgq_retention_interval_in);
PG_FUNCTION_INFO_V1(pgq_retention_interval_out);
PG_FUNCTION_INFO_V1(pgq_retention_interval_recv);
PG_FUNCTION_INFO_V1(pgq_retention_interval_send);

/*
 * A queue's retention or key retention that keeps for ever: 'infinity',
 * stored as PostgreSQL 17 stores an infinite interval, which 15 and 16
 * cannot read as an interval (see pgq.retention_interval).
 */
#define RETENTION_IS_INFINITE(i) \
	((i)->month == PG_INT32_MAX && (i)->day == PG_INT32_MAX && \
	 (i)->time == PG_INT64_MAX)

/* The longest finite retention: its cutoff must be a valid timestamp. */
#define RETENTION_MAX_MONTHS	(1000 * MONTHS_PER_YEAR)

PGDLLEXPORT void pgq_launcher_main(Datum arg);
PGDLLEXPORT void pgq_maintenance_main(Datum arg);

/*
 * Define the setting and register the launcher; called from _PG_init() while
 * preloading.
 */
void
pgq_worker_init(void)
{
	BackgroundWorker worker;

	DefineCustomIntVariable("pgq.maintenance_interval",
							"Time between pgq's maintenance passes over the databases.",
							"0 turns background maintenance off.",
							&pgq_maintenance_interval,
							10, 0, 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pgq.retention",
							"How long drained and failed groups are kept before a maintenance pass removes them.",
							"Counted from when a pass first finds a group drained, or from its failure.  0 keeps them forever.",
							&pgq_retention,
							7 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	strlcpy(worker.bgw_library_name, "pgq", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "pgq_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "pgq launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "pgq launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Are maintenance passes on?  Only meaningful when pgq is preloaded. */
bool
pgq_maintenance_on(void)
{
	return pgq_maintenance_interval > 0;
}

/*
 * The databases a pass should visit: those that accept connections and are
 * neither templates nor half-dropped, as PassDatabase entries.  Returned in
 * the current memory context.
 */
static List *
list_databases(void)
{
	List	   *dbs = NIL;
	MemoryContext cxt = CurrentMemoryContext;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		PassDatabase *entry;
		MemoryContext old;

		if (!db->datallowconn || db->datistemplate)
			continue;
#ifdef DATCONNLIMIT_INVALID_DB
		if (database_is_invalid_form(db))
			continue;
#endif
		old = MemoryContextSwitchTo(cxt);
		entry = palloc(sizeof(PassDatabase));
		entry->oid = db->oid;
		entry->name = db->datname;
		dbs = lappend(dbs, entry);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	return dbs;
}

/*
 * Run a maintenance pass in one database and wait for it to end.  False if
 * no worker slot was free: the launcher tries again next time.
 */
static bool
run_pass(Oid dboid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pgq", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "pgq_maintenance_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pgq maintenance of database %u",
			 dboid);
	strlcpy(worker.bgw_type, "pgq maintenance", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dboid);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return false;
	(void) WaitForBackgroundWorkerShutdown(handle);
	pfree(handle);
	return true;
}

/* The launcher is going away: nobody is to wake it. */
static void
forget_launcher(int code, Datum arg)
{
	pgq_launcher_latch_set(NULL);
}

/* Say in pg_stat_activity how many passes the launcher has made. */
static void
report_passes(int64 passes)
{
	char		activity[64];

	snprintf(activity, sizeof(activity),
			 "maintenance passes done: " INT64_FORMAT, passes);
	pgstat_report_activity(STATE_IDLE, activity);
}

/*
 * The launcher: a maintenance pass over every database, then sleep until
 * the next one is due or pgq.wake_maintenance() wakes it.  Reloads
 * its configuration on SIGHUP and exits promptly on SIGTERM.
 */
void
pgq_launcher_main(Datum arg)
{
	MemoryContext passcxt;
	bool		warned = false;
	int64		passes = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	passcxt = AllocSetContextCreate(TopMemoryContext, "pgq launcher",
									ALLOCSET_DEFAULT_SIZES);
	pgq_launcher_latch_set(MyLatch);
	before_shmem_exit(forget_launcher, (Datum) 0);
	for (;;)
	{
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (pgq_maintenance_interval > 0)
		{
			MemoryContext old = MemoryContextSwitchTo(passcxt);
			ListCell   *lc;

			foreach(lc, list_databases())
			{
				PassDatabase *db = lfirst(lc);

				CHECK_FOR_INTERRUPTS();
				if (!run_pass(db->oid) && !warned)
				{
					ereport(LOG,
							(errmsg("pgq: database \"%s\": could not start a maintenance worker",
									NameStr(db->name)),
							 errhint("Raise max_worker_processes: pgq's maintenance needs one free slot at a time.")));
					warned = true;
				}
			}
			MemoryContextSwitchTo(old);
			MemoryContextReset(passcxt);
			passes++;
			report_passes(passes);
		}

		sleep_ms = pgq_maintenance_interval > 0 ?
			pgq_maintenance_interval * 1000L : 3600 * 1000L;
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * pgq.retention_interval's input: 'infinity' (any case, with blanks
 * around), or what interval reads.
 */
Datum
pgq_retention_interval_in(PG_FUNCTION_ARGS)
{
	char	   *str = PG_GETARG_CSTRING(0);
	char	   *start = str;
	size_t		len;
	Interval   *result;

	while (scanner_isspace(*start))
		start++;
	len = strlen(start);
	while (len > 0 && scanner_isspace(start[len - 1]))
		len--;
	if ((len == 8 && pg_strncasecmp(start, "infinity", 8) == 0) ||
		(len == 9 && pg_strncasecmp(start, "+infinity", 9) == 0))
	{
		result = palloc(sizeof(Interval));
		result->month = PG_INT32_MAX;
		result->day = PG_INT32_MAX;
		result->time = PG_INT64_MAX;
		PG_RETURN_INTERVAL_P(result);
	}
	return DirectFunctionCall3(interval_in, CStringGetDatum(str),
							   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

/* pgq.retention_interval's output: 'infinity', or as interval writes it. */
Datum
pgq_retention_interval_out(PG_FUNCTION_ARGS)
{
	Interval   *span = PG_GETARG_INTERVAL_P(0);

	if (RETENTION_IS_INFINITE(span))
		PG_RETURN_CSTRING(pstrdup("infinity"));
	return DirectFunctionCall1(interval_out, IntervalPGetDatum(span));
}

/* pgq.retention_interval's binary input: as interval's. */
Datum
pgq_retention_interval_recv(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall3(interval_recv, PG_GETARG_DATUM(0),
							   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

/* pgq.retention_interval's binary output: as interval's. */
Datum
pgq_retention_interval_send(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall1(interval_send, PG_GETARG_DATUM(0));
}

/*
 * A queue's retention or key retention: infinity, or 0 to 1000 years (its
 * cutoff, now less the span, must be a timestamp).
 */
void
pgq_check_retention(const char *argname, const Interval *span)
{
	Interval	zero = {0};
	Interval	most = {0};

	if (RETENTION_IS_INFINITE(span))
		return;
	most.month = RETENTION_MAX_MONTHS;
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
										  IntervalPGetDatum(span),
										  IntervalPGetDatum(&zero))) < 0 ||
		DatumGetInt32(DirectFunctionCall2(interval_cmp,
										  IntervalPGetDatum(span),
										  IntervalPGetDatum(&most))) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and 1000 years, or infinity",
						argname),
				 errdetail("The value given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span)))),
				 errhint("Pass 'infinity' to keep for ever, or NULL for pgq.retention.")));
}

/*
 * A queue's key retention is at least its retention: given both, a shorter
 * key_retention is an error.  (Should one of them be pgq.retention, a pass
 * takes the longer of the two as the key retention instead.)
 */
void
pgq_check_key_retention(bool has_retention, Datum retention,
						bool has_key_retention, Datum key_retention)
{
	Interval   *keep;
	Interval   *key_keep;

	if (!has_retention || !has_key_retention)
		return;
	keep = DatumGetIntervalP(retention);
	key_keep = DatumGetIntervalP(key_retention);
	if (RETENTION_IS_INFINITE(key_keep) ||
		(!RETENTION_IS_INFINITE(keep) &&
		 DatumGetInt32(DirectFunctionCall2(interval_cmp, key_retention,
										   retention)) >= 0))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("key_retention must not be shorter than retention"),
			 errdetail("A key is kept as long as its item at least: retention is %s, key_retention %s.",
					   DatumGetCString(DirectFunctionCall1(pgq_retention_interval_out,
														   retention)),
					   DatumGetCString(DirectFunctionCall1(pgq_retention_interval_out,
														   key_retention)))));
}

/*
 * Are two retention settings (NULL: the cluster's) the same?  Intervals
 * compare as interval's "=" does: '1 day' is '24 hours'.
 */
bool
pgq_retention_equal(bool isnull1, Datum d1, bool isnull2, Datum d2)
{
	if (isnull1 || isnull2)
		return isnull1 && isnull2;
	return DatumGetBool(DirectFunctionCall2(interval_eq, d1, d2));
}

/*
 * Wake the waiting claims of groups that have leases run out, retries come
 * due or delayed items come due: no transaction announces those.  Blocks
 * are looked for as claims look for them, walking the blocks in flight of
 * each lease or advisory group that claims have used (pgq_block_due()); items
 * through their due index.
 */
static void
wake_due_groups(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			rc;

	rc = SPI_execute("SELECT g.group_id, g.created_at, g.kind " OP("=") " 'query' "
					 "FROM pgq.groups g "
					 "WHERE (g.kind " OP("=") " 'query' "
					 "AND g.mode " OP("<>") " 'transaction') "
					 "OR EXISTS (SELECT FROM pgq.items i "
					 "WHERE i.group_id " OP("=") " g.group_id "
					 "AND i.state " OP("=") " ANY ('{c,r}'::pg_catalog.\"char\"[]) "
					 "AND i.due_at " OP("<=") " pg_catalog.now())",
					 true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read due blocks: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		PgqGroupRef group;
		bool		isnull;
		bool		blocks;

		pgq_group_ref_from_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
								 1, &group);
		blocks = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
											SPI_tuptable->tupdesc, 3,
											&isnull));
		/*
		 * Only claims that wait need waking, and they made an entry, unless
		 * the table was full (pgq.max_groups): those are woken blindly, to
		 * look for themselves.  They look again every
		 * pgq.wait_recheck_interval anyway: trust the last look's time
		 * however old, and walk only once it has come.
		 */
		if (!blocks || !pgq_group_has_entry(&group) ||
			(pgq_due_recorded(&group) <= now &&
			 pgq_block_due(&group, now, 0, NULL) > 0))
			pgq_wake_group(&group);
	}
}

/*
 * Mark failed the materializing groups whose writer is gone: a crash, a
 * restart or pg_terminate_backend stopped it halfway.  The query's order
 * need not be repeatable, and consumers may have taken some of its blocks
 * already, so the group cannot be resumed or redone behind their back.
 */
static void
fail_dead_materializations(void)
{
	Oid			argtypes[1] = {INT8OID};
	int			rc;
	uint64		ngroups;
	SPITupleTable *groups;

	rc = SPI_execute("SELECT group_id, created_at, group_name FROM pgq.groups "
					 "WHERE state " OP("=") " 'materializing'", false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read groups: %s", SPI_result_code_string(rc));
	ngroups = SPI_processed;
	groups = SPI_tuptable;
	for (uint64 i = 0; i < ngroups; i++)
	{
		PgqGroupRef group;
		Datum		values[1];

		CHECK_FOR_INTERRUPTS();
		pgq_group_ref_from_tuple(groups->vals[i], groups->tupdesc, 1, &group);
		if (pgq_materializer_alive(group.group_id))
			continue;

		/*
		 * A writer that just finished changed the state: then this is a
		 * no-op.  A row that someone holds locked waits for the next pass.
		 */
		values[0] = Int64GetDatum(group.group_id);
		rc = SPI_execute_with_args("UPDATE pgq.groups SET state = 'failed', "
								   "finished_at = pg_catalog.clock_timestamp(), "
								   "error = 'materialization interrupted: its worker stopped "
								   "(server crash or restart, or pg_terminate_backend) after '"
								   " OPERATOR(pg_catalog.||) COALESCE(total_ids, 0) "
								   " OPERATOR(pg_catalog.||) ' ids; the group holds only part of "
								   "the query''s ids: drop it and create it again' "
								   "WHERE group_id " OP("=") " $1 "
								   "AND group_id IN (SELECT group_id FROM pgq.groups "
								   "WHERE group_id " OP("=") " $1 "
								   "AND state " OP("=") " 'materializing' "
								   "FOR NO KEY UPDATE SKIP LOCKED)",
								   1, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE)
			elog(ERROR, "could not update group: %s", SPI_result_code_string(rc));
		if (SPI_processed == 1)
		{
			pgq_xact_wake_at_commit(&group);
			pgq_invalidate_groups();
			ereport(LOG,
					(errmsg("pgq: database \"%s\": materialization of group \"%s\" was interrupted; the group is marked failed",
							pass_database,
							SPI_getvalue(groups->vals[i], groups->tupdesc, 3))));
		}
	}
}

/*
 * Remove one group past retention, with its blocks, unless another
 * transaction holds its row or one of its blocks locked: then leave it for
 * the next pass.  A maintenance pass never waits for a lock that a user can
 * hold (a role that keeps a transaction open after pgq.pause() of its own
 * group would otherwise hold up every database's maintenance).  Runs the
 * statements in a subtransaction of its own, with NOWAIT, so that a lock
 * found taken undoes this group's removal and nothing else.  True if the
 * group was removed.
 */
static bool
remove_group_nowait(const PgqGroupRef *group)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	Oid			argtypes[2] = {INT8OID, INT4OID};
	Datum		values[2];
	volatile bool removed = false;

	values[0] = Int64GetDatum(group->group_id);
	values[1] = Int32GetDatum(pgq_retention);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		int			rc;

		/* still past retention (not resumed, say) once locked */
		rc = SPI_execute_with_args("SELECT FROM pgq.groups "
								   "WHERE group_id " OP("=") " $1 "
								   "AND finished_at " OP("<") " (pg_catalog.now() "
								   OP("-") " pg_catalog.make_interval(secs => $2)) "
								   "FOR UPDATE NOWAIT",
								   2, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not lock group: %s", SPI_result_code_string(rc));
		if (SPI_processed > 0)
		{
			pgq_xact_remember_drop(group);
			rc = SPI_execute_with_args("SELECT FROM pgq.blocks "
									   "WHERE group_id " OP("=") " $1 "
									   "FOR UPDATE NOWAIT",
									   1, argtypes, values, NULL, false, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "could not lock blocks: %s",
					 SPI_result_code_string(rc));
			rc = SPI_execute_with_args("DELETE FROM pgq.blocks "
									   "WHERE group_id " OP("=") " $1",
									   1, argtypes, values, NULL, false, 0);
			if (rc != SPI_OK_DELETE)
				elog(ERROR, "could not delete blocks: %s",
					 SPI_result_code_string(rc));
			rc = SPI_execute_with_args("DELETE FROM pgq.groups "
									   "WHERE group_id " OP("=") " $1",
									   1, argtypes, values, NULL, false, 0);
			if (rc != SPI_OK_DELETE)
				elog(ERROR, "could not delete group: %s",
					 SPI_result_code_string(rc));
			removed = SPI_processed > 0;
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* roll back first, whatever the error, as PL/pgSQL does */
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return removed;
}

/*
 * Append name number i of n to a log line's list, quoted: the first
 * PGQ_LOG_NAMES of them, then how many more there are, so that a line stays
 * readable however many groups a pass removed.
 */
static void
append_name(StringInfo buf, uint64 i, uint64 n, const char *name)
{
	if (i < PGQ_LOG_NAMES)
		appendStringInfo(buf, "%s\"%s\"", i > 0 ? ", " : "", name);
	else if (i == PGQ_LOG_NAMES)
		appendStringInfo(buf, " and " UINT64_FORMAT " more", n - i);
}

/*
 * The cutoff of a queue's retention setting (NULL: pgq.retention): finished
 * items that finished before it are past it.  False if it keeps for ever.
 */
static bool
retention_cutoff(bool isnull, Datum setting, TimestampTz now,
				 TimestampTz *cutoff)
{
	Interval   *span;

	if (isnull)
	{
		if (pgq_retention == 0)
			return false;
		*cutoff = now - (int64) pgq_retention * USECS_PER_SEC;
		return true;
	}
	span = DatumGetIntervalP(setting);
	if (RETENTION_IS_INFINITE(span))
		return false;
	*cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													  TimestampTzGetDatum(now),
													  IntervalPGetDatum(span)));
	return true;
}

/*
 * Log what a pass did to how many finished items ("what ... items past
 * ...") of which queues: names and counts (int64 *) in name order.
 */
static void
log_queue_counts(const char *what, const char *past, List *names,
				 List *counts)
{
	StringInfoData queues;
	int64		total = 0;
	ListCell   *lc1,
			   *lc2;

	if (names == NIL)
		return;
	initStringInfo(&queues);
	forboth(lc1, names, lc2, counts)
	{
		int			i = foreach_current_index(lc1);
		int64		n = *(int64 *) lfirst(lc2);

		total += n;
		append_name(&queues, i, list_length(names), lfirst(lc1));
		if (i < PGQ_LOG_NAMES)
			appendStringInfo(&queues, " (" INT64_FORMAT ")", n);
	}
	ereport(LOG,
			(errmsg("pgq: database \"%s\": %s " INT64_FORMAT " finished items past %s from %s: %s",
					pass_database, what, total, past,
					list_length(names) == 1 ? "queue" : "queues",
					queues.data)));
}

/*
 * Apply each queue's retention to its finished (done and dead) items: past
 * key_retention (never shorter than retention) remove them, with their
 * keys; past retention drop their payloads, data, results and errors, and
 * keep the rest of the row, whose key stays taken in items_key_idx, so that
 * an enqueue of the key finds it as before.  Each statement reads only the
 * rows it changes, through items_finished_idx (rows with payloads) and
 * items_kept_keys_idx (rows without), however many keys are kept.  Rows
 * that another transaction holds locked are left for the next pass.
 */
static void
apply_queue_retention(void)
{
	Oid			argtypes[2] = {INT8OID, TIMESTAMPTZOID};
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	SPITupleTable *queues;
	uint64		nqueues;
	List	   *removed_names = NIL,
			   *removed_counts = NIL,
			   *stripped_names = NIL,
			   *stripped_counts = NIL;
	int			rc;

	/* a database still at 0.1 has pgq.retention only */
	if (get_attnum(get_relname_relid("groups", get_namespace_oid("pgq", false)),
				   "retention") != InvalidAttrNumber)
		rc = SPI_execute("SELECT group_id, group_name, retention, key_retention "
						 "FROM pgq.groups WHERE kind " OP("=") " 'queue' "
						 "ORDER BY group_name", true, 0);
	else
		rc = SPI_execute("SELECT group_id, group_name, NULL, NULL "
						 "FROM pgq.groups WHERE kind " OP("=") " 'queue' "
						 "ORDER BY group_name", true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read queues: %s", SPI_result_code_string(rc));
	queues = SPI_tuptable;
	nqueues = SPI_processed;
	for (uint64 i = 0; i < nqueues; i++)
	{
		HeapTuple	row = queues->vals[i];
		bool		isnull;
		bool		key_isnull;
		Datum		keep = SPI_getbinval(row, queues->tupdesc, 3, &isnull);
		Datum		key_keep = SPI_getbinval(row, queues->tupdesc, 4,
											 &key_isnull);
		TimestampTz cutoff;
		TimestampTz key_cutoff;
		Datum		values[2];

		CHECK_FOR_INTERRUPTS();
		if (!retention_cutoff(isnull, keep, now, &cutoff))
			continue;			/* keeps everything for ever */
		values[0] = SPI_getbinval(row, queues->tupdesc, 1, &isnull);

		/* key retention, at least as long as retention */
		if (retention_cutoff(key_isnull, key_keep, now, &key_cutoff))
		{
			values[1] = TimestampTzGetDatum(Min(key_cutoff, cutoff));
			rc = SPI_execute_with_args("DELETE FROM pgq.items "
									   "WHERE ctid " OP("=") " ANY (ARRAY("
									   "SELECT ctid FROM pgq.items "
									   "WHERE group_id " OP("=") " $1 "
									   "AND state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) "
									   "AND (payload IS NOT NULL OR data IS NOT NULL) "
									   "AND finished_at " OP("<") " $2 "
									   "FOR UPDATE SKIP LOCKED) " OP("||") " ARRAY("
									   "SELECT ctid FROM pgq.items "
									   "WHERE group_id " OP("=") " $1 "
									   "AND state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) "
									   "AND payload IS NULL AND data IS NULL "
									   "AND finished_at " OP("<") " $2 "
									   "FOR UPDATE SKIP LOCKED))",
									   2, argtypes, values, NULL, false, 0);
			if (rc != SPI_OK_DELETE)
				elog(ERROR, "could not delete items: %s",
					 SPI_result_code_string(rc));
			if (SPI_processed > 0)
			{
				int64	   *n = palloc(sizeof(int64));

				*n = (int64) SPI_processed;
				removed_names = lappend(removed_names,
										SPI_getvalue(row, queues->tupdesc, 2));
				removed_counts = lappend(removed_counts, n);
			}
		}

		values[1] = TimestampTzGetDatum(cutoff);
		rc = SPI_execute_with_args("UPDATE pgq.items SET payload = NULL, "
								   "data = NULL, result = NULL, "
								   "result_data = NULL, last_error = NULL, "
								   "errors = NULL "
								   "WHERE ctid " OP("=") " ANY (ARRAY("
								   "SELECT ctid FROM pgq.items "
								   "WHERE group_id " OP("=") " $1 "
								   "AND state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) "
								   "AND (payload IS NOT NULL OR data IS NOT NULL) "
								   "AND finished_at " OP("<") " $2 "
								   "FOR UPDATE SKIP LOCKED))",
								   2, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE)
			elog(ERROR, "could not update items: %s", SPI_result_code_string(rc));
		if (SPI_processed > 0)
		{
			int64	   *n = palloc(sizeof(int64));

			*n = (int64) SPI_processed;
			stripped_names = lappend(stripped_names,
									 SPI_getvalue(row, queues->tupdesc, 2));
			stripped_counts = lappend(stripped_counts, n);
		}
	}
	log_queue_counts("removed", "key retention",
					 removed_names, removed_counts);
	log_queue_counts("dropped the payloads of", "retention, keeping their keys,",
					 stripped_names, stripped_counts);
}

/*
 * Note when drained groups became drained, and remove drained and failed
 * groups, with their blocks, once pgq.retention has passed since.  A group
 * counts as drained when no block of it is left, not even a dead-lettered
 * one: those wait for a person.  A removed group's name is free again.
 * Queues are not removed; their finished items are, as each queue's
 * retention says (apply_queue_retention()).  Rows that another transaction
 * holds locked are skipped, and looked at again by the next pass: a pass
 * never waits for a user's transaction.
 */
static void
apply_retention(void)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1];
	int			rc;
	uint64		ngroups;
	List	   *removed = NIL;
	ListCell   *lc;
	StringInfoData names;
	SPITupleTable *groups;

	rc = SPI_execute("UPDATE pgq.groups "
					 "SET finished_at = pg_catalog.clock_timestamp() "
					 "WHERE group_id IN (SELECT g.group_id FROM pgq.groups g "
					 "WHERE g.kind " OP("=") " 'query' "
					 "AND g.state " OP("=") " 'ready' AND g.finished_at IS NULL "
					 "AND NOT EXISTS (SELECT FROM pgq.blocks b "
					 "WHERE b.group_id " OP("=") " g.group_id) "
					 "FOR NO KEY UPDATE OF g SKIP LOCKED)",
					 false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update groups: %s", SPI_result_code_string(rc));
	apply_queue_retention();
	if (pgq_retention == 0)
		return;

	values[0] = Int32GetDatum(pgq_retention);
	rc = SPI_execute_with_args("SELECT group_id, created_at, group_name "
							   "FROM pgq.groups "
							   "WHERE finished_at " OP("<") " (pg_catalog.now() "
							   OP("-") " pg_catalog.make_interval(secs => $1)) "
							   "ORDER BY group_name",
							   1, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read groups: %s", SPI_result_code_string(rc));
	ngroups = SPI_processed;
	groups = SPI_tuptable;
	for (uint64 i = 0; i < ngroups; i++)
	{
		PgqGroupRef group;

		CHECK_FOR_INTERRUPTS();
		pgq_group_ref_from_tuple(groups->vals[i], groups->tupdesc, 1, &group);
		if (remove_group_nowait(&group))
			removed = lappend(removed,
							  SPI_getvalue(groups->vals[i], groups->tupdesc, 3));
	}
	if (removed == NIL)
		return;
	initStringInfo(&names);
	foreach(lc, removed)
		append_name(&names, foreach_current_index(lc), list_length(removed),
					lfirst(lc));
	ereport(LOG,
			(errmsg("pgq: database \"%s\": removed %d finished %s past pgq.retention: %s",
					pass_database, list_length(removed),
					list_length(removed) == 1 ? "group" : "groups",
					names.data)));
	pgq_invalidate_groups();
}

/* Wake the launcher at commit, or forget it at abort. */
static void
wake_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_at_commit)
				(void) pgq_launcher_wake();
			wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wake_at_commit = false;
			break;
		default:
			break;
	}
}

/*
 * pgq.wake_maintenance() -> boolean
 *
 * Have the launcher start a pass over every database when this transaction
 * commits, instead of at its next interval: CREATE EXTENSION calls it, so
 * that a new database is looked after at once.  False when there is no
 * launcher (pgq is not preloaded).
 */
Datum
pgq_wake_maintenance(PG_FUNCTION_ARGS)
{
	if (!pgq_shmem_ready())
		PG_RETURN_BOOL(false);
	if (!wake_callback_registered)
	{
		RegisterXactCallback(wake_callback, NULL);
		wake_callback_registered = true;
	}
	wake_at_commit = true;
	PG_RETURN_BOOL(true);
}

/*
 * Name the pass's database in the context of its errors and warnings (its
 * own log lines name it themselves).
 */
static void
pass_context(void *arg)
{
	if (geterrcode() != ERRCODE_SUCCESSFUL_COMPLETION &&
		pass_database[0] != '\0')
		errcontext("pgq maintenance pass in database \"%s\"", pass_database);
}

/*
 * One maintenance pass in the database given as argument; exits when done.
 * Errors end the pass; the next one starts afresh.
 */
void
pgq_maintenance_main(Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	ErrorContextCallback context;
	char	   *name;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	/*
	 * READ COMMITTED, whatever the database's default: a look for due blocks
	 * must take its snapshot after it reads what shared memory knows
	 * (invariant D2 in shmem.c), as claims do.
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	context.callback = pass_context;
	context.arg = NULL;
	context.previous = error_context_stack;
	error_context_stack = &context;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	name = get_database_name(MyDatabaseId);
	if (name != NULL)
		strlcpy(pass_database, name, sizeof(pass_database));
	if (OidIsValid(get_extension_oid("pgq", true)))
	{
		pgstat_report_activity(STATE_RUNNING, "pgq maintenance pass");
		SPI_connect();
		wake_due_groups();
		fail_dead_materializations();
		apply_retention();
		pgq_forget_dead_workers();
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
