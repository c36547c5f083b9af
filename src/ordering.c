/*-------------------------------------------------------------------------
 *
 * ordering.c
 *	  Ordering keys of queue items: the items of one key are handed out one
 *	  at a time, in the order they were enqueued; other keys go on in
 *	  parallel.
 *
 * Only the head of a key, its oldest unfinished item, is ever claimable.
 * An item enqueued while its key has an unfinished item waits in state 'w',
 * which no claim looks at (items_pending_idx covers state 'p' only), so
 * claims are the same statements with or without ordering keys.  When the
 * head finishes for good (done, or dead-lettered: pgq.complete,
 * pgq.complete_many, pgq.fail at max_attempts, a lease that runs out at
 * max_attempts, a transaction-mode claim), the key's next waiting item (the
 * lowest item_id) becomes pending, or scheduled if its run_at is still to
 * come, in the same transaction: a rollback undoes both.  A head that is
 * running, released or waiting for a retry keeps its key busy.
 *
 * Enqueues of a key and the hand-on to the key's next item are serialized
 * by a transaction-level advisory lock on a hash of (queue, key), taken
 * before either looks at the key's items and held until commit:
 *
 *	- an enqueue looks, under the lock, for an unfinished item of the key
 *	  with a fresh snapshot, and waits in state 'w' if there is one;
 *	- a transaction that finishes a head takes the lock after it changed the
 *	  head's row, and makes the key's lowest waiting item pending if no
 *	  other unfinished item of the key is in front of it.
 *
 * Either the enqueue commits first, and the hand-on (which waits for the
 * lock) sees its waiting item, or the hand-on commits first, and the
 * enqueue sees the head finished and its successor, if any.  Two enqueues
 * of one key cannot both become heads.  The locks are ordinary transaction
 * locks: a transaction takes one per distinct key it enqueues into or hands
 * on, so a batch of many distinct keys needs room in the lock table
 * (max_locks_per_transaction).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "blockscan.h"
#include "ordering.h"
#include "queue.h"
#include "wait.h"
#include "xact.h"

/*
 * objsubid of the advisory locks on ordering keys; pgq's other advisory
 * locks use 4096 to 20479 and 20563 and 20564 (advisory.c).
 */
#define PGQ_LOCK_ORDERING	20565

/* Limit on the length of an ordering key, as for keys (queue.c). */
#define PGQ_MAX_ORDERING_KEY_BYTES	1024

/* An unfinished item of the key, in queue $1 and key $2. */
#define KEY_UNFINISHED \
	"WHERE group_id " OP("=") " $1 AND ordering_key " OP("=") " $2 " \
	"AND state " OP("<>") " 'd' AND state " OP("<>") " 'f'"

/* An ordering key, its hash, and the first item of a call that has it. */
typedef struct OrderingSlot
{
	uint64		hash;
	text	   *key;
	int			item;			/* the first item given with it */
} OrderingSlot;

struct PgqOrderingEnqueue
{
	int		   *slot_of;		/* per item: its key's slot, or -1 */
	bool	   *busy;			/* per slot: the key has an unfinished item */
};

/*
 * Does pgq.items have the column ordering_key?  Not in a database still
 * at 0.1.
 */
bool
pgq_ordering_supported(void)
{
	return get_attnum(pgq_rel_oid("items"), "ordering_key") != InvalidAttrNumber;
}

/* Check an ordering key given as argument "argname". */
void
pgq_ordering_check_key(text *key, const char *argname)
{
	if (VARSIZE_ANY_EXHDR(key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname),
				 errhint("Pass NULL for an item without an ordering key.")));
	if (VARSIZE_ANY_EXHDR(key) > PGQ_MAX_ORDERING_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("ordering key is too long"),
				 errdetail("The ordering key has %zu bytes; the limit is %d.",
						   VARSIZE_ANY_EXHDR(key), PGQ_MAX_ORDERING_KEY_BYTES),
				 errhint("Use a hash of the key, such as md5(key).")));
}

/* The hash of an ordering key in a queue, which names its lock. */
static uint64
key_hash(int64 group_id, text *key)
{
	return DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(key),
											VARSIZE_ANY_EXHDR(key),
											(uint64) group_id));
}

/*
 * Take the lock of a key hash until the transaction ends, waiting for the
 * transaction that holds it.  Two keys whose hashes are equal share a lock,
 * which only serializes them.
 */
