/*-------------------------------------------------------------------------
 *
 * due.c
 *	  Looks for due blocks: leases that ran out and retries that came due,
 *	  and the bound of blocks in flight that tells how far to walk.
 *
 * No index is kept on the deadlines of pgq.blocks (claims would not be HOT
 * updates), so a look walks the group's primary key, through blockscan.c,
 * up to the highest block claimed under a lease or waiting for a retry.
 * What the looks find, and that bound, are kept in shared memory under the
 * invariants D1-D4 and B1-B2 of shmem.c; this file is where they are read
 * and learned.
 *
 * IDENTIFICATION
 *	  src/due.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "lib/binaryheap.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "advisory.h"
#include "blockscan.h"
#include "due.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/*
 * The look for due blocks this backend has under way, if any, so that an
 * error does not keep other claims from looking (pgq_block_due_abort()).
 */
static struct
{
	bool		active;
	PgqGroupRef group;
	TimestampTz since;
}			my_look;

/* Order due blocks by deadline, then block id, as claims take them. */
static int
compare_due(const void *a, const void *b)
{
	const PgqDueBlock *x = (const PgqDueBlock *) a;
	const PgqDueBlock *y = (const PgqDueBlock *) b;

	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	if (x->block_id != y->block_id)
		return x->block_id < y->block_id ? -1 : 1;
	return 0;
}

/* binaryheap comparator: the latest deadline of the kept ones on top */
static int
compare_due_nodes(Datum a, Datum b, void *arg)
{
	const PgqDueBlock *due = (const PgqDueBlock *) arg;

	return compare_due(&due[DatumGetInt32(a)], &due[DatumGetInt32(b)]);
}

/*
 * Does pgq.blocks_inflight fire in every session, and since when?  It is
 * made ENABLE ALWAYS, so that it fires under session_replication_role =
 * replica too (logical replication's apply workers).  Without it (a
 * database not yet updated from 0.1, or the trigger disabled or made to
 * fire in some sessions only), SQL can make blocks claimed or waiting
 * beyond the bound that shared memory keeps without raising it; a bound
 * learned before, or while, it was missing does not cover them once it is
 * back.
 *
 * Returns 0 if it does not fire in every session, and otherwise the epoch
 * of the bounds that it keeps (invariant B1 in shmem.c): the trigger's
 * OID and the transaction that wrote the current version of its pg_trigger
 * row, which every CREATE TRIGGER, ENABLE and DISABLE writes anew.  Read
 * from the catalog again after each invalidation of pgq's relations, which
 * those commands send.  "blocks" is pgq.blocks' OID.
 */
static uint64
inflight_trigger_epoch(Oid blocks)
{
	static uint64 epoch = 0;
	static uint64 epoch_generation = 0;
	static bool epoch_valid = false;
	uint64		generation;
	Relation	rel;
	ScanKeyData keys[2];
	SysScanDesc scan;
	HeapTuple	tuple;

	if (epoch_valid && epoch_generation == pgq_rels_generation())
		return epoch;

	/* an invalidation taken in while pg_trigger is read makes us read again */
	generation = pgq_rels_generation();
	rel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyInit(&keys[0], Anum_pg_trigger_tgrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(blocks));
	ScanKeyInit(&keys[1], Anum_pg_trigger_tgname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("blocks_inflight"));
	scan = systable_beginscan(rel, TriggerRelidNameIndexId, true, NULL, 2,
							  keys);
	epoch = 0;
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		Form_pg_trigger trigger = (Form_pg_trigger) GETSTRUCT(tuple);

		if (trigger->tgenabled == TRIGGER_FIRES_ALWAYS)
			epoch = (uint64) HeapTupleHeaderGetRawXmin(tuple->t_data) << 32 |
				trigger->oid;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	epoch_generation = generation;
	epoch_valid = true;
	return epoch;
}

/*
 * The epoch of the bounds of blocks in flight (see inflight_trigger_epoch()),
 * for a group being created: 0 if the trigger that keeps them is not in
 * place.
 */
