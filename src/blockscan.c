/*-------------------------------------------------------------------------
 *
 * blockscan.c
 *	  Direct access to pgq.blocks for the hot paths of claims and block
 *	  operations.
 *
 * A claim or a complete does little work on few rows, and running it as an
 * SQL statement costs more than the work: executor setup alone (opening
 * every scan, building quals and projections) took most of an advisory
 * claim's instructions.  The calls here walk pgq's own indexes through the
 * index and table AMs instead.  They are safe to use because pgq owns the
 * table: it has no rules, policies or foreign keys to honour, and the
 * callers check the caller's privilege on the group before they change
 * anything.  Its trigger, blocks_inflight, is for changes made in SQL; the
 * callers of the updates made here (lease claims) tell shared memory
 * themselves, at commit.  This is storage only: looking for due blocks,
 * which also reads and keeps shared state, is due.c's.
 *
 * Each scan takes the snapshot a statement would: a new one in READ
 * COMMITTED, the transaction's in REPEATABLE READ and SERIALIZABLE (claims
 * are refused there; completes raise a serialization failure, as a DELETE
 * would, when the block changed since).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "storage/bufmgr.h"
#include "storage/proc.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "pgq.h"
#include "blockscan.h"
#include "queue.h"

/* How many block ids past twice those it asks for a claim's first pass reads */
#define PGQ_CLAIM_WINDOW	16

/*
 * The block pgq_block_group_id() found last, and where: a complete, which
 * looks the block's group up and then deletes it, reads it there again
 * instead of walking an index twice.  block_id 0: none.  Only the
 * transaction that found it uses it: its lock on pgq.blocks keeps vacuum
 * from truncating the table under the TID.
 */
#if PG_VERSION_NUM >= 170000
#define CURRENT_LXID	(MyProc->vxid.lxid)
#else
#define CURRENT_LXID	(MyProc->lxid)
#endif

static struct
{
	int64		block_id;
	int64		group_id;
	LocalTransactionId lxid;
	ItemPointerData tid;
}			last_found;

/*
 * The OIDs of the relations that the hot paths open, looked up by name once
 * rather than at every call (three catalog lookups each; a claim and a
 * complete open four scans of pgq.blocks).  Any relcache invalidation of one
 * of them, as DROP EXTENSION sends, forgets them all and counts a
 * generation.
 */
typedef struct OwnRel
{
	const char *name;
	char		relkind;
	Oid			relid;			/* InvalidOid: look it up */
} OwnRel;

static OwnRel own_rels[] = {
	{"blocks", RELKIND_RELATION, InvalidOid},
	{"blocks_pkey", RELKIND_INDEX, InvalidOid},
	{"blocks_block_id_idx", RELKIND_INDEX, InvalidOid},
	{"items", RELKIND_RELATION, InvalidOid},
	{"items_pkey", RELKIND_INDEX, InvalidOid},
	{"items_key_idx", RELKIND_INDEX, InvalidOid},
	{"items_pending_idx", RELKIND_INDEX, InvalidOid},
	{"items_item_id_idx", RELKIND_INDEX, InvalidOid},
	{"items_due_idx", RELKIND_INDEX, InvalidOid},
	{"block_id_seq", RELKIND_SEQUENCE, InvalidOid},
	{"epoch_seq", RELKIND_SEQUENCE, InvalidOid},
};
static uint64 own_rels_generation = 0;

/*
 * A counter that moves at every invalidation of pgq's relations: what was
 * read from the catalog about them before it moved must be read again.
 */
uint64
pgq_rels_generation(void)
{
	return own_rels_generation;
}

/*
 * The IndexInfos of a table's indexes, as ExecOpenIndices() builds them for
 * every statement, but built once and kept (see open_indexes()).
 */
typedef struct OwnIndexes
{
	const char *table;
	bool		valid;			/* false: build again before use */
	Oid			relid;			/* the table they were built for */
	bool		use_executor;	/* some cannot be kept: ExecOpenIndices() */
	MemoryContext cxt;			/* of what follows; NULL: none */
	int			n;
	Oid		   *indexids;
	IndexInfo **infos;
} OwnIndexes;

static OwnIndexes own_indexes[] = {
	{"blocks"},
	{"items"},
};

