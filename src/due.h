/*-------------------------------------------------------------------------
 *
 * due.h
 *	  Looks for due blocks (due.c).
 *
 * IDENTIFICATION
 *	  src/due.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_DUE_H
#define PGQ_DUE_H

#include "pgq.h"

#include "storage/itemptr.h"
#include "utils/snapshot.h"

/* A block whose lease ran out or whose retry came due. */
typedef struct PgqDueBlock
{
	int64		block_id;
	ItemPointerData tid;		/* the row version the walk saw */
	TimestampTz due;
} PgqDueBlock;

extern int	pgq_block_due(const PgqGroupRef *group, TimestampTz now, int max,
						  PgqDueBlock **due);
extern bool pgq_block_any_deadline(const PgqGroupRef *group, bool skip_own,
								   Snapshot snapshot, int64 *bound);
extern int64 pgq_block_due_bound(const PgqGroupRef *group);
extern void pgq_block_due_abort(void);
extern bool pgq_item_due_skip(const PgqGroupRef *group, TimestampTz now,
							  uint64 *gen);
extern void pgq_item_due_looked(const PgqGroupRef *group, uint64 gen,
								TimestampTz now, bool all);
extern uint64 pgq_block_inflight_epoch(void);

#endif							/* PGQ_DUE_H */
