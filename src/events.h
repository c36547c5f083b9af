/*-------------------------------------------------------------------------
 *
 * events.h
 *	  Waiting for a set of items, and the NOTIFY of finished items.
 *
 * IDENTIFICATION
 *	  src/events.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_EVENTS_H
#define PGQ_EVENTS_H

#include "pgq.h"
#include "claim.h"

/* A queue's finished channel: its channel (pgq.channel()) and this. */
#define PGQ_FINISHED_SUFFIX "_finished"

extern void pgq_events_init(void);
extern void pgq_events_note(const PgqGroupRef *group, const int64 *item_ids,
							int n, char state);
extern void pgq_events_note_rows(const PgqGroupRef *group, int idcol,
								 int groupcol, int statecol, char state);
extern void pgq_events_note_claimed(const PgqGroupRef *group,
									const PgqClaimed *items, int n);
extern void pgq_events_note_current(const PgqGroupRef *group, int64 item_id);

#endif							/* PGQ_EVENTS_H */
