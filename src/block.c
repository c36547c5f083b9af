/*-------------------------------------------------------------------------
 *
 * block.c
 *	  Operations on one claimed block or item: complete, release, fail,
 *	  extend; and the batch forms of release and fail, which do for each id
 *	  what the single form does.  Items of queues are handed to queue.c.
 *
 * Each looks the block up, then does what the block's claim mode means.  A
 * block that no longer exists (consumed, dropped) gives false.  The holder
 * proves its claim with the attempt number in lease mode and the worker id
 * in advisory mode; a caller that does not hold the block gets false and
 * changes nothing.  In transaction mode COMMIT and ROLLBACK do this work.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "advisory.h"
#include "block.h"
#include "blockscan.h"
#include "group.h"
#include "itemwrite.h"
#include "lease.h"
#include "privilege.h"
#include "queue.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(pgq_complete);
PG_FUNCTION_INFO_V1(pgq_release);
PG_FUNCTION_INFO_V1(pgq_fail);
PG_FUNCTION_INFO_V1(pgq_extend);
PG_FUNCTION_INFO_V1(pgq_release_many);
PG_FUNCTION_INFO_V1(pgq_fail_many);

/*
 * Start an operation on a block or item: check the id, connect to SPI, look
 * it up and check that the caller may consume its group.  False (all ended)
 * if there is no such block or item, or none that the caller may see.
 * end_block_op() ends the others.
 *
 * A block that the caller's own transaction claimed in transaction mode is
 * deleted, so the lookup cannot find it; it is still a block of a
 * transaction-mode group, which the callers refuse as they refuse the
 * others (the caller could consume it when it claimed it).
 */
static bool
begin_block_op(FunctionCallInfo fcinfo, const char *what, PgqGroup *group,
			   PgqScope *scope)
{
	int64		group_id;
	bool		gone;

	pgq_check_arg_not_null(fcinfo, 0, "block_id");
	pgq_check_not_in_recovery(what);
	pgq_enter(scope);
	SPI_connect();
	if (pgq_lookup_block(PG_GETARG_INT64(0), group) ||
		pgq_lookup_item(PG_GETARG_INT64(0), group))
	{
		pgq_check_privilege(group, PGQ_PRIV_CONSUME);
		return true;
	}
	if (pgq_xact_claimed(PG_GETARG_INT64(0)))
	{
		memset(group, 0, sizeof(PgqGroup));
		group->kind = PGQ_KIND_QUERY;
		group->mode = PGQ_MODE_TRANSACTION;
		return true;
	}
	/* the block or item may exist in a group that the caller may not see */
	gone = !pgq_block_group_id(PG_GETARG_INT64(0), &group_id) &&
		!pgq_item_group_id(PG_GETARG_INT64(0), &group_id);
	SPI_finish();
	pgq_leave(scope);
	/* an advisory lock on a block that is gone is of no use any more */
	if (gone)
		pgq_advisory_forget_block(PG_GETARG_INT64(0));
	return false;
}

/* End an operation begun with begin_block_op(). */
static void
end_block_op(PgqScope *scope)
{
	SPI_finish();
	pgq_leave(scope);
}

/* The worker_id argument that advisory mode requires, checked. */
static void
require_worker(FunctionCallInfo fcinfo, int argno, const PgqGroup *group)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 group->kind == PGQ_KIND_QUEUE ?
				 errmsg("worker_id is required for items of advisory-mode queues") :
				 errmsg("worker_id is required for blocks of advisory-mode groups"),
				 errhint("Pass the id that pgq.register_worker() returned.")));
	pgq_advisory_check_worker_held(PG_GETARG_INT64(argno));
}

/* Refuse an operation that the block's mode does not have. */
static void
refuse_mode(const char *function, const PgqGroup *group, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 group->kind == PGQ_KIND_QUEUE ?
			 errmsg("%s does not apply to items of %s-mode queues",
					function, pgq_mode_name(group->mode)) :
			 errmsg("%s does not apply to blocks of %s-mode groups",
					function, pgq_mode_name(group->mode)),
			 errhint("%s", hint)));
}

#define TRANSACTION_MODE_HINT \
	"In transaction mode, COMMIT consumes the claimed blocks and ROLLBACK gives them back."

/*
 * pgq.complete(block_id, result, attempt, worker_id, result_data) -> boolean
 *
 * Consume a held block, or finish a held item with its result.  False if
 * the caller does not hold it.
 */