/* Whether relid is one of pgq's relations, or of their indexes, we know of. */
static bool
is_own_rel(Oid relid)
{
	for (size_t i = 0; i < lengthof(own_rels); i++)
		if (relid == own_rels[i].relid)
			return true;
	for (size_t i = 0; i < lengthof(own_indexes); i++)
	{
		if (relid == own_indexes[i].relid)
			return true;
		for (int j = 0; j < own_indexes[i].n; j++)
			if (relid == own_indexes[i].indexids[j])
				return true;
	}
	return false;
}

/*
 * Relcache callback: one of pgq's relations changed, or everything.  Forget
 * all that is kept about them, and count a generation.
 */
static void
own_rels_callback(Datum arg, Oid relid)
{
	if (relid != InvalidOid && !is_own_rel(relid))
		return;
	for (size_t i = 0; i < lengthof(own_rels); i++)
		own_rels[i].relid = InvalidOid;
	for (size_t i = 0; i < lengthof(own_indexes); i++)
		own_indexes[i].valid = false;
	own_rels_generation++;
}

/* The entry of own_rels of this name, its OID looked up if need be. */
static OwnRel *
own_rel(const char *name)
{
	static bool registered = false;
	OwnRel	   *own = NULL;

	for (size_t i = 0; i < lengthof(own_rels); i++)
		if (strcmp(own_rels[i].name, name) == 0)
			own = &own_rels[i];
	if (own == NULL)
		elog(ERROR, "unknown relation of pgq: \"%s\"", name);
	if (!registered)
	{
		CacheRegisterRelcacheCallback(own_rels_callback, (Datum) 0);
		registered = true;
	}
	if (!OidIsValid(own->relid))
	{
		own->relid = get_relname_relid(name, get_namespace_oid("pgq", false));
		if (!OidIsValid(own->relid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("relation \"pgq.%s\" does not exist", name)));
	}
	return own;
}

/*
 * Open one of pgq's relations (own_rels) by name.  The invalidations that
 * came before are taken in first, so that a cached OID is not one of a
 * relation dropped meanwhile (a drop that commits while this waits for the
 * lock raises an error, as an open by name would then); if one of those
 * that came with the lock was about these relations, look the name up again.
 */
Relation
pgq_open_rel(const char *name, LOCKMODE lockmode)
{
	for (;;)
	{
		OwnRel	   *own;
		uint64		generation;
		Relation	rel;

		CHECK_FOR_INTERRUPTS();
		AcceptInvalidationMessages();
		own = own_rel(name);
		generation = own_rels_generation;
		rel = relation_open(own->relid, lockmode);
		if (generation == own_rels_generation)
		{
			if (rel->rd_rel->relkind != own->relkind)
				ereport(ERROR,
						(errcode(ERRCODE_WRONG_OBJECT_TYPE),
						 errmsg("\"pgq.%s\" is not %s", name,
								own->relkind == RELKIND_INDEX ? "an index" :
								own->relkind == RELKIND_SEQUENCE ? "a sequence" :
								"a table")));
			return rel;
		}
		relation_close(rel, lockmode);
	}
}

/*
 * The OID of one of pgq's relations, for a caller that opens it itself
 * (nextval, the executor's index code), with the same care about drops.
 */
Oid
pgq_rel_oid(const char *name)
{
	AcceptInvalidationMessages();
	return own_rel(name)->relid;
}

/*
 * The index that finds an item by its id alone: the primary key from 0.2,
 * the hash index on item_id in a database still at 0.1 (whose primary key
 * is (group_id, item_id)).
 */
const char *
pgq_item_id_index(void)
{
	static bool known = false;
	static uint64 generation;
	static bool old_index;

	AcceptInvalidationMessages();
	if (!known || generation != own_rels_generation)
	{
		old_index = OidIsValid(get_relname_relid("items_item_id_idx",
												 get_namespace_oid("pgq", false)));
		generation = own_rels_generation;
		known = true;
	}
	return old_index ? "items_item_id_idx" : "items_pkey";
}

/* Whether a function OID is not built in (check_functions_in_node()). */
static bool
is_user_function(Oid funcid, void *context)
{
	return funcid >= FirstNormalObjectId;
}

/* Whether an expression calls a function that is not built in. */
static bool
calls_user_function(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, is_user_function, context))
		return true;
	return expression_tree_walker(node, calls_user_function, context);
}

