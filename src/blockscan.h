/*-------------------------------------------------------------------------
 *
 * blockscan.h
 *	  Direct access to pgq.blocks: index scans, refetches, deletes.
 *
 * IDENTIFICATION
 *	  src/blockscan.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_BLOCKSCAN_H
#define PGQ_BLOCKSCAN_H

#include "access/genam.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "storage/itemptr.h"

#include "pgq.h"

/* pgq.blocks.state of a block claimed under a lease (see pgq--0.1.sql) */
#define PGQ_BLOCK_CLAIMED	'c'

/* columns of pgq.blocks that C code reads directly (see pgq--0.1.sql) */
#define Anum_blocks_group_id	1
#define Anum_blocks_block_id	2
#define Anum_blocks_ids			3
#define Anum_blocks_state		4
#define Anum_blocks_attempt		5
#define Anum_blocks_lease_until	6
#define Anum_blocks_last_error	7
#define Anum_blocks_tries		8	/* from 0.2 */
#define Anum_blocks_epoch		9	/* from 0.2 */

/* pgq.items.state of a pending item, and of one claimed under a lease */
#define PGQ_ITEM_PENDING	'p'
#define PGQ_ITEM_CLAIMED	'c'

/* columns of pgq.items that C code reads or writes directly (pgq--0.1.sql) */
#define Anum_items_group_id		1
#define Anum_items_item_id		2
#define Anum_items_key			3
#define Anum_items_priority		4
#define Anum_items_state		5
#define Anum_items_attempt		6
#define Anum_items_due_at		7
#define Anum_items_payload		8
#define Anum_items_data			9
#define Anum_items_result		10
#define Anum_items_result_data	11
#define Anum_items_enqueued_at	14
#define Anum_items_finished_at	15
#define Natts_items				15
#define Anum_items_tries		16	/* from 0.2 */
#define Anum_items_epoch		17	/* from 0.2 */
#define Anum_items_ordering_key	18	/* from 0.2 */

/* An index scan of pgq.blocks, or of pgq.items, without SQL. */
typedef struct PgqBlockScan
{
	Relation	heap;
	Relation	index;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;		/* the current row */
} PgqBlockScan;

/*
 * Changes to rows of pgq.blocks or pgq.items that an index scan finds,
 * without SQL: the hot paths of lease claims (see pgq_writer_open()).
 */
typedef struct PgqRowWriter
{
	PgqBlockScan scan;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *newslot;
	CommandId	cid;
} PgqRowWriter;

extern Relation pgq_open_rel(const char *name, LOCKMODE lockmode);
extern Oid	pgq_rel_oid(const char *name);
extern uint64 pgq_rels_generation(void);
extern ResultRelInfo *pgq_result_rel(EState *estate, Relation rel);
extern void pgq_block_scan_open(PgqBlockScan *scan, const char *index_name,
								LOCKMODE lockmode);
extern void pgq_item_scan_open(PgqBlockScan *scan, const char *index_name,
							   LOCKMODE lockmode);
extern void pgq_block_scan_keys(PgqBlockScan *scan, ScanKey keys, int nkeys);
extern bool pgq_block_scan_next(PgqBlockScan *scan);
extern bool pgq_block_refetch(PgqBlockScan *scan, ItemPointer tid);
extern void pgq_block_scan_close(PgqBlockScan *scan);
extern void pgq_block_scan_claim_pass(PgqBlockScan *scan, int64 group_id,
									  int64 from, int limit, int pass);
extern bool pgq_item_scan_pending_pass(PgqBlockScan *scan, int64 group_id,
									   int64 from, int pass);
extern void pgq_block_key(ScanKey keys, int64 group_id, int64 block_id);
extern Datum pgq_block_attr(PgqBlockScan *scan, AttrNumber attnum,
							bool *isnull);
extern bool pgq_scan_find_id(PgqBlockScan *scan, int64 id, AttrNumber id_att);
extern const char *pgq_item_id_index(void);
extern bool pgq_block_group_id(int64 block_id, int64 *group_id);
extern bool pgq_block_delete(int64 group_id, int64 block_id,
							 const int32 *attempt);
extern void pgq_writer_open(PgqRowWriter *w, const char *table,
							const char *index_name);
extern void pgq_writer_close(PgqRowWriter *w, bool wrote);
extern bool pgq_writer_lock(PgqRowWriter *w);
extern bool pgq_writer_only_locked(PgqRowWriter *w);
extern TupleTableSlot *pgq_writer_new_version(PgqRowWriter *w);
extern void pgq_writer_update(PgqRowWriter *w);

#endif							/* PGQ_BLOCKSCAN_H */
