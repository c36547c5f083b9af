/*-------------------------------------------------------------------------
 *
 * claim_list.c
 *	  One claim over a list of groups: pgq.claim(group_names text[], ...).
 *
 * A worker that serves several queues (one per tenant, one per run) claims
 * from all of them in one call, and waits on all of them at once.  Each
 * group of the list is claimed from exactly as the one-name form claims
 * from it (claim.c's steps), so every mode keeps its rules; what this file
 * adds is the order and the shares, and the look that skips empty queues.
 *
 * Fairness: a claim visits the groups in the list's order, starting after
 * the group that gave the previous claim of this session over a list its
 * last row (at a random place when that group is not in the list), and asks
 * each group with work for its share of what is still to claim: that
 * divided by the groups with work not yet asked, rounded up.  Groups that
 * gave their whole share are then asked for the rest, in the same order.
 * So a claim of max_blocks => 1 repeated by one worker takes from the groups
 * that have work in turn, and a claim of more takes from each of them.
 *
 * Empty queues cost an index probe each, not a claim: the probe looks for
 * a visible pending item, from where the queue's claims start (its hint),
 * or one due (a retry, a delayed item, a lease that ran out), which is what
 * a claim of the queue takes.  Query groups are
 * always asked: a transaction-mode claim of blocks costs about a probe.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "pgq.h"
#include "advisory.h"
#include "blockscan.h"
#include "claim.h"
#include "group.h"
#include "lease.h"
#include "privilege.h"
#include "queue.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#endif

PG_FUNCTION_INFO_V1(pgq_claim_list);

/* A group of the list, as the claim sees it. */
typedef struct ListedGroup
{
	PgqGroup	group;
	bool		gone;			/* failed or dropped: yields nothing more */
	bool		has_work;		/* this look's probe found something */
	int			share;			/* what this look asked of it first */
	int			gave;			/* and what it gave */
} ListedGroup;

/*
 * The group that gave the last row of this session's last claim over a
 * list (in the first round): the next claim starts after it.  0: none.
 */
static int64 last_served = 0;

/*
 * Read the list of names (argument 0): not NULL, not empty, no NULL
 * element, no name twice, each a valid name.  Returns how many.
 */
static int
read_names(FunctionCallInfo fcinfo, text ***names)
{
	PgqArrayArg arg;
	char	  **sorted;

	pgq_check_arg_not_null(fcinfo, 0, "group_names");
	pgq_get_array_arg(fcinfo, 0, "group_names", TEXTOID, &arg);
	if (arg.n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("group_names must not be empty"),
				 errhint("Name at least one group or queue.")));
	*names = palloc(arg.n * sizeof(text *));
	sorted = palloc(arg.n * sizeof(char *));
	for (int i = 0; i < arg.n; i++)
	{
		if (arg.nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("group_names must not contain NULL")));
		(*names)[i] = DatumGetTextPP(arg.values[i]);
		pgq_check_name((*names)[i]);
		sorted[i] = text_to_cstring((*names)[i]);
	}
	qsort(sorted, arg.n, sizeof(char *), pg_qsort_strcmp);
	for (int i = 1; i < arg.n; i++)
		if (strcmp(sorted[i - 1], sorted[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("group_names must not name a group twice"),
					 errdetail("\"%s\" is in the list more than once.",
							   sorted[i])));
	return arg.n;
}

/*
 * Index scans of pgq.items for probe(): one per index, restarted per group.
 * The scan of items_pending_idx is keyed as a claim's is
 * (pgq_item_scan_pending_pass()), so that it starts where a claim would.
 */
typedef struct ItemProbe
{
	PgqBlockScan pending;
	Relation	due;
	IndexScanDesc due_scan;
} ItemProbe;

/* Open the scans, with the snapshot a statement would take. */
static void
probe_open(ItemProbe *p)
{
	pgq_item_scan_open(&p->pending, "items_pending_idx", AccessShareLock);
	p->due = pgq_open_rel("items_due_idx", AccessShareLock);
#if PG_VERSION_NUM >= 180000
	p->due_scan = index_beginscan(p->pending.heap, p->due,
								  p->pending.snapshot, NULL, 2, 0);
#else
	p->due_scan = index_beginscan(p->pending.heap, p->due,
								  p->pending.snapshot, 2, 0);
#endif
}

/* End what probe_open() began; the locks stay. */
static void
probe_close(ItemProbe *p)
{
	index_endscan(p->due_scan);
	index_close(p->due, NoLock);
	pgq_block_scan_close(&p->pending);
}