uint64
pgq_block_inflight_epoch(void)
{
	Relation	heap = pgq_open_rel("blocks", AccessShareLock);
	uint64		epoch = inflight_trigger_epoch(RelationGetRelid(heap));

	table_close(heap, NoLock);
	return epoch;
}

/*
 * Learn the bound of the group's blocks in flight (invariants B1 and B2 in
 * shmem.c), read at generation "gen", by walking the whole group: the highest
 * block claimed under a lease or waiting for a retry.  The walk sees what is
 * committed, and none of the current transaction's own changes: had it
 * completed the highest block, say, and then rolled back, the block would lie
 * above the bound.  Its own blocks count anyway (pgq_xact_inflight_highest()).
 * "epoch" is the trigger's that keeps the bound from now on.
 */
static void
learn_bound(const PgqGroupRef *group, uint64 gen, uint64 epoch)
{
	PgqBlockScan scan;
	ScanKeyData keys[1];
	int64		highest = 0;

	pgq_block_scan_open(&scan, "blocks_pkey", AccessShareLock);

	/*
	 * A snapshot taken now, after the bound was read, in a copy of our own
	 * (RegisterSnapshot() copies GetLatestSnapshot()'s), with no command of
	 * the transaction's own visible.
	 */
	UnregisterSnapshot(scan.snapshot);
	scan.snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan.snapshot->curcid = FirstCommandId;

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group->group_id));
	pgq_block_scan_keys(&scan, keys, 1);
	while (pgq_block_scan_next(&scan))
	{
		bool		isnull;
		char		state = DatumGetChar(pgq_block_attr(&scan, Anum_blocks_state,
														&isnull));

		if (state == PGQ_BLOCK_CLAIMED || state == 'r')
			highest = DatumGetInt64(pgq_block_attr(&scan, Anum_blocks_block_id,
												   &isnull));
	}
	pgq_block_scan_close(&scan);
	pgq_inflight_found(group, gen, highest, epoch);
}

/*
 * Walk the group's blocks that may be claimed under a lease or wait for a
 * retry (state 'c' or 'r' with a deadline in lease_until): the primary key
 * from the start of the group up to the bound that shared memory keeps,
 * which a walk of the whole group learns first if it is not known.  No
 * index is kept on the deadlines: a lease claim changes them, and would
 * then not be a HOT update.  Dead-lettered blocks and the dead index entries
 * of consumed ones below the bound are walked too.
 *
 * *earliest gets the first deadline found (DT_NOEND: none).  With max > 0,
 * *due gets (palloc'd) up to "max" of the blocks due by "now", earliest
 * deadline first, and their count is returned.  With max 0, the walk ends
 * at the first due block, or with "any_deadline", at the first deadline.
 * With "skip_own", blocks that this session holds by advisory lock are
 * passed over.  The walk reads "snapshot", or (NULL) a statement's.  The
 * bound it read from shared memory goes to *bound_read if that is not NULL
 * (PG_INT64_MAX: not known, and the whole group was walked).
 */
