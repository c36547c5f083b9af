/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  Claiming blocks in transaction mode.
 *
 * A claim deletes the group's first unclaimed blocks that no other
 * transaction is deleting, the way FOR UPDATE SKIP LOCKED would pass them
 * over, in the caller's transaction: its COMMIT consumes them, its ROLLBACK
 * (or the end of its session) gives them back at once.  The scan
 * starts at the group's hint from shared memory rather than at the head of
 * the index, where the dead entries of consumed blocks pile up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "pgq.h"
#include "advisory.h"
#include "block.h"
#include "blockscan.h"
#include "claim.h"
#include "due.h"
#include "group.h"
#include "lease.h"
#include "privilege.h"
#include "queue.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#endif

PG_FUNCTION_INFO_V1(pgq_claim);
PG_FUNCTION_INFO_V1(pgq_inflight);

/*
 * Claims need READ COMMITTED, where SKIP LOCKED moves past blocks that others
 * consumed meanwhile.  A transaction-mode claim is consumed when the caller's
 * transaction commits, so it also needs a transaction block.
 */
void
pgq_check_claim_context(PgqMode mode)
{
	if (mode == PGQ_MODE_TRANSACTION && !IsTransactionBlock())
		ereport(ERROR,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("pgq.claim() in transaction mode must be called inside a transaction block"),
				 errdetail("A claimed block is consumed when the claiming transaction commits; outside a transaction block it would be consumed before it could be processed."),
				 errhint("Run BEGIN, claim, process the ids, then COMMIT (or ROLLBACK to give the block back).")));
	if (XactIsoLevel != XACT_READ_COMMITTED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("pgq.claim() requires the READ COMMITTED isolation level"),
				 errdetail("The current transaction runs at isolation level %s.",
						   GetConfigOption("transaction_isolation", false, false)),
				 errhint("Start the transaction with BEGIN ISOLATION LEVEL READ COMMITTED.")));
}

/* qsort comparator: claimed blocks in block id order */
int
pgq_compare_claimed(const void *a, const void *b)
{
	int64		x = ((const PgqClaimed *) a)->id;
	int64		y = ((const PgqClaimed *) b)->id;

	return (x > y) - (x < y);
}

/*
 * Lock and delete up to "limit" unclaimed blocks of the group from block id
 * "from" on, append them to blocks[*nblocks...] (in resultcxt, sorted by
 * block id), and make them the transaction's claims.  Returns how many.
 *
 * This is every transaction-mode claim's work, so it walks the primary key
 * and deletes through the table AM itself instead of running a statement:
 * the executor's setup for a DELETE .. SKIP LOCKED costs more than the
 * deletion.  Deleting without waiting does what FOR UPDATE SKIP LOCKED and
 * a DELETE would do together, with one WAL record instead of two: a block
 * that another transaction is deleting (claiming) or has deleted is passed
 * over.  Nothing else updates a transaction-mode block, and pgq.blocks has
 * no rules, foreign keys or DELETE triggers to honour (its trigger,
 * pgq.blocks_inflight(), is for rows that become claimed or retries).
 */
static int
lock_and_delete(const PgqGroupRef *group, int64 from, int limit,
				PgqClaimed *blocks, int *nblocks, MemoryContext resultcxt)
{
	PgqBlockScan scan;
	CommandId	cid = GetCurrentCommandId(true);
	PgqClaimed *added = blocks + *nblocks;
	int			found = 0;

	pgq_block_scan_open(&scan, "blocks_pkey", RowExclusiveLock);
	for (int pass = 0; pass < 2 && found < limit; pass++)
	{
		pgq_block_scan_claim_pass(&scan, group->group_id, from, limit, pass);
		while (found < limit && pgq_block_scan_next(&scan))
		{
			TM_FailureData tmfd;
			TM_Result	result;
			bool		isnull;
			Datum		ids;
			MemoryContext oldcxt;

			pgq_xact_claiming_count(limit - found);
			PGQ_INJECTION_POINT("pgq-claim-scan-counted");
			result = table_tuple_delete(scan.heap, &scan.slot->tts_tid, cid,
										scan.snapshot, InvalidSnapshot, false,
										&tmfd, false);
			PGQ_INJECTION_POINT("pgq-claim-scan-tried");
			if (result != TM_Ok)
				continue;		/* claimed by another, or consumed */

			/* the slot still holds the version this transaction deleted */
			added[found].id =
				DatumGetInt64(pgq_block_attr(&scan, Anum_blocks_block_id,
											 &isnull));
			ids = pgq_block_attr(&scan, Anum_blocks_ids, &isnull);
			oldcxt = MemoryContextSwitchTo(resultcxt);
			added[found].ids = PointerGetDatum(PG_DETOAST_DATUM_COPY(ids));
			MemoryContextSwitchTo(oldcxt);
			added[found].attempt = 1;
			added[found].payload = added[found].data = added[found].key = (Datum) 0;
			added[found].priority = 0;
			found++;
		}
	}
	pgq_block_scan_close(&scan);

	/* later statements and scans of this transaction must see the deletes */
	if (found > 0)
		CommandCounterIncrement();

	pgq_xact_remember(group, added, found);
	*nblocks += found;
	return found;
}

