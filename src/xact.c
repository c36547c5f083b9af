/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  Claims held by the current transaction, and what happens to them when
 *	  it (or one of its subtransactions) ends.
 *
 * A transaction-mode claim is a deleted, row-locked block: COMMIT consumes it
 * and ABORT gives it back, with no help from pgq.  What pgq must do is keep
 * its shared state honest: take the blocks out of the group's claimed count
 * at either end, and lower the group's claim hint when a claim is undone, so
 * that the block becomes reachable again.  PREPARE TRANSACTION is refused
 * while the transaction holds claims (a prepared transaction would hold its
 * blocks with nobody left to process them) or has other work for its end
 * that must not be lost: COMMIT PREPARED settles no record, and what that
 * leaves undone (a wake, a hint lowered to items made pending) is caught up
 * by rechecks and full scans (pgq_xact_callback()).
 *
 * Shared state that describes the table changes once the change is visible:
 * in the commit and abort callbacks here, never before.  A retry of a
 * dead-lettered block lowers the hint to it when it commits; until then it
 * counts as claimed, as claims do.
 *
 * A pgq.drop_group() that is undone needs the same care as a claim: it locks
 * the group's blocks one by one, and a claim running meanwhile moves the hint
 * past the ones it has locked.
 *
 * Waiting claims of the groups concerned are woken once the outcome is
 * visible: on abort, and on commits that released, completed, failed or
 * dropped something, or that left no claim of the group in flight but the
 * waiting claims' own (invariant C3 in shmem.c).
 *
 * The records live in TopTransactionContext and are appended in claim order.
 * The callbacks settle them in place: no allocation, no SPI and no error may
 * happen after commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "advisory.h"
#include "blockscan.h"
#include "claim.h"
#include "due.h"
#include "lease.h"
#include "queue.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(pgq_blocks_inflight);
PG_FUNCTION_INFO_V1(pgq_items_inflight);

/*
 * What a record stands for.  Undoing a claim or a drop may leave a claimable
 * block below the group's hint, so an abort lowers the hint to the record's
 * block.  An advisory block completed or failed by the transaction is
 * unlocked when it commits, not before: unlocked earlier, another claimer
 * could take the lock and still see the block pending.  If the transaction
 * aborts, the session keeps the block.
 */
typedef enum PgqRecordKind
{
	PGQ_REC_CLAIM,				/* a transaction-mode claim, in the claimed
								 * count (of an item: at "place") */
	PGQ_REC_LEASE,				/* a lease-mode claim, in the claimed count
								 * until the transaction ends */
	PGQ_REC_ITEM_LEASE,			/* the same of an item, at its place in
								 * claim order */
	PGQ_REC_DROP,				/* pgq.drop_group() locked the group's blocks */
	PGQ_REC_UNLOCK,				/* an advisory block to unlock at commit */
	PGQ_REC_WAKE,				/* the group's waiters to wake at commit */
	PGQ_REC_ADVISORY,			/* an advisory claim, given back on abort */
	PGQ_REC_RETRY,				/* a dead-lettered block made pending again,
								 * in the claimed count until the transaction
								 * ends */
	PGQ_REC_LOOK,				/* a look for due blocks recorded what it
								 * found, with the transaction's own writes
								 * in view: forgotten on abort */
	PGQ_REC_EXTENDING,			/* a lease extended: its rollback wakes the
								 * group's waiting claims, which may have
								 * passed the row over while it was locked */
	PGQ_REC_PENDING				/* items of a queue made pending, from this
								 * place in claim order on ("block_id") */
} PgqRecordKind;

typedef struct PgqClaimRecord
{
	PgqGroupRef group;
	int64		block_id;		/* 0 for PGQ_REC_DROP: every block */
	int			nest_level;		/* (sub)transaction that made the record */
	PgqRecordKind kind;
	TimestampTz until;			/* PGQ_REC_LEASE of a group, and
								 * PGQ_REC_ITEM_LEASE: the lease's end */
	int64		place;			/* where an abort lowers the hint: block_id,
								 * or a claimed item's place in claim order */
} PgqClaimRecord;

static PgqClaimRecord *claims = NULL;
static int	nclaims = 0;
static int	maxclaims = 0;
static int	ncounted = 0;		/* PGQ_REC_CLAIM records */
static int	ndrops = 0;			/* PGQ_REC_DROP records */

/*
 * The groups in which SQL statements of the transaction wrote rows claimed
 * under a lease or waiting for a retry (see pgq_blocks_inflight()): the
 * highest block id that became such a row, for pgq_inflight_raise() at
 * commit (0: none), and whether a deadline may have come sooner, for
 * pgq_due_forget().
 */
typedef struct InflightRows
{
	int64		group_id;
	int64		highest;
	bool		sooner;
} InflightRows;

static InflightRows *inflight = NULL;
static int	ninflight = 0;
static int	maxinflight = 0;

