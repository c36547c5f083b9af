/*-------------------------------------------------------------------------
 *
 * admin.c
 *	  What a group's owner does from psql: pause and resume a group, purge
 *	  finished work, change a queue's retention, and run a failed
 *	  materialization again.
 *
 * Each needs the owner's privilege (see privilege.c).  A paused group hands
 * out nothing: claims return no rows, and waiting claims keep waiting until
 * pgq.resume() commits, which wakes them.  Work already claimed is not
 * affected.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "group.h"
#include "materialize.h"
#include "privilege.h"
#include "wait.h"
#include "worker.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(pgq_pause);
PG_FUNCTION_INFO_V1(pgq_resume);
PG_FUNCTION_INFO_V1(pgq_purge);
PG_FUNCTION_INFO_V1(pgq_rematerialize);
PG_FUNCTION_INFO_V1(pgq_set_retention);

/*
 * Start an owner's operation on the group named by argument 0: look it up,
 * inside SPI, as the tables' owner, and check that the caller owns it.
 */
static void
begin_admin(FunctionCallInfo fcinfo, const char *what, PgqGroup *group,
			PgqScope *scope)
{
	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	pgq_check_not_in_recovery(what);
	pgq_enter(scope);
	SPI_connect();
	pgq_lookup_group(PG_GETARG_TEXT_PP(0), group);
	pgq_check_privilege(group, PGQ_PRIV_ADMIN);
}

/* End an operation begun with begin_admin(). */
static void
end_admin(PgqScope *scope)
{
	SPI_finish();
	pgq_leave(scope);
}

/* Set the group's pause; true if that changed it. */
static bool
set_paused(const PgqGroup *group, bool paused)
{
	Oid			argtypes[2] = {INT8OID, BOOLOID};
	Datum		values[2];
	int			rc;

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = BoolGetDatum(paused);
	rc = pgq_execute_fresh("UPDATE pgq.groups SET paused = $2 "
						   "WHERE group_id " OP("=") " $1 "
						   "AND paused " OP("<>") " $2",
						   2, argtypes, values);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update group: %s", SPI_result_code_string(rc));
	pgq_invalidate_groups();
	return SPI_processed > 0;
}

/*
 * pgq.pause(group_name) -> boolean
 *
 * Stop handing out the group's work, from this transaction's commit on;
 * false if it was paused already.
 */
Datum
pgq_pause(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	bool		changed;

	begin_admin(fcinfo, "pause a group", &group, &scope);
	changed = set_paused(&group, true);
	end_admin(&scope);
	PG_RETURN_BOOL(changed);
}

/*
 * pgq.resume(group_name) -> boolean
 *
 * Hand out the group's work again, waking its waiting claims at commit;
 * false if it was not paused.
 */
Datum
pgq_resume(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	bool		changed;

	begin_admin(fcinfo, "resume a group", &group, &scope);
	changed = set_paused(&group, false);
	if (changed)
		pgq_announce_claimable(&group.ref, group.name);
	end_admin(&scope);
	PG_RETURN_BOOL(changed);
}

/*
 * pgq.purge(group_name, older_than, dead) -> bigint
 *
 * Remove a queue's done items (and dead ones, if "dead") that finished at
 * least older_than ago, before retention would; in a query group, remove
 * dead-lettered blocks (done blocks are gone already).  Returns how many.
 * Purged keys are free again.
 */