/*
 * Claim up to max_blocks blocks, from the group's hint on.  Should that find
 * fewer, look again from the start of the group when pgq_full_scan_due()
 * says so: a block whose holder let it go without pgq knowing may lie below
 * the hint.  The hint saves work; it hides no block for long.
 *
 * Returns how many; blocks[] (in resultcxt) gets them in block id order.
 */
static int
transaction_claim(const PgqGroupRef *group, int max_blocks,
				  PgqClaimed *blocks, MemoryContext resultcxt)
{
	int64		hint;
	uint64		gen;
	int			nblocks = 0;
	int			first;

	(void) pgq_claim_hint(group, &hint, &gen);

	pgq_xact_claiming(group, hint);
	first = lock_and_delete(group, hint, max_blocks, blocks, &nblocks,
							resultcxt);
	/*
	 * Everything below the last block claimed is consumed or held.  The
	 * scan ends here, so that the count that decides a full scan is of
	 * holders.
	 */
	pgq_xact_claiming_done_advance(gen,
								   first > 0 ? blocks[first - 1].id + 1 : 0);

	if (nblocks < max_blocks && hint > 0 &&
		pgq_full_scan_due(group, pgq_xact_own_in_flight(group->group_id)))
	{
		pgq_xact_claiming(group, 0);
		if (lock_and_delete(group, 0, max_blocks - nblocks, blocks, &nblocks,
							resultcxt) > 0)
		{
			/* blocks were stranded below the hint: start there next time */
			pgq_hint_lower(group, blocks[first].id);
			qsort(blocks, nblocks, sizeof(PgqClaimed), pgq_compare_claimed);
		}
		pgq_xact_claiming_done();
	}
	return nblocks;
}

/*
 * Where a claim of the group starts looking for pending blocks: the shared
 * hint, or a block that this transaction retried below it, which the shared
 * hint moves to only when the retry commits (pgq_xact_own_hint()).  *gen is
 * for the scan's end (pgq_xact_claiming_done_advance()).  False when no
 * hint is kept.
 */
bool
pgq_claim_hint(const PgqGroupRef *group, int64 *hint, uint64 *gen)
{
	bool		kept = pgq_hint_get(group, hint, gen);

	*hint = pgq_xact_own_hint(group, *hint);
	return kept;
}

/* When a call asked to wait for "wait" must give up; 0 for not at all. */
TimestampTz
pgq_wait_deadline(Interval *wait)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz deadline;

	deadline = pgq_time_after(now, wait);
	if (deadline < now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must not be negative")));
	if (TIMESTAMP_NOT_FINITE(deadline))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must be finite")));
	return deadline > now ? deadline : 0;
}

/*
 * Read the group's state and pause again, with a fresh snapshot: a
 * materializing group becomes ready or failed while claims wait on it, and
 * a paused one is resumed.  A group dropped since is reported as failed: it
 * yields nothing more either.
 */
void
pgq_refresh_group(PgqGroup *group)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[1];
	bool		isnull;
	int			rc;

	if (plan == NULL)
	{
		Oid			argtypes[1] = {INT8OID};

		plan = pgq_keep_plan("SELECT state, paused FROM pgq.groups "
							 "WHERE group_id " OP("=") " $1",
							 1, argtypes);
	}
	values[0] = Int64GetDatum(group->ref.group_id);
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		group->state = PGQ_GROUP_FAILED;
		group->paused = false;
		SPI_freetuptable(SPI_tuptable);
		return;
	}
	group->state = pgq_parse_state(SPI_getvalue(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1));
	group->paused = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 2,
											   &isnull));
	SPI_freetuptable(SPI_tuptable);
}