/*
 * A scan for pending blocks under way, from block "from" of the group: the
 * blocks it has taken so far are in no record yet (except in advisory mode,
 * which records each as it takes it).  Should it end in an
 * error, its (sub)transaction's abort lowers the hint to "from", as for the
 * blocks it recorded (invariant H1 in shmem.c): another claim may have moved
 * the hint past blocks that the abort makes pending again.  Once it finds a
 * block to take, "counted" blocks are in the shared count of blocks being
 * taken (invariant C1; pgq_xact_claiming_count()).
 */
static struct
{
	bool		active;
	bool		counting;		/* "counted" is in the shared count */
	PgqGroupRef group;
	int64		from;
	int64		counted;		/* the most it may take */
	int64		taken;			/* blocks taken, and counted by records */
	int			nest_level;
}			claiming;

static bool same_group(const PgqGroupRef *a, const PgqGroupRef *b);
static void pgq_xact_callback(XactEvent event, void *arg);
static void publish_inflight(void);
static void pgq_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								 SubTransactionId parentSubid, void *arg);

/* Register the callbacks; called once per backend from _PG_init(). */
void
pgq_xact_init(void)
{
	RegisterXactCallback(pgq_xact_callback, NULL);
	RegisterSubXactCallback(pgq_subxact_callback, NULL);
}

/* Append a record for the current (sub)transaction; room must be reserved. */
static void
add_record(const PgqGroupRef *group, int64 block_id, PgqRecordKind kind)
{
	Assert(nclaims < maxclaims);
	claims[nclaims].group = *group;
	claims[nclaims].block_id = block_id;
	claims[nclaims].nest_level = GetCurrentTransactionNestLevel();
	claims[nclaims].kind = kind;
	claims[nclaims].until = 0;
	claims[nclaims].place = block_id;
	nclaims++;
	if (kind == PGQ_REC_CLAIM)
		ncounted++;
	else if (kind == PGQ_REC_DROP)
		ndrops++;
}

/*
 * Make room for n more records, so that adding them cannot fail: callers
 * that take a lock before recording it reserve first.
 */
void
pgq_xact_reserve(int n)
{
	int			newmax;

	if (nclaims + n <= maxclaims)
		return;
	newmax = Max(64, maxclaims);
	while (newmax < nclaims + n)
		newmax *= 2;
	if (claims == NULL)
		claims = MemoryContextAlloc(TopTransactionContext,
									newmax * sizeof(PgqClaimRecord));
	else
		claims = repalloc(claims, newmax * sizeof(PgqClaimRecord));
	maxclaims = newmax;
}

/*
 * The current (sub)transaction just claimed these blocks of the group:
 * remember them for its end, and count them as claimed.  Both happen or
 * neither, so the shared count always matches what ends will subtract.
 */
void
pgq_xact_remember(const PgqGroupRef *group, const PgqClaimed *blocks, int n)
{
	if (n == 0)
		return;
	pgq_xact_reserve(n);
	for (int i = 0; i < n; i++)
		add_record(group, blocks[i].id, PGQ_REC_CLAIM);
	pgq_xact_count_claimed(group, n);
}

/*
 * pgq_xact_remember() for items of a transaction-mode queue: their records
 * also hold their places in claim order (pgq_item_position()), to which an
 * abort lowers the queue's hint.
 */
void
pgq_xact_remember_items(const PgqGroupRef *group, const PgqClaimed *items,
						int n)
{
	if (n == 0)
		return;
	pgq_xact_reserve(n);
	for (int i = 0; i < n; i++)
	{
		add_record(group, items[i].id, PGQ_REC_CLAIM);
		claims[nclaims - 1].place = pgq_item_position(items[i].priority,
													  items[i].id);
	}
	pgq_xact_count_claimed(group, n);
}

/*
 * The current (sub)transaction just took these blocks of a lease-mode group,
 * with leases that end at "until" (items of queues are
 * pgq_xact_remember_lease_items()'s).
 * Should it roll back, the ones that were pending are pending again.  Until
 * it ends they count as claimed in shared memory, so that others know a
 * claim is in flight (group_stats counts committed leases from the table).
 * When it commits, claims learn when the leases end (pgq_due_lower()).
 */
void
pgq_xact_remember_lease(const PgqGroupRef *group, const PgqClaimed *blocks,
						int n, TimestampTz until)
{
	if (n == 0)
		return;
	pgq_xact_reserve(n);
	for (int i = 0; i < n; i++)
	{
		add_record(group, blocks[i].id, PGQ_REC_LEASE);
		claims[nclaims - 1].until = until;
	}
	pgq_xact_count_claimed(group, n);
}

/*
 * The current (sub)transaction just took these items of a lease-mode queue,
 * under leases that end at "until": pgq_xact_remember_lease() for items,
 * whose records hold their places in claim order (pgq_item_position()), to
 * which an abort lowers the queue's hint.  Room must be reserved.
 */