/* Is an item pending from place "from" in claim order on (0: the start)? */
static bool
probe_pending_from(ItemProbe *p, int64 group_id, int64 from)
{
	for (int pass = 0;
		 pgq_item_scan_pending_pass(&p->pending, group_id, from, pass);
		 pass++)
		if (pgq_block_scan_next(&p->pending))
			return true;
	return false;
}

/*
 * Is an item of the queue pending?  A queue is probed from where its claims
 * start (as pgq_claim_hint() says: its hint, or lower, where this
 * transaction made an item pending that the hint moves to only at commit;
 * from the start if it has no entry in shared memory, which the probe does
 * not make): the head of items_pending_idx holds the dead entries of every
 * item finished since the last vacuum, and all those kept by an old
 * snapshot.  What lies below (H1 in shmem.c) is looked for at the rate of
 * claims' full scans (pgq_full_scan_due()); an item found there lowers the
 * hint to it, so that the claim that follows finds it too.
 */
static bool
probe_pending(ItemProbe *p, const PgqGroup *group)
{
	int64		hint = pgq_xact_own_hint(&group->ref,
										 pgq_hint_peek(&group->ref));
	TupleTableSlot *slot;

	if (probe_pending_from(p, group->ref.group_id, hint))
		return true;
	if (hint == 0 || !pgq_full_scan_due(&group->ref, -1) ||
		!probe_pending_from(p, group->ref.group_id, 0))
		return false;
	slot = p->pending.slot;
	slot_getallattrs(slot);
	pgq_hint_lower(&group->ref,
				   pgq_item_position(DatumGetInt32(slot->tts_values[Anum_items_priority - 1]),
									 DatumGetInt64(slot->tts_values[Anum_items_item_id - 1])));
	return true;
}

/*
 * Has the queue an item that a claim would take: one pending, or one due
 * (a retry or a delayed item whose time came, a lease that ran out)?  Only
 * rows visible to the snapshot count, as for a claim's own scan.
 */
static bool
probe_queue(ItemProbe *p, const PgqGroup *group, TimestampTz now)
{
	ScanKeyData keys[2];

	if (probe_pending(p, group))
		return true;
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group->ref.group_id));
	ScanKeyInit(&keys[1], 2, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
				TimestampTzGetDatum(now));
	index_rescan(p->due_scan, keys, 2, NULL, 0);
	return index_getnext_slot(p->due_scan, ForwardScanDirection,
							  p->pending.slot);
}

/*
 * Set has_work for each group of the list that a claim may take from: for
 * queues, whether an item is pending or due (what pgq_queue_claim() takes);
 * query groups always have it.  Paused and vanished groups have none.  An
 * item that another claim holds until it commits still counts: the claim
 * will skip it, as the one-name form does.  The queue that served the
 * previous claim is not probed but asked: it most likely has more, and its
 * probe would walk the same index entries as its claim (the dead ones of
 * the items claimed since the last vacuum among them).  Should it have
 * none, the second round of look() gives its share to the others.
 */
static void
probe(ListedGroup *groups, int n)
{
	ItemProbe	p;
	bool		opened = false;
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < n; i++)
	{
		ListedGroup *g = &groups[i];

		CHECK_FOR_INTERRUPTS();
		g->has_work = !g->gone && !g->group.paused;
		if (!g->has_work || g->group.kind != PGQ_KIND_QUEUE ||
			g->group.ref.group_id == last_served)
			continue;
		if (!opened)
		{
			probe_open(&p);
			opened = true;
		}
		g->has_work = probe_queue(&p, &g->group, now);
	}
	if (opened)
		probe_close(&p);
}

/*
 * Ask one group for up to "limit" rows, into blocks[] and their group's
 * index into from[]; as the one-name form would ("apart": in a
 * subtransaction of their own when waiting).  *changed is set if the
 * attempt changed rows besides those it claimed (see
 * pgq_claim_attempt_changed()).
 */
static int
ask(ListedGroup *groups, int i, int limit, bool waiting, PgqClaimed *blocks,
	int *from, MemoryContext resultcxt, bool *changed)
{
	PgqGroup   *group = &groups[i].group;
	int			got;

	CHECK_FOR_INTERRUPTS();
	if (waiting && pgq_claim_locks_rows(group))
		got = pgq_claim_attempt_apart(group, limit, blocks, resultcxt);
	else
		got = pgq_claim_attempt(group, limit, blocks, resultcxt);
	if (pgq_claim_attempt_changed())
		*changed = true;
	for (int j = 0; j < got; j++)
		from[j] = i;
	return got;
}

/*
 * One look over the list: claim up to max_blocks rows, fairly (see the top
 * of the file).  Returns how many; blocks[] and from[] get them, group by
 * group in the order asked.  *changed is set if an attempt changed rows
 * besides those it claimed: a waiting claim then ends, as the one-name
 * form does.
 */