static void
lock_key(uint64 hash)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, PGQ_LOCK_ORDERING);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * Run a kept statement with a snapshot taken now: under REPEATABLE READ or
 * SERIALIZABLE too, an item that a transaction committed before the key's
 * lock was had must be seen, or a key would wait for a head that finished.
 * (READ COMMITTED takes a new snapshot for each statement anyway.)
 */
static int
execute_fresh(SPIPlanPtr plan, Datum *values)
{
	if (IsolationUsesXactSnapshot())
		return SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
									InvalidSnapshot, false, true, 0);
	return SPI_execute_plan(plan, values, NULL, false, 0);
}

/* Has the key an unfinished item (its lock held)? */
static bool
key_busy(int64 group_id, text *key)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2];
	int			rc;
	bool		busy;

	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, TEXTOID};

		plan = pgq_keep_plan("SELECT FROM pgq.items " KEY_UNFINISHED " LIMIT 1",
							 2, argtypes);
	}
	values[0] = Int64GetDatum(group_id);
	values[1] = PointerGetDatum(key);
	rc = execute_fresh(plan, values);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read items: %s", SPI_result_code_string(rc));
	busy = SPI_processed > 0;
	SPI_freetuptable(SPI_tuptable);
	return busy;
}

/* Do two slots hold the same key? */
static bool
same_key(const OrderingSlot *x, const OrderingSlot *y)
{
	return x->hash == y->hash &&
		VARSIZE_ANY_EXHDR(x->key) == VARSIZE_ANY_EXHDR(y->key) &&
		memcmp(VARDATA_ANY(x->key), VARDATA_ANY(y->key),
			   VARSIZE_ANY_EXHDR(x->key)) == 0;
}

/* qsort comparator: slots by hash, then key, then first item */
static int
compare_slots(const void *a, const void *b)
{
	const OrderingSlot *x = (const OrderingSlot *) a;
	const OrderingSlot *y = (const OrderingSlot *) b;
	Size		lx = VARSIZE_ANY_EXHDR(x->key);
	Size		ly = VARSIZE_ANY_EXHDR(y->key);
	int			c;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	c = memcmp(VARDATA_ANY(x->key), VARDATA_ANY(y->key), lx);
	if (c != 0)
		return c;
	return (x->item > y->item) - (x->item < y->item);
}

/*
 * Before an enqueue of n items with ordering keys keys[] (NULL: none),
 * which the caller checked: lock each distinct key, in the order of their
 * hashes (so that two batches cannot deadlock on each other), and learn
 * which have an unfinished item.  Returns what pgq_ordering_must_wait()
 * asks, in the current memory context.
 */
PgqOrderingEnqueue *
pgq_ordering_enqueue_begin(const PgqGroup *group, text **keys, int n)
{
	PgqOrderingEnqueue *oe = palloc(sizeof(PgqOrderingEnqueue));
	OrderingSlot *slots = palloc(Max(n, 1) * sizeof(OrderingSlot));
	int			nkeyed = 0;
	int			nslots = 0;

	oe->slot_of = palloc(Max(n, 1) * sizeof(int));
	oe->busy = palloc(Max(n, 1) * sizeof(bool));
	for (int i = 0; i < n; i++)
	{
		oe->slot_of[i] = -1;
		if (keys[i] == NULL)
			continue;
		slots[nkeyed].hash = key_hash(group->ref.group_id, keys[i]);
		slots[nkeyed].key = keys[i];
		slots[nkeyed].item = i;
		nkeyed++;
	}
	qsort(slots, nkeyed, sizeof(OrderingSlot), compare_slots);
	for (int i = 0; i < nkeyed; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (i > 0 && same_key(&slots[i - 1], &slots[i]))
		{
			/* the same key again: the same slot */
			oe->slot_of[slots[i].item] = nslots - 1;
			continue;
		}
		if (i == 0 || slots[i - 1].hash != slots[i].hash)
			lock_key(slots[i].hash);
		oe->busy[nslots] = key_busy(group->ref.group_id, slots[i].key);
		oe->slot_of[slots[i].item] = nslots++;
	}
	pfree(slots);
	return oe;
}