void
pgq_xact_remember_lease_items(const PgqGroupRef *group,
							  const PgqClaimed *items, int n,
							  TimestampTz until)
{
	if (n == 0)
		return;
	for (int i = 0; i < n; i++)
	{
		add_record(group, pgq_item_position(items[i].priority, items[i].id),
				   PGQ_REC_ITEM_LEASE);
		claims[nclaims - 1].until = until;
	}
	pgq_xact_count_claimed(group, n);
}

/*
 * The current (sub)transaction made block_id of the group pending again
 * (pgq.retry() of a dead-lettered block).  Claims find the block only once
 * the hint is at or below it, and the hint may move there only once the
 * block is visible: at commit (a claim that ran meanwhile could move the
 * hint past it again).  From here until the transaction ends the block
 * counts as claimed, so that waiting claims do not take the group for
 * exhausted while the retry may still make a block claimable, nor before
 * the hint is lowered (invariant C1 in shmem.c).  (One that read the count
 * before saw the group as it was before the retry, which is still true.)
 */
void
pgq_xact_remember_retry(const PgqGroupRef *group, int64 block_id)
{
	pgq_xact_reserve(1);
	add_record(group, block_id, PGQ_REC_RETRY);
	pgq_claimed_add(group, 1);
}

/*
 * The current (sub)transaction made items of a queue pending (enqueued
 * them, handed an ordering key on, retried or released one, moved those
 * come due back), the first of them at "position" in claim order
 * (pgq_item_position()).  As for a retried block, the queue's hint may move
 * down to them only once they are visible: at commit (invariant H1 in
 * shmem.c).  PREPARE lets them through, and COMMIT PREPARED lowers nothing:
 * full scans find them (F1).  Unlike a retry, they are not counted as
 * claimed: a queue is never taken for exhausted.  A statement's record
 * takes in the previous one's if that is among the last few (an enqueue
 * adds a wake record after it), so that each call looks at few records (a
 * transaction of many enqueues still keeps a wake record per call).
 */
void
pgq_xact_remember_pending(const PgqGroupRef *group, int64 position)
{
	int			level = GetCurrentTransactionNestLevel();

	for (int i = nclaims - 1;
		 i >= 0 && i >= nclaims - 4 && claims[i].nest_level == level; i--)
	{
		if (claims[i].kind == PGQ_REC_PENDING &&
			same_group(&claims[i].group, group))
		{
			claims[i].block_id = Min(claims[i].block_id, position);
			return;
		}
	}
	pgq_xact_reserve(1);
	add_record(group, position, PGQ_REC_PENDING);
}

/*
 * Has this transaction written, in SQL, a row of the group that is claimed
 * under a lease or waits for a retry (see pgq_blocks_inflight()), or
 * brought a deadline of a queue's item sooner
 * (pgq_xact_deadline_sooner())?  Then what shared memory knows of the
 * group's deadlines does not cover the transaction's own changes, and what
 * the transaction sees of them is not for others.
 */
bool
pgq_xact_changed_deadlines(int64 group_id)
{
	for (int i = 0; i < ninflight; i++)
		if (inflight[i].group_id == group_id)
			return true;
	return false;
}

/*
 * The current (sub)transaction is deleting all blocks of the group: should
 * it abort, reset the group's hint.  Called before the first block is locked.
 */
void
pgq_xact_remember_drop(const PgqGroupRef *group)
{
	pgq_xact_reserve(1);
	add_record(group, 0, PGQ_REC_DROP);
}

/*
 * End the scan under way: what it took moves to the shared count of blocks
 * held, which its records give back when they end, and the rest of what it
 * counted leaves the count; with "next" > 0 the hint of generation "gen"
 * moves to "next" in the same visit (see pgq_scan_end()).  Waiting claims
 * that the scan's count kept asleep are woken when they are owed it
 * (invariant C3 in shmem.c): a waiting claim marks the debt when the count
 * it reads is over what it holds only by scans, and so does a holder that
 * lets go meanwhile.  (Not at every end: a waiting claim's own scan would
 * wake it again and again while a block that it cannot take is held, by a
 * row lock taken by hand say; nor at every block the scan passed over that
 * a transaction committed since its snapshot: that commit woke the waiters
 * if it left the count at their floor, and any that looked since marked the
 * debt.)  A scan cut short
 * ("aborted") wakes them in any case: what it took is in no record, so no
 * other end wakes them for it, and a waiter that another holder kept asleep
 * as well marked no debt.  Safe in transaction callbacks: it allocates
 * nothing and cannot fail.
 */
static void
claiming_end(uint64 gen, int64 next, bool aborted)
{
	/* a scan that found a block to move the hint past counted first */
	Assert(next == 0 || claiming.counting);
	if (claiming.counting)
	{
		if (pgq_scan_end(&claiming.group, claiming.counted, claiming.taken,
						 gen, next) || aborted)
			pgq_wake_group(&claiming.group);
	}
	claiming.counting = false;
	claiming.counted = 0;
	claiming.taken = 0;
}