/*
 * Whether an index's IndexInfo can be kept across statements and
 * transactions: btree and hash keep no state in it between inserts (BRIN and
 * GIN do), and a predicate of built-in functions only keeps no state in
 * their fn_extra that belongs to one query.  pgq's own indexes all qualify;
 * an expression index, or one of another access method, that someone added
 * is set up for every call by ExecOpenIndices().
 */
static bool
can_keep(Relation index, IndexInfo *info)
{
	if (index->rd_rel->relam != BTREE_AM_OID &&
		index->rd_rel->relam != HASH_AM_OID)
		return false;
	if (info->ii_Expressions != NIL)
		return false;
	return !calls_user_function((Node *) info->ii_Predicate, NULL);
}

/*
 * Build the IndexInfos of the indexes of rel, one of pgq's tables, as
 * ExecOpenIndices(.., true) would, with their predicates compiled, in a new
 * memory context.  The old context may still be in use by the running
 * transaction, and goes when it ends.  If an index cannot be kept, only
 * remember to leave them all to the executor.
 */
static void
build_own_indexes(OwnIndexes *own, Relation rel)
{
	List	   *indexids = RelationGetIndexList(rel);
	uint64		generation = own_rels_generation;
	MemoryContext cxt;
	MemoryContext oldcxt;
	Oid		   *ids;
	IndexInfo **infos;
	int			n = 0;
	bool		use_executor = false;
	ListCell   *lc;

	if (own->cxt != NULL)
		MemoryContextSetParent(own->cxt, TopTransactionContext);
	own->cxt = NULL;
	own->n = 0;
	own->valid = false;

	/*
	 * Under the caller's context until complete, so that an error frees it;
	 * own keeps nothing of it until then.
	 */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "pgq index infos",
								ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(cxt);
	ids = palloc(list_length(indexids) * sizeof(Oid));
	infos = palloc(list_length(indexids) * sizeof(IndexInfo *));
	foreach(lc, indexids)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		IndexInfo  *info = BuildIndexInfo(index);

		if (!can_keep(index, info))
		{
			index_close(index, AccessShareLock);
			use_executor = true;
			break;
		}
		if (index->rd_index->indisunique)
			BuildSpeculativeIndexInfo(index, info);
		if (info->ii_Predicate != NIL)
			info->ii_PredicateState =
				ExecInitQual((List *) expression_planner((Expr *) info->ii_Predicate),
							 NULL);
		ids[n] = lfirst_oid(lc);
		infos[n] = info;
		n++;
		index_close(index, AccessShareLock);
	}
	MemoryContextSwitchTo(oldcxt);
	list_free(indexids);
	if (use_executor)
		MemoryContextDelete(cxt);
	else
	{
		MemoryContextSetParent(cxt, CacheMemoryContext);
		own->cxt = cxt;
		own->indexids = ids;
		own->infos = infos;
		own->n = n;
	}
	own->use_executor = use_executor;
	own->relid = RelationGetRelid(rel);
	/* an invalidation taken in while the indexes were opened: build again */
	own->valid = generation == own_rels_generation;
}

/*
 * Open the indexes of rel, pgq.blocks or pgq.items, into rri for inserts
 * of new row versions, as ExecOpenIndices(rri, true) does.
 * ExecOpenIndices() builds every index's IndexInfo and compiles its
 * predicate for each statement, which was a tenth of an enqueue; here they
 * are built once per backend and kept until a relcache invalidation of one
 * of pgq's relations or their indexes (an index created or dropped).  If one
 * arrives while the indexes are being opened, open them again.
 */