static int
look(ListedGroup *groups, int n, int max_blocks, bool waiting,
	 PgqClaimed *blocks, int *from, MemoryContext resultcxt, bool *changed)
{
	int			start = -1;
	int			with_work = 0;
	int			got = 0;
	int			last = -1;

	probe(groups, n);
	for (int i = 0; i < n; i++)
	{
		groups[i].share = groups[i].gave = 0;
		if (groups[i].has_work)
			with_work++;
		if (last_served != 0 && groups[i].group.ref.group_id == last_served)
			start = (i + 1) % n;
	}
	if (with_work == 0)
		return 0;
	if (start < 0)
		start = (int) pg_prng_uint64_range(&pg_global_prng_state, 0, n - 1);

	/* first round: each group with work its share of what is left */
	for (int k = 0; k < n && got < max_blocks; k++)
	{
		int			i = (start + k) % n;
		ListedGroup *g = &groups[i];

		if (!g->has_work)
			continue;
		g->share = (max_blocks - got + with_work - 1) / with_work;
		with_work--;
		g->gave = ask(groups, i, g->share, waiting, blocks + got, from + got,
					  resultcxt, changed);
		got += g->gave;
		if (g->gave > 0)
			last = i;
	}
	if (last >= 0)
		last_served = groups[last].group.ref.group_id;

	/* then the rest, from those that gave all that they were asked */
	for (int k = 0; k < n && got < max_blocks; k++)
	{
		int			i = (start + k) % n;
		ListedGroup *g = &groups[i];

		if (!g->has_work || g->share == 0 || g->gave < g->share)
			continue;
		got += ask(groups, i, max_blocks - got, waiting, blocks + got,
				   from + got, resultcxt, changed);
	}
	return got;
}

/*
 * Read the state and pause of every group of the list again, with a fresh
 * snapshot, after a wake-up: one statement for the list.  A group that is
 * gone, or failed, yields nothing more.
 */
static void
refresh(ListedGroup *groups, int n)
{
	static SPIPlanPtr plan = NULL;
	Datum	   *ids = palloc(n * sizeof(Datum));
	Datum		values[1];
	int			rc;

	if (plan == NULL)
	{
		Oid			argtypes[1] = {INT8ARRAYOID};

		plan = pgq_keep_plan("SELECT group_id, state, paused FROM pgq.groups "
							 "WHERE group_id " OP("=") " ANY ($1)",
							 1, argtypes);
	}
	for (int i = 0; i < n; i++)
		ids[i] = Int64GetDatum(groups[i].group.ref.group_id);
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	rc = SPI_execute_plan(plan, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read groups: %s", SPI_result_code_string(rc));
	for (int i = 0; i < n; i++)
	{
		ListedGroup *g = &groups[i];
		bool		found = false;

		for (uint64 r = 0; r < SPI_processed && !found; r++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[r];
			TupleDesc	tupdesc = SPI_tuptable->tupdesc;
			bool		isnull;

			if (DatumGetInt64(SPI_getbinval(tuple, tupdesc, 1, &isnull)) !=
				g->group.ref.group_id)
				continue;
			found = true;
			g->group.state = pgq_parse_state(SPI_getvalue(tuple, tupdesc, 2));
			g->group.paused = DatumGetBool(SPI_getbinval(tuple, tupdesc, 3,
														 &isnull));
		}
		if (!found || g->group.state == PGQ_GROUP_FAILED)
			g->gone = true;
	}
	SPI_freetuptable(SPI_tuptable);
}

/* Can no group of the list yield another block? */
static bool
all_exhausted(ListedGroup *groups, int n)
{
	for (int i = 0; i < n; i++)
		if (!groups[i].gone && !pgq_group_exhausted(&groups[i].group))
			return false;
	return true;
}

/*
 * The references of the groups still in the list, and their wake-up counts
 * read before their states (seen[], one per group of the list), for
 * pgq_wait_for_any().  Returns how many.
 */
static int
wait_refs(ListedGroup *groups, int n, const uint64 *seen, PgqGroupRef *refs,
		  uint64 *gens)
{
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		if (groups[i].gone)
			continue;
		refs[m] = groups[i].group.ref;
		gens[m] = seen[i];
		m++;
	}
	return m;
}

/*
 * pgq.claim(group_names, max_blocks, wait, worker_id, complete, attempt)
 *	  -> SETOF pgq.claimed_from
 *
 * pgq.claim() over several groups: the checks of the one-name form for
 * each group, in the list's order; then up to max_blocks rows from the
 * groups, fairly, each with its group's name; with wait, waiting on all of
 * them at once until one of them yields a row, none can yield another, or
 * the time is up.
 */