/* A scan for pending blocks of the group begins at block "from". */
void
pgq_xact_claiming(const PgqGroupRef *group, int64 from)
{
	if (claiming.active)
		claiming_end(0, 0, false);
	claiming.group = *group;
	claiming.from = from;
	claiming.nest_level = GetCurrentTransactionNestLevel();
	claiming.counting = false;
	claiming.counted = 0;
	claiming.taken = 0;
	claiming.active = true;
}

/*
 * The scan under way found a pending block and may take up to n more: count
 * them before it takes the first (invariant C1 in shmem.c).  Counted after
 * the take, a block could be passed over by another claim, which moves the
 * hint past it, and a waiting claim reading the count in between would take
 * the group for exhausted, though this scan's abort may still give the
 * block back.  Counting once per scan keeps shared memory out of the scan's
 * loop; counting only once a block is found keeps scans of an exhausted
 * group from holding waiting claims back.  The blocks the scan records are
 * counted out of this (pgq_xact_count_claimed()), when it ends.
 */
void
pgq_xact_claiming_count(int n)
{
	Assert(claiming.active);
	if (claiming.counting || n <= 0)
		return;
	pgq_scan_count(&claiming.group, n);
	claiming.counting = true;
	claiming.counted = n;
}

/*
 * Count n blocks of the group as held (n < 0: no longer held): by the scan
 * under way, if it counted them ahead, when it ends; otherwise now.  True
 * if the group's waiting claims must look again (see pgq_claimed_add()).
 */
bool
pgq_xact_count_claimed(const PgqGroupRef *group, int n)
{
	if (claiming.active && claiming.counting &&
		same_group(&claiming.group, group) &&
		claiming.taken + n >= 0)
	{
		claiming.taken += n;
		Assert(claiming.taken <= claiming.counted);
		return false;
	}
	return pgq_claimed_add(group, n);
}

/* The scan ended, and what it took is recorded. */
void
pgq_xact_claiming_done(void)
{
	claiming_end(0, 0, false);
	claiming.active = false;
}

/*
 * The scan ended, and what it took is recorded; it began from the hint of
 * generation "gen" and found every block below "next" consumed or held.
 * The hint moves there in the same visit to shared memory as the scan's
 * count ends: one visit fewer per claim.
 */
void
pgq_xact_claiming_done_advance(uint64 gen, int64 next)
{
	claiming_end(gen, next, false);
	claiming.active = false;
}

/*
 * The (sub)transaction at nest level "level" is aborting: a scan for pending
 * blocks that it began, cut short by an error, lowers the hint, and only
 * then gives back what it counted (invariant C1), waking the waiting
 * claims.  Safe in transaction callbacks: it allocates nothing and cannot
 * fail.
 */
static void
claiming_abort(int level)
{
	if (claiming.active && claiming.nest_level >= level)
	{
		pgq_hint_lower(&claiming.group, claiming.from);
		claiming_end(0, 0, true);
		claiming.active = false;
	}
}

/*
 * A look for due blocks of the group recorded what it found in shared memory
 * (invariant D1 in shmem.c) while this transaction had written: the look saw
 * the transaction's own writes (a due block claimed again, a block
 * completed), which an abort takes back.  Then the record must go too.
 */
void
pgq_xact_remember_look(const PgqGroupRef *group)
{
	int			level = GetCurrentTransactionNestLevel();

	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return;
	/* one record per group and level is enough */
	for (int i = nclaims - 1; i >= 0 && claims[i].nest_level == level; i--)
	{
		if (claims[i].kind == PGQ_REC_LOOK &&
			same_group(&claims[i].group, group))
			return;
	}
	pgq_xact_reserve(1);
	add_record(group, 0, PGQ_REC_LOOK);
}

/* At this transaction's commit, let go of the advisory lock on block_id */
void
pgq_xact_unlock_at_commit(const PgqGroupRef *group, int64 block_id)
{
	pgq_xact_reserve(1);
	add_record(group, block_id, PGQ_REC_UNLOCK);
}

/*
 * The current (sub)transaction took an advisory lock on block_id.  The lock
 * outlives the transaction, but should the transaction abort, the claim is
 * undone as in the other modes.
 */
void
pgq_xact_remember_advisory(const PgqGroupRef *group, int64 block_id)
{
	pgq_xact_reserve(1);
	add_record(group, block_id, PGQ_REC_ADVISORY);
}

/* Wake the group's waiting claims when this transaction ends. */
void
pgq_xact_wake_at_commit(const PgqGroupRef *group)
{
	pgq_xact_reserve(1);
	add_record(group, PG_INT64_MAX, PGQ_REC_WAKE);
}

