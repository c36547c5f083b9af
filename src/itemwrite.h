/*-------------------------------------------------------------------------
 *
 * itemwrite.h
 *	  Direct access to pgq.items for the hot path of an item's holder.
 *
 * IDENTIFICATION
 *	  src/itemwrite.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_ITEMWRITE_H
#define PGQ_ITEMWRITE_H

#include "fmgr.h"
#include "nodes/pg_list.h"

#include "pgq.h"
#include "claim.h"

extern bool pgq_item_group_id(int64 item_id, int64 *group_id);
extern bool pgq_item_finish_held(int64 group_id, int64 item_id,
								 const int32 *attempt, NullableDatum result,
								 NullableDatum data, text **key);

extern int	pgq_item_claim_pending(const PgqGroupRef *group, int64 from,
								   int limit, TimestampTz until,
								   PgqClaimed *items, MemoryContext cxt,
								   int64 *last, List **keys);

#endif							/* PGQ_ITEMWRITE_H */