/*
 * Can the group never yield another block?  Not while it is paused or
 * materializing; always once it failed.  Otherwise, true when no block is
 * pending, claimed under a lease or waiting for a retry (only lease and
 * advisory groups have those), and no other session holds a claim that it
 * might give back.
 *
 * All of it is read in one snapshot: read in two, a block could be pending
 * in the one that looks for leases and leased in the one that looks for
 * pending blocks.  A claim that the snapshot does not show left its blocks
 * pending or due in it.  One that it shows has its leases walked only up
 * to the bound, which the claim raises in its commit callback, after its
 * commit became visible (B1 in shmem.c); but the claim stays counted until
 * after the raise (C1).  So, should nothing be found, the count is read
 * again, then the bound: a claim still counted, or a bound that moved,
 * may be one whose leases the walk missed, and the group is not taken for
 * exhausted.  The count is read again as a waiting claim reads it (C3): a
 * claim that it keeps asleep only by what a scan counted ahead since the
 * first read is owed the wake that the scan's end gives.
 *
 * Pending blocks are looked for through the primary key, from the hint on
 * and, should that find none, from the start (see below): the range is a
 * row comparison, which only an index that starts with group_id can serve
 * (a range of block ids alone, on the index on block_id, would read the
 * blocks of every later group).  Blocks held by others count when their
 * number is not known (they are visible rows then).
 */
bool
pgq_group_exhausted(PgqGroup *group)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[3];
	int64		hint;
	uint64		gen;
	int64		own = 0;
	int64		claimed;
	int64		bound = PG_INT64_MAX;
	Snapshot	snapshot;
	bool		isnull;
	bool		exhausted;
	int			rc;

	if (plan == NULL)
	{
		Oid			argtypes[3] = {INT8OID, INT8OID, INT8ARRAYOID};

		plan = pgq_keep_plan("SELECT EXISTS (SELECT FROM pgq.blocks "
							 "WHERE group_id " OP("=") " $1 "
							 "AND (group_id, block_id) " OP(">=") " ($1, $2) "
							 "AND state " OP("=") " 'p' "
							 "AND block_id " OP("<>") " ALL ($3))",
							 3, argtypes);
	}

	if (group->paused || group->state == PGQ_GROUP_MATERIALIZING)
		pgq_refresh_group(group);
	if (group->paused)
		return false;			/* until it is resumed */
	if (group->kind == PGQ_KIND_QUEUE)
		return false;			/* producers can always add more */
	if (group->state == PGQ_GROUP_MATERIALIZING)
		return false;
	if (group->state == PGQ_GROUP_FAILED)
		return true;

	/*
	 * The claimed count before the hint: a block given back stays counted
	 * until the hint is lowered to it (invariant C1 in shmem.c).
	 */
	if (group->mode == PGQ_MODE_ADVISORY)
		own = pgq_advisory_held_in_group(&group->ref);
	else
		own = pgq_xact_own_in_flight(group->ref.group_id);
	if (!pgq_claimed_get_waiting(&group->ref, own, &claimed) || claimed > own)
		return false;
	if (!pgq_claim_hint(&group->ref, &hint, &gen))
		hint = 0;
	PGQ_INJECTION_POINT("pgq-exhausted-counted");

	snapshot = RegisterSnapshot(GetTransactionSnapshot());

	/* a lease that may run out, or a retry to come due */
	if (group->mode != PGQ_MODE_TRANSACTION &&
		pgq_block_any_deadline(&group->ref,
							   group->mode == PGQ_MODE_ADVISORY,
							   snapshot, &bound))
	{
		UnregisterSnapshot(snapshot);
		return false;
	}
	PGQ_INJECTION_POINT("pgq-exhausted-walked");

	/*
	 * From the hint on, then, should that find nothing, from the start: a
	 * block that somebody row-locked by hand is passed over by claims, which
	 * count no such lock (H1 in shmem.c), and is pending again once the lock
	 * goes.  The second walk runs only where the group would otherwise be
	 * taken for exhausted: once per claim that ends for that reason.
	 * Advisory-mode blocks that this session holds are pending rows: they
	 * do not count (holding the last block, a claim for more finds none).
	 */
	values[0] = Int64GetDatum(group->ref.group_id);
	values[2] = pgq_advisory_held_ids(&group->ref);
	exhausted = true;
	for (int from = 0; from < 2 && exhausted; from++)
	{
		if (from == 1 && hint == 0)
			break;
		values[1] = Int64GetDatum(from == 0 ? hint : 0);
		rc = SPI_execute_snapshot(plan, values, NULL, snapshot,
								  InvalidSnapshot, false, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read blocks: %s", SPI_result_code_string(rc));
		exhausted = !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1,
												&isnull));
		SPI_freetuptable(SPI_tuptable);
	}
	UnregisterSnapshot(snapshot);

	/* the count again, then the bound: see above */
	if (exhausted && group->mode != PGQ_MODE_TRANSACTION)
	{
		if (!pgq_claimed_get_waiting(&group->ref, own, &claimed) ||
			claimed > own)
			exhausted = false;
		else if (pgq_block_due_bound(&group->ref) != bound)
			exhausted = false;
	}
	return exhausted;
}

