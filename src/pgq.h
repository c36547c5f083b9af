/*-------------------------------------------------------------------------
 *
 * pgq.h
 *	  Declarations shared by the pgq extension's source files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_H
#define PGQ_H

#include "postgres.h"

#include "access/genam.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "storage/lockdefs.h"
#include "datatype/timestamp.h"
#include "utils/timestamp.h"

/* Limits on user input. */
#define PGQ_MAX_GROUP_NAME_LEN	128
#define PGQ_MAX_BLOCK_SIZE		1000000
#define PGQ_MAX_CLAIM_BLOCKS	10000

/* Claim modes, as stored in pgq.groups.mode. */
typedef enum PgqMode
{
	PGQ_MODE_TRANSACTION,
	PGQ_MODE_LEASE,
	PGQ_MODE_ADVISORY
} PgqMode;

/*
 * A group as claims see it: its id plus the creation time, which tells apart
 * two groups that reuse an id after DROP EXTENSION / CREATE EXTENSION.
 */
typedef struct PgqGroupRef
{
	Oid			dbid;
	int64		group_id;
	TimestampTz created_at;
} PgqGroupRef;

/* A group's state, as stored in pgq.groups.state. */
typedef enum PgqGroupState
{
	PGQ_GROUP_MATERIALIZING,
	PGQ_GROUP_READY,
	PGQ_GROUP_FAILED
} PgqGroupState;

/* What a group holds: a query's ids in blocks, or enqueued items. */
typedef enum PgqGroupKind
{
	PGQ_KIND_QUERY,
	PGQ_KIND_QUEUE
} PgqGroupKind;

/* A group's definition, as claims and block operations need it. */
typedef struct PgqGroup
{
	PgqGroupRef ref;
	PgqGroupKind kind;
	PgqGroupState state;
	bool		paused;			/* pgq.pause(): claims get nothing */
	char		name[PGQ_MAX_GROUP_NAME_LEN * 4 + 1];	/* in the server encoding */
	PgqMode		mode;
	Interval	lease;
	int32		max_attempts;
	Interval	backoff;		/* queues: the first retry's delay */
	Interval	max_backoff;	/* queues: the longest retry delay */
	Oid			owner;			/* the role that created it */
	bool		may_consume;	/* what the caller may do with it */
	bool		may_produce;
	bool		may_admin;
} PgqGroup;

/* What a caller may do with a group (see privilege.c). */
typedef enum PgqPrivilege
{
	PGQ_PRIV_CONSUME,
	PGQ_PRIV_PRODUCE,
	PGQ_PRIV_ADMIN,
	PGQ_PRIV_USE				/* consume or produce */
} PgqPrivilege;

/* The caller and the user to go back to, while pgq acts as its tables' owner. */
typedef struct PgqScope
{
	Oid			save_userid;
	int			save_sec_context;
	Oid			save_caller;
	Oid			owner;
} PgqScope;

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

/* A block whose lease ran out or whose retry came due (blockscan.c) */
typedef struct PgqDueBlock
{
	int64		block_id;
	ItemPointerData tid;		/* the row version the walk saw */
	TimestampTz due;
} PgqDueBlock;

/* field4 of the advisory lock tags pgq takes on groups (group.c) */
#define PGQ_LOCK_GROUP	20564

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

/* A row for pgq.items (iteminsert.c). */
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
} PgqNewItem;

typedef struct PgqItemInserter PgqItemInserter;

/* An index scan of pgq.blocks without SQL (blockscan.c). */
typedef struct PgqBlockScan
{
	Relation	heap;
	Relation	index;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;		/* the current row */
} PgqBlockScan;

/*
 * Internal SQL names every relation, function and operator with its schema,
 * so that a caller's search_path cannot redirect it.
 */
#define OP(op)	"OPERATOR(pg_catalog." op ")"

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#include "funcapi.h"
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#endif

/* Receives a group's ids from pgq_run_group_query(), a fetch at a time. */
typedef void (*PgqIdSink) (const int64 *ids, int n, void *arg);

/* Cuts a stream of ids into blocks and inserts them (group.c). */
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

