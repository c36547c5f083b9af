/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Lease mode: claims that commit, with a deadline and an attempt number.
 *
 * A claim sets the block's state to 'c', counts an attempt, and sets
 * lease_until.  pgq.complete() deletes the block, pgq.extend() moves the
 * deadline, pgq.release() and pgq.fail() hand it back (state 'r', claimable
 * from lease_until on) or, once max_attempts is used up, dead-letter it
 * (state 'f').  Every one of them names the attempt it holds: once a lease
 * has run out and another consumer has claimed the block, the attempt is
 * higher, and the late holder's call changes nothing.
 *
 * A claim first takes blocks whose lease ran out or whose retry came due
 * (oldest first), then pending blocks from the group's hint, like a
 * transaction-mode claim.  No index names the columns a claim changes, and
 * pgq.blocks leaves more than half of each page free (fillfactor 45): a
 * claim is a HOT update, which writes no index entry.  Due blocks are found
 * by walking the group's blocks in flight instead (pgq_block_due()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "pgq.h"


/*
 * A claim made outside a transaction block commits asynchronously: a claim
 * lost in a crash only offers its block again.  The setting it changed,
 * whether it did so in the current transaction, and whether the transaction
 * wrote something that must be durable (then no later claim in it switches
 * the setting, as in pgq.claim(..., complete => ...)).
 */
static char sync_commit_before[32];
static bool async_claim_xact = false;
static bool durable_xact = false;

/*
 * Complete, release and fail are durable: if a claim in the same
 * transaction made its commit asynchronous, put the setting back.
 */
