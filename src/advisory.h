/*-------------------------------------------------------------------------
 *
 * advisory.h
 *	  Advisory mode: claims, block operations, and the locks a session holds.
 *
 * IDENTIFICATION
 *	  src/advisory.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_ADVISORY_H
#define PGQ_ADVISORY_H

#include "pgq.h"
#include "claim.h"

extern void pgq_advisory_init(void);
extern void pgq_advisory_check_worker_held(int64 worker_id);
extern int	pgq_advisory_claim(const PgqGroup *group, int max_blocks,
							   PgqClaimed *blocks, MemoryContext cxt);
extern bool pgq_advisory_holds(const PgqGroupRef *group, int64 id);
extern bool pgq_advisory_held_here(const PgqGroupRef *group, int64 id);
extern bool pgq_advisory_complete(const PgqGroup *group, int64 block_id);
extern bool pgq_advisory_release(const PgqGroup *group, int64 block_id);
extern bool pgq_advisory_fail(const PgqGroup *group, int64 block_id,
							  text *error, Interval *retry_after);
extern void pgq_advisory_unlock(int64 block_id);
extern void pgq_advisory_undo_claim(int64 block_id);
extern void pgq_advisory_forget_block(int64 block_id);
extern void pgq_forget_dead_workers(void);
extern void pgq_advisory_forget_group(const PgqGroupRef *group);
extern int64 pgq_advisory_held_in_group(const PgqGroupRef *group);
extern Datum pgq_advisory_held_ids(const PgqGroupRef *group);

#endif							/* PGQ_ADVISORY_H */
