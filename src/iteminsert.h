/*-------------------------------------------------------------------------
 *
 * iteminsert.h
 *	  Inserting items into pgq.items without SQL, for enqueues.
 *
 * IDENTIFICATION
 *	  src/iteminsert.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_ITEMINSERT_H
#define PGQ_ITEMINSERT_H

#include "pgq.h"

/* A row for pgq.items. */
typedef struct PgqNewItem
{
	int64		group_id;
	text	   *key;			/* NULL: none */
	int32		priority;
	bool		has_due_at;		/* in state 'r' until due_at, else pending */
	TimestampTz due_at;
	Datum		payload;		/* jsonb */
	bool		no_payload;
	Datum		data;			/* bytea */
	bool		no_data;
	text	   *ordering_key;	/* NULL: none */
	bool		waiting;		/* behind its ordering key's head: state 'w' */
} PgqNewItem;

typedef struct PgqItemInserter PgqItemInserter;

extern PgqItemInserter *pgq_item_inserter_begin(int32 epoch);
extern int64 pgq_item_insert(PgqItemInserter *ins, const PgqNewItem *item);
extern void pgq_item_inserter_end(PgqItemInserter *ins);

#endif							/* PGQ_ITEMINSERT_H */