static void
open_indexes(ResultRelInfo *rri, Relation rel)
{
	OwnIndexes *own = NULL;

	for (size_t i = 0; i < lengthof(own_indexes); i++)
		if (strcmp(own_indexes[i].table, RelationGetRelationName(rel)) == 0)
			own = &own_indexes[i];
	if (own == NULL || rri->ri_RelationDesc != rel)
		elog(ERROR, "pgq_result_rel() called for \"%s\"",
			 RelationGetRelationName(rel));

	for (;;)
	{
		uint64		generation;

		CHECK_FOR_INTERRUPTS();
		if (!own->valid || own->relid != RelationGetRelid(rel))
		{
			build_own_indexes(own, rel);
			continue;
		}
		if (own->use_executor)
		{
			ExecOpenIndices(rri, true);
			return;
		}
		generation = own_rels_generation;
		rri->ri_NumIndices = own->n;
		rri->ri_IndexRelationDescs = palloc(own->n * sizeof(Relation));
		rri->ri_IndexRelationInfo = own->infos;
		for (int i = 0; i < own->n; i++)
		{
			Relation	index = index_open(own->indexids[i], RowExclusiveLock);

			rri->ri_IndexRelationDescs[i] = index;

			/*
			 * Whether CREATE INDEX CONCURRENTLY made the index ready for
			 * inserts yet is read at every open, from the relcache entry
			 * that the lock just brought up to date, not from the cache.
			 */
			own->infos[i]->ii_ReadyForInserts = index->rd_index->indisready;
		}
		if (generation == own_rels_generation)
			return;
		ExecCloseIndices(rri);
		pfree(rri->ri_IndexRelationDescs);
	}
}

/*
 * A ResultRelInfo for writing rows of rel, pgq.blocks or pgq.items (opened
 * with pgq_open_rel()), with the executor's index code: its indexes opened
 * as above, all in the EState's memory.  Close them with ExecCloseIndices().
 */
ResultRelInfo *
pgq_result_rel(EState *estate, Relation rel)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *rri = makeNode(ResultRelInfo);

	InitResultRelInfo(rri, rel, 0, NULL, 0);
	open_indexes(rri, rel);
	MemoryContextSwitchTo(oldcxt);
	return rri;
}

/*
 * Open pgq.blocks and one of its indexes, by name, for a scan; with
 * RowExclusiveLock, to change rows, which a read-only transaction may not.
 */
