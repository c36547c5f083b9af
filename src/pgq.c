/*-------------------------------------------------------------------------
 *
 * pgq.c
 *	  Module load: settings, shared memory hooks, transaction callbacks, and
 *	  small checks shared by the SQL-callable functions.
 *
 * pgq works without shared_preload_libraries; preloading adds the shared
 * state of shmem.c (claim hints and claimed counts).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "advisory.h"
#include "events.h"
#include "lease.h"
#include "materialize.h"
#include "quota.h"
#include "shmem.h"
#include "wait.h"
#include "worker.h"
#include "xact.h"

PG_MODULE_MAGIC;

int			pgq_max_groups = 1024;
int			pgq_materialize_timeout = 0;	/* milliseconds, 0 for none */
int			pgq_max_materialize_timeout = 0;	/* milliseconds, 0 for none */
int			pgq_key_lookups = 100;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

/* Ask for pgq's shared memory and its lock (from shmem_request_hook). */
static void
pgq_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(add_size(pgq_shmem_size(),
											 pgq_wait_shmem_size()),
									pgq_lease_shmem_size()));
	RequestNamedLWLockTranche("pgq", 2);
}

/* Create or attach to pgq's shared memory (PostgreSQL calls this once). */
static void
pgq_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	pgq_shmem_init();
	pgq_wait_shmem_init();
	pgq_lease_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Module load: in the postmaster when preloaded, else in each backend that
 * first calls a pgq function.
 */
void
_PG_init(void)
{
	/*
	 * Shared memory, and the setting that sizes it, exist only when pgq is
	 * preloaded: a PGC_POSTMASTER setting cannot be defined later.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("pgq.max_groups",
								"Number of groups whose claim state pgq keeps in shared memory.",
								"Idle groups make room for busy ones.  Groups left without room still work, but claims on them scan from the start of the group and their claimed count shows as NULL.",
								&pgq_max_groups,
								1024, 16, 1000000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("pgq.max_groups_per_role",
								"Most of pgq.max_groups' entries that one role's calls may hold.",
								"-1 means half of pgq.max_groups.  A role past it reuses its own idle entries; its other groups go without one.",
								&pgq_max_groups_per_role,
								-1, -1, 1000000,
								PGC_SUSET,
								0,
								NULL, NULL, NULL);

		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = pgq_shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = pgq_shmem_startup;

		pgq_worker_init();
	}

	DefineCustomIntVariable("pgq.key_lookups",
							"Keyed enqueues that look their key up before inserting, after the session met a taken key.",
							"A keyed enqueue inserts at once and lets the unique index find a taken key, which then leaves a dead row version.",
							&pgq_key_lookups,
							100, 0, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pgq.materialize_timeout",
							"Time an asynchronous materialization may run before it is canceled.",
							"0 means no limit.  create_group(timeout => ...) overrides it for one group.",
							&pgq_materialize_timeout,
							0, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pgq.max_materialize_timeout",
							"Longest time an asynchronous materialization may run before it is canceled.",
							"0 means no limit.  Caps pgq.materialize_timeout and create_group(timeout => ...); set by superusers, for one role with ALTER ROLE.",
							&pgq_max_materialize_timeout,
							0, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	pgq_materialize_define_settings();
	pgq_quota_init();
	pgq_xact_init();
	pgq_advisory_init();
	pgq_wait_init();
	pgq_events_init();
	pgq_lease_init();

	/*
	 * Last, once every setting is defined: this removes the placeholders of
	 * pgq.* names still undefined, with the values postgresql.conf gave them.
	 */
	MarkGUCPrefixReserved("pgq");
}

/*
 * Reject a group name that is NULL-free but empty or too long.  NULL is
 * checked by the callers, which know the argument's name.
 */
void
pgq_check_name(text *name)
{
	char	   *str = text_to_cstring(name);
	int			len = pg_mbstrlen(str);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("group name must not be empty")));
	if (len > PGQ_MAX_GROUP_NAME_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("group name is too long"),
				 errdetail("The name has %d characters; the limit is %d.",
						   len, PGQ_MAX_GROUP_NAME_LEN)));
	pfree(str);
}

/* Error out on a NULL argument, naming it. */
void
pgq_check_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", argname)));
}

/*
 * The attempt argument that a lease-mode call requires; the error names a
 * queue's items if "item", else blocks.
 */
int32
pgq_required_attempt(FunctionCallInfo fcinfo, int argno, bool item)
{
	if (!PG_ARGISNULL(argno))
		return PG_GETARG_INT32(argno);
	if (item)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("attempt is required for items of lease-mode queues"),
				 errhint("Pass the attempt that pgq.claim() returned with the item.")));
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("attempt is required for blocks of lease-mode groups"),
			 errhint("Pass the attempt that pgq.claim() returned with the block.")));
	pg_unreachable();
}

/* Refuse writes during recovery with the error a standby gives. */
void
pgq_check_not_in_recovery(const char *what)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot %s during recovery", what),
				 errhint("pgq writes to its tables: connect to the primary.")));
}

