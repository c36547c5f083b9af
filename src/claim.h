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

#include "pgq.h"

/* A claimed block or item, as pgq.claim() returns it. */
typedef struct ClaimedBlock
{
	int64		block_id;
	int32		attempt;
	Datum		ids;			/* bigint[]; (Datum) 0 for an item */
	Datum		payload;		/* items: jsonb, or (Datum) 0 for NULL */
	Datum		data;			/* items: bytea, or (Datum) 0 for NULL */
	Datum		key;			/* items: text, or (Datum) 0 for NULL */
	int32		priority;		/* items: the claim order */
} ClaimedBlock;

extern bool pgq_claim_hint(const PgqGroupRef *group, int64 *hint,
						   uint64 *gen);
extern void pgq_claim_changed_more(void);
extern TimestampTz pgq_wait_deadline(Interval *wait);
extern int	pgq_compare_claimed(const void *a, const void *b);

#endif							/* PGQ_CLAIM_H */