void
pgq_block_scan_open(PgqBlockScan *scan, const char *index_name,
					LOCKMODE lockmode)
{
	if (lockmode >= RowExclusiveLock && XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot claim or consume blocks in a read-only transaction")));
	scan->heap = pgq_open_rel("blocks", lockmode);
	scan->index = pgq_open_rel(index_name, lockmode);
	scan->snapshot = RegisterSnapshot(GetTransactionSnapshot());
	scan->slot = table_slot_create(scan->heap, NULL);
	scan->scan = NULL;
}

/*
 * pgq_block_scan_open() for pgq.items: advisory-mode claims of items, which
 * write nothing, and what their holders change (itemwrite.c).
 */
void
pgq_item_scan_open(PgqBlockScan *scan, const char *index_name,
				   LOCKMODE lockmode)
{
	if (lockmode >= RowExclusiveLock && XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot claim or consume blocks in a read-only transaction")));
	scan->heap = pgq_open_rel("items", lockmode);
	scan->index = pgq_open_rel(index_name, lockmode);
	scan->snapshot = RegisterSnapshot(GetTransactionSnapshot());
	scan->slot = table_slot_create(scan->heap, NULL);
	scan->scan = NULL;
}

/*
 * Start (or restart) an index scan with nkeys keys.  The keys are copied:
 * the caller's array may go.  A restart with another number of keys begins
 * a new scan: index_rescan() takes as many as the scan began with.
 */
void
pgq_block_scan_keys(PgqBlockScan *scan, ScanKey keys, int nkeys)
{
	if (scan->scan != NULL && scan->scan->numberOfKeys != nkeys)
	{
		index_endscan(scan->scan);
		scan->scan = NULL;
	}
	if (scan->scan == NULL)
	{
#if PG_VERSION_NUM >= 180000
		scan->scan = index_beginscan(scan->heap, scan->index, scan->snapshot,
									 NULL, nkeys, 0);
#else
		scan->scan = index_beginscan(scan->heap, scan->index, scan->snapshot,
									 nkeys, 0);
#endif
	}
	index_rescan(scan->scan, keys, nkeys, NULL, 0);
}

/* The next row of the scan, in scan->slot; false at the end. */
bool
pgq_block_scan_next(PgqBlockScan *scan)
{
	CHECK_FOR_INTERRUPTS();
	return index_getnext_slot(scan->scan, ForwardScanDirection, scan->slot);
}

/*
 * Read the row version at "tid" into scan->slot again, with the snapshot a
 * new statement would take; false if that version is not visible to it (it
 * was deleted, or updated: a newer version is elsewhere).  The scan goes on
 * from where it was.
 */
bool
pgq_block_refetch(PgqBlockScan *scan, ItemPointer tid)
{
	Snapshot	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	bool		found;

	found = table_tuple_fetch_row_version(scan->heap, tid, snapshot,
										  scan->slot);
	UnregisterSnapshot(snapshot);
	return found;
}

/* End a scan begun with pgq_block_scan_open(); the locks stay. */
void
pgq_block_scan_close(PgqBlockScan *scan)
{
	if (scan->scan != NULL)
		index_endscan(scan->scan);
	ExecDropSingleTupleTableSlot(scan->slot);
	UnregisterSnapshot(scan->snapshot);
	index_close(scan->index, NoLock);
	table_close(scan->heap, NoLock);
}

/*
 * Open pgq.blocks or pgq.items ("table") and one of its indexes to change
 * rows that a scan of the index finds.  The new versions' index entries go
 * in through the executor's code, which wants an EState and a
 * ResultRelInfo; in the EState's memory, so that a waiting claim's attempts
 * do not pile them up.  With no range table entry, the index AMs are not
 * told which columns changed: they take every update as not changing their
 * keys, a hint for cleanup only.
 */
void
pgq_writer_open(PgqRowWriter *w, const char *table, const char *index_name)
{
	if (strcmp(table, "items") == 0)
		pgq_item_scan_open(&w->scan, index_name, RowExclusiveLock);
	else
		pgq_block_scan_open(&w->scan, index_name, RowExclusiveLock);
	w->estate = CreateExecutorState();
	w->rri = pgq_result_rel(w->estate, w->scan.heap);
	w->newslot = table_slot_create(w->scan.heap, NULL);
	w->cid = GetCurrentCommandId(true);
}

/* Close what pgq_writer_open() opened; the command counter moves if "wrote". */
void
pgq_writer_close(PgqRowWriter *w, bool wrote)
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
bool
pgq_writer_lock(PgqRowWriter *w)
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
 * After pgq_writer_lock() failed: does another transaction only hold a row
 * lock on the version in w->scan.slot, rather than change it (a claim in
 * flight)?  Such a lock is a FOR UPDATE, taken by hand or by a look for due
 * items, or what an UPDATE keeps of a row that it found changed and no
 * longer matching (EvalPlanQual), as a late holder's pgq.extend() does: its
 * end lowers no claim hint.  pgq.items and pgq.blocks are heap tables: the
 * tuple header says, read under the buffer's lock.
 */
bool
pgq_writer_only_locked(PgqRowWriter *w)
{
	BufferHeapTupleTableSlot *bslot;
	bool		only;

	if (!TTS_IS_BUFFERTUPLE(w->scan.slot))
		return false;
	bslot = (BufferHeapTupleTableSlot *) w->scan.slot;
	if (!BufferIsValid(bslot->buffer) || bslot->base.tuple == NULL)
		return false;
	LockBuffer(bslot->buffer, BUFFER_LOCK_SHARE);
	only = HeapTupleHeaderIsOnlyLocked(bslot->base.tuple->t_data);
	LockBuffer(bslot->buffer, BUFFER_LOCK_UNLOCK);
	return only;
}

/*
 * The new version of the locked row in w->scan.slot, to be changed by the
 * caller and then written by pgq_writer_update(): a copy of every column.
 * What the caller allocates for it belongs in
 * GetPerTupleMemoryContext(w->estate).
 */
TupleTableSlot *
pgq_writer_new_version(PgqRowWriter *w)
{
	TupleTableSlot *old = w->scan.slot;
	int			natts = old->tts_tupleDescriptor->natts;

	ExecClearTuple(w->newslot);
	memcpy(w->newslot->tts_values, old->tts_values, natts * sizeof(Datum));
	memcpy(w->newslot->tts_isnull, old->tts_isnull, natts * sizeof(bool));
	return w->newslot;
}

/*
 * Replace the locked row in w->scan.slot by the new version the caller
 * filled in, with its index entries (none when the update is HOT).
 */
void
pgq_writer_update(PgqRowWriter *w)
{
	TupleTableSlot *old = w->scan.slot;
	TupleTableSlot *newslot = w->newslot;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	MemoryContext oldcxt;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
#else
	bool		update_indexes;
#endif

	oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(w->estate));
	ExecStoreVirtualTuple(newslot);
	if (table_tuple_update(w->scan.heap, &old->tts_tid, newslot, w->cid,
						   w->scan.snapshot, InvalidSnapshot, true,
						   &tmfd, &lockmode, &update_indexes) != TM_Ok)
		elog(ERROR, "could not update a locked row of \"%s\"",
			 RelationGetRelationName(w->scan.heap));
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

/*
 * Keys for the blocks of a group with block ids in [from, to), on the
 * primary key (group_id, block_id).
 */
static void
range_keys(ScanKey keys, int64 group_id, int64 from, int64 to)
{
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group_id));
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(from));
	ScanKeyInit(&keys[2], 2, BTLessStrategyNumber, F_INT8LT,
				Int64GetDatum(to));
}