/* pgq.c */
extern int	pgq_max_groups;
extern int	pgq_materialize_timeout;
extern int	pgq_max_materialize_timeout;
extern int	pgq_key_lookups;
extern void pgq_check_name(text *name);
extern void pgq_check_arg_not_null(FunctionCallInfo fcinfo, int argno,
								   const char *argname);
extern int32 pgq_required_attempt(FunctionCallInfo fcinfo, int argno,
								  bool item);
extern void pgq_check_not_in_recovery(const char *what);
extern void pgq_check_lease(const Interval *lease);
extern void pgq_check_retry_after(const Interval *retry_after);
extern void pgq_check_timeout(const Interval *timeout);
extern void pgq_check_duration(const char *argname, const Interval *span);
extern int64 pgq_duration_usecs(const Interval *span);
extern PgqMode pgq_parse_mode(const char *mode);
extern const char *pgq_mode_name(PgqMode mode);
extern PgqGroupState pgq_parse_state(const char *state);
extern SPIPlanPtr pgq_keep_plan(const char *sql, int nargs, Oid *argtypes);
extern TimestampTz pgq_time_after(TimestampTz start, const Interval *span);

/* privilege.c */
extern Oid	pgq_caller;
extern void pgq_enter(PgqScope *scope);
extern void pgq_leave(PgqScope *scope);
extern void pgq_become_owner(const PgqScope *scope);
extern void pgq_become_caller(const PgqScope *scope);
extern void pgq_set_privileges(PgqGroup *group, Oid owner, Datum consumers,
							   Datum producers);
extern bool pgq_may_see_group(const PgqGroup *group);
extern void pgq_check_privilege(const PgqGroup *group, PgqPrivilege what);
extern void pgq_check_join(const PgqGroup *existing, PgqGroupKind kind,
						   Oid owner);
extern void pgq_report_join(const PgqGroup *existing);
extern void pgq_check_create_owner(text *name, PgqGroupKind kind, Oid owner);

/* group.c */
extern SPIPlanPtr pgq_prepare_group_query(const char *query);
extern int64 pgq_run_group_query(SPIPlanPtr query_plan, PgqIdSink sink,
								 void *arg);
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

/* blockscan.c */
extern Relation pgq_open_rel(const char *name, LOCKMODE lockmode);
extern Oid	pgq_rel_oid(const char *name);
extern ResultRelInfo *pgq_result_rel(EState *estate, Relation rel);
extern void pgq_block_scan_open(PgqBlockScan *scan, const char *index_name,
								LOCKMODE lockmode);
extern void pgq_block_scan_keys(PgqBlockScan *scan, ScanKey keys, int nkeys);
extern bool pgq_block_scan_next(PgqBlockScan *scan);
extern bool pgq_block_refetch(PgqBlockScan *scan, ItemPointer tid);
extern void pgq_block_scan_close(PgqBlockScan *scan);
extern void pgq_block_scan_claim_pass(PgqBlockScan *scan, int64 group_id,
									  int64 from, int limit, int pass);
extern void pgq_block_key(ScanKey keys, int64 group_id, int64 block_id);
extern Datum pgq_block_attr(PgqBlockScan *scan, AttrNumber attnum,
							bool *isnull);
extern int	pgq_block_due(const PgqGroupRef *group, TimestampTz now, int max,
						  PgqDueBlock **due);
extern bool pgq_block_any_deadline(const PgqGroupRef *group);
extern void pgq_block_due_abort(void);
extern uint64 pgq_block_inflight_epoch(void);
extern bool pgq_block_group_id(int64 block_id, int64 *group_id);
extern bool pgq_block_delete(int64 group_id, int64 block_id,
							 const int32 *attempt);

/* iteminsert.c */
extern PgqItemInserter *pgq_item_inserter_begin(void);
extern int64 pgq_item_insert(PgqItemInserter *ins, const PgqNewItem *item);
extern void pgq_item_inserter_end(PgqItemInserter *ins);