static int
walk_due(const PgqGroupRef *group, TimestampTz now, int max,
		 bool any_deadline, bool skip_own, Snapshot snapshot,
		 PgqDueBlock **due, TimestampTz *earliest, int64 *bound_read)
{
	PgqBlockScan scan;
	ScanKeyData keys[2];
	int64		bound;
	uint64		gen;
	uint64		epoch;
	PgqDueBlock *kept = NULL;	/* grown as needed, up to "max" */
	int			nkept = 0;
	binaryheap *heap = NULL;	/* once "max" are kept, over them */
	int			n = 0;

	*earliest = DT_NOEND;
	if (due != NULL)
		*due = NULL;

	pgq_block_scan_open(&scan, "blocks_pkey", AccessShareLock);
	if (snapshot != NULL)
	{
		UnregisterSnapshot(scan.snapshot);
		scan.snapshot = RegisterSnapshot(snapshot);
	}
	epoch = inflight_trigger_epoch(RelationGetRelid(scan.heap));
	if (epoch == 0)
		bound = PG_INT64_MAX;
	else if (!pgq_inflight_bound(group, epoch, &bound, &gen) && gen != 0)
	{
		learn_bound(group, gen, epoch);
		(void) pgq_inflight_bound(group, epoch, &bound, &gen);
	}
	if (bound_read != NULL)
		*bound_read = bound;
	if (bound != PG_INT64_MAX)
		bound = Max(bound, pgq_xact_inflight_highest(group->group_id));

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group->group_id));
	ScanKeyInit(&keys[1], 2, BTLessEqualStrategyNumber, F_INT8LE,
				Int64GetDatum(bound));
	pgq_block_scan_keys(&scan, keys, 2);
	while (pgq_block_scan_next(&scan))
	{
		bool		isnull;
		char		state = DatumGetChar(pgq_block_attr(&scan, Anum_blocks_state,
														&isnull));
		TimestampTz deadline;
		PgqDueBlock cand;

		if (state != PGQ_BLOCK_CLAIMED && state != 'r')
			continue;
		deadline = DatumGetTimestampTz(pgq_block_attr(&scan,
													  Anum_blocks_lease_until,
													  &isnull));
		if (isnull)
			continue;
		if (skip_own &&
			pgq_advisory_held_here(group,
							   DatumGetInt64(pgq_block_attr(&scan,
															Anum_blocks_block_id,
															&isnull))))
			continue;
		*earliest = Min(*earliest, deadline);
		if (any_deadline)
			break;
		if (deadline > now)
			continue;
		if (max == 0)
			break;

		/* due: keep it if it is one of the "max" earliest so far */
		cand.block_id = DatumGetInt64(pgq_block_attr(&scan, Anum_blocks_block_id,
													 &isnull));
		cand.due = deadline;
		cand.tid = scan.slot->tts_tid;
		if (n < max)
		{
			if (n == nkept)
			{
				nkept = Min(Max(16, nkept * 2), max);
				kept = kept == NULL ? palloc(nkept * sizeof(PgqDueBlock)) :
					repalloc(kept, nkept * sizeof(PgqDueBlock));
			}
			kept[n++] = cand;
		}
		else
		{
			int			top;

			if (heap == NULL)
			{
				heap = binaryheap_allocate(max, compare_due_nodes, kept);
				for (int i = 0; i < max; i++)
					binaryheap_add_unordered(heap, Int32GetDatum(i));
				binaryheap_build(heap);
			}
			top = DatumGetInt32(binaryheap_first(heap));
			if (compare_due(&cand, &kept[top]) < 0)
			{
				kept[top] = cand;
				binaryheap_replace_first(heap, Int32GetDatum(top));
			}
		}
	}
	pgq_block_scan_close(&scan);

	if (heap != NULL)
		binaryheap_free(heap);
	if (n > 0)
		qsort(kept, n, sizeof(PgqDueBlock), compare_due);
	if (due != NULL)
		*due = kept;
	return n;
}

/*
 * The group's blocks whose lease ran out or whose retry came due by "now", up
 * to "max" of them, earliest deadline first, into *due (palloc'd; NULL if
 * none).  No walk is needed before the earliest deadline that the last look
 * found, nor while another claim looks (invariants D1 and D4 in shmem.c);
 * otherwise walk, and remember what the walk found if nothing is due.  A
 * transaction that changed the group's deadlines in SQL walks every time, and
 * keeps what it sees to itself.  With max 0, returns 1 if some block is due, 0
 * if none is.
 */
int
pgq_block_due(const PgqGroupRef *group, TimestampTz now, int max,
			  PgqDueBlock **due)
{
	uint64		gen = 0;
	TimestampTz earliest;
	bool		own = pgq_xact_changed_deadlines(group->group_id);
	int			n;

	if (due != NULL)
		*due = NULL;
	if (!own)
	{
		if (pgq_due_none(group, now, &gen))
			return 0;
		my_look.group = *group;
		my_look.since = now;
		my_look.active = true;
	}
	n = walk_due(group, now, max, false, false, NULL, due, &earliest, NULL);
	if (!own)
	{
		PGQ_INJECTION_POINT("pgq-due-look-walked");
		pgq_xact_remember_look(group);
		pgq_due_found(group, gen, now, earliest);
		my_look.active = false;
	}
	if (earliest <= now)
		return max == 0 ? 1 : n;
	return 0;
}