Datum
pgq_purge(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	Oid			argtypes[3] = {INT8OID, INTERVALOID, BOOLOID};
	Datum		values[3];
	int			rc;
	int64		purged;

	pgq_check_arg_not_null(fcinfo, 1, "older_than");
	pgq_check_arg_not_null(fcinfo, 2, "dead");
	pgq_check_duration("older_than", PG_GETARG_INTERVAL_P(1));
	begin_admin(fcinfo, "purge a group", &group, &scope);
	values[0] = Int64GetDatum(group.ref.group_id);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);

	/*
	 * The last condition, always true, names the two partial indexes of
	 * finished items (with and without their payloads) for the planner.
	 */
	if (group.kind == PGQ_KIND_QUEUE)
		rc = SPI_execute_with_args("DELETE FROM pgq.items "
								   "WHERE group_id " OP("=") " $1 "
								   "AND state " OP("=") " ANY (CASE WHEN $3 "
								   "THEN '{d,f}'::pg_catalog.\"char\"[] "
								   "ELSE '{d}'::pg_catalog.\"char\"[] END) "
								   "AND finished_at " OP("<=") " (pg_catalog.now() "
								   OP("-") " $2) "
								   "AND ((payload IS NOT NULL OR data IS NOT NULL) "
								   "OR (payload IS NULL AND data IS NULL))",
								   3, argtypes, values, NULL, false, 0);
	else
		rc = SPI_execute_with_args("DELETE FROM pgq.blocks "
								   "WHERE group_id " OP("=") " $1 "
								   "AND $3 AND state " OP("=") " 'f'",
								   3, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not purge: %s", SPI_result_code_string(rc));
	purged = (int64) SPI_processed;

	/*
	 * A row that a pgq.retry() made pending while the DELETE waited for it
	 * is left, locked (EvalPlanQual), until this transaction ends: claims
	 * pass it over, and waiting ones sleep.  Its end wakes them.
	 */
	pgq_xact_wake_at_commit(&group.ref);
	end_admin(&scope);
	PG_RETURN_INT64(purged);
}

/*
 * pgq.rematerialize(group_name) -> boolean
 *
 * Run a failed group's query again, asynchronously, as the group's owner:
 * the blocks of the failed run are removed and the group is materializing
 * again once this transaction commits.  Consumers may have processed some of
 * the failed run's blocks; the new run hands out all of the query's ids.
 */
Datum
pgq_rematerialize(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	int			rc;

	begin_admin(fcinfo, "materialize a group", &group, &scope);
	if (group.kind != PGQ_KIND_QUERY || group.state != PGQ_GROUP_FAILED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("group \"%s\" has not failed", group.name),
				 errhint("Only a query group whose asynchronous creation failed can be materialized again.")));

	values[0] = Int64GetDatum(group.ref.group_id);
	rc = SPI_execute_with_args("UPDATE pgq.groups SET state = 'materializing', "
							   "error = NULL, total_ids = 0, total_blocks = 0, "
							   "ready_at = NULL, finished_at = NULL "
							   "WHERE group_id " OP("=") " $1 "
							   "AND state " OP("=") " 'failed'",
							   1, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update group: %s", SPI_result_code_string(rc));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("group \"%s\" was dropped or changed by another transaction",
						group.name),
				 errhint("Look at pgq.group_stats, and try again if the group is still failed.")));
	rc = SPI_execute_with_args("DELETE FROM pgq.blocks "
							   "WHERE group_id " OP("=") " $1",
							   1, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not delete blocks: %s", SPI_result_code_string(rc));

	pgq_invalidate_groups();
	/* the group's shared claim state starts afresh at commit */
	pgq_xact_remember_drop(&group.ref);
	pgq_start_materialization(group.ref.group_id);
	end_admin(&scope);
	PG_RETURN_BOOL(true);
}

/*
 * pgq.set_retention(queue_name, retention, key_retention) -> void
 *
 * Set how long the queue keeps its finished items' payloads and results,
 * and their keys (NULL: pgq.retention), from this transaction's commit on;
 * the next maintenance pass applies them.  Payloads that a pass dropped
 * already do not come back.
 */
Datum
pgq_set_retention(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	Oid			argtypes[3] = {INT8OID, INTERVALOID, INTERVALOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	int			rc;

	for (int i = 1; i < 3; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
		if (!PG_ARGISNULL(i))
			pgq_check_retention(i == 1 ? "retention" : "key_retention",
								PG_GETARG_INTERVAL_P(i));
	}
	pgq_check_key_retention(!PG_ARGISNULL(1), values[1],
							!PG_ARGISNULL(2), values[2]);
	begin_admin(fcinfo, "change a queue's retention", &group, &scope);
	if (group.kind != PGQ_KIND_QUEUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a query group, not a queue", group.name),
				 errhint("Query groups are removed whole once pgq.retention has passed since they drained.")));
	values[0] = Int64GetDatum(group.ref.group_id);
	rc = SPI_execute_with_args("UPDATE pgq.groups "
							   "SET retention = $2, key_retention = $3 "
							   "WHERE group_id " OP("=") " $1",
							   3, argtypes, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update group: %s", SPI_result_code_string(rc));
	end_admin(&scope);
	PG_RETURN_VOID();
}