/*
 * Set up pass "pass" (0, then 1) of a claim's walk of a group's blocks from
 * block id "from", on the primary key.  A B-tree scan reads all of a leaf
 * page's matching entries when it starts, hundreds of them, to hand out the
 * first: pass 0 looks at a window just wide enough for a claim of "limit"
 * blocks and the claims racing it, pass 1 past it, if that was not enough.
 */
void
pgq_block_scan_claim_pass(PgqBlockScan *scan, int64 group_id, int64 from,
						  int limit, int pass)
{
	int64		window = Min((int64) limit * 2 + PGQ_CLAIM_WINDOW,
							 PG_INT64_MAX - from);
	ScanKeyData keys[3];

	if (pass == 0)
		range_keys(keys, group_id, from, from + window);
	else
		range_keys(keys, group_id, from + window, PG_INT64_MAX);
	pgq_block_scan_keys(scan, keys, 3);
}

/*
 * Set up pass "pass" (0, then 1) of a walk of a queue's pending items from
 * place "from" in claim order on (pgq_item_position(); 0: from the start),
 * on items_pending_idx, (group_id, priority DESC, item_id): the rest of
 * from's priority, then the lower priorities.  False if there is no such
 * pass: a walk from the start takes one.
 */
bool
pgq_item_scan_pending_pass(PgqBlockScan *scan, int64 group_id, int64 from,
						   int pass)
{
	int32		priority = PGQ_MAX_PRIORITY - (int32) (from >> PGQ_ITEM_ID_BITS);
	ScanKeyData keys[3];
	int			nkeys = 1;

	if (pass > (from > 0 ? 1 : 0))
		return false;
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group_id));
	if (from > 0 && pass == 0)
	{
		ScanKeyInit(&keys[nkeys++], 2, BTEqualStrategyNumber, F_INT4EQ,
					Int32GetDatum(priority));
		ScanKeyInit(&keys[nkeys++], 3, BTGreaterEqualStrategyNumber,
					F_INT8GE, Int64GetDatum(from & PGQ_ITEM_ID_MASK));
	}
	else if (from > 0)
		ScanKeyInit(&keys[nkeys++], 2, BTLessStrategyNumber, F_INT4LT,
					Int32GetDatum(priority));
	pgq_block_scan_keys(scan, keys, nkeys);
	return true;
}

/*
 * Keys for one block of a group, on the primary key (group_id, block_id).
 */
void
pgq_block_key(ScanKey keys, int64 group_id, int64 block_id)
{
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(block_id));
}

/* A column of the row in scan->slot. */
Datum
pgq_block_attr(PgqBlockScan *scan, AttrNumber attnum, bool *isnull)
{
	return slot_getattr(scan->slot, attnum, isnull);
}

/*
 * Position a scan opened on an index of one bigint id (pgq.blocks' block_id,
 * pgq.items' item_id), a hash index or a btree, on the row with this id
 * (column "id_att" of the table).  False if there is none now.  A hash index
 * matches hash codes, not values: every row it returns is checked.
 */
bool
pgq_scan_find_id(PgqBlockScan *scan, int64 id, AttrNumber id_att)
{
	ScanKeyData key;
	Oid			am = scan->index->rd_rel->relam;

	if (am != BTREE_AM_OID && am != HASH_AM_OID)
		elog(ERROR, "index \"%s\" is neither a btree nor a hash index",
			 RelationGetRelationName(scan->index));
	ScanKeyInit(&key, 1,
				am == HASH_AM_OID ? HTEqualStrategyNumber : BTEqualStrategyNumber,
				F_INT8EQ, Int64GetDatum(id));
	pgq_block_scan_keys(scan, &key, 1);
	while (pgq_block_scan_next(scan))
	{
		bool		isnull;

		if (DatumGetInt64(pgq_block_attr(scan, id_att, &isnull)) == id)
			return true;
	}
	return false;
}

