/*-------------------------------------------------------------------------
 *
 * itemwrite.c
 *	  Direct access to pgq.items for the hot path of an item's holder: the
 *	  queue of an item, and the item finished.
 *
 * Every pgq.complete() of an item looks up its queue by the item's id, and
 * in advisory mode, where the claim wrote nothing, the complete is the one
 * write of the item's cycle.  As SQL (a join for the lookup, an UPDATE
 * through SPI) they took most of an advisory item's cycle; here they walk
 * pgq's own indexes through the index and table AMs instead, as blocks'
 * hot paths do (blockscan.c), with the same reasons why that is safe: pgq
 * owns the table, which has no rules, policies or foreign keys, and the
 * callers check the caller's privilege on the queue before they change
 * anything.  The new row version's index entries go in through the
 * executor's code, with the index infos that blockscan.c keeps.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tableam.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "blockscan.h"
#include "itemwrite.h"
#include "lease.h"
#include "queue.h"
#include "xact.h"

#if PG_VERSION_NUM >= 170000
#define CURRENT_LXID	(MyProc->vxid.lxid)
#else
#define CURRENT_LXID	(MyProc->lxid)
#endif

/*
 * The item pgq_item_group_id() found last, and where, for the write that
 * usually follows in the same transaction (whose lock on pgq.items keeps
 * vacuum from truncating the table under the TID).  item_id 0: none.
 */
static struct
{
	int64		item_id;
	int64		group_id;
	LocalTransactionId lxid;
	ItemPointerData tid;
}			last_found;

/*
 * The queue of an item, looked up by the item's id (pgq_item_id_index()).
 * False if there is no such item now.
 */
bool
pgq_item_group_id(int64 item_id, int64 *group_id)
{
	PgqBlockScan scan;
	bool		found;

	last_found.item_id = 0;
	pgq_item_scan_open(&scan, pgq_item_id_index(), AccessShareLock);
	found = pgq_scan_find_id(&scan, item_id, Anum_items_item_id);
	if (found)
	{
		bool		isnull;

		*group_id = DatumGetInt64(pgq_block_attr(&scan, Anum_items_group_id,
												 &isnull));
		last_found.item_id = item_id;
		last_found.group_id = *group_id;
		last_found.lxid = CURRENT_LXID;
		last_found.tid = scan.slot->tts_tid;
	}
	pgq_block_scan_close(&scan);
	return found;
}

/* Is the row in scan->slot the given item of the given queue? */
static bool
is_item(PgqBlockScan *scan, int64 group_id, int64 item_id)
{
	bool		isnull;

	return DatumGetInt64(pgq_block_attr(scan, Anum_items_item_id,
										&isnull)) == item_id &&
		DatumGetInt64(pgq_block_attr(scan, Anum_items_group_id,
									 &isnull)) == group_id;
}

/*
 * Write the new version of the item in scan->slot: done, with its result,
 * finished now, and one attempt more if "count" (an advisory claim counted
 * none).  Returns the result of the update; on TM_Ok, *key gets the item's
 * ordering key (NULL if none) in the caller's memory.
 */