/* claim.c */
extern void pgq_claim_changed_more(void);
extern TimestampTz pgq_wait_deadline(Interval *wait);
extern int	pgq_compare_claimed(const void *a, const void *b);

/* block.c */
extern bool pgq_complete_held(int64 block_id, NullableDatum attempt,
							  NullableDatum worker_id);

/* lease.c */
extern int	pgq_lease_claim(const PgqGroup *group, int max_blocks,
							ClaimedBlock *blocks, MemoryContext cxt);
extern bool pgq_lease_complete(const PgqGroup *group, int64 block_id,
							   int32 attempt);
extern bool pgq_lease_release(const PgqGroup *group, int64 block_id,
							  int32 attempt);
extern bool pgq_lease_fail(const PgqGroup *group, int64 block_id,
						   int32 attempt, text *error, Interval *retry_after);
extern bool pgq_lease_extend(const PgqGroup *group, int64 block_id,
							 int32 attempt, Interval *lease);
extern void pgq_lease_durable(void);
extern void pgq_lease_claim_async(void);
extern void pgq_lease_claim_done(void);
extern void pgq_lease_items_claiming(bool on);
extern void pgq_lease_promoted(TransactionId xmin);
extern void pgq_lease_xact_end(void);
extern void pgq_lease_init(void);
extern Size pgq_lease_shmem_size(void);
extern void pgq_lease_shmem_init(void);
extern bool pgq_blocks_fenced(void);
extern int32 pgq_lease_epoch(void);

/* wait.c */
extern void pgq_wait_init(void);
extern Size pgq_wait_shmem_size(void);
extern void pgq_wait_shmem_init(void);
extern void pgq_wake_group(const PgqGroupRef *group);
extern uint64 pgq_wait_generation(const PgqGroupRef *group);
extern bool pgq_wait_for_wakeup(const PgqGroupRef *group, TimestampTz deadline,
								uint64 seen);
extern void pgq_wait_done(void);
extern void pgq_notify_group(const char *group_name);
extern void pgq_announce_claimable(const PgqGroupRef *group,
								   const char *group_name);

/* advisory.c */
extern void pgq_advisory_init(void);
extern void pgq_advisory_check_worker_held(int64 worker_id);
extern int	pgq_advisory_claim(const PgqGroup *group, int max_blocks,
							   ClaimedBlock *blocks, MemoryContext cxt);
extern bool pgq_advisory_complete(const PgqGroup *group, int64 block_id);
extern bool pgq_advisory_release(const PgqGroup *group, int64 block_id);
extern bool pgq_advisory_fail(const PgqGroup *group, int64 block_id,
							  text *error, Interval *retry_after);
extern void pgq_advisory_unlock(int64 block_id);
extern void pgq_advisory_undo_claim(int64 block_id);
extern void pgq_advisory_forget_block(int64 block_id);
extern void pgq_forget_dead_workers(void);
extern void pgq_advisory_forget_group(const PgqGroupRef *group);
extern int64 pgq_advisory_held_in_group(const PgqGroupRef *group);

/* queue.c */
extern int	pgq_queue_claim(const PgqGroup *group, int max_items,
							ClaimedBlock *items, MemoryContext cxt);
extern bool pgq_queue_complete(const PgqGroup *group, int64 item_id,
							   FunctionCallInfo fcinfo);
extern bool pgq_queue_release(const PgqGroup *group, int64 item_id,
							  FunctionCallInfo fcinfo);
extern bool pgq_queue_fail(const PgqGroup *group, int64 item_id,
						   FunctionCallInfo fcinfo, text *error,
						   Interval *retry_after);
extern bool pgq_queue_extend(const PgqGroup *group, int64 item_id,
							 int32 attempt, Interval *lease);

/* materialize.c */
extern void pgq_materialize_define_settings(void);
extern void pgq_start_materialization(int64 group_id);
extern bool pgq_materializer_alive(int64 group_id);

/* worker.c */
extern void pgq_worker_init(void);
extern bool pgq_maintenance_on(void);