/*
 * Did the current claim attempt change rows besides those it claimed (a
 * block dead-lettered, due items moved back to pending)?  Then it must not
 * be rolled back, even if it claimed nothing.
 */
static bool attempt_changed_more = false;

/* Note that the current claim attempt changed rows it did not claim. */
void
pgq_claim_changed_more(void)
{
	attempt_changed_more = true;
}

/*
 * Did the last claim attempt change rows besides those it claimed?  A
 * waiting claim whose attempt did so, and claimed nothing, ends rather than
 * sleeps: its transaction must commit those changes (see
 * pgq_claim_attempt_apart()).
 */
bool
pgq_claim_attempt_changed(void)
{
	return attempt_changed_more;
}

/* One attempt to claim up to max_blocks blocks or items of the group. */
int
pgq_claim_attempt(PgqGroup *group, int max_blocks, PgqClaimed *blocks,
				  MemoryContext resultcxt)
{
	attempt_changed_more = false;
	/* a paused group hands out nothing; a waiting claim waits on */
	if (group->paused)
		return 0;
	if (group->kind == PGQ_KIND_QUEUE)
		return pgq_queue_claim(group, max_blocks, blocks, resultcxt);
	switch (group->mode)
	{
		case PGQ_MODE_TRANSACTION:
			return transaction_claim(&group->ref, max_blocks, blocks,
									 resultcxt);
		case PGQ_MODE_LEASE:
			return pgq_lease_claim(group, max_blocks, blocks, resultcxt);
		case PGQ_MODE_ADVISORY:
			return pgq_advisory_claim(group, max_blocks, blocks, resultcxt);
	}
	return 0;					/* keep the compiler quiet */
}

/*
 * Does a claim of the group update rows, and so take row locks that a
 * waiting claim must let go of before it sleeps (see below)?  Lease mode
 * does, and so do queues' claims but in advisory mode, which write nothing.
 */
bool
pgq_claim_locks_rows(const PgqGroup *group)
{
	return group->mode == PGQ_MODE_LEASE ||
		(group->kind == PGQ_KIND_QUEUE && group->mode != PGQ_MODE_ADVISORY);
}

/*
 * pgq_claim_attempt() in a subtransaction of its own, rolled back if it claims
 * nothing, for waiting claims that update rows (pgq_claim_locks_rows()).  In
 * READ COMMITTED, FOR UPDATE SKIP LOCKED (in the statements that take
 * transaction-mode queues' items, and lease-mode ones' due items) follows a
 * row that another claim updated since the snapshot, locks its new version,
 * finds that it no longer qualifies and skips it, but keeps the lock: a
 * claim that then sleeps would hold up the other claimer's complete or fail
 * for the whole wait.  The rollback lets go of such locks before the sleep.
 * An attempt that changed other rows (dead-lettered a block, moved due
 * items back) is kept instead: that is rare, and undoing it would leave the
 * group waiting for it.  Kept, it must not sleep either: the rows it
 * changed stay locked, and their changes unseen, until its transaction
 * ends, and a late holder's complete or extend would wait for the whole
 * wait.  So such an attempt that claimed nothing ends the claim
 * (pgq_claim_attempt_changed()).
 *
 * An error rolls the subtransaction back here before it goes on, as
 * PL/pgSQL's exception blocks do: left open, it would be the one that the
 * caller's exception handler rolls back, instead of the handler's own.
 */
int
pgq_claim_attempt_apart(PgqGroup *group, int max_blocks,
						PgqClaimed *blocks, MemoryContext resultcxt)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			n;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		n = pgq_claim_attempt(group, max_blocks, blocks, resultcxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* keep the error, out of the memory that the rollback frees */
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ReThrowError(edata);
	}
	PG_END_TRY();
	if (n > 0 || attempt_changed_more)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
	return n;
}