/*
 * Is the interval a duration between "least" and 366 days, without months
 * ("1 month" has no fixed length)?
 */
static bool
duration_within(const Interval *span, int64 least)
{
	int64		usecs;

	/* with days bounded, the sum below cannot overflow */
	if (span->month != 0 || span->day > 366 || span->day < -366 ||
		span->time > 400 * USECS_PER_DAY || span->time < -400 * USECS_PER_DAY)
		return false;
	usecs = span->time + (int64) span->day * USECS_PER_DAY;
	return usecs >= least && usecs <= 366 * USECS_PER_DAY;
}

/* A lease is more than 0 and at most 366 days. */
void
pgq_check_lease(const Interval *lease)
{
	if (!duration_within(lease, 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be more than 0 and at most 366 days, without months"),
				 errdetail("The lease given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(lease))))));
}

/* A materialization timeout is more than 0 and at most 366 days. */
void
pgq_check_timeout(const Interval *timeout)
{
	if (!duration_within(timeout, 1000))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be at least 1 millisecond and at most 366 days, without months"),
				 errdetail("The timeout given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(timeout)))),
				 errhint("Pass NULL for no timeout.")));
}

/* A duration argument: 0 to 366 days, without months. */
void
pgq_check_duration(const char *argname, const Interval *span)
{
	if (!duration_within(span, 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and 366 days, without months",
						argname),
				 errdetail("The value given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span))))));
}

/* A duration checked by duration_within(), in microseconds. */
int64
pgq_duration_usecs(const Interval *span)
{
	return span->time + (int64) span->day * USECS_PER_DAY;
}

/* A retry delay is 0 to 366 days. */
void
pgq_check_retry_after(const Interval *retry_after)
{
	if (!duration_within(retry_after, 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_after must be between 0 and 366 days, without months"),
				 errdetail("The delay given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(retry_after))))));
}

/*
 * Read the array argument "argno" (of element type "elemtype") into *out:
 * its elements, or n = -1 if it is NULL.  It must be one-dimensional.
 */
void
pgq_get_array_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
				  Oid elemtype, PgqArrayArg *out)
{
	ArrayType  *array;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	out->n = -1;
	out->values = NULL;
	out->nulls = NULL;
	if (PG_ARGISNULL(argno))
		return;
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", argname)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign,
					  &out->values, &out->nulls, &out->n);
}

/* qsort and bsearch comparator: int64s, ascending */
int
pgq_compare_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * The ids that a batch call handled, ids[0..n-1] (sorted in place), as a
 * bigint[] in ascending order: what pgq.complete_many() and the other batch
 * forms return.  In the current memory context.
 */
Datum
pgq_sorted_ids(int64 *ids, int n)
{
	Datum	   *elems = palloc(Max(n, 1) * sizeof(Datum));

	qsort(ids, n, sizeof(int64), pgq_compare_int64);
	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* start + span, as the server computes timestamptz + interval */
TimestampTz
pgq_time_after(TimestampTz start, const Interval *span)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(start),
												   IntervalPGetDatum(span)));
}

/*
 * Prepare a statement once per backend and keep it, with a generic plan:
 * planning pgq's short statements afresh on every call (the plan cache's
 * custom plans) cost more than running them.  Generic plans are made for the
 * statistics of their time; pgq.create_group() invalidates them, and so does
 * every ANALYZE of pgq.blocks.
 */
SPIPlanPtr
pgq_keep_plan(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes,
										  CURSOR_OPT_GENERIC_PLAN);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/* Parse pgq.groups.state. */
PgqGroupState
pgq_parse_state(const char *state)
{
	if (strcmp(state, "materializing") == 0)
		return PGQ_GROUP_MATERIALIZING;
	if (strcmp(state, "ready") == 0)
		return PGQ_GROUP_READY;
	if (strcmp(state, "failed") == 0)
		return PGQ_GROUP_FAILED;
	elog(ERROR, "unknown group state \"%s\"", state);
	return PGQ_GROUP_FAILED;	/* keep the compiler quiet */
}

/* Parse a claim mode name given by a user. */
PgqMode
pgq_parse_mode(const char *mode)
{
	if (strcmp(mode, "transaction") == 0)
		return PGQ_MODE_TRANSACTION;
	if (strcmp(mode, "lease") == 0)
		return PGQ_MODE_LEASE;
	if (strcmp(mode, "advisory") == 0)
		return PGQ_MODE_ADVISORY;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown claim mode \"%s\"", mode),
			 errhint("The claim modes are \"transaction\", \"lease\" and \"advisory\".")));
	pg_unreachable();
}

/* The name of a claim mode, as stored and as users write it. */
const char *
pgq_mode_name(PgqMode mode)
{
	switch (mode)
	{
		case PGQ_MODE_TRANSACTION:
			return "transaction";
		case PGQ_MODE_LEASE:
			return "lease";
		case PGQ_MODE_ADVISORY:
			return "advisory";
	}
	pg_unreachable();
}
