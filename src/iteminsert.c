/*-------------------------------------------------------------------------
 *
 * iteminsert.c
 *	  Inserts into pgq.items for enqueues, without SQL.
 *
 * An enqueue adds one row, and as an SQL statement (INSERT .. ON CONFLICT
 * DO NOTHING RETURNING, through SPI) it spent more instructions on the
 * statement than on the row: planning-free as a kept plan is, the executor
 * still built its nodes, projections and index predicates each time.  Here
 * the row goes in through the table and index AMs, with the executor's
 * index code, by the speculative insertion that INSERT .. ON CONFLICT
 * (group_id, key) DO NOTHING uses:
 *
 *	- without a key, a plain insert;
 *	- with a key, insert the row with a speculative token, then its index
 *	  entries; if the unique index items_key_idx holds the key already, or
 *	  another transaction is inserting it, kill the row, look for the key
 *	  (waiting for that transaction) and insert again if it is not there.
 *	  Unlike INSERT .. ON CONFLICT, the key is not looked for first, unless
 *	  the session met a taken key lately (see pgq.key_lookups).
 *
 * This is safe for the reasons blockscan.c gives for pgq.blocks: pgq owns
 * the table, which has no rules, policies, foreign keys or CHECK
 * constraints of its own (docs/administration.md says that those that
 * someone adds do not see these inserts), and its one trigger,
 * items_inflight, is for changes made in SQL: a delayed enqueue tells
 * shared memory itself (pgq_xact_deadline_sooner()).  The callers check the
 * caller's privilege on the queue first.  One EState serves every row of a
 * call, so that enqueue_many pays for the executor state once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_index.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "blockscan.h"
#include "iteminsert.h"

/*
 * INSERT .. ON CONFLICT looks for the key in the unique index before it
 * inserts, so that a key that is taken costs no dead row.  New keys are the
 * rule for enqueues, and that look took 8% of an enqueue's instructions and
 * 23% of each item of an enqueue_many: an enqueue inserts at once, and the
 * unique index finds a conflict as it takes the entry.  A taken key then
 * costs a killed row version with an entry in every index of pgq.items, for
 * vacuum to remove, and a transaction id.  So a session that met a taken key
 * looks first for its next pgq.key_lookups keyed enqueues: a producer that
 * resends keys leaves one dead row per pgq.key_lookups new keys, not one
 * per resend.
 */
static int	precheck_keys = 0;

struct PgqItemInserter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	List	   *arbiters;		/* items_key_idx */
	bool		look_first;		/* always look for the key first */
	Oid			seqid;			/* pgq.block_id_seq */
	int32		epoch;			/* recorded in each item; 0.2 only */
	AttrNumber	ordering_attnum;	/* ordering_key; 0.2 only */
	bool		inserted;		/* a row went in */
};

/*
 * Open pgq.items for inserts of items made in lease epoch "epoch" (see
 * lease.c; ignored in a database still at 0.1).  A read-only transaction may
 * not, as it may not run an INSERT.
 */
PgqItemInserter *
pgq_item_inserter_begin(int32 epoch)
{
	PgqItemInserter *ins = palloc0(sizeof(PgqItemInserter));
	Oid			key_index;
	bool		key_index_found = false;
	MemoryContext oldcxt;

	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot enqueue in a read-only transaction")));
	ins->rel = pgq_open_rel("items", RowExclusiveLock);
	if (RelationGetDescr(ins->rel)->natts < Natts_items)
		elog(ERROR, "pgq.items has %d columns, expected %d",
			 RelationGetDescr(ins->rel)->natts, Natts_items);
	ins->seqid = pgq_rel_oid("block_id_seq");
	ins->epoch = epoch;
	ins->ordering_attnum = get_attnum(RelationGetRelid(ins->rel), "ordering_key");
	key_index = pgq_rel_oid("items_key_idx");
	ins->estate = CreateExecutorState();
	ins->rri = pgq_result_rel(ins->estate, ins->rel);
	oldcxt = MemoryContextSwitchTo(ins->estate->es_query_cxt);
	ins->arbiters = list_make1_oid(key_index);
	MemoryContextSwitchTo(oldcxt);

	/*
	 * The key index decides which keys are taken.  Another unique index
	 * that is ready for inserts (the copy that REINDEX CONCURRENTLY builds
	 * of it, one that someone added) would raise a unique violation for a
	 * taken key inserted at once: look first while there is one, as INSERT
	 * .. ON CONFLICT does.
	 */
	for (int i = 0; i < ins->rri->ri_NumIndices; i++)
	{
		Form_pg_index index = ins->rri->ri_IndexRelationDescs[i]->rd_index;

		if (index->indexrelid == key_index)
			key_index_found = index->indisunique && index->indimmediate &&
				index->indisready;
		else if (index->indisunique && !index->indisprimary &&
				 index->indisready)
			ins->look_first = true;
	}
	if (!key_index_found)
		elog(ERROR, "pgq.items_key_idx is not a unique index of pgq.items");
	ins->slot = table_slot_create(ins->rel, NULL);
	return ins;
}

