/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Per-group state in shared memory, and the counts behind pgq's limits.
 *
 * IDENTIFICATION
 *	  src/shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_SHMEM_H
#define PGQ_SHMEM_H

#include "pgq.h"

extern int	pgq_max_groups_per_role;

extern bool pgq_shmem_ready(void);
extern Size pgq_shmem_size(void);
extern void pgq_shmem_init(void);
extern bool pgq_hint_get(const PgqGroupRef *group, int64 *hint, uint64 *gen);
extern int64 pgq_hint_peek(const PgqGroupRef *group);
extern void pgq_hint_lower(const PgqGroupRef *group, int64 block_id);
/* how long a look for due blocks (or items) is trusted (D1 in shmem.c) */
#define PGQ_DUE_TRUST	(1000 * 1000)	/* microseconds */

extern bool pgq_due_none(const PgqGroupRef *group, TimestampTz now,
						 uint64 *gen);
extern void pgq_due_found(const PgqGroupRef *group, uint64 gen,
						  TimestampTz now, TimestampTz earliest);
extern TimestampTz pgq_due_recorded(const PgqGroupRef *group);
extern void pgq_due_look_abandoned(const PgqGroupRef *group,
									TimestampTz now);
extern void pgq_due_lower(const PgqGroupRef *group, TimestampTz until);
extern void pgq_due_forget(Oid dbid, int64 group_id);
extern bool pgq_group_has_entry(const PgqGroupRef *group);
extern bool pgq_inflight_bound(const PgqGroupRef *group, uint64 epoch,
							   int64 *bound, uint64 *gen);
extern void pgq_inflight_none(const PgqGroupRef *group, uint64 epoch);
extern void pgq_inflight_found(const PgqGroupRef *group, uint64 gen,
							   int64 highest, uint64 epoch);
extern void pgq_inflight_raise(Oid dbid, int64 group_id, int64 block_id);
extern bool pgq_claimed_add(const PgqGroupRef *group, int64 delta);
extern bool pgq_claimed_get_waiting(const PgqGroupRef *group, int64 own,
									int64 *claimed);
extern void pgq_scan_count(const PgqGroupRef *group, int64 n);
extern bool pgq_scan_end(const PgqGroupRef *group, int64 counted,
						 int64 taken, uint64 gen, int64 next);
extern bool pgq_claimed_get(const PgqGroupRef *group, bool scans,
							int64 *claimed);
extern void pgq_group_forget(Oid dbid, int64 group_id);
extern bool pgq_full_scan_due(const PgqGroupRef *group, int64 own);

struct Latch;
extern void pgq_launcher_latch_set(struct Latch *latch);
extern bool pgq_launcher_wake(void);

/* Which limit on advisory locks a lock would pass. */
typedef enum PgqLockLimit
{
	PGQ_LOCKS_OK,
	PGQ_LOCKS_CLUSTER,			/* pgq.max_locks */
	PGQ_LOCKS_ROLE				/* pgq.max_locks_per_role */
} PgqLockLimit;

extern PgqLockLimit pgq_advisory_locks_take(int limit, Oid role,
											int role_limit);
extern void pgq_advisory_locks_give(Oid role);
extern PgqLockLimit pgq_materialization_take(int limit, Oid role,
											 int role_limit);
extern void pgq_materialization_give(Oid role);

#endif							/* PGQ_SHMEM_H */