/*
 * A lease holder's extend, release or fail (an UPDATE under its attempt)
 * changed nothing: the lease had run out and a claim that committed
 * meanwhile took the block or item; or a retry found it made pending by
 * another retry.  The UPDATE may then have row-locked the new version
 * (EvalPlanQual), which may be pending or due again, until this
 * (sub)transaction ends.  Claims pass the row over while it is locked
 * and waiting ones sleep: the lock's end, commit or abort, wakes them.
 */
void
pgq_xact_late_holder_locked(const PgqGroupRef *group)
{
	pgq_xact_wake_at_commit(group);
}

/*
 * The current (sub)transaction extended a lease of the group.  A look for
 * due blocks (or a lease-mode queue's claim) passes the locked row over,
 * and a waiting claim may sleep on it: should the extend roll back, the
 * lease may have run out, and the waiting claims must look again.  A
 * commit only moves a deadline later, and wakes nobody, so that heartbeats
 * do not wake every waiter.
 */
void
pgq_xact_wake_on_abort(const PgqGroupRef *group)
{
	if (nclaims > 0 && claims[nclaims - 1].kind == PGQ_REC_EXTENDING &&
		claims[nclaims - 1].nest_level == GetCurrentTransactionNestLevel() &&
		same_group(&claims[nclaims - 1].group, group))
		return;
	pgq_xact_reserve(1);
	add_record(group, PG_INT64_MAX, PGQ_REC_EXTENDING);
}

/*
 * Note for the transaction's commit that group_id has rows in flight up to
 * block id "raise" (0: none new), and whether a deadline may have come
 * sooner (see publish_inflight()).
 */
static void
note_inflight(int64 group_id, int64 raise, bool sooner)
{
	int			i;

	for (i = 0; i < ninflight; i++)
		if (inflight[i].group_id == group_id)
			break;
	if (i == ninflight)
	{
		if (ninflight == maxinflight)
		{
			int			newmax = Max(4, maxinflight * 2);

			if (inflight == NULL)
				inflight = MemoryContextAlloc(TopTransactionContext,
											  newmax * sizeof(InflightRows));
			else
				inflight = repalloc(inflight, newmax * sizeof(InflightRows));
			maxinflight = newmax;
		}
		inflight[i].group_id = group_id;
		inflight[i].highest = 0;
		inflight[i].sooner = false;
		ninflight++;
	}
	inflight[i].highest = Max(inflight[i].highest, raise);
	inflight[i].sooner |= sooner;
}

/*
 * The current transaction made items of a lease-mode queue wait for a
 * delayed run without SQL (an enqueue), which the trigger
 * pgq.items_inflight() does not see: when it commits, the queue's claims
 * look for due items again (D1 in shmem.c), and until then, its own claims
 * look every time.
 */
void
pgq_xact_deadline_sooner(const PgqGroup *group)
{
	if (group->kind == PGQ_KIND_QUEUE && group->mode == PGQ_MODE_LEASE)
		note_inflight(group->ref.group_id, 0, true);
}

/*
 * The row trigger of pgq.blocks (pgq.blocks_inflight()) or pgq.items
 * (pgq.items_inflight(), "items"), BEFORE INSERT OR UPDATE of rows claimed
 * under a lease or waiting for a retry (its WHEN clause).
 *
 * Looks for due blocks walk a group only up to the highest such block that
 * shared memory knows of, so a block that becomes one (inserted, updated
 * from another state, or given another block or group id) has its block id
 * added there at commit (pgq_inflight_raise()): advisory mode's pgq.fail(),
 * or SQL run by hand.  Lease mode's release and fail change blocks that
 * were claimed already, which the bound covers; lease claims, which run no
 * SQL, raise it from their records (settle_claims()).  Looks for due items
 * walk an index on the deadlines: no bound.
 *
 * Claims do not look for due blocks or items while shared memory knows that
 * none is due yet.  A row that becomes one, or whose deadline moves earlier
 * (lease mode's release and fail), makes its group's claims look again once
 * the transaction commits (pgq_due_forget()); a deadline moved later
 * (extend) or gone (complete, dead-lettering) makes nothing due sooner than
 * known.
 */
