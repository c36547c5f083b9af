/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  Lease mode: claims that commit, operations on a held block, and what
 *	  lease-mode queues share with them.
 *
 * IDENTIFICATION
 *	  src/lease.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_LEASE_H
#define PGQ_LEASE_H

#include "executor/tuptable.h"

#include "pgq.h"
#include "claim.h"

extern int	pgq_lease_claim(const PgqGroup *group, int max_blocks,
							PgqClaimed *blocks, MemoryContext cxt);
extern bool pgq_lease_complete(const PgqGroup *group, int64 block_id,
							   int32 attempt);
extern bool pgq_lease_release(const PgqGroup *group, int64 block_id,
							  int32 attempt);
extern bool pgq_lease_fail(const PgqGroup *group, int64 block_id,
						   int32 attempt, text *error, Interval *retry_after);
extern bool pgq_lease_extend(const PgqGroup *group, int64 block_id,
							 int32 attempt, Interval *lease);
extern void pgq_lease_durable(void);
extern void pgq_lease_claim_async(void);
extern void pgq_lease_claim_done(void);
extern void pgq_lease_promoted(TransactionId xmin);
extern void pgq_lease_xact_end(void);
extern void pgq_lease_init(void);
extern Size pgq_lease_shmem_size(void);
extern void pgq_lease_shmem_init(void);
extern bool pgq_blocks_fenced(void);
extern int32 pgq_lease_epoch(void);
extern int32 pgq_lease_next_attempt(TupleTableSlot *slot,
									 AttrNumber attempt_att,
									 AttrNumber epoch_att);

#endif							/* PGQ_LEASE_H */
