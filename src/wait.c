/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Claims that wait inside the server, and the wake-ups that end the wait.
 *
 * A waiting claim sleeps on one of a fixed array of condition variables in
 * shared memory, chosen by hashing (database, group).  Whatever may have made
 * a block of the group claimable, or the group unable to yield another one,
 * broadcasts on it: the end of a transaction that completed, released,
 * failed, retried, made work pending or dropped, the abort of one that
 * claimed or was looking for due blocks or items (D4 in shmem.c), and the
 * commit of one that claimed when C3 says so (from the transaction
 * callbacks, once the change is visible); and at once, an advisory
 * release, the end of a scan that owes a wake (C3), and a look for due
 * blocks or items that leaves some past its limit (D4).  The waiter then
 * claims again with a fresh snapshot.  For what no transaction announces,
 * a lease running out, a retry coming due, the maintenance worker wakes
 * the group, and a recheck interval is the safety net.  Broadcasting
 * allocates nothing and cannot fail, as transaction callbacks require.
 *
 * A claim over several groups (pgq.claim(text[])) cannot sleep on several
 * condition variables at once: it sleeps on one of a second, smaller array,
 * chosen by its process number, after counting itself, for each slot of its
 * groups, as a waiter of that slot on that variable.  A broadcast on a slot
 * broadcasts on the variables that have waiters of the slot too.  Those
 * waiters look at their slots' wake-up counts and sleep again if none moved
 * (another's slot woke them).
 *
 * Without shared memory (pgq not preloaded) a waiting claim polls.
 *
 * NOTIFY is for clients that LISTEN instead.  It takes a global lock at
 * commit, so it is off unless pgq.notify is on.  PostgreSQL has no
 * privileges on channels: any session may LISTEN on any channel, and NOTIFY
 * on it.  So each group has a channel of its own, a random name kept in
 * pgq.groups.channel, which pgq.channel() tells only the roles that may use
 * the group: the others can neither hear of the group's work nor send fake
 * wake-ups to its listeners.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#include "pgq.h"
#include "events.h"
#include "group.h"
#include "privilege.h"
#include "wait.h"
#include "xact.h"

/*
 * libpq/libpq.h declares this, but it includes the GSSAPI headers, which a
 * server development install need not have.
 */
extern bool pq_check_connection(void);

PG_FUNCTION_INFO_V1(pgq_channel);

#define PGQ_WAKE_SLOTS		64

/* Poll interval of waiting claims when pgq is not preloaded, in ms. */
#define PGQ_POLL_MS			100

/* How often a sleeping waiter checks that its client is still there, in ms. */
#define PGQ_CLIENT_CHECK_MS	1000

static ConditionVariable *wake_slots = NULL;

/*
 * A count of the wake-ups of each slot, taken before each broadcast: a
 * waiter that could not stay prepared to sleep while it rechecked (a
 * subtransaction's abort cancels the preparation) compares it to what it
 * read before the recheck, so that no wake-up in between is lost.
 */
static pg_atomic_uint64 *wake_counts = NULL;

/*
 * The condition variables of claims over several groups, and for each slot
 * and each of them, how many such claims wait on the slot there.
 */
#define PGQ_MULTI_WAKE_CVS	16

typedef struct PgqMultiWake
{
	ConditionVariable cvs[PGQ_MULTI_WAKE_CVS];
	pg_atomic_uint32 waiters[PGQ_WAKE_SLOTS][PGQ_MULTI_WAKE_CVS];
} PgqMultiWake;

static PgqMultiWake *multi_wake = NULL;

/* This backend's variable among them, by its process number */
#if PG_VERSION_NUM >= 170000
#define MY_MULTI_CV		(MyProcNumber % PGQ_MULTI_WAKE_CVS)
#else
#define MY_MULTI_CV		(MyProc->pgprocno % PGQ_MULTI_WAKE_CVS)
#endif

/* The slots this backend counts itself a waiter of, and on which variable. */
static uint64 my_multi_slots = 0;
static int	my_multi_cv = 0;

static int	pgq_wait_recheck_ms = 1000;
static bool pgq_notify = false;

/* Define the settings; called from _PG_init(). */
void
pgq_wait_init(void)
{
	DefineCustomIntVariable("pgq.wait_recheck_interval",
							"How often a waiting claim looks again without being woken.",
							"Wake-ups come at the commit that made work claimable; this catches leases that run out and retries that come due.",
							&pgq_wait_recheck_ms,
							1000, 1, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("pgq.notify",
							 "Send a NOTIFY on the group's channel (pgq.channel()) when a transaction makes blocks of a group claimable.",
							 "NOTIFY takes a cluster-wide lock at commit.",
							 &pgq_notify,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
}

/* Size of the condition variables, for the shmem request. */
Size
pgq_wait_shmem_size(void)
{
	return add_size(add_size(mul_size(PGQ_WAKE_SLOTS, sizeof(ConditionVariable)),
							 mul_size(PGQ_WAKE_SLOTS, sizeof(pg_atomic_uint64))),
					sizeof(PgqMultiWake));
}

/* Attach to the condition variables; called with AddinShmemInitLock held. */
void
pgq_wait_shmem_init(void)
{
	bool		found;

	wake_slots = ShmemInitStruct("pgq wake slots", pgq_wait_shmem_size(),
								 &found);
	wake_counts = (pg_atomic_uint64 *) (wake_slots + PGQ_WAKE_SLOTS);
	multi_wake = (PgqMultiWake *) (wake_counts + PGQ_WAKE_SLOTS);
	if (!found)
	{
		for (int i = 0; i < PGQ_WAKE_SLOTS; i++)
		{
			ConditionVariableInit(&wake_slots[i]);
			pg_atomic_init_u64(&wake_counts[i], 0);
		}
		for (int j = 0; j < PGQ_MULTI_WAKE_CVS; j++)
		{
			ConditionVariableInit(&multi_wake->cvs[j]);
			for (int i = 0; i < PGQ_WAKE_SLOTS; i++)
				pg_atomic_init_u32(&multi_wake->waiters[i][j], 0);
		}
	}
}

/* The slot of the group's waiters: the index of its condition variable. */
static int
slot_for(const PgqGroupRef *group)
{
	uint32		h = hash_combine(murmurhash32(group->dbid),
								 murmurhash32((uint32) group->group_id ^
											  (uint32) (group->group_id >> 32)));

	return h % PGQ_WAKE_SLOTS;
}

/*
 * The group's wake-up count, to pass to pgq_wait_for_wakeup() after a
 * recheck that starts now.  0 without shared memory.
 */
uint64
pgq_wait_generation(const PgqGroupRef *group)
{
	if (wake_counts == NULL)
		return 0;
	return pg_atomic_read_u64(&wake_counts[slot_for(group)]);
}

/*
 * Wake the group's waiters.  Safe in transaction callbacks and at backend
 * exit: it allocates nothing and cannot fail.
 */
void
pgq_wake_group(const PgqGroupRef *group)
{
	if (wake_slots != NULL)
	{
		int			slot = slot_for(group);

		/* a full barrier: a waiter counted after it sees the new count */
		pg_atomic_fetch_add_u64(&wake_counts[slot], 1);
		ConditionVariableBroadcast(&wake_slots[slot]);
		for (int j = 0; j < PGQ_MULTI_WAKE_CVS; j++)
			if (pg_atomic_read_u32(&multi_wake->waiters[slot][j]) > 0)
				ConditionVariableBroadcast(&multi_wake->cvs[j]);
	}
}

/* End the statement if the client went away: nobody needs its claim. */
static void
check_client(void)
{
	CHECK_FOR_INTERRUPTS();
	if (MyProcPort != NULL && !pq_check_connection())
	{
		ClientConnectionLost = true;
		InterruptPending = true;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Sleep until the group's waiters are woken, the recheck interval passes, or
 * the deadline comes; in slices of at most a second, to notice a client
 * that went away.  "seen" is what pgq_wait_generation() said before the
 * caller's last check: if the group was woken since, this returns at once,
 * so that a wake-up between that check and the sleep is not lost.  Returns
 * false once the deadline has passed.  The caller ends the wait with
 * pgq_wait_done().
 */
bool
pgq_wait_for_wakeup(const PgqGroupRef *group, TimestampTz deadline,
					uint64 seen)
{
	static bool told = false;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz recheck_at;

	if (now >= deadline)
		return false;
	recheck_at = Min(deadline,
					 TimestampTzPlusMilliseconds(now, pgq_wait_recheck_ms));

	if (wake_slots == NULL)
	{
		if (!told)
		{
			ereport(LOG,
					(errmsg("pgq is not in shared_preload_libraries: waiting claims poll every %d ms",
							PGQ_POLL_MS)));
			told = true;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min((recheck_at - now + 999) / 1000, PGQ_POLL_MS),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		check_client();
		return true;
	}

	/* on the list before the count is read: a later wake-up reaches us */
	ConditionVariablePrepareToSleep(&wake_slots[slot_for(group)]);
	pg_memory_barrier();
	if (pgq_wait_generation(group) != seen)
		return true;

	for (;;)
	{
		long		slice = (long) Min((recheck_at - now + 999) / 1000,
									   (int64) PGQ_CLIENT_CHECK_MS);
		bool		timed_out;

		timed_out = ConditionVariableTimedSleep(&wake_slots[slot_for(group)],
												slice, PG_WAIT_EXTENSION);
		check_client();
		if (!timed_out)
			return true;
		now = GetCurrentTimestamp();
		if (now >= recheck_at)
			return true;
	}
}

/*
 * Stop counting this backend as a waiter of the slots of a claim over
 * several groups.  Allocates nothing and cannot fail: also called at backend
 * exit.
 */
static void
multi_uncount(void)
{
	for (int i = 0; i < PGQ_WAKE_SLOTS; i++)
		if (my_multi_slots & (UINT64CONST(1) << i))
			pg_atomic_fetch_sub_u32(&multi_wake->waiters[i][my_multi_cv], 1);
	my_multi_slots = 0;
}

/* At backend exit: a claim over several groups that ended in an error. */
static void
multi_uncount_at_exit(int code, Datum arg)
{
	multi_uncount();
}

/*
 * Count this backend as a waiter of exactly these slots, on its variable.
 * A claim that ended in an error left its count: it is corrected here, at
 * the next claim over several groups, or at exit.  Until then broadcasts on
 * those slots also reach a variable that may have no sleeper, which costs
 * them a little and nobody else anything.
 */
static void
multi_count(uint64 slots)
{
	static bool exit_registered = false;

	if (!exit_registered)
	{
		before_shmem_exit(multi_uncount_at_exit, (Datum) 0);
		exit_registered = true;
	}
	if (slots == my_multi_slots)
		return;
	multi_uncount();
	my_multi_cv = MY_MULTI_CV;
	for (int i = 0; i < PGQ_WAKE_SLOTS; i++)
		if (slots & (UINT64CONST(1) << i))
			pg_atomic_fetch_add_u32(&multi_wake->waiters[i][my_multi_cv], 1);
	my_multi_slots = slots;
}

/*
 * Has any of the n groups been woken since gens[] were read?  The caller
 * passes what pgq_wait_generation() said of each before its last check.
 */
static bool
any_woken(const PgqGroupRef *groups, int n, const uint64 *gens)
{
	for (int i = 0; i < n; i++)
		if (pgq_wait_generation(&groups[i]) != gens[i])
			return true;
	return false;
}

/*
 * pgq_wait_for_wakeup() for a claim over the n groups: sleep until one of
 * them is woken (since gens[], read before the caller's last check), the
 * recheck interval passes, or the deadline comes.  Returns false once the
 * deadline has passed.  The caller ends the wait with pgq_wait_done().
 */
bool
pgq_wait_for_any(const PgqGroupRef *groups, int n, TimestampTz deadline,
				 const uint64 *gens)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz recheck_at;
	uint64		slots = 0;
	ConditionVariable *cv;

	Assert(n > 0);
	if (wake_slots == NULL)
		return pgq_wait_for_wakeup(&groups[0], deadline, 0);	/* polls */
	if (now >= deadline)
		return false;
	recheck_at = Min(deadline,
					 TimestampTzPlusMilliseconds(now, pgq_wait_recheck_ms));

	for (int i = 0; i < n; i++)
		slots |= UINT64CONST(1) << slot_for(&groups[i]);

	/*
	 * On the variable's list, then counted (a full barrier), then the counts
	 * read: a waker that counted its wake-up before that is seen here, and
	 * one after sees this backend counted and broadcasts.
	 */
	cv = &multi_wake->cvs[MY_MULTI_CV];
	ConditionVariablePrepareToSleep(cv);
	multi_count(slots);
	pg_memory_barrier();
	if (any_woken(groups, n, gens))
		return true;

	for (;;)
	{
		long		slice = (long) Min((recheck_at - now + 999) / 1000,
									   (int64) PGQ_CLIENT_CHECK_MS);
		bool		timed_out;

		timed_out = ConditionVariableTimedSleep(cv, slice, PG_WAIT_EXTENSION);
		check_client();
		if (!timed_out && any_woken(groups, n, gens))
			return true;
		now = GetCurrentTimestamp();
		if (now >= recheck_at)
			return true;
	}
}

/* End a wait begun by pgq_wait_for_wakeup() or pgq_wait_for_any(). */
void
pgq_wait_done(void)
{
	if (wake_slots != NULL)
	{
		ConditionVariableCancelSleep();
		multi_uncount();
	}
}

/*
 * Work of the group became claimable in this transaction: at commit, wake
 * the claims waiting for it, and NOTIFY if pgq.notify is on.
 */
void
pgq_announce_claimable(const PgqGroupRef *group, const char *group_name)
{
	pgq_xact_wake_at_commit(group);
	pgq_notify_group(group_name);
}

/* Does pgq.groups have the channel column (the schema is 0.2 or later)? */
static bool
have_channels(void)
{
	Oid			relid = get_relname_relid("groups",
										  get_namespace_oid("pgq", false));

	return get_attnum(relid, "channel") != InvalidAttrNumber;
}

/*
 * The channel of the group that a statement prepared once in *plan finds,
 * as the tables' owner; NULL if there is no such group (any more).
 */
static char *
read_channel(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
			 Datum *values)
{
	char	   *channel = NULL;
	int			rc;

	SPI_connect();
	if (*plan == NULL)
		*plan = pgq_keep_plan(sql, nargs, argtypes);
	/* groups are read with a fresh snapshot (see lookup_by() in group.c) */
	rc = SPI_execute_snapshot(*plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed > 0)
	{
		char	   *found = SPI_getvalue(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1);

		/* in the caller's memory: SPI_finish() frees SPI's */
		if (found != NULL)
		{
			channel = SPI_palloc(strlen(found) + 1);
			strcpy(channel, found);
		}
	}
	SPI_finish();
	return channel;
}

/* The channel of the named group; NULL if there is no such group. */
static char *
group_channel(const char *group_name)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(group_name)};

	return read_channel(&plan,
						"SELECT channel FROM pgq.groups "
						"WHERE group_name " OP("=") " $1",
						1, argtypes, values);
}

/*
 * The channel of the group that a lookup found; NULL if it is gone.  Looked
 * up by id, not by name: a group made under the name since the lookup is
 * another group, which the caller may not be allowed to know of.
 */
static char *
found_group_channel(const PgqGroupRef *ref)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int64GetDatum(ref->group_id),
	TimestampTzGetDatum(ref->created_at)};

	return read_channel(&plan,
						"SELECT channel FROM pgq.groups "
						"WHERE group_id " OP("=") " $1 "
						"AND created_at " OP("=") " $2",
						2, argtypes, values);
}

/*
 * Queue a NOTIFY on the group's channel, with the group's name as payload,
 * for the end of the current transaction, if pgq.notify is on.  PostgreSQL
 * sends one notification per channel and payload per transaction, however
 * often this is called.  A database not updated from 0.1 has no channels:
 * there, the notification goes to channel pgq, as it did in 0.1.  Called
 * as the owner of pgq's tables.
 */
void
pgq_notify_group(const char *group_name)
{
	char	   *channel;

	if (!pgq_notify)
		return;
	if (!have_channels())
	{
		Async_Notify("pgq", group_name);
		return;
	}
	channel = group_channel(group_name);
	if (channel != NULL)
		Async_Notify(channel, group_name);
}

/*
 * pgq.channel(group_name, finished) -> text  (since 0.2)
 *
 * The channel on which pgq notifies the group's listeners: for the roles
 * that may consume or produce the group.  With finished, the queue's
 * channel for its finished items (see events.c): the same name with
 * "_finished" after it.
 */
Datum
pgq_channel(PG_FUNCTION_ARGS)
{
	PgqScope	scope;
	PgqGroup	group;
	char	   *channel;
	Datum		result;
	bool		finished = PG_NARGS() > 1 && PG_GETARG_BOOL(1);

	pgq_check_name(PG_GETARG_TEXT_PP(0));
	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group(PG_GETARG_TEXT_PP(0), &group);
	pgq_check_privilege(&group, PGQ_PRIV_USE);
	if (finished && group.kind != PGQ_KIND_QUEUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a query group, not a queue", group.name),
				 errdetail("Only queues announce finished items.")));
	channel = found_group_channel(&group.ref);
	if (channel == NULL)		/* dropped since the lookup */
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("group \"%s\" does not exist", group.name)));
	if (finished)
		channel = psprintf("%s%s", channel, PGQ_FINISHED_SUFFIX);
	/* out of SPI's memory, which SPI_finish() frees */
	result = SPI_datumTransfer(PointerGetDatum(cstring_to_text(channel)),
							   false, -1);
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_DATUM(result);
}