static Datum
inflight_trigger(FunctionCallInfo fcinfo, bool items)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	AttrNumber	group_att = items ? Anum_items_group_id : Anum_blocks_group_id;
	AttrNumber	state_att = items ? Anum_items_state : Anum_blocks_state;
	AttrNumber	id_att = items ? Anum_items_item_id : Anum_blocks_block_id;
	AttrNumber	due_att = items ? Anum_items_due_at : Anum_blocks_lease_until;
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	int64		group_id;
	int64		id;
	Datum		due;
	bool		nodue;
	int64		raise;			/* the block id to raise the bound to */
	bool		sooner;			/* may a deadline come sooner? */

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s can only be called as a BEFORE INSERT OR UPDATE ... FOR EACH ROW trigger",
						items ? "pgq.items_inflight()" : "pgq.blocks_inflight()")));

	tupdesc = RelationGetDescr(trigdata->tg_relation);
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	group_id = DatumGetInt64(heap_getattr(tuple, group_att, tupdesc, &isnull));
	id = DatumGetInt64(heap_getattr(tuple, id_att, tupdesc, &isnull));
	due = heap_getattr(tuple, due_att, tupdesc, &nodue);
	raise = items ? 0 : id;
	sooner = !nodue;
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		HeapTuple	old = trigdata->tg_trigtuple;
		char		before = DatumGetChar(heap_getattr(old, state_att,
													   tupdesc, &isnull));

		/* a row that was in flight already, where it was */
		if ((before == 'c' || before == 'r') &&
			DatumGetInt64(heap_getattr(old, group_att, tupdesc,
									   &isnull)) == group_id &&
			DatumGetInt64(heap_getattr(old, id_att, tupdesc, &isnull)) == id)
		{
			Datum		olddue = heap_getattr(old, due_att, tupdesc, &isnull);

			raise = 0;
			if (sooner && !isnull)
				sooner = DatumGetTimestampTz(due) < DatumGetTimestampTz(olddue);
		}
	}

	note_inflight(group_id, raise, sooner);
	return PointerGetDatum(tuple);
}

/* pgq.blocks_inflight(): inflight_trigger() of pgq.blocks. */
Datum
pgq_blocks_inflight(PG_FUNCTION_ARGS)
{
	return inflight_trigger(fcinfo, false);
}

/* pgq.items_inflight(): inflight_trigger() of pgq.items, from 0.2. */
Datum
pgq_items_inflight(PG_FUNCTION_ARGS)
{
	return inflight_trigger(fcinfo, true);
}

/*
 * The highest block of the group that this transaction claimed under a
 * lease or made waiting for a retry in SQL; 0 if none.  Its own looks for
 * due blocks walk that far before it commits.
 */
int64
pgq_xact_inflight_highest(int64 group_id)
{
	int64		highest = 0;

	for (int i = 0; i < ninflight; i++)
		if (inflight[i].group_id == group_id)
			highest = inflight[i].highest;
	for (int i = 0; i < nclaims; i++)
		if (claims[i].kind == PGQ_REC_LEASE &&
			claims[i].group.group_id == group_id)
			highest = Max(highest, claims[i].block_id);
	return highest;
}

/*
 * Add what pgq_blocks_inflight() saw to shared memory, now that it is
 * visible.  Safe in transaction callbacks: it allocates nothing and cannot
 * fail.
 */
static void
publish_inflight(void)
{
	for (int i = 0; i < ninflight; i++)
	{
		if (inflight[i].highest > 0)
			pgq_inflight_raise(MyDatabaseId, inflight[i].group_id,
							   inflight[i].highest);
		if (inflight[i].sooner)
			pgq_due_forget(MyDatabaseId, inflight[i].group_id);
	}
}

/*
 * Did this transaction (or a live subtransaction) claim block_id in
 * transaction mode?
 */
bool
pgq_xact_claimed(int64 block_id)
{
	for (int i = 0; i < nclaims; i++)
	{
		if (claims[i].kind == PGQ_REC_CLAIM && claims[i].block_id == block_id)
			return true;
	}
	return false;
}

/* Will block_id be unlocked when this transaction commits? */
bool
pgq_xact_unlocking(int64 block_id)
{
	for (int i = 0; i < nclaims; i++)
	{
		if (claims[i].kind == PGQ_REC_UNLOCK && claims[i].block_id == block_id)
			return true;
	}
	return false;
}

/*
 * Blocks of the group that this transaction claimed in transaction or lease
 * mode, or retried, and has not committed yet: its part of the shared
 * claimed count.
 */
int64
pgq_xact_own_in_flight(int64 group_id)
{
	int64		n = 0;

	for (int i = 0; i < nclaims; i++)
	{
		if ((claims[i].kind == PGQ_REC_CLAIM ||
			 claims[i].kind == PGQ_REC_LEASE ||
			 claims[i].kind == PGQ_REC_ITEM_LEASE ||
			 claims[i].kind == PGQ_REC_RETRY) &&
			claims[i].group.dbid == MyDatabaseId &&
			claims[i].group.group_id == group_id)
			n++;
	}
	return n;
}

/* Blocks of the group that this transaction claimed and still holds. */
int64
pgq_xact_own_claims(int64 group_id)
{
	int64		n = 0;

	for (int i = 0; i < nclaims; i++)
	{
		if (claims[i].kind == PGQ_REC_CLAIM &&
			claims[i].group.dbid == MyDatabaseId &&
			claims[i].group.group_id == group_id)
			n++;
	}
	return n;
}

/*
 * The blocks (or items) of the group that this transaction claimed in
 * transaction mode and still holds, into *ids (palloc'd in the current
 * memory context); returns how many.
 */