Datum
pgq_complete(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	int64		block_id;
	bool		done = false;

	if (!begin_block_op(fcinfo, "complete a block", &group, &scope))
		PG_RETURN_BOOL(false);
	block_id = PG_GETARG_INT64(0);
	if (group.kind == PGQ_KIND_QUEUE)
	{
		if (group.mode == PGQ_MODE_ADVISORY)
			require_worker(fcinfo, 3, &group);
		done = pgq_queue_complete(&group, block_id, fcinfo);
	}
	else if (!PG_ARGISNULL(1) || !PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("blocks of query groups have no result"),
				 errhint("Results are stored for items of queues (pgq.create_queue).")));
	else switch (group.mode)
	{
		case PGQ_MODE_TRANSACTION:
			refuse_mode("pgq.complete()", &group, TRANSACTION_MODE_HINT);
			break;
		case PGQ_MODE_LEASE:
			done = pgq_lease_complete(&group, block_id,
									  pgq_required_attempt(fcinfo, 2, false));
			break;
		case PGQ_MODE_ADVISORY:
			require_worker(fcinfo, 3, &group);
			done = pgq_advisory_complete(&group, block_id);
			break;
	}
	end_block_op(&scope);
	PG_RETURN_BOOL(done);
}

/*
 * pgq.complete(block_id, attempt => attempt, worker_id => worker_id), for
 * pgq.claim(..., complete => ...): a worker hands in its last block and
 * takes the next in one call.  "attempt" and "worker_id" may be NULL.
 */
bool
pgq_complete_held(int64 block_id, NullableDatum attempt, NullableDatum worker_id)
{
	LOCAL_FCINFO(cfcinfo, 5);

	InitFunctionCallInfoData(*cfcinfo, NULL, 5, InvalidOid, NULL, NULL);
	cfcinfo->args[0].value = Int64GetDatum(block_id);
	cfcinfo->args[0].isnull = false;
	cfcinfo->args[1].isnull = true; /* result */
	cfcinfo->args[2] = attempt;
	cfcinfo->args[3] = worker_id;
	cfcinfo->args[4].isnull = true; /* result_data */
	return DatumGetBool(pgq_complete(cfcinfo));
}

/*
 * Give a held block or item back (arguments: 0 block_id, 1 attempt, 2
 * worker_id); false if the caller does not hold it.  Unless "act", only
 * check what would make the call an error, and change nothing: a batch
 * checks every id so, before it gives any back.  "function" names the call
 * in errors.
 */
static bool
release_one(FunctionCallInfo fcinfo, const char *function, bool act)
{
	PgqGroup	group;
	PgqScope	scope;
	int64		block_id;
	bool		done = false;

	if (!begin_block_op(fcinfo, "release a block", &group, &scope))
		return false;
	block_id = PG_GETARG_INT64(0);
	if (group.kind == PGQ_KIND_QUEUE && group.mode == PGQ_MODE_LEASE)
	{
		if (act)
			done = pgq_queue_release(&group, block_id, fcinfo);
		else
			(void) pgq_required_attempt(fcinfo, 1, true);
	}
	else switch (group.mode)
	{
		case PGQ_MODE_TRANSACTION:
			refuse_mode(function, &group, TRANSACTION_MODE_HINT);
			break;
		case PGQ_MODE_LEASE:
			{
				int32		attempt = pgq_required_attempt(fcinfo, 1, false);

				if (act)
					done = pgq_lease_release(&group, block_id, attempt);
			}
			break;
		case PGQ_MODE_ADVISORY:
			require_worker(fcinfo, 2, &group);
			if (act)
				done = pgq_advisory_release(&group, block_id);
			break;
	}
	end_block_op(&scope);
	return done;
}

/*
 * pgq.release(block_id, attempt, worker_id) -> boolean
 *
 * Give a held block back to the group at once.  False if the caller does not
 * hold it.
 */
Datum
pgq_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(release_one(fcinfo, "pgq.release()", true));
}

/*
 * A binary error (pgq.fail's error_data, since 0.2) is kept for queue items
 * only: refuse it for a block rather than drop it.
 */
static void
refuse_error_data(FunctionCallInfo fcinfo, const PgqGroup *group)
{
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("error_data is kept for queue items only"),
				 errdetail("Block " INT64_FORMAT " belongs to query group \"%s\", whose blocks keep a text error.",
						   PG_GETARG_INT64(0), group->name),
				 errhint("Pass the error as text, in error.")));
}