/*
 * The complete => argument of pgq.claim (argument 4, with attempt, argument
 * 5): complete that block first, in the claim's transaction, which saves a
 * worker one round trip and one commit per block.  A block the caller no
 * longer holds does not stop the claim: a warning says so.  Called outside
 * the claim's pgq_enter() scope, as pgq.complete() checks its caller itself.
 */
void
pgq_claim_complete_first(FunctionCallInfo fcinfo)
{
	NullableDatum attempt = {(Datum) 0, true};
	int64		block_id = PG_GETARG_INT64(4);

	if (!PG_ARGISNULL(5))
	{
		attempt.value = PG_GETARG_DATUM(5);
		attempt.isnull = false;
	}
	if (pgq_complete_held(block_id, attempt, fcinfo->args[3]))
	{
		/* whatever the block's mode, its completion must not be lost */
		pgq_lease_durable();
		return;
	}
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("could not complete block %lld", (long long) block_id),
			 errdetail("The caller does not hold it: it is gone, another worker holds it, or its lease ran out."),
			 errhint("The claim went on.  Call pgq.complete() on its own where the worker must act on this.")));
}

/*
 * pgq.claim(group_name, max_blocks, wait, worker_id, complete, attempt)
 *	  -> SETOF pgq.claimed
 *
 * Up to max_blocks blocks, in block_id order; no rows when nothing is
 * claimable (after waiting up to "wait" for something to become claimable).
 * With complete, that block is completed first.
 */
Datum
pgq_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext resultcxt;
	text	   *name;
	int32		max_blocks;
	PgqGroup	group;
	PgqClaimed *blocks;
	int			nblocks = 0;
	TimestampTz deadline = 0;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_arg_not_null(fcinfo, 1, "max_blocks");
	name = PG_GETARG_TEXT_PP(0);
	pgq_check_name(name);
	pgq_claim_check_args(fcinfo, &max_blocks, &deadline);

	InitMaterializedSRF(fcinfo, 0);
	resultcxt = rsinfo->econtext->ecxt_per_query_memory;
	blocks = MemoryContextAllocZero(resultcxt, max_blocks * sizeof(PgqClaimed));

	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group_cached(name, &group);
	pgq_check_privilege(&group, PGQ_PRIV_CONSUME);
	pgq_check_claim_context(group.mode);
	if (group.mode == PGQ_MODE_ADVISORY)
	{
		if (PG_ARGISNULL(3))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("worker_id is required to claim from advisory-mode group \"%s\"",
							text_to_cstring(name)),
					 errhint("Register with pgq.register_worker() and pass its id as worker_id.")));
		pgq_advisory_check_worker_held(PG_GETARG_INT64(3));
	}
	if (PG_NARGS() >= 6 && !PG_ARGISNULL(4))
	{
		SPI_finish();
		pgq_leave(&scope);
		pgq_claim_complete_first(fcinfo);
		pgq_enter(&scope);
		SPI_connect();
	}
	if (group.state == PGQ_GROUP_FAILED)
	{
		/* its blocks are not all of the query's: hand out none of them */
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("group \"%s\" failed to materialize and yields no blocks",
						group.name),
				 errhint("pgq.group_stats shows why.  Drop the group and create it again.")));
		SPI_finish();
		pgq_leave(&scope);
		return (Datum) 0;
	}

	/*
	 * Claim; if nothing came and the caller wants to wait, sleep until woken
	 * and claim again, until a block comes, the group can yield no more, an
	 * attempt changed rows that its transaction must commit, or the time is
	 * up.
	 */
	if (group.mode == PGQ_MODE_LEASE)
		pgq_lease_claim_async();	/* here, not in an attempt's subtransaction */
	for (int look = 0;; look++)
	{
		uint64		seen;
		bool		done;

		/*
		 * Each look after a wake-up has an SPI connection of its own, whose
		 * memory (results, scans) goes with it: a claim woken thousands of
		 * times must not keep what every look allocated.
		 */
		if (look > 0)
			SPI_connect();

		/*
		 * The wake-up count before the group's state: a resume that commits
		 * after the state was read, which an attempt of a paused group does
		 * not see, wakes the claim.  (Work made claimable otherwise is seen
		 * by the attempt's own reads, which come later.)
		 */
		seen = pgq_wait_generation(&group.ref);
		if (look > 0 || group.paused)
		{
			/* a pause, a resume or a failure may have come with the wake-up */
			pgq_refresh_group(&group);
			if (group.state == PGQ_GROUP_FAILED)
			{
				if (look > 0)
					SPI_finish();
				break;
			}
		}
		PGQ_INJECTION_POINT("pgq-claim-state-read");
		if (deadline != 0 && pgq_claim_locks_rows(&group))
			nblocks = pgq_claim_attempt_apart(&group, max_blocks, blocks,
											  resultcxt);
		else
			nblocks = pgq_claim_attempt(&group, max_blocks, blocks,
										resultcxt);
		done = nblocks > 0 || deadline == 0 ||
			pgq_claim_attempt_changed() || pgq_group_exhausted(&group);
		if (look > 0)
			SPI_finish();
		if (done || !pgq_wait_for_wakeup(&group.ref, deadline, seen))
			break;
	}
	if (group.mode == PGQ_MODE_LEASE)
		pgq_lease_claim_done(); /* also when no attempt claimed: a pause */
	if (deadline != 0)
		pgq_wait_done();
	SPI_finish();
	pgq_leave(&scope);

	for (int i = 0; i < nblocks; i++)
		pgq_claimed_put(rsinfo, &blocks[i], NULL);
	return (Datum) 0;
}