int
pgq_xact_own_claim_ids(int64 group_id, int64 **ids)
{
	int			n = 0;

	*ids = palloc(Max(nclaims, 1) * sizeof(int64));
	for (int i = 0; i < nclaims; i++)
	{
		if (claims[i].kind == PGQ_REC_CLAIM &&
			claims[i].group.dbid == MyDatabaseId &&
			claims[i].group.group_id == group_id)
			(*ids)[n++] = claims[i].block_id;
	}
	return n;
}

/* Do two records name the same incarnation of a group? */
static bool
same_group(const PgqGroupRef *a, const PgqGroupRef *b)
{
	return a->dbid == b->dbid && a->group_id == b->group_id &&
		a->created_at == b->created_at;
}

/*
 * The lowest block of the group that this transaction retried (or place of
 * an item it made pending), if below "hint": the shared hint moves to it
 * only at commit, and until then only this transaction can claim it.
 */
int64
pgq_xact_own_hint(const PgqGroupRef *group, int64 hint)
{
	for (int i = 0; i < nclaims; i++)
	{
		if ((claims[i].kind == PGQ_REC_RETRY ||
			 claims[i].kind == PGQ_REC_PENDING) &&
			same_group(&claims[i].group, group) &&
			claims[i].block_id < hint)
			hint = claims[i].block_id;
	}
	return hint;
}

/*
 * The claims from index "first" on have ended: committed, or undone if
 * "undone".  Consecutive records of one group are settled together, so a
 * claim of many blocks costs one shared-memory update per group.
 */
static void
settle_claims(int first, bool undone)
{
	int			i = first;

	while (i < nclaims)
	{
		const PgqGroupRef *group = &claims[i].group;
		int64		lowest = PG_INT64_MAX;
		int64		retried = PG_INT64_MAX; /* the lowest block retried, or
											 * place made pending */
		TimestampTz until = DT_NOEND;	/* the first committed lease end */
		int64		leased = 0; /* the highest block taken under a lease */
		int64		counted = 0;	/* in the shared claimed count */
		int			claims_here = 0;	/* transaction-mode claims */
		bool		wake = false;
		bool		dropped = false;
		int			j = i;

		for (; j < nclaims && same_group(group, &claims[j].group); j++)
		{
			/* an undone claim may have made a block claimable again */
			if (undone && claims[j].kind != PGQ_REC_LOOK)
				wake = true;
			switch (claims[j].kind)
			{
				case PGQ_REC_CLAIM:
					counted++;
					claims_here++;
					break;
				case PGQ_REC_DROP:
					ndrops--;
					dropped = !undone;
					wake = true;
					break;
				case PGQ_REC_LEASE:
					counted++;
					until = Min(until, claims[j].until);
					leased = Max(leased, claims[j].block_id);
					break;
				case PGQ_REC_ITEM_LEASE:
					counted++;
					until = Min(until, claims[j].until);
					break;
				case PGQ_REC_UNLOCK:
					if (!undone)
						pgq_advisory_unlock(claims[j].block_id);
					wake = true;
					continue;
				case PGQ_REC_WAKE:
					wake = true;
					continue;
				case PGQ_REC_ADVISORY:
					if (undone)
						pgq_advisory_undo_claim(claims[j].block_id);
					continue;
				case PGQ_REC_RETRY:
					counted++;
					if (!undone)
						retried = Min(retried, claims[j].block_id);
					wake = true;
					continue;
				case PGQ_REC_LOOK:
					if (undone)
						pgq_due_forget(group->dbid, group->group_id);
					continue;
				case PGQ_REC_EXTENDING:
					/* on abort, "wake" is set above */
					continue;
				case PGQ_REC_PENDING:
					if (!undone)
						retried = Min(retried, claims[j].block_id);
					wake = true;
					continue;
			}
			lowest = Min(lowest, claims[j].place);
		}
		if (undone && lowest != PG_INT64_MAX)
			pgq_hint_lower(group, lowest);
		if (retried != PG_INT64_MAX)
			pgq_hint_lower(group, retried);
		if (!undone && until != DT_NOEND)
		{
			/* now that the leases are visible: invariant B1 in shmem.c */
			if (leased > 0)
				pgq_inflight_raise(group->dbid, group->group_id, leased);
			pgq_due_lower(group, until);
		}

		/*
		 * Only now, after the hint: invariant C1 in shmem.c.  A commit that
		 * leaves no claim in flight but the waiting claims' own may have
		 * left the group unable to yield another block: they must learn
		 * that too (C3).
		 */
		if (counted > 0 && pgq_claimed_add(group, -counted))
			wake = true;
		ncounted -= claims_here;
		if (dropped)
		{
			pgq_advisory_forget_group(group);
			pgq_group_forget(group->dbid, group->group_id);
		}

		/*
		 * Whatever may have made a block claimable, or the group unable to
		 * yield another one: let its waiters look again, now that the shared
		 * state says so too.
		 */
		if (wake)
			pgq_wake_group(group);
		i = j;
	}
	nclaims = first;
}