/* Must item i of the enqueue wait behind an unfinished item of its key? */
bool
pgq_ordering_must_wait(PgqOrderingEnqueue *oe, int item)
{
	return oe->slot_of[item] >= 0 && oe->busy[oe->slot_of[item]];
}

/* Item i of the enqueue was added: later ones of its key wait behind it. */
void
pgq_ordering_enqueued(PgqOrderingEnqueue *oe, int item)
{
	if (oe->slot_of[item] >= 0)
		oe->busy[oe->slot_of[item]] = true;
}

/*
 * The ordering keys of the rows of the last SPI statement whose state
 * (column state_col, "char") is done or dead, copied into the current
 * memory context: the keys to hand on.  The statement's result stays.
 */
List *
pgq_ordering_finished_keys(int state_col, int key_col)
{
	List	   *keys = NIL;

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		key = SPI_getbinval(tuple, tupdesc, key_col, &isnull);
		char		state;

		if (isnull)
			continue;
		state = state_col > 0 ?
			DatumGetChar(SPI_getbinval(tuple, tupdesc, state_col, &isnull)) : 'd';
		if (state == 'd' || state == 'f')
			keys = lappend(keys, DatumGetTextPCopy(key));
	}
	return keys;
}

/* qsort comparator: keys by their hashes, kept alongside */
static int
compare_hashes(const void *a, const void *b)
{
	uint64		x = ((const OrderingSlot *) a)->hash;
	uint64		y = ((const OrderingSlot *) b)->hash;

	return (x > y) - (x < y);
}

/*
 * The heads of these ordering keys of the queue finished in this
 * transaction: make each key's next waiting item pending (or scheduled,
 * if its run_at is still to come), unless an unfinished item of the key is
 * in front of it.  The keys are locked in the order of their hashes.
 * Returns how many items were made pending.
 */
int
pgq_ordering_hand_on(const PgqGroup *group, List *keys)
{
	static SPIPlanPtr plan = NULL;
	OrderingSlot *slots;
	int			n = list_length(keys);
	int			i = 0;
	int			claimable = 0;
	ListCell   *lc;

	if (n == 0)
		return 0;
	if (plan == NULL)
	{
		Oid			argtypes[3] = {INT8OID, TEXTOID, TIMESTAMPTZOID};

		/* the key's first unfinished item, if it waits */
		plan = pgq_keep_plan("UPDATE pgq.items SET "
							 "state = CASE WHEN due_at " OP(">") " $3 "
							 "THEN 'r'::pg_catalog.\"char\" "
							 "ELSE 'p'::pg_catalog.\"char\" END, "
							 "due_at = CASE WHEN due_at " OP(">") " $3 "
							 "THEN due_at END "
							 "WHERE ctid " OP("=") " (SELECT ctid FROM pgq.items "
							 KEY_UNFINISHED " ORDER BY item_id LIMIT 1) "
							 "AND state " OP("=") " 'w' "
							 "RETURNING state, priority, item_id",
							 3, argtypes);
	}
	slots = palloc(n * sizeof(OrderingSlot));
	foreach(lc, keys)
	{
		slots[i].key = (text *) lfirst(lc);
		slots[i].hash = key_hash(group->ref.group_id, slots[i].key);
		slots[i].item = i;
		i++;
	}
	qsort(slots, n, sizeof(OrderingSlot), compare_hashes);
	for (i = 0; i < n; i++)
	{
		Datum		values[3];
		HeapTuple	row;
		TupleDesc	rowdesc;
		bool		isnull;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		lock_key(slots[i].hash);
		values[0] = Int64GetDatum(group->ref.group_id);
		values[1] = PointerGetDatum(slots[i].key);
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		rc = execute_fresh(plan, values);
		if (rc != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not hand on an ordering key: %s",
				 SPI_result_code_string(rc));
		row = SPI_processed > 0 ? SPI_tuptable->vals[0] : NULL;
		rowdesc = SPI_tuptable->tupdesc;
		if (SPI_processed > 0 &&
			DatumGetChar(SPI_getbinval(row, rowdesc, 1, &isnull)) == 'p')
		{
			int32		priority = DatumGetInt32(SPI_getbinval(row, rowdesc,
															   2, &isnull));
			int64		item_id = DatumGetInt64(SPI_getbinval(row, rowdesc,
															  3, &isnull));

			claimable++;
			/* its queue's claims find it from its place on (H1, shmem.c) */
			pgq_xact_remember_pending(&group->ref,
									  pgq_item_position(priority, item_id));
		}
		SPI_freetuptable(SPI_tuptable);
	}
	pfree(slots);
	if (claimable > 0)
		pgq_announce_claimable(&group->ref, group->name);
	return claimable;
}

