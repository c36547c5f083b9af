/*-------------------------------------------------------------------------
 *
 * ordering.h
 *	  Ordering keys of queue items: one item of a key handed out at a time.
 *
 * IDENTIFICATION
 *	  src/ordering.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_ORDERING_H
#define PGQ_ORDERING_H

#include "nodes/pg_list.h"

#include "pgq.h"

/* The state of an item waiting behind the head of its ordering key. */
#define PGQ_ITEM_WAITING	'w'

/* The keys an enqueue has decided on, within one call. */
typedef struct PgqOrderingEnqueue PgqOrderingEnqueue;

extern bool pgq_ordering_supported(void);
extern void pgq_ordering_check_key(text *key, const char *argname);
extern PgqOrderingEnqueue *pgq_ordering_enqueue_begin(const PgqGroup *group,
													  text **keys, int n);
extern bool pgq_ordering_must_wait(PgqOrderingEnqueue *oe, int item);
extern void pgq_ordering_enqueued(PgqOrderingEnqueue *oe, int item);
extern List *pgq_ordering_finished_keys(int state_col, int key_col);
extern int	pgq_ordering_hand_on(const PgqGroup *group, List *keys);
extern void pgq_ordering_take_back(const PgqGroup *group, int64 item_id);
extern void pgq_ordering_check_retry(const PgqGroup *group, int64 item_id);

#endif							/* PGQ_ORDERING_H */
