/*-------------------------------------------------------------------------
 *
 * group.h
 *	  Groups: lookups, locks, and writing a query's ids into blocks.
 *
 * IDENTIFICATION
 *	  src/group.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_GROUP_H
#define PGQ_GROUP_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/array.h"

#include "pgq.h"

/*
 * The values of a group's query parameters, $1..$n, bound as SPI takes
 * them; nparams is 0 for a query without parameters.
 */
typedef struct PgqQueryParams
{
	int			nparams;
	Oid		   *types;
	Datum	   *values;
	char	   *nulls;			/* 'n' for NULL, ' ' otherwise */
} PgqQueryParams;

/* Receives a group's ids from pgq_run_group_query(), a fetch at a time. */
typedef void (*PgqIdSink) (const int64 *ids, int n, void *arg);

/* Cuts a stream of ids into blocks and inserts them. */
typedef struct PgqBlockWriter
{
	int64		group_id;
	int			block_size;
	int64	   *ids;			/* the block being filled */
	int			n;				/* ids in it */
	int64		nids;			/* ids written in blocks so far */
	int64		nblocks;		/* blocks written so far */
	MemoryContext scratch;
} PgqBlockWriter;

extern void pgq_bind_group_params(const char *query, ArrayType *values,
								  PgqQueryParams *params);
extern void pgq_load_group_params(Datum types, Datum values,
								  PgqQueryParams *params);
extern bool pgq_groups_have_column(const char *column);
extern SPIPlanPtr pgq_prepare_group_query(const char *query,
										  const PgqQueryParams *params);
extern int64 pgq_run_group_query(SPIPlanPtr query_plan,
								 const PgqQueryParams *params,
								 PgqIdSink sink, void *arg);
extern void pgq_block_writer_init(PgqBlockWriter *writer, int64 group_id,
								  int block_size);
extern void pgq_block_writer_add(PgqBlockWriter *writer, const char *ids,
								 int n);
extern void pgq_block_writer_finish(PgqBlockWriter *writer);
extern void pgq_mark_ready(int64 group_id, int64 total_ids,
						   int64 total_blocks);
extern void pgq_invalidate_block_plans(void);
extern void pgq_lock_group(int64 group_id, bool exclusive);
extern void pgq_unlock_group(int64 group_id, bool exclusive);
extern void pgq_group_ref_from_tuple(HeapTuple tuple, TupleDesc tupdesc,
									 int col, PgqGroupRef *ref);
extern bool pgq_find_group(text *name, PgqGroup *group);
extern void pgq_lookup_group(text *name, PgqGroup *group);
extern void pgq_lookup_group_cached(text *name, PgqGroup *group);
extern void pgq_invalidate_groups(void);
extern int	pgq_execute_fresh(const char *sql, int nargs, Oid *argtypes,
							  Datum *values);
extern bool pgq_lookup_block(int64 block_id, PgqGroup *group);
extern bool pgq_lookup_item(int64 item_id, PgqGroup *group);
extern bool pgq_find_group_id(int64 group_id, PgqGroup *group);

#endif							/* PGQ_GROUP_H */