void
pgq_lease_durable(void)
{
	durable_xact = true;
	if (async_claim_xact)
	{
		(void) set_config_option("synchronous_commit", sync_commit_before,
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
		async_claim_xact = false;
	}
}

/*
 * A lease claim outside a transaction block: make its commit asynchronous
 * (complete, release and fail put the setting back).
 */
void
pgq_lease_claim_async(void)
{
	if (!IsTransactionBlock() && !async_claim_xact && !durable_xact)
	{
		const char *current = GetConfigOption("synchronous_commit", false, false);

		strlcpy(sync_commit_before, current, sizeof(sync_commit_before));
		(void) set_config_option("synchronous_commit", "off",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
		async_claim_xact = true;
	}
}

/* The transaction ended: a new one starts with its own setting. */
void
pgq_lease_xact_end(void)
{
	async_claim_xact = false;
	durable_xact = false;
}

/*
 * Where a claim changes pgq.blocks: the table and its kept indexes, opened
 * for the executor's index code.
 */
typedef struct BlockWriter
{
	PgqBlockScan scan;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *newslot;
	CommandId	cid;
} BlockWriter;

/*
 * Open pgq.blocks to claim blocks, with a scan of its primary key.  The new
 * versions' index entries go in through the executor's code, which wants an
 * EState and a ResultRelInfo; in the EState's memory, so that a waiting
 * claim's attempts do not pile them up.  With no range table entry, the
 * index AMs are not told which columns changed: they take every update as
 * not changing their keys, a hint for cleanup only, and true of every index
 * of pgq.blocks.  Mostly there are no entries to add: a claim is a HOT
 * update when the block's page has room.
 */
static void
writer_open(BlockWriter *w)
{
	pgq_block_scan_open(&w->scan, "blocks_pkey", RowExclusiveLock);
	w->estate = CreateExecutorState();
	w->rri = pgq_result_rel(w->estate, w->scan.heap);
	w->newslot = table_slot_create(w->scan.heap, NULL);
	w->cid = GetCurrentCommandId(true);
}

/* Close what writer_open() opened; the command counter moves if "wrote". */
static void
writer_close(BlockWriter *w, bool wrote)
{
	ExecDropSingleTupleTableSlot(w->newslot);
	ExecCloseIndices(w->rri);
	FreeExecutorState(w->estate);
	pgq_block_scan_close(&w->scan);
	if (wrote)
		CommandCounterIncrement();
}

/*
 * Lock the row version in w->scan.slot, or pass it over (false) if another
 * transaction is changing it (claiming it) or changed it since the scan's
 * snapshot, as FOR UPDATE SKIP LOCKED would.  heap_update() cannot be asked
 * not to wait itself.  On success the slot holds the locked version, every
 * column extracted.
 */
static bool
writer_lock(BlockWriter *w)
{
	TupleTableSlot *old = w->scan.slot;
	TM_FailureData tmfd;

	if (table_tuple_lock(w->scan.heap, &old->tts_tid, w->scan.snapshot, old,
						 w->cid, LockTupleNoKeyExclusive, LockWaitSkip, 0,
						 &tmfd) != TM_Ok)
		return false;
	slot_getallattrs(old);
	return true;
}

/*
 * Replace the locked block in w->scan.slot by a copy with state "state",
 * attempt "attempt", lease_until "until" (0: NULL) and, with "error" not
 * NULL, that last_error.
 */
static void
writer_update(BlockWriter *w, char state, int32 attempt, TimestampTz until,
			  const char *error)
{
	TupleTableSlot *old = w->scan.slot;
	TupleTableSlot *newslot = w->newslot;
	int			natts = old->tts_tupleDescriptor->natts;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	MemoryContext oldcxt;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
#else
	bool		update_indexes;
#endif

	ExecClearTuple(newslot);
	memcpy(newslot->tts_values, old->tts_values, natts * sizeof(Datum));
	memcpy(newslot->tts_isnull, old->tts_isnull, natts * sizeof(bool));
	newslot->tts_values[Anum_blocks_state - 1] = CharGetDatum(state);
	newslot->tts_values[Anum_blocks_attempt - 1] = Int32GetDatum(attempt);
	newslot->tts_values[Anum_blocks_lease_until - 1] = TimestampTzGetDatum(until);
	newslot->tts_isnull[Anum_blocks_lease_until - 1] = until == 0;
	oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(w->estate));
	if (error != NULL)
	{
		newslot->tts_values[Anum_blocks_last_error - 1] = CStringGetTextDatum(error);
		newslot->tts_isnull[Anum_blocks_last_error - 1] = false;
	}
	ExecStoreVirtualTuple(newslot);

	if (table_tuple_update(w->scan.heap, &old->tts_tid, newslot, w->cid,
						   w->scan.snapshot, InvalidSnapshot, true,
						   &tmfd, &lockmode, &update_indexes) != TM_Ok)
		elog(ERROR, "could not update locked block " INT64_FORMAT,
			 DatumGetInt64(old->tts_values[Anum_blocks_block_id - 1]));
#if PG_VERSION_NUM >= 160000
	if (update_indexes != TU_None)
		ExecInsertIndexTuples(w->rri, newslot, w->estate, true, false, NULL,
							  NIL, update_indexes == TU_Summarizing);
#else
	if (update_indexes)
		ExecInsertIndexTuples(w->rri, newslot, w->estate, true, false, NULL,
							  NIL);
#endif
	MemoryContextSwitchTo(oldcxt);
	ResetPerTupleExprContext(w->estate);
}

/* Hand the block in w->scan.slot, claimed at "attempt", to the caller. */
static void
writer_claimed(BlockWriter *w, int32 attempt, ClaimedBlock *block,
			   MemoryContext cxt)
{
	TupleTableSlot *old = w->scan.slot;
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

	memset(block, 0, sizeof(ClaimedBlock));
	block->block_id = DatumGetInt64(old->tts_values[Anum_blocks_block_id - 1]);
	block->ids = PointerGetDatum(PG_DETOAST_DATUM_COPY(old->tts_values[Anum_blocks_ids - 1]));
	block->attempt = attempt;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Take up to "limit" blocks whose lease ran out or whose retry came due,
 * oldest deadline first, as walks of the group's blocks in flight find them
 * (pgq_block_due()): usually there is none.  Each is read again at the row
 * version the walk saw, and locked as pending blocks are; one that had its
 * last attempt already (its lease ran out, or it was released) is
 * dead-lettered instead, and does not count.  Due blocks left over wake the
 * group's waiting claims, which did not look while this one did.
 */
static int
claim_due(const PgqGroup *group, int limit, TimestampTz now,
		  TimestampTz until, ClaimedBlock *blocks, MemoryContext cxt)
{
	int			n = 0;

	while (n < limit)
	{
		/* some candidates may be held by other claims: look at a few more */
		int			max = Min(limit - n, INT_MAX / 4) * 2 + 16;
		BlockWriter w;
		PgqDueBlock *due;
		int			ndue;
		int			changed = 0;
		int			i;

		ndue = pgq_block_due(&group->ref, now, max, &due);
		if (ndue == 0)
			break;

		writer_open(&w);
		for (i = 0; i < ndue && n < limit; i++)
		{
			TupleTableSlot *old = w.scan.slot;
			bool		isnull;
			char		state;
			int32		attempt;

			CHECK_FOR_INTERRUPTS();
			if (!table_tuple_fetch_row_version(w.scan.heap, &due[i].tid,
											   w.scan.snapshot, old))
				continue;		/* changed since the walk */
			if (!writer_lock(&w))
				continue;

			/* the TID may hold another row now: check everything again */
			state = DatumGetChar(old->tts_values[Anum_blocks_state - 1]);
			if (DatumGetInt64(old->tts_values[Anum_blocks_group_id - 1]) != group->ref.group_id ||
				(state != PGQ_BLOCK_CLAIMED && state != 'r') ||
				old->tts_isnull[Anum_blocks_lease_until - 1] ||
				DatumGetTimestampTz(old->tts_values[Anum_blocks_lease_until - 1]) > now)
				continue;

			attempt = DatumGetInt32(old->tts_values[Anum_blocks_attempt - 1]);
			changed++;
			if (attempt >= group->max_attempts)
			{
				const char *error = NULL;

				(void) slot_getattr(old, Anum_blocks_last_error, &isnull);
				if (state == PGQ_BLOCK_CLAIMED)
					error = "lease expired";
				else if (isnull)
					error = "released on its last attempt";
				writer_update(&w, 'f', attempt, 0, error);
				/* that must stay, even if nothing else is claimed */
				pgq_claim_changed_more();
				continue;
			}
			writer_update(&w, PGQ_BLOCK_CLAIMED, attempt + 1, until, NULL);
			writer_claimed(&w, attempt + 1, &blocks[n++], cxt);
		}
		writer_close(&w, changed > 0);
		pfree(due);

		if (n == limit && (i < ndue || ndue == max))
			pgq_wake_group(&group->ref);

		/* the walk kept only the earliest "max": look again for the rest */
		if (ndue < max || changed == 0)
			break;
	}
	return n;
}

/*
 * Take up to "limit" pending blocks from block id "from" on: every lease
 * claim's work, done without SQL (see blockscan.c).  The primary key is
 * walked as in transaction mode (claim.c); each pending block is locked,
 * skipping those that other transactions are changing (claiming), as FOR
 * UPDATE SKIP LOCKED would, and those changed since the scan's snapshot,
 * which are no longer pending, and then updated to claimed.
 */
static int
claim_pending(const PgqGroup *group, int64 from, int limit,
			  TimestampTz until, ClaimedBlock *blocks, MemoryContext cxt)
{
	BlockWriter w;
	int			n = 0;

	writer_open(&w);
	for (int pass = 0; pass < 2 && n < limit; pass++)
	{
		pgq_block_scan_claim_pass(&w.scan, group->ref.group_id, from, limit,
								  pass);

		while (n < limit && pgq_block_scan_next(&w.scan))
		{
			TupleTableSlot *old = w.scan.slot;
			int32		attempt;

			slot_getallattrs(old);
			if (DatumGetChar(old->tts_values[Anum_blocks_state - 1]) != 'p')
				continue;
			if (!writer_lock(&w))
				continue;
			attempt = DatumGetInt32(old->tts_values[Anum_blocks_attempt - 1]) + 1;
			writer_update(&w, PGQ_BLOCK_CLAIMED, attempt, until, NULL);
			writer_claimed(&w, attempt, &blocks[n++], cxt);
		}
	}
	writer_close(&w, n > 0);
	return n;
}

/*
 * Claim up to max_blocks blocks of a lease-mode group: due ones first, then
 * pending ones from the hint, then pending ones below it (see claim.c).
 * Outside a transaction block the claim commits asynchronously: losing it in
 * a crash only offers the block again.
 */
int
pgq_lease_claim(const PgqGroup *group, int max_blocks, ClaimedBlock *blocks,
				MemoryContext cxt)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = pgq_time_after(now, &group->lease);
	int64		hint;
	uint64		gen;
	int			n;
	int			got;

	pgq_lease_claim_async();

	/*
	 * Each batch is remembered as soon as it is taken, so that an error in a
	 * later step (a cancel during a long scan, say) lowers the hint for it.
	 */
	pgq_xact_reserve(max_blocks);

	n = claim_due(group, max_blocks, now, until, blocks, cxt);
	pgq_xact_remember_lease(&group->ref, blocks, n, until);
	if (n < max_blocks)
	{
		(void) pgq_hint_get(&group->ref, &hint, &gen);
		got = claim_pending(group, hint, max_blocks - n, until, blocks + n, cxt);
		pgq_xact_remember_lease(&group->ref, blocks + n, got, until);
		if (got > 0)
			pgq_hint_advance(&group->ref, gen, blocks[n + got - 1].block_id + 1);
		n += got;

		/*
		 * Committed leases are rows, not in the shared claimed count: look
		 * below the hint only at the rate pgq_full_scan_due() allows.
		 */
		if (n < max_blocks && hint > 0 && pgq_full_scan_due(&group->ref, -1))
		{
			got = claim_pending(group, 0, max_blocks - n, until, blocks + n, cxt);
			pgq_xact_remember_lease(&group->ref, blocks + n, got, until);
			if (got > 0)
				pgq_hint_lower(&group->ref, blocks[n].block_id);
			n += got;
		}
	}
	qsort(blocks, n, sizeof(ClaimedBlock), pgq_compare_claimed);
	return n;
}

/*
 * Run one of the statements below on the block held under "attempt".  True
 * if it changed the block: the caller held it.
 */
static bool
change_held_block(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
				  Datum *values, int expected_rc)
{
	int			rc;

	if (*plan == NULL)
		*plan = pgq_keep_plan(sql, nargs, argtypes);
	rc = SPI_execute_plan(*plan, values, NULL, false, 0);
	if (rc != expected_rc)
		elog(ERROR, "could not change block: %s", SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/*
 * The block held under "attempt".  Naming the group as well makes this a
 * primary key lookup, which no other index can win in the planner.
 */
#define HELD_BY_ATTEMPT \
	"WHERE group_id " OP("=") " $1 AND block_id " OP("=") " $2 " \
	"AND state " OP("=") " 'c' AND attempt " OP("=") " $3"

/*
 * Consume a block held under "attempt", without SQL (see blockscan.c): it
 * is every lease cycle's second half.  Waiters learn at commit whether the
 * group can yield more.
 */
bool
pgq_lease_complete(const PgqGroup *group, int64 block_id, int32 attempt)
{
	if (!pgq_block_delete(group->ref.group_id, block_id, &attempt))
		return false;
	pgq_lease_durable();
	pgq_xact_wake_at_commit(&group->ref);
	return true;
}

/*
 * Give a block back at once.  The next claim counts a new attempt: that is
 * what keeps this holder's attempt number from being valid again.
 */
bool
pgq_lease_release(const PgqGroup *group, int64 block_id, int32 attempt)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[4] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(group->ref.group_id),
		Int64GetDatum(block_id), Int32GetDatum(attempt),
	TimestampTzGetDatum(GetCurrentTimestamp())};

	if (!change_held_block(&plan,
						   "UPDATE pgq.blocks SET state = 'r', lease_until = $4 "
						   HELD_BY_ATTEMPT,
						   4, argtypes, values, SPI_OK_UPDATE))
		return false;
	pgq_lease_durable();
	pgq_announce_claimable(&group->ref, group->name);
	return true;
}

/*
 * Record a failed attempt: the block is retried after retry_after (at once
 * if NULL), or dead-lettered with the error if it had its last attempt.
 */
bool
pgq_lease_fail(const PgqGroup *group, int64 block_id, int32 attempt,
			   text *error, Interval *retry_after)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[6] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID,
	TEXTOID, INT4OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	TimestampTz now = GetCurrentTimestamp();
	int			rc;

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(block_id);
	values[2] = Int32GetDatum(attempt);
	values[3] = TimestampTzGetDatum(retry_after ? pgq_time_after(now, retry_after) : now);
	values[4] = PointerGetDatum(error);
	if (error == NULL)
		nulls[4] = 'n';
	values[5] = Int32GetDatum(group->max_attempts);

	if (plan == NULL)
		plan = pgq_keep_plan("UPDATE pgq.blocks SET "
							 "state = CASE WHEN attempt " OP(">=") " $6 "
							 "THEN 'f'::pg_catalog.\"char\" "
							 "ELSE 'r'::pg_catalog.\"char\" END, "
							 "lease_until = CASE WHEN attempt " OP(">=") " $6 "
							 "THEN NULL ELSE $4 END, "
							 "last_error = $5 "
							 HELD_BY_ATTEMPT,
							 6, argtypes);
	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not fail block: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	pgq_lease_durable();
	pgq_announce_claimable(&group->ref, group->name);
	return true;
}

/* Move the deadline of a block held under "attempt" to now() + lease. */
bool
pgq_lease_extend(const PgqGroup *group, int64 block_id, int32 attempt,
				 Interval *lease)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[4] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(group->ref.group_id),
		Int64GetDatum(block_id), Int32GetDatum(attempt),
	TimestampTzGetDatum(pgq_time_after(GetCurrentTimestamp(), lease))};

	return change_held_block(&plan,
							 "UPDATE pgq.blocks SET lease_until = $4 "
							 HELD_BY_ATTEMPT,
							 4, argtypes, values, SPI_OK_UPDATE);
}