/*
 * Record a failed attempt of a held block or item (arguments: 0 block_id,
 * 1 error, 2 retry_after, which the caller checked, 3 attempt, 4 worker_id,
 * 5 error_data); false if the caller does not hold it.  "act" and
 * "function" as for release_one().
 */
static bool
fail_one(FunctionCallInfo fcinfo, const char *function, bool act)
{
	PgqGroup	group;
	PgqScope	scope;
	int64		block_id;
	text	   *error = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	Interval   *retry_after = PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2);
	bool		done = false;

	if (!begin_block_op(fcinfo, "fail a block", &group, &scope))
		return false;
	block_id = PG_GETARG_INT64(0);
	if (group.kind == PGQ_KIND_QUEUE)
	{
		if (group.mode == PGQ_MODE_ADVISORY)
			require_worker(fcinfo, 4, &group);
		if (act)
			done = pgq_queue_fail(&group, block_id, fcinfo, error, retry_after);
		else if (group.mode == PGQ_MODE_LEASE)
			(void) pgq_required_attempt(fcinfo, 3, true);
	}
	else switch (group.mode)
	{
		case PGQ_MODE_TRANSACTION:
			refuse_mode(function, &group, TRANSACTION_MODE_HINT);
			break;
		case PGQ_MODE_LEASE:
			{
				int32		attempt;

				refuse_error_data(fcinfo, &group);
				attempt = pgq_required_attempt(fcinfo, 3, false);
				if (act)
					done = pgq_lease_fail(&group, block_id, attempt, error,
										  retry_after);
			}
			break;
		case PGQ_MODE_ADVISORY:
			refuse_error_data(fcinfo, &group);
			require_worker(fcinfo, 4, &group);
			if (act)
				done = pgq_advisory_fail(&group, block_id, error, retry_after);
			break;
	}
	end_block_op(&scope);
	return done;
}

/*
 * pgq.fail(block_id, error, retry_after, attempt, worker_id, error_data)
 *	 -> boolean
 *
 * Record a failed attempt of a held block: it is retried after retry_after
 * (at once if NULL), or dead-lettered with the error once the group's
 * max_attempts are used up.  False if the caller does not hold it.
 */
Datum
pgq_fail(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(2))
		pgq_check_retry_after(PG_GETARG_INTERVAL_P(2));
	PG_RETURN_BOOL(fail_one(fcinfo, "pgq.fail()", true));
}

/*
 * pgq.extend(block_id, lease, attempt) -> boolean
 *
 * Move a lease-mode claim's deadline to now() + lease: the holder's
 * heartbeat.  False if the caller does not hold the block.
 */
Datum
pgq_extend(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	bool		done = false;

	pgq_check_arg_not_null(fcinfo, 1, "lease");
	pgq_check_lease(PG_GETARG_INTERVAL_P(1));
	if (!begin_block_op(fcinfo, "extend a lease", &group, &scope))
		PG_RETURN_BOOL(false);
	if (group.mode != PGQ_MODE_LEASE)
		refuse_mode("pgq.extend()", &group,
					"Only lease-mode claims have a deadline to extend.");
	if (group.kind == PGQ_KIND_QUEUE)
		done = pgq_queue_extend(&group, PG_GETARG_INT64(0),
								pgq_required_attempt(fcinfo, 2, false),
								PG_GETARG_INTERVAL_P(1));
	else
		done = pgq_lease_extend(&group, PG_GETARG_INT64(0),
								pgq_required_attempt(fcinfo, 2, false),
								PG_GETARG_INTERVAL_P(1));
	end_block_op(&scope);
	PG_RETURN_BOOL(done);
}

/*
 * Read the array argument "argno" of a batch call into *out: it must be
 * one-dimensional and, unless NULL, have one element per id (nids; -1 for
 * the ids themselves).
 */
static void
get_batch_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			  Oid elemtype, int nids, PgqArrayArg *out)
{
	pgq_get_array_arg(fcinfo, argno, argname, elemtype, out);
	if (out->n >= 0 && nids >= 0 && out->n != nids)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must have one element per block id", argname),
				 errhint("Pass NULL, or one element per block id, in the same order.")));
}