/*
 * The group of a block, looked up by its id through the index on block_id.
 * False if there is no such block now.
 */
bool
pgq_block_group_id(int64 block_id, int64 *group_id)
{
	PgqBlockScan scan;
	bool		found;

	last_found.block_id = 0;

	pgq_block_scan_open(&scan, "blocks_block_id_idx", AccessShareLock);
	found = pgq_scan_find_id(&scan, block_id, Anum_blocks_block_id);
	if (found)
	{
		bool		isnull;

		*group_id = DatumGetInt64(pgq_block_attr(&scan, Anum_blocks_group_id,
												 &isnull));
		last_found.block_id = block_id;
		last_found.group_id = *group_id;
		last_found.lxid = CURRENT_LXID;
		last_found.tid = scan.slot->tts_tid;
	}
	pgq_block_scan_close(&scan);
	return found;
}

/*
 * Is the row in scan->slot the given block of the given group?
 */
static bool
is_block(PgqBlockScan *scan, int64 group_id, int64 block_id)
{
	bool		isnull;

	return DatumGetInt64(pgq_block_attr(scan, Anum_blocks_block_id,
										&isnull)) == block_id &&
		DatumGetInt64(pgq_block_attr(scan, Anum_blocks_group_id,
									 &isnull)) == group_id;
}

/*
 * Delete a block of a group that the caller holds, waiting for a
 * transaction that is changing it.  With "attempt", the block must be
 * claimed under that lease attempt (state 'c'); without, it is held by an
 * advisory lock.  False if it is gone or not held that way.
 *
 * Like a DELETE in READ COMMITTED, a block changed by a transaction that
 * committed meanwhile is looked at again in its new version (an extend
 * keeps it held; a claim that took it over after its lease ran out does
 * not); in REPEATABLE READ and SERIALIZABLE that is a serialization failure.
 *
 * If pgq_block_group_id() just found the block (a complete looks its group
 * up first), the row version it saw is read again by its TID rather than
 * through the index; a version that is no longer visible, or a TID that
 * holds another row now, sends the delete to the index.
 */
bool
pgq_block_delete(int64 group_id, int64 block_id, const int32 *attempt)
{
	bool		by_tid = last_found.block_id == block_id &&
		last_found.group_id == group_id && last_found.lxid == CURRENT_LXID;
	ItemPointerData tid = last_found.tid;

	last_found.block_id = 0;
	for (;;)
	{
		PgqBlockScan scan;
		TM_Result	result = TM_Invisible;	/* not found, or not held */
		TM_FailureData tmfd;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		pgq_block_scan_open(&scan, "blocks_pkey", RowExclusiveLock);
		found = by_tid &&
			table_tuple_fetch_row_version(scan.heap, &tid, scan.snapshot,
										  scan.slot) &&
			is_block(&scan, group_id, block_id);
		by_tid = false;
		if (!found)
		{
			ScanKeyData keys[2];

			pgq_block_key(keys, group_id, block_id);
			pgq_block_scan_keys(&scan, keys, 2);
			found = pgq_block_scan_next(&scan);
		}
		if (found)
		{
			bool		isnull;

			if (attempt == NULL ||
				(DatumGetChar(pgq_block_attr(&scan, Anum_blocks_state,
											 &isnull)) == PGQ_BLOCK_CLAIMED &&
				 DatumGetInt32(pgq_block_attr(&scan, Anum_blocks_attempt,
											  &isnull)) == *attempt))
				result = table_tuple_delete(scan.heap, &scan.slot->tts_tid,
											GetCurrentCommandId(true),
											scan.snapshot, InvalidSnapshot,
											true, &tmfd, false);
		}
		pgq_block_scan_close(&scan);

		if (result == TM_Ok)
		{
			CommandCounterIncrement();
			return true;
		}
		if ((result == TM_Updated || result == TM_Deleted) &&
			IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
		if (result != TM_Updated)
			return false;
		/* changed and committed meanwhile: look at the new version */
	}
}
