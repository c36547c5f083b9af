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

#include "fmgr.h"
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

/* A block claimed by the current transaction, as pgq.claim() returns it. */
typedef struct ClaimedBlock
{
	int64		block_id;
	Datum		ids;			/* bigint[] */
} ClaimedBlock;

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#if PG_VERSION_NUM >= 150001
#include "funcapi.h"
#elif PG_VERSION_NUM >= 150000
#include "funcapi.h"
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#else
#define InitMaterializedSRF(fcinfo, flags) pgq_init_materialized_srf(fcinfo)
extern void pgq_init_materialized_srf(FunctionCallInfo fcinfo);
#endif

/* pgq.c */
extern int	pgq_max_groups;
extern bool pgq_shmem_ready(void);
extern void pgq_check_name(text *name);
extern PgqMode pgq_parse_mode(const char *mode);
extern const char *pgq_mode_name(PgqMode mode);

/* shmem.c: per-group state shared by all backends */
extern Size pgq_shmem_size(void);
extern void pgq_shmem_init(void);
extern bool pgq_hint_get(const PgqGroupRef *group, int64 *hint, uint64 *gen);
extern void pgq_hint_advance(const PgqGroupRef *group, uint64 gen, int64 next);
extern void pgq_hint_lower(const PgqGroupRef *group, int64 block_id);
extern void pgq_claimed_add(const PgqGroupRef *group, int64 delta);
extern bool pgq_claimed_get(const PgqGroupRef *group, int64 *claimed);
extern void pgq_group_forget(Oid dbid, int64 group_id);

/* xact.c: claims held by the current transaction */
extern void pgq_xact_init(void);
extern void pgq_xact_remember(const PgqGroupRef *group,
							  const ClaimedBlock *blocks, int n);
extern void pgq_xact_remember_drop(const PgqGroupRef *group);
extern int64 pgq_xact_own_claims(int64 group_id);

#endif							/* PGQ_H */