/*
 * At the end of the top-level transaction: settle every record, or refuse
 * PREPARE while there is pgq work to do at the end.
 */
static void
pgq_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (ncounted > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds pgq claims"),
						 errdetail_plural("The transaction holds %d claimed block.",
										"The transaction holds %d claimed blocks.",
										ncounted, ncounted),
						 errhint("Commit the transaction to consume the blocks, or roll it back to give them back.")));
			/* (a deadline moved sooner is seen once a look is a second old) */
			for (int i = 0; i < ninflight; i++)
			{
				if (inflight[i].highest > 0)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that made pgq blocks claimed or waiting for a retry"),
							 errdetail("Shared memory must learn of such blocks when the transaction commits."),
							 errhint("Commit or roll back the transaction instead.")));
			}
			for (int i = 0; i < nclaims; i++)
			{
				if (claims[i].kind == PGQ_REC_RETRY)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that retried a dead-lettered pgq block"),
							 errdetail("Shared memory must learn of the block when the transaction commits."),
							 errhint("Commit or roll back the transaction instead.")));
			}
			if (ndrops > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that dropped a pgq group"),
						 errdetail("Rolling back a prepared drop would leave blocks that claims skip."),
						 errhint("Commit or roll back the transaction instead.")));
			for (int i = 0; i < nclaims; i++)
			{
				if (claims[i].kind != PGQ_REC_WAKE &&
					claims[i].kind != PGQ_REC_LOOK &&
					claims[i].kind != PGQ_REC_EXTENDING &&
					claims[i].kind != PGQ_REC_PENDING)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that claimed, completed or failed pgq blocks"),
							 errdetail("What pgq does at the end of the transaction cannot be handed to a prepared transaction."),
							 errhint("Commit or roll back the transaction instead.")));
			}
			/* a prepared transaction may yet roll back: forget its looks now */
			for (int i = 0; i < nclaims; i++)
			{
				if (claims[i].kind == PGQ_REC_LOOK)
					pgq_due_forget(claims[i].group.dbid,
								   claims[i].group.group_id);
			}
			/* keep the records: PREPARE may still fail, and then abort */
			return;
		case XACT_EVENT_PREPARE:
			pgq_lease_xact_end();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* every scan ends before its statement does */
			Assert(!claiming.active);
			if (claiming.active)
				claiming_end(0, 0, false);
			/* visible to all, and nothing of it published yet */
			if (nclaims > 0)
				PGQ_INJECTION_POINT("pgq-commit-visible");
			/* before the waiters wake, so that their claims look again */
			publish_inflight();
			settle_claims(0, false);
			pgq_lease_xact_end();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			pgq_block_due_abort();
			claiming_abort(1);
			settle_claims(0, true);
			pgq_lease_xact_end();
			break;
		default:
			return;
	}

	/* TopTransactionContext is about to go away, and the records with it */
	claiming.active = false;
	claiming.counting = false;
	inflight = NULL;
	ninflight = 0;
	maxinflight = 0;
	claims = NULL;
	nclaims = 0;
	maxclaims = 0;
	ncounted = 0;
	ndrops = 0;
}

/*
 * An aborting subtransaction at nest level "level", whose records start at
 * index "first", wrote nothing itself: its looks for due blocks saw only
 * the writes of its parents, which still stand, so they become the
 * parent's (a waiting claim's attempt that claimed nothing and locked no
 * row is rolled back like this, and must not forget what its look found,
 * nor wake anyone; one that locked a row has a transaction id of its own,
 * and its looks are forgotten with it, which costs a look).
 * They move ahead of the records to settle; returns where those now begin.
 * Allocates nothing and cannot fail.
 */
static int
keep_parents_looks(int first, int level)
{
	if (TransactionIdIsValid(GetCurrentTransactionIdIfAny()))
		return first;
	for (int i = first; i < nclaims; i++)
	{
		PgqClaimRecord look = claims[i];

		if (look.kind != PGQ_REC_LOOK)
			continue;
		memmove(&claims[first + 1], &claims[first],
				(i - first) * sizeof(PgqClaimRecord));
		look.nest_level = level - 1;
		claims[first++] = look;
	}
	return first;
}

/*
 * At the end of a subtransaction: its records go to the parent on commit,
 * and are settled as undone on abort.
 */
static void
pgq_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			first = nclaims;

	/* the subtransaction's records are the tail of the array */
	while (first > 0 && claims[first - 1].nest_level >= level)
		first--;

	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			/* the parent now holds the claims */
			for (int i = first; i < nclaims; i++)
				claims[i].nest_level = level - 1;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			pgq_block_due_abort();
			claiming_abort(level);
			first = keep_parents_looks(first, level);
			settle_claims(first, true);
			break;
		default:
			break;
	}
}