/*
 * Check the arguments that both forms of pgq.claim() share (max_blocks,
 * wait, complete and attempt), and that claims may be made here: into
 * *max_blocks and *deadline (left as it is without a wait).
 */
void
pgq_claim_check_args(FunctionCallInfo fcinfo, int *max_blocks,
					 TimestampTz *deadline)
{
	*max_blocks = PG_GETARG_INT32(1);
	if (*max_blocks < 1 || *max_blocks > PGQ_MAX_CLAIM_BLOCKS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_blocks must be between 1 and %d", PGQ_MAX_CLAIM_BLOCKS),
				 errdetail("The value given is %d.", *max_blocks)));
	if (!PG_ARGISNULL(2))
		*deadline = pgq_wait_deadline(PG_GETARG_INTERVAL_P(2));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot claim blocks during recovery"),
				 errhint("Claims are made on the primary.")));
	if (PG_NARGS() >= 6 && PG_ARGISNULL(4) && !PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt is only used with complete"),
				 errhint("Pass the block to complete as complete => block_id, with the attempt its claim returned.")));
}

/*
 * Return a claimed block or item as a row of pgq.claimed, or with the name
 * of its group, "group_name", as a row of pgq.claimed_from.  Absent columns
 * (ids of an item, payload of a block) are NULL.
 */
void
pgq_claimed_put(ReturnSetInfo *rsinfo, const PgqClaimed *block,
				const char *group_name)
{
	Datum		values[7];
	bool		nulls[7];

	values[0] = Int64GetDatum(block->id);
	values[1] = Int32GetDatum(block->attempt);
	values[2] = block->ids;
	values[3] = block->payload;
	values[4] = block->data;
	values[5] = block->key;
	for (int c = 0; c < 6; c++)
		nulls[c] = c >= 2 && values[c] == (Datum) 0;
	if (group_name != NULL)
	{
		values[6] = CStringGetTextDatum(group_name);
		nulls[6] = false;
	}
	Assert(rsinfo->setDesc->natts == (group_name != NULL ? 7 : 6));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * pgq.inflight(group_id, created_at) -> (claimed, own)
 *
 * Blocks of the group held by open transactions, from shared memory (NULL
 * without it), and how many of them the calling transaction holds.  The
 * group_stats view needs both: a block claimed by another transaction is
 * still visible to the caller's snapshot, one claimed by the caller is not.
 * Every role may call it: for a group that the caller may not see, the
 * answer is the one for a group that does not exist.
 */
Datum
pgq_inflight(PG_FUNCTION_ARGS)
{
	PgqGroupRef group;
	PgqGroup	found;
	PgqScope	scope;
	bool		visible;
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	int64		claimed;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	group.dbid = MyDatabaseId;
	group.group_id = PG_GETARG_INT64(0);
	group.created_at = PG_GETARG_TIMESTAMPTZ(1);

	pgq_enter(&scope);
	SPI_connect();
	visible = pgq_find_group_id(group.group_id, &found) &&
		found.ref.created_at == group.created_at &&
		pgq_may_see_group(&found);
	SPI_finish();
	pgq_leave(&scope);
	if (!visible)
		group.group_id = 0;		/* no group has it */

	if (pgq_claimed_get(&group, false, &claimed))
		values[0] = Int64GetDatum(claimed);
	else
		nulls[0] = true;
	values[1] = Int64GetDatum(pgq_xact_own_claims(group.group_id));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
