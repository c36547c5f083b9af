/*-------------------------------------------------------------------------
 *
 * pgq.h
 *	  What every module of pgq shares: groups, claim modes, limits, and the
 *	  settings and checks of pgq.c.
 *
 * Each module declares what it offers the others in a header of its own
 * (blockscan.h, claim.h, ...); a file includes pgq.h and the headers of
 * the modules it uses.
 *
 * IDENTIFICATION
 *	  src/pgq.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_H
#define PGQ_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"

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

/*
 * Internal SQL names every relation, function and operator with its schema,
 * so that a caller's search_path cannot redirect it.
 */
#define OP(op)	"OPERATOR(pg_catalog." op ")"

/*
 * PGQ_INJECTION_POINT(name): a place where the isolation specs of
 * ISOLATION_INJECTION (Makefile) pause a claim, with the injection_points
 * test module.  Compiled only into servers built with
 * --enable-injection-points (17 and later), whose macro takes an argument
 * from 18 on; nothing at all elsewhere.
 */
#ifdef USE_INJECTION_POINTS
#include "utils/injection_point.h"
#if PG_VERSION_NUM >= 180000
#define PGQ_INJECTION_POINT(name) INJECTION_POINT(name, NULL)
#else
#define PGQ_INJECTION_POINT(name) INJECTION_POINT(name)
#endif
#else
#define PGQ_INJECTION_POINT(name) ((void) 0)
#endif

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
/* An array argument: its elements, or n = -1 if it is NULL. */
typedef struct PgqArrayArg
{
	Datum	   *values;
	bool	   *nulls;
	int			n;
} PgqArrayArg;

extern void pgq_get_array_arg(FunctionCallInfo fcinfo, int argno,
							  const char *argname, Oid elemtype,
							  PgqArrayArg *out);
extern int	pgq_compare_int64(const void *a, const void *b);
extern Datum pgq_sorted_ids(int64 *ids, int n);

#endif							/* PGQ_H */