/* Read the block_ids argument of a batch call: not NULL, without NULLs. */
static void
get_batch_ids(FunctionCallInfo fcinfo, PgqArrayArg *ids)
{
	pgq_check_arg_not_null(fcinfo, 0, "block_ids");
	get_batch_arg(fcinfo, 0, "block_ids", INT8OID, -1, ids);
	for (int i = 0; i < ids->n; i++)
	{
		if (ids->nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("block_ids must not contain NULL")));
	}
}

/* Element i of a batch argument, as the argument of a single call. */
static NullableDatum
batch_elem(const PgqArrayArg *arg, int i)
{
	NullableDatum d;

	d.isnull = arg->n < 0 || arg->nulls[i];
	d.value = d.isnull ? (Datum) 0 : arg->values[i];
	return d;
}

/*
 * pgq.release_many(block_ids, attempts, worker_id) -> bigint[]
 *
 * Give many held blocks and items back, each under the proof that
 * pgq.release() takes: its attempt in lease mode, worker_id in advisory
 * mode.  Returns the ids given back: those the caller held.  Every id is
 * checked before any is given back, since an advisory lock given back is
 * not taken again by the rollback of an error that comes later.
 */
Datum
pgq_release_many(PG_FUNCTION_ARGS)
{
	LOCAL_FCINFO(one, 3);
	PgqArrayArg	ids;
	PgqArrayArg	attempts;
	int64	   *done;
	int			ndone = 0;

	get_batch_ids(fcinfo, &ids);
	get_batch_arg(fcinfo, 1, "attempts", INT4OID, ids.n, &attempts);
	pgq_check_not_in_recovery("release blocks");
	done = palloc(Max(ids.n, 1) * sizeof(int64));

	InitFunctionCallInfoData(*one, NULL, 3, InvalidOid, NULL, NULL);
	for (int pass = 0; pass < 2; pass++)
	{
		for (int i = 0; i < ids.n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			one->args[0] = batch_elem(&ids, i);
			one->args[1] = batch_elem(&attempts, i);
			one->args[2].value = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
			one->args[2].isnull = PG_ARGISNULL(2);
			if (release_one(one, "pgq.release_many()", pass == 1))
				done[ndone++] = DatumGetInt64(ids.values[i]);
		}
	}
	PG_RETURN_DATUM(pgq_sorted_ids(done, ndone));
}

/*
 * pgq.fail_many(block_ids, errors, retry_after, attempts, worker_id,
 *				 error_data) -> bigint[]
 *
 * Record a failed attempt of many held blocks and items, each with its
 * error, under the proof that pgq.fail() takes: its attempt in lease mode,
 * worker_id in advisory mode, the calling transaction's claim in a
 * transaction-mode queue.  Returns the ids failed: those the caller held.
 * Every id is checked first, as pgq.release_many() does.
 */
Datum
pgq_fail_many(PG_FUNCTION_ARGS)
{
	LOCAL_FCINFO(one, 6);
	PgqArrayArg	ids;
	PgqArrayArg	errors;
	PgqArrayArg	attempts;
	PgqArrayArg	error_data;
	int64	   *done;
	int			ndone = 0;

	get_batch_ids(fcinfo, &ids);
	get_batch_arg(fcinfo, 1, "errors", TEXTOID, ids.n, &errors);
	get_batch_arg(fcinfo, 3, "attempts", INT4OID, ids.n, &attempts);
	get_batch_arg(fcinfo, 5, "error_data", BYTEAOID, ids.n, &error_data);
	if (!PG_ARGISNULL(2))
		pgq_check_retry_after(PG_GETARG_INTERVAL_P(2));
	pgq_check_not_in_recovery("fail blocks");
	done = palloc(Max(ids.n, 1) * sizeof(int64));

	InitFunctionCallInfoData(*one, NULL, 6, InvalidOid, NULL, NULL);
	for (int pass = 0; pass < 2; pass++)
	{
		for (int i = 0; i < ids.n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			one->args[0] = batch_elem(&ids, i);
			one->args[1] = batch_elem(&errors, i);
			one->args[2].value = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
			one->args[2].isnull = PG_ARGISNULL(2);
			one->args[3] = batch_elem(&attempts, i);
			one->args[4].value = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
			one->args[4].isnull = PG_ARGISNULL(4);
			one->args[5] = batch_elem(&error_data, i);
			if (fail_one(one, "pgq.fail_many()", pass == 1))
				done[ndone++] = DatumGetInt64(ids.values[i]);
		}
	}
	PG_RETURN_DATUM(pgq_sorted_ids(done, ndone));
}