static TM_Result
write_done(PgqBlockScan *scan, bool count, NullableDatum result,
		   NullableDatum data, text **key, TM_FailureData *tmfd)
{
	TupleTableSlot *old = scan->slot;
	TupleDesc	tupdesc = RelationGetDescr(scan->heap);
	int			natts = tupdesc->natts;
	MemoryContext cxt = CurrentMemoryContext;
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri;
	TupleTableSlot *newslot;
	LockTupleMode lockmode;
	TM_Result	tm;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
#else
	bool		update_indexes;
#endif

	slot_getallattrs(old);
	MemoryContextSwitchTo(estate->es_query_cxt);
	rri = pgq_result_rel(estate, scan->heap);
	newslot = table_slot_create(scan->heap, NULL);
	memcpy(newslot->tts_values, old->tts_values, natts * sizeof(Datum));
	memcpy(newslot->tts_isnull, old->tts_isnull, natts * sizeof(bool));
	newslot->tts_values[Anum_items_state - 1] = CharGetDatum('d');
	newslot->tts_isnull[Anum_items_due_at - 1] = true;
	if (count)
		newslot->tts_values[Anum_items_attempt - 1] =
			Int32GetDatum(DatumGetInt32(old->tts_values[Anum_items_attempt - 1]) + 1);
	newslot->tts_values[Anum_items_result - 1] = result.value;
	newslot->tts_isnull[Anum_items_result - 1] = result.isnull;
	newslot->tts_values[Anum_items_result_data - 1] = data.value;
	newslot->tts_isnull[Anum_items_result_data - 1] = data.isnull;
	newslot->tts_values[Anum_items_finished_at - 1] =
		TimestampTzGetDatum(GetCurrentTimestamp());
	newslot->tts_isnull[Anum_items_finished_at - 1] = false;
	ExecStoreVirtualTuple(newslot);

	tm = table_tuple_update(scan->heap, &old->tts_tid, newslot,
							GetCurrentCommandId(true), scan->snapshot,
							InvalidSnapshot, true, tmfd, &lockmode,
							&update_indexes);
	if (tm == TM_Ok)
	{
#if PG_VERSION_NUM >= 160000
		if (update_indexes != TU_None)
			ExecInsertIndexTuples(rri, newslot, estate, true, false, NULL,
								  NIL, update_indexes == TU_Summarizing);
#else
		if (update_indexes)
			ExecInsertIndexTuples(rri, newslot, estate, true, false, NULL,
								  NIL);
#endif
		*key = NULL;
		if (natts >= Anum_items_ordering_key &&
			!old->tts_isnull[Anum_items_ordering_key - 1])
		{
			MemoryContextSwitchTo(cxt);
			*key = DatumGetTextPCopy(old->tts_values[Anum_items_ordering_key - 1]);
		}
	}
	MemoryContextSwitchTo(cxt);
	ExecDropSingleTupleTableSlot(newslot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	return tm;
}

/*
 * Mark an item that the caller holds done, with its result and data
 * (either may be NULL).  With "attempt" (lease mode), the item must be
 * claimed under that attempt; without, the caller holds it by an advisory
 * lock, it must be pending or due for a retry (as its claim took it), and
 * the attempt that ended is counted.  On success, *key gets its ordering
 * key, or NULL, for the caller to hand on.  False if the item is gone or
 * not held that way.
 *
 * Like an UPDATE in READ COMMITTED, an item changed by a transaction that
 * committed meanwhile is looked at again in its new version; in REPEATABLE
 * READ and SERIALIZABLE that is a serialization failure.  If
 * pgq_item_group_id() just found the item, the row version it saw is read
 * again by its TID rather than through the primary key.
 */
bool
pgq_item_finish_held(int64 group_id, int64 item_id, const int32 *attempt,
					 NullableDatum result, NullableDatum data, text **key)
{
	bool		by_tid = last_found.item_id == item_id &&
		last_found.group_id == group_id && last_found.lxid == CURRENT_LXID;
	ItemPointerData tid = last_found.tid;

	last_found.item_id = 0;
	for (;;)
	{
		PgqBlockScan scan;
		TM_Result	tm = TM_Invisible;	/* not found, or not claimable */
		TM_FailureData tmfd;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		pgq_item_scan_open(&scan, pgq_item_id_index(), RowExclusiveLock);
		found = by_tid &&
			table_tuple_fetch_row_version(scan.heap, &tid, scan.snapshot,
										  scan.slot) &&
			is_item(&scan, group_id, item_id);
		by_tid = false;
		if (!found)
			found = pgq_scan_find_id(&scan, item_id, Anum_items_item_id) &&
				is_item(&scan, group_id, item_id);
		if (found)
		{
			bool		isnull;
			char		state = DatumGetChar(pgq_block_attr(&scan,
															Anum_items_state,
															&isnull));

			if (attempt == NULL ? state == PGQ_ITEM_PENDING || state == 'r' :
				state == PGQ_ITEM_CLAIMED &&
				DatumGetInt32(pgq_block_attr(&scan, Anum_items_attempt,
											 &isnull)) == *attempt)
				tm = write_done(&scan, attempt == NULL, result, data, key,
								&tmfd);
		}
		pgq_block_scan_close(&scan);

		if (tm == TM_Ok)
		{
			CommandCounterIncrement();
			return true;
		}
		if ((tm == TM_Updated || tm == TM_Deleted) &&
			IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
		if (tm != TM_Updated)
			return false;
		/* changed and committed meanwhile: look at the new version */
	}
}

/*
 * A detoasted copy, in the current memory context, of a column of the row
 * in "slot" (every column extracted), or 0 if it is NULL.
 */
static Datum
copy_column(TupleTableSlot *slot, AttrNumber attnum)
{
	if (slot->tts_isnull[attnum - 1])
		return (Datum) 0;
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(slot->tts_values[attnum - 1]));
}

/*
 * Claim the locked pending item in w->scan.slot, and hand it to the caller
 * in cxt: under a lease until "until", with the next attempt number
 * ("epoch": 0.2's fenced numbers, or -1 in a database still at 0.1); or,
 * with "until" 0 (transaction mode), done at once, as the caller's commit
 * consumes it, its ordering key appended to *keys (in the caller's memory).
 */
static void
claim_item(PgqRowWriter *w, TimestampTz until, int32 epoch, PgqClaimed *item,
		   MemoryContext cxt, List **keys)
{
	TupleTableSlot *old = w->scan.slot;
	TupleTableSlot *newslot = pgq_writer_new_version(w);
	int32		attempt = DatumGetInt32(old->tts_values[Anum_items_attempt - 1]);
	MemoryContext oldcxt;

	if (until == 0)
	{
		attempt++;
		newslot->tts_values[Anum_items_state - 1] = CharGetDatum('d');
		newslot->tts_values[Anum_items_finished_at - 1] =
			TimestampTzGetDatum(GetCurrentTimestamp());
		newslot->tts_isnull[Anum_items_finished_at - 1] = false;
	}
	else
	{
		if (epoch >= 0)
		{
			int32		tries = attempt;

			/* not claimed since the update from 0.1: its attempt counts them */
			if (!old->tts_isnull[Anum_items_tries - 1])
				tries = DatumGetInt32(old->tts_values[Anum_items_tries - 1]);
			attempt = pgq_lease_next_attempt(old, Anum_items_attempt,
											 Anum_items_epoch);
			newslot->tts_values[Anum_items_tries - 1] = Int32GetDatum(tries + 1);
			newslot->tts_isnull[Anum_items_tries - 1] = false;
			newslot->tts_values[Anum_items_epoch - 1] = Int32GetDatum(epoch);
			newslot->tts_isnull[Anum_items_epoch - 1] = false;
		}
		else
			attempt++;
		newslot->tts_values[Anum_items_state - 1] = CharGetDatum(PGQ_ITEM_CLAIMED);
		newslot->tts_values[Anum_items_due_at - 1] = TimestampTzGetDatum(until);
		newslot->tts_isnull[Anum_items_due_at - 1] = false;
	}
	newslot->tts_values[Anum_items_attempt - 1] = Int32GetDatum(attempt);
	pgq_writer_update(w);

	if (keys != NULL && until == 0 &&
		old->tts_tupleDescriptor->natts >= Anum_items_ordering_key &&
		!old->tts_isnull[Anum_items_ordering_key - 1])
		*keys = lappend(*keys,
						DatumGetTextPCopy(old->tts_values[Anum_items_ordering_key - 1]));

	oldcxt = MemoryContextSwitchTo(cxt);
	item->id = DatumGetInt64(old->tts_values[Anum_items_item_id - 1]);
	item->attempt = attempt;
	item->ids = (Datum) 0;
	item->payload = copy_column(old, Anum_items_payload);
	item->data = copy_column(old, Anum_items_data);
	item->key = copy_column(old, Anum_items_key);
	item->priority = DatumGetInt32(old->tts_values[Anum_items_priority - 1]);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Claim up to "limit" pending items of a queue, from place "from" in claim
 * order on (pgq_item_scan_pending_pass()), into items[] (in cxt): every
 * lease-mode and transaction-mode claim of pending items, without SQL.
 * "until" is the end of the items' leases, or 0 in transaction mode, where
 * the claim marks them done at once and appends their ordering keys to
 * *keys, for the caller to hand on (claim_item()).  Each pending item is
 * locked, skipping those that other transactions are changing (claiming),
 * as FOR UPDATE SKIP LOCKED would, and those changed since the scan's
 * snapshot, which are no longer pending, and then updated.  *last gets the
 * place of the last candidate looked at (0 if none), short of the first
 * that another transaction only row-locks (pgq_writer_only_locked()): a
 * claim's abort lowers the hint to what it held, a row lock's end does
 * not, so the hint must not pass such an item (H1 in shmem.c).
 */
int
pgq_item_claim_pending(const PgqGroupRef *group, int64 from, int limit,
					   TimestampTz until, PgqClaimed *items,
					   MemoryContext cxt, int64 *last, List **keys)
{
	PgqRowWriter w;
	int32		epoch = -1;
	int			n = 0;
	bool		held_back = false;	/* *last stays below a row-locked item */

	*last = 0;
	pgq_writer_open(&w, "items", "items_pending_idx");
	if (until != 0)
	{
		/* leases: fenced attempt numbers, from 0.2 on */
		if (RelationGetDescr(w.scan.heap)->natts >= Anum_items_epoch)
			epoch = pgq_lease_epoch();
		else
			pgq_lease_durable();
	}
	for (int pass = 0; n < limit &&
		 pgq_item_scan_pending_pass(&w.scan, group->group_id, from, pass);
		 pass++)
	{
		while (n < limit && pgq_block_scan_next(&w.scan))
		{
			TupleTableSlot *old = w.scan.slot;
			int64		position;

			slot_getallattrs(old);
			if (DatumGetChar(old->tts_values[Anum_items_state - 1]) != PGQ_ITEM_PENDING)
				continue;
			/* counted before the hint may move past it (C1 in shmem.c) */
			pgq_xact_claiming_count(limit - n);
			position = pgq_item_position(DatumGetInt32(old->tts_values[Anum_items_priority - 1]),
										 DatumGetInt64(old->tts_values[Anum_items_item_id - 1]));
			if (!pgq_writer_lock(&w))
			{
				/* a row lock's end lowers no hint: keep it below the item */
				if (pgq_writer_only_locked(&w))
					held_back = true;
				else if (!held_back)
					*last = position;
				continue;
			}
			if (!held_back)
				*last = position;
			claim_item(&w, until, epoch, &items[n++], cxt, keys);
		}
	}
	pgq_writer_close(&w, n > 0);
	return n;
}