/* shmem.c: per-group state shared by all backends */
extern bool pgq_shmem_ready(void);
extern Size pgq_shmem_size(void);
extern void pgq_shmem_init(void);
extern bool pgq_hint_get(const PgqGroupRef *group, int64 *hint, uint64 *gen);
extern void pgq_hint_advance(const PgqGroupRef *group, uint64 gen, int64 next);
extern void pgq_hint_lower(const PgqGroupRef *group, int64 block_id);
extern bool pgq_due_none(const PgqGroupRef *group, TimestampTz now,
						 uint64 *gen);
extern void pgq_due_found(const PgqGroupRef *group, uint64 gen,
						  TimestampTz now, TimestampTz earliest);
extern TimestampTz pgq_due_recorded(const PgqGroupRef *group);
extern void pgq_due_look_abandoned(const PgqGroupRef *group,
									TimestampTz now);
extern void pgq_due_lower(const PgqGroupRef *group, TimestampTz until);
extern void pgq_due_forget(Oid dbid, int64 group_id);
extern bool pgq_group_has_entry(const PgqGroupRef *group);
extern bool pgq_inflight_bound(const PgqGroupRef *group, uint64 epoch,
							   int64 *bound, uint64 *gen);
extern void pgq_inflight_none(const PgqGroupRef *group, uint64 epoch);
extern void pgq_inflight_found(const PgqGroupRef *group, uint64 gen,
							   int64 highest, uint64 epoch);
extern void pgq_inflight_raise(Oid dbid, int64 group_id, int64 block_id);
extern int64 pgq_claimed_add(const PgqGroupRef *group, int64 delta);
extern bool pgq_claimed_get(const PgqGroupRef *group, int64 *claimed);
extern void pgq_group_forget(Oid dbid, int64 group_id);
extern bool pgq_no_claims_by_others(const PgqGroupRef *group, int64 own);
extern bool pgq_full_scan_due(const PgqGroupRef *group, int64 own);
struct Latch;
extern void pgq_launcher_latch_set(struct Latch *latch);
extern bool pgq_launcher_wake(void);
extern int	pgq_max_groups_per_role;

/* Which limit on advisory locks a lock would pass (shmem.c). */
typedef enum PgqLockLimit
{
	PGQ_LOCKS_OK,
	PGQ_LOCKS_CLUSTER,			/* pgq.max_locks */
	PGQ_LOCKS_ROLE				/* pgq.max_locks_per_role */
} PgqLockLimit;

extern PgqLockLimit pgq_advisory_locks_take(int limit, Oid role,
											int role_limit);
extern void pgq_advisory_locks_give(Oid role);
extern PgqLockLimit pgq_materialization_take(int limit, Oid role,
											 int role_limit);
extern void pgq_materialization_give(Oid role);

/* quota.c */
extern void pgq_quota_init(void);
extern void pgq_check_item_size(const PgqNewItem *item);
extern void pgq_check_queue_room(const PgqGroup *group, int n);

/* xact.c: claims held by the current transaction */
extern void pgq_xact_init(void);
extern void pgq_xact_reserve(int n);
extern void pgq_xact_remember(const PgqGroupRef *group,
							  const ClaimedBlock *blocks, int n);
extern void pgq_xact_remember_lease(const PgqGroupRef *group,
									const ClaimedBlock *blocks, int n,
									TimestampTz until);
extern bool pgq_xact_changed_deadlines(int64 group_id);
extern int64 pgq_xact_inflight_highest(int64 group_id);
extern void pgq_xact_remember_drop(const PgqGroupRef *group);
extern void pgq_xact_unlock_at_commit(const PgqGroupRef *group, int64 block_id);
extern bool pgq_xact_unlocking(int64 block_id);
extern bool pgq_xact_claimed(int64 block_id);
extern void pgq_xact_wake_at_commit(const PgqGroupRef *group);
extern void pgq_xact_remember_advisory(const PgqGroupRef *group,
									   int64 block_id);
extern void pgq_xact_remember_retry(const PgqGroupRef *group, int64 block_id);
extern int64 pgq_xact_own_claims(int64 group_id);
extern int64 pgq_xact_own_in_flight(int64 group_id);

#endif							/* PGQ_H */