Datum
pgq_claim_list(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext resultcxt;
	text	  **names;
	int			n;
	int32		max_blocks;
	ListedGroup *groups;
	PgqGroupRef *refs;
	uint64	   *seen;
	uint64	   *gens;
	PgqClaimed *blocks;
	int		   *from;
	int			nblocks = 0;
	TimestampTz deadline = 0;
	bool		any_lease = false;
	bool		any_advisory = false;
	bool		any_writes = false;
	PgqScope	scope;

	n = read_names(fcinfo, &names);
	pgq_check_arg_not_null(fcinfo, 1, "max_blocks");
	pgq_claim_check_args(fcinfo, &max_blocks, &deadline);

	InitMaterializedSRF(fcinfo, 0);
	resultcxt = rsinfo->econtext->ecxt_per_query_memory;
	blocks = MemoryContextAllocZero(resultcxt, max_blocks * sizeof(PgqClaimed));
	from = palloc(max_blocks * sizeof(int));
	groups = palloc0(n * sizeof(ListedGroup));
	refs = palloc(n * sizeof(PgqGroupRef));
	seen = palloc(n * sizeof(uint64));
	gens = palloc(n * sizeof(uint64));

	pgq_enter(&scope);
	SPI_connect();
	for (int i = 0; i < n; i++)
	{
		PgqGroup   *group = &groups[i].group;

		pgq_lookup_group_cached(names[i], group);
		pgq_check_privilege(group, PGQ_PRIV_CONSUME);
		pgq_check_claim_context(group->mode);
		if (group->mode == PGQ_MODE_ADVISORY)
		{
			if (PG_ARGISNULL(3))
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("worker_id is required to claim from advisory-mode group \"%s\"",
								group->name),
						 errhint("Register with pgq.register_worker() and pass its id as worker_id.")));
			any_advisory = true;
		}
		else
			any_writes = true;
		if (group->mode == PGQ_MODE_LEASE)
			any_lease = true;
	}
	if (any_advisory)
		pgq_advisory_check_worker_held(PG_GETARG_INT64(3));

	/*
	 * The one-name form fails in a read-only transaction when it writes,
	 * whether or not it finds anything; a list does too, also when the
	 * queues that would write are empty and are not asked.
	 */
	if (any_writes && XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot claim or consume blocks in a read-only transaction")));
	if (!PG_ARGISNULL(4))
	{
		SPI_finish();
		pgq_leave(&scope);
		pgq_claim_complete_first(fcinfo);
		pgq_enter(&scope);
		SPI_connect();
	}
	for (int i = 0; i < n; i++)
	{
		if (groups[i].group.state != PGQ_GROUP_FAILED)
			continue;
		/* its blocks are not all of the query's: hand out none of them */
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("group \"%s\" failed to materialize and yields no blocks",
						groups[i].group.name),
				 errhint("pgq.group_stats shows why.  Drop the group and create it again.")));
		groups[i].gone = true;
	}

	/*
	 * Claim; if nothing came and the caller wants to wait, sleep until one
	 * of the groups is woken and claim again, as the one-name form does.
	 */
	if (any_lease)
		pgq_lease_claim_async();	/* here, not in an attempt's subtransaction */
	for (int pass = 0;; pass++)
	{
		int			waiting_on;
		bool		changed = false;
		bool		paused = false;
		bool		done;

		/* each look after a wake-up has an SPI connection of its own */
		if (pass > 0)
			SPI_connect();

		/*
		 * The wake-up counts before the groups' states, as the one-name form
		 * reads them: a resume that commits after the states were read wakes
		 * the claim.
		 */
		for (int i = 0; i < n; i++)
		{
			seen[i] = pgq_wait_generation(&groups[i].group.ref);
			paused |= groups[i].group.paused;
		}
		if (pass > 0 || paused)
			refresh(groups, n);
		PGQ_INJECTION_POINT("pgq-claim-state-read");
		waiting_on = wait_refs(groups, n, seen, refs, gens);
		if (waiting_on > 0)
			nblocks = look(groups, n, max_blocks, deadline != 0, blocks, from,
						   resultcxt, &changed);
		done = nblocks > 0 || deadline == 0 || waiting_on == 0 || changed ||
			all_exhausted(groups, n);
		if (pass > 0)
			SPI_finish();
		if (done || !pgq_wait_for_any(refs, waiting_on, deadline, gens))
			break;
	}
	if (any_lease)
		pgq_lease_claim_done(); /* also when no attempt claimed: a pause */
	if (deadline != 0)
		pgq_wait_done();
	SPI_finish();
	pgq_leave(&scope);

	for (int i = 0; i < nblocks; i++)
		pgq_claimed_put(rsinfo, &blocks[i], groups[from[i]].group.name);
	return (Datum) 0;
}
