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

#endif							/* PGQ_QUEUE_H */
