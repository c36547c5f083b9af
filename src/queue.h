/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  Queues: claiming items, and operations on one held item.
 *
 * IDENTIFICATION
 *	  src/queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_QUEUE_H
#define PGQ_QUEUE_H

#include "pgq.h"
#include "claim.h"

extern int	pgq_queue_claim(const PgqGroup *group, int max_items,
							PgqClaimed *items, MemoryContext cxt);
extern bool pgq_queue_complete(const PgqGroup *group, int64 item_id,
							   FunctionCallInfo fcinfo);
extern bool pgq_queue_release(const PgqGroup *group, int64 item_id,
							  FunctionCallInfo fcinfo);
extern bool pgq_queue_fail(const PgqGroup *group, int64 item_id,
						   FunctionCallInfo fcinfo, text *error,
						   Interval *retry_after);
extern bool pgq_queue_extend(const PgqGroup *group, int64 item_id,
							 int32 attempt, Interval *lease);

extern const char *pgq_item_state_name(char state);
extern int	pgq_item_classes(const char *const **conds);

/* the highest priority an item may have */
#define PGQ_MAX_PRIORITY	32767

/*
 * An item's place in claim order, where items_pending_idx has it (priority
 * descending, then item id), as one number that grows along the index:
 * what a queue's hint is (invariant H1 in shmem.c).  Ids take the low
 * PGQ_ITEM_ID_BITS bits; an item whose id (or priority, set by hand) does
 * not fit is given place 0, before every item, where a hint may always go.
 */
#define PGQ_ITEM_ID_BITS	48
#define PGQ_ITEM_ID_MASK	((INT64CONST(1) << PGQ_ITEM_ID_BITS) - 1)

static inline int64
pgq_item_position(int32 priority, int64 item_id)
{
	if (item_id <= 0 || item_id >= PGQ_ITEM_ID_MASK ||
		priority < 0 || priority > PGQ_MAX_PRIORITY)
		return 0;
	return ((int64) (PGQ_MAX_PRIORITY - priority) << PGQ_ITEM_ID_BITS) |
		item_id;
}

/*
 * The place right after "position" (not 0), where a claim that found every
 * item up to "position" consumed or held may move the hint.  Ids stop one
 * short of the mask (above), so that this never carries into the priority:
 * the next place is of the same priority.
 */
static inline int64
pgq_item_position_after(int64 position)
{
	Assert(position > 0 && (position & PGQ_ITEM_ID_MASK) < PGQ_ITEM_ID_MASK);
	return position + 1;
}

#endif							/* PGQ_QUEUE_H */
