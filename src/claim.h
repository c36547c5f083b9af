/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  Claimed blocks and items, and what the claim paths share.
 *
 * IDENTIFICATION
 *	  src/claim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_CLAIM_H
#define PGQ_CLAIM_H

#include "nodes/execnodes.h"

#include "pgq.h"

/*
 * A claimed block or item, as pgq.claim() returns it (its first column is
 * named block_id for both).
 */
typedef struct PgqClaimed
{
	int64		id;				/* the block's id, or the item's */
	int32		attempt;
	Datum		ids;			/* bigint[]; (Datum) 0 for an item */
	Datum		payload;		/* items: jsonb, or (Datum) 0 for NULL */
	Datum		data;			/* items: bytea, or (Datum) 0 for NULL */
	Datum		key;			/* items: text, or (Datum) 0 for NULL */
	int32		priority;		/* items: the claim order */
} PgqClaimed;

extern bool pgq_claim_hint(const PgqGroupRef *group, int64 *hint,
						   uint64 *gen);
extern void pgq_claim_changed_more(void);
extern bool pgq_claim_attempt_changed(void);
extern TimestampTz pgq_wait_deadline(Interval *wait);
extern int	pgq_compare_claimed(const void *a, const void *b);

/* claim.c's steps, which claim_list.c takes for each group of its list */
extern void pgq_check_claim_context(PgqMode mode);
extern void pgq_refresh_group(PgqGroup *group);
extern bool pgq_group_exhausted(PgqGroup *group);
extern int	pgq_claim_attempt(PgqGroup *group, int max_blocks,
							  PgqClaimed *blocks, MemoryContext resultcxt);
extern bool pgq_claim_locks_rows(const PgqGroup *group);
extern int	pgq_claim_attempt_apart(PgqGroup *group, int max_blocks,
									PgqClaimed *blocks,
									MemoryContext resultcxt);
extern void pgq_claim_complete_first(FunctionCallInfo fcinfo);
extern void pgq_claim_check_args(FunctionCallInfo fcinfo, int *max_blocks,
								 TimestampTz *deadline);
extern void pgq_claimed_put(ReturnSetInfo *rsinfo, const PgqClaimed *block,
							const char *group_name);

#endif							/* PGQ_CLAIM_H */
