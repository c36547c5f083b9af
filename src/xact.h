/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  Claims held by the current transaction, settled when it ends.
 *
 * IDENTIFICATION
 *	  src/xact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_XACT_H
#define PGQ_XACT_H

#include "pgq.h"
#include "claim.h"

extern void pgq_xact_init(void);
extern void pgq_xact_reserve(int n);
extern void pgq_xact_remember(const PgqGroupRef *group,
							  const PgqClaimed *blocks, int n);
extern void pgq_xact_remember_items(const PgqGroupRef *group,
									const PgqClaimed *items, int n);
extern void pgq_xact_remember_lease(const PgqGroupRef *group,
									const PgqClaimed *blocks, int n,
									TimestampTz until);
extern void pgq_xact_remember_lease_items(const PgqGroupRef *group,
										  const PgqClaimed *items, int n,
										  TimestampTz until);
extern bool pgq_xact_changed_deadlines(int64 group_id);
extern void pgq_xact_deadline_sooner(const PgqGroup *group);
extern int64 pgq_xact_inflight_highest(int64 group_id);
extern void pgq_xact_remember_drop(const PgqGroupRef *group);
extern void pgq_xact_unlock_at_commit(const PgqGroupRef *group, int64 block_id);
extern bool pgq_xact_unlocking(int64 block_id);
extern bool pgq_xact_claimed(int64 block_id);
extern void pgq_xact_wake_at_commit(const PgqGroupRef *group);
extern void pgq_xact_late_holder_locked(const PgqGroupRef *group);
extern void pgq_xact_wake_on_abort(const PgqGroupRef *group);
extern void pgq_xact_remember_advisory(const PgqGroupRef *group,
									   int64 block_id);
extern void pgq_xact_remember_retry(const PgqGroupRef *group, int64 block_id);
extern void pgq_xact_remember_pending(const PgqGroupRef *group, int64 position);
extern int64 pgq_xact_own_claims(int64 group_id);
extern int	pgq_xact_own_claim_ids(int64 group_id, int64 **ids);
extern int64 pgq_xact_own_hint(const PgqGroupRef *group, int64 hint);
extern void pgq_xact_remember_look(const PgqGroupRef *group);
extern void pgq_xact_claiming(const PgqGroupRef *group, int64 from);
extern void pgq_xact_claiming_count(int n);
extern bool pgq_xact_count_claimed(const PgqGroupRef *group, int n);
extern void pgq_xact_claiming_done(void);
extern void pgq_xact_claiming_done_advance(uint64 gen, int64 next);
extern int64 pgq_xact_own_in_flight(int64 group_id);

#endif							/* PGQ_XACT_H */