/*
 * A transaction-mode queue's item that this transaction claimed, which
 * handed its key on, became a retry (pgq.fail): its key is busy again, so
 * the item handed on waits again.  Should this transaction have claimed
 * that item too, the retry would come after it: refused.
 */
void
pgq_ordering_take_back(const PgqGroup *group, int64 item_id)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8ARRAYOID};
	Datum		values[3];
	int64	   *claimed;
	int			nclaimed = pgq_xact_own_claim_ids(group->ref.group_id,
												  &claimed);
	int			rc;

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(item_id);
	if (nclaimed > 1)
	{
		/*
		 * Finished items of the key after it: did this transaction claim
		 * one?  Looked up among its claims, by their ids: the primary key
		 * is the item id alone, and a range of ids after this one would
		 * walk the items of every queue enqueued since.
		 */
		values[2] = pgq_sorted_ids(claimed, nclaimed);
		rc = SPI_execute_with_args("SELECT n.item_id FROM pgq.items f "
								   "JOIN pgq.items n "
								   "ON n.group_id " OP("=") " f.group_id "
								   "AND n.ordering_key " OP("=") " f.ordering_key "
								   "AND n.item_id " OP(">") " f.item_id "
								   "WHERE f.group_id " OP("=") " $1 "
								   "AND f.item_id " OP("=") " $2 "
								   "AND n.item_id " OP("=") " ANY ($3) "
								   "AND n.state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[])",
								   3, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read items: %s", SPI_result_code_string(rc));
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			int64		later = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc,
															1, &isnull));

			if (pgq_xact_claimed(later))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("cannot fail item " INT64_FORMAT ": this transaction claimed item " INT64_FORMAT " of the same ordering key after it",
								item_id, later),
						 errdetail("A retry of item " INT64_FORMAT " would come after an item enqueued later.",
								   item_id),
						 errhint("Roll back, or fail the later items of the key first.")));
		}
		SPI_freetuptable(SPI_tuptable);
	}
	/* the unfinished items of the key but it were handed on: they wait */
	rc = SPI_execute_with_args("UPDATE pgq.items n SET state = 'w' "
							   "FROM pgq.items f "
							   "WHERE f.group_id " OP("=") " $1 "
							   "AND f.item_id " OP("=") " $2 "
							   "AND n.group_id " OP("=") " f.group_id "
							   "AND n.ordering_key " OP("=") " f.ordering_key "
							   "AND n.item_id " OP("<>") " f.item_id "
							   "AND n.state " OP("<>") " 'd' AND n.state " OP("<>") " 'f' "
							   "AND n.state " OP("<>") " 'w'",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update items: %s", SPI_result_code_string(rc));
}

/*
 * pgq.retry() of an item: a done or dead item with an ordering key becomes
 * the head of its key again, which it may only if the key has no
 * unfinished item (the key moved on past it).  Items in other states are
 * left to pgq.retry()'s own error.  Takes the key's lock, held
 * until the transaction ends, so that no enqueue of the key comes between.
 */
void
pgq_ordering_check_retry(const PgqGroup *group, int64 item_id)
{
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	text	   *key;
	bool		isnull;
	int			rc;

	if (!pgq_ordering_supported())
		return;
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(item_id);
	rc = SPI_execute_with_args("SELECT ordering_key FROM pgq.items "
							   "WHERE group_id " OP("=") " $1 "
							   "AND item_id " OP("=") " $2 "
							   "AND ordering_key IS NOT NULL "
							   "AND state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[])",
							   2, argtypes, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read item: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return;
	key = DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	lock_key(key_hash(group->ref.group_id, key));
	if (key_busy(group->ref.group_id, key))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("item " INT64_FORMAT " cannot be retried while its ordering key has unfinished items",
						item_id),
				 errdetail("Ordering key \"%s\" has moved on past the item: later items of the key are pending, running, scheduled or waiting.",
						   text_to_cstring(key)),
				 errhint("Retry it once the key's items are done, or enqueue it again as a new item.")));
}
