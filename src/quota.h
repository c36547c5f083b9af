/*-------------------------------------------------------------------------
 *
 * quota.h
 *	  Bounds on the storage that enqueues take.
 *
 * IDENTIFICATION
 *	  src/quota.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_QUOTA_H
#define PGQ_QUOTA_H

#include "pgq.h"
#include "iteminsert.h"

extern void pgq_quota_init(void);
extern void pgq_check_item_size(const PgqNewItem *item);
extern void pgq_check_queue_room(const PgqGroup *group, int n);

#endif							/* PGQ_QUOTA_H */