/*
 * In REPEATABLE READ and SERIALIZABLE, a key held by an item that the
 * transaction's snapshot cannot see is a serialization failure, as it is for
 * INSERT .. ON CONFLICT DO NOTHING: the enqueue would otherwise return an id
 * that the rest of the transaction cannot find.  Items that this transaction
 * inserted itself are its own to see.
 */
static void
check_conflict_visible(PgqItemInserter *ins, ItemPointer tid)
{
	TupleTableSlot *slot;
	bool		isnull;
	TransactionId xmin;

	if (!IsolationUsesXactSnapshot())
		return;
	slot = table_slot_create(ins->rel, NULL);
	if (!table_tuple_fetch_row_version(ins->rel, tid, SnapshotAny, slot))
		elog(ERROR, "could not fetch the item that holds the key");
	if (!table_tuple_satisfies_snapshot(ins->rel, slot,
										GetTransactionSnapshot()))
	{
		xmin = DatumGetTransactionId(slot_getsysattr(slot,
													 MinTransactionIdAttributeNumber,
													 &isnull));
		if (!TransactionIdIsCurrentTransactionId(xmin))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	ExecDropSingleTupleTableSlot(slot);
}

/* The index entries of the row in ins->slot; true unless the key was taken. */
static bool
insert_index_entries(PgqItemInserter *ins, bool speculative)
{
	bool		conflict = false;
	List	   *recheck;

#if PG_VERSION_NUM >= 160000
	recheck = ExecInsertIndexTuples(ins->rri, ins->slot, ins->estate, false,
									speculative, speculative ? &conflict : NULL,
									speculative ? ins->arbiters : NIL, false);
#else
	recheck = ExecInsertIndexTuples(ins->rri, ins->slot, ins->estate, false,
									speculative, speculative ? &conflict : NULL,
									speculative ? ins->arbiters : NIL);
#endif
	list_free(recheck);
	return !conflict;
}

/*
 * Insert the item unless the queue holds its key: returns its new id, or 0
 * if the key is taken by an item the caller can see (after waiting for the
 * transaction that inserted it, if that was still in progress).  The
 * Datums are stored as given; key must be NULL for an item without one.
 */
int64
pgq_item_insert(PgqItemInserter *ins, const PgqNewItem *item)
{
	TupleTableSlot *slot = ins->slot;
	int			natts = slot->tts_tupleDescriptor->natts;
	CommandId	cid = GetCurrentCommandId(true);
	int64		id;

	id = DatumGetInt64(DirectFunctionCall1(nextval_oid,
										   ObjectIdGetDatum(ins->seqid)));
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, natts * sizeof(bool));
	slot->tts_values[Anum_items_group_id - 1] = Int64GetDatum(item->group_id);
	slot->tts_isnull[Anum_items_group_id - 1] = false;
	slot->tts_values[Anum_items_item_id - 1] = Int64GetDatum(id);
	slot->tts_isnull[Anum_items_item_id - 1] = false;
	slot->tts_values[Anum_items_key - 1] = PointerGetDatum(item->key);
	slot->tts_isnull[Anum_items_key - 1] = item->key == NULL;
	slot->tts_values[Anum_items_priority - 1] = Int32GetDatum(item->priority);
	slot->tts_isnull[Anum_items_priority - 1] = false;
	slot->tts_values[Anum_items_state - 1] =
		CharGetDatum(item->waiting ? 'w' : item->has_due_at ? 'r' : 'p');
	slot->tts_isnull[Anum_items_state - 1] = false;
	slot->tts_values[Anum_items_attempt - 1] = Int32GetDatum(0);
	slot->tts_isnull[Anum_items_attempt - 1] = false;
	slot->tts_values[Anum_items_due_at - 1] = TimestampTzGetDatum(item->due_at);
	slot->tts_isnull[Anum_items_due_at - 1] = !item->has_due_at;
	slot->tts_values[Anum_items_payload - 1] = item->payload;
	slot->tts_isnull[Anum_items_payload - 1] = item->no_payload;
	slot->tts_values[Anum_items_data - 1] = item->data;
	slot->tts_isnull[Anum_items_data - 1] = item->no_data;
	slot->tts_values[Anum_items_enqueued_at - 1] =
		TimestampTzGetDatum(GetCurrentTimestamp());
	slot->tts_isnull[Anum_items_enqueued_at - 1] = false;
	/* the epoch that a lease claim's attempt number counts from (lease.c) */
	if (natts >= Anum_items_epoch)
	{
		slot->tts_values[Anum_items_epoch - 1] = Int32GetDatum(ins->epoch);
		slot->tts_isnull[Anum_items_epoch - 1] = false;
	}
	/* the ordering key (ordering.c), where the column is */
	if (item->ordering_key != NULL)
	{
		if (ins->ordering_attnum == InvalidAttrNumber)
			elog(ERROR, "pgq.items has no column ordering_key");
		slot->tts_values[ins->ordering_attnum - 1] = PointerGetDatum(item->ordering_key);
		slot->tts_isnull[ins->ordering_attnum - 1] = false;
	}
	ExecStoreVirtualTuple(slot);

	if (item->key == NULL)
	{
		table_tuple_insert(ins->rel, slot, cid, 0, NULL);
		insert_index_entries(ins, false);
	}
	else
	{
		bool		look_first = ins->look_first || precheck_keys > 0;

		for (;;)
		{
			ItemPointerData conflict_tid;
			uint32		token;
			bool		inserted;

			CHECK_FOR_INTERRUPTS();
#if PG_VERSION_NUM >= 180000
			if (look_first &&
				!ExecCheckIndexConstraints(ins->rri, slot, ins->estate,
										   &conflict_tid, NULL, ins->arbiters))
#else
			if (look_first &&
				!ExecCheckIndexConstraints(ins->rri, slot, ins->estate,
										   &conflict_tid, ins->arbiters))
#endif
			{
				precheck_keys = pgq_key_lookups;
				check_conflict_visible(ins, &conflict_tid);
				id = 0;
				break;
			}

			/*
			 * The token tells a transaction that finds the row before it is
			 * complete to wait for this insert rather than for the whole
			 * transaction; a row that lost the race is killed at once.
			 */
			token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
			table_tuple_insert_speculative(ins->rel, slot, cid, 0, NULL,
										   token);
			inserted = insert_index_entries(ins, true);
			table_tuple_complete_speculative(ins->rel, slot, token, inserted);
			SpeculativeInsertionLockRelease(GetCurrentTransactionId());
			if (inserted)
			{
				if (precheck_keys > 0)
					precheck_keys--;
				break;
			}

			/*
			 * The key is taken, or being taken: look for it first from now
			 * on, which waits for a transaction that inserts it to end.
			 */
			look_first = true;
			precheck_keys = pgq_key_lookups;
		}
	}
	ResetPerTupleExprContext(ins->estate);
	ins->inserted |= id != 0;
	return id;
}

/*
 * Close what pgq_item_inserter_begin() opened; the lock stays.  The rows
 * become visible to the transaction's next command, as an INSERT's do.
 */
void
pgq_item_inserter_end(PgqItemInserter *ins)
{
	if (ins->inserted)
		CommandCounterIncrement();
	ExecDropSingleTupleTableSlot(ins->slot);
	ExecCloseIndices(ins->rri);
	FreeExecutorState(ins->estate);
	table_close(ins->rel, NoLock);
	pfree(ins);
}
