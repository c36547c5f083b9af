/*-------------------------------------------------------------------------
 *
 * wait.h
 *	  Claims that wait inside the server, their wake-ups, and NOTIFY.
 *
 * IDENTIFICATION
 *	  src/wait.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_WAIT_H
#define PGQ_WAIT_H

#include "pgq.h"

extern void pgq_wait_init(void);
extern Size pgq_wait_shmem_size(void);
extern void pgq_wait_shmem_init(void);
extern void pgq_wake_group(const PgqGroupRef *group);
extern uint64 pgq_wait_generation(const PgqGroupRef *group);
extern bool pgq_wait_for_wakeup(const PgqGroupRef *group, TimestampTz deadline,
								uint64 seen);
extern bool pgq_wait_for_any(const PgqGroupRef *groups, int n,
							 TimestampTz deadline, const uint64 *gens);
extern void pgq_wait_done(void);
extern void pgq_notify_group(const char *group_name);
extern void pgq_announce_claimable(const PgqGroupRef *group,
								   const char *group_name);

#endif							/* PGQ_WAIT_H */