/*
 * May a lease-mode queue's claim at "now" skip moving its due items back to
 * pending (promote_due() in queue.c)?  As for blocks (pgq_block_due()), it
 * may before the time the last look recorded, and while another claim
 * looks (D1 and D4 in shmem.c), unless its transaction brought a deadline
 * of the queue sooner.  If not, the caller looks, and then tells
 * pgq_item_due_looked() what it found, with *gen.
 */
bool
pgq_item_due_skip(const PgqGroupRef *group, TimestampTz now, uint64 *gen)
{
	*gen = 0;
	if (pgq_xact_changed_deadlines(group->group_id))
		return false;
	if (pgq_due_none(group, now, gen))
		return true;
	my_look.group = *group;
	my_look.since = now;
	my_look.active = true;
	return false;
}

/*
 * The look that pgq_item_due_skip() let begin at "now" is done, having
 * moved every item due by then ("all"), or stopped at its limit.  Its
 * statement sees no deadline beyond "now": it records none due for
 * PGQ_DUE_TRUST (D1's exception for queues, in shmem.c).  A transaction
 * that brought a deadline sooner records nothing.
 */
void
pgq_item_due_looked(const PgqGroupRef *group, uint64 gen, TimestampTz now,
					bool all)
{
	if (!my_look.active)
		return;
	pgq_xact_remember_look(group);
	pgq_due_found(group, gen, now, all ? now + PGQ_DUE_TRUST : now);
	my_look.active = false;
}

/*
 * The current (sub)transaction is aborting: if it was looking for due blocks
 * (pgq_block_due()), let other claims look, and wake the waiting ones, which
 * did not look while this one did and counted on it to wake them for what
 * it left (D4 in shmem.c).  Safe in transaction callbacks.
 */
void
pgq_block_due_abort(void)
{
	if (my_look.active)
	{
		pgq_due_look_abandoned(&my_look.group, my_look.since);
		pgq_wake_group(&my_look.group);
	}
	my_look.active = false;
}

/*
 * Has the group a block claimed under a lease or waiting for a retry, with a
 * deadline, in "snapshot"?  A group that has one is not exhausted: the lease
 * may run out, the retry will come due.  With "skip_own", an advisory-mode
 * retry that this session holds does not count: it holds it, and a claim of
 * it cannot take it.  *bound gets the bound that the walk read (see
 * pgq_block_due_bound()).
 */
bool
pgq_block_any_deadline(const PgqGroupRef *group, bool skip_own,
					   Snapshot snapshot, int64 *bound)
{
	TimestampTz earliest;

	(void) walk_due(group, GetCurrentTimestamp(), 0, true, skip_own,
					snapshot, NULL, &earliest, bound);
	return earliest != DT_NOEND;
}

/*
 * The bound of the group's blocks in flight that a walk for due blocks would
 * read now (invariant B1 in shmem.c); PG_INT64_MAX if it is not known.  A
 * walk may read the bound from before the raise of a claim that its snapshot
 * shows: what must not miss that claim's lease reads the bound again, once
 * the claim's commit callback ran, and sees whether it moved.
 */
int64
pgq_block_due_bound(const PgqGroupRef *group)
{
	Relation	heap = pgq_open_rel("blocks", AccessShareLock);
	uint64		epoch = inflight_trigger_epoch(RelationGetRelid(heap));
	int64		bound;
	uint64		gen;

	table_close(heap, NoLock);
	if (epoch == 0 || !pgq_inflight_bound(group, epoch, &bound, &gen))
		return PG_INT64_MAX;
	return bound;
}
