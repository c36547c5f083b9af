/*-------------------------------------------------------------------------
 *
 * advisory.c
 *	  Advisory mode: claims that write nothing, and the worker registry that
 *	  tells a worker when its claims are gone.
 *
 * A claim takes a session-level advisory lock on the block, in a lock key
 * space of pgq's own (field4 of the lock tag), and writes nothing: no row
 * version, no WAL, no transaction id.  pgq.complete() deletes the block and
 * unlocks it when that transaction commits; pgq.release() unlocks at once;
 * the session's end unlocks everything.
 *
 * Advisory locks live only in shared memory: a crash restart, a clean
 * restart, a failover or a pooler that hands the client another backend
 * drops them without the worker noticing.  So a worker registers first:
 * pgq.register_worker() adds a row to pgq.worker_registry, an UNLOGGED table
 * that crash recovery empties and a standby does not have, and takes a
 * placeholder lock for it.  pgq.check_worker() is true only while both are
 * there; every advisory call checks the placeholder, and a worker that lost
 * it registers again and takes its blocks back with pgq.relock().
 *
 * The lock table is shared by the whole cluster, and running out of it makes
 * unrelated work fail.  pgq bounds the locks one session may hold, blocks
 * and placeholders together (pgq.max_locks_per_session) and, when preloaded,
 * the locks of all sessions (pgq.max_locks) and of all sessions of one role
 * (pgq.max_locks_per_role, so that one role cannot take them all), and
 * refuses a claim or a registration before any of them is passed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/stratnum.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "advisory.h"
#include "blockscan.h"
#include "claim.h"
#include "due.h"
#include "group.h"
#include "privilege.h"
#include "queue.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/*
 * pgq's advisory lock tags, as pg_locks shows them (locktype 'advisory'):
 *
 *	database	the database's OID
 *	classid		the high 32 bits of the block or worker id
 *	objid		its low 32 bits
 *	objsubid	4096 + 8192 * kind + (the extension's OID modulo 8192)
 *
 * where kind is 0 for a block and 1 for a worker's placeholder: 4096 to
 * 12287 are block locks, 12288 to 20479 worker locks.  Block and worker ids
 * start again from 1 when the extension is dropped and created again, and
 * sessions from before may still hold locks on the old ones; the
 * extension's OID is new at every CREATE EXTENSION, so each installation
 * has a key space of its own (two whose OIDs are equal modulo 8192 share
 * one).  PostgreSQL's own advisory locks use objsubid 1 and 2, pgq's locks
 * on group names and materializations 20564 and 20563 (pgq.h,
 * materialize.c), those on ordering keys 20565 (ordering.c).  The views
 * pgq.group_stats and pgq.workers read the same layout (pgq--0.1--0.2.sql).
 */
#define PGQ_LOCK_BLOCK		0
#define PGQ_LOCK_WORKER		1
#define PGQ_LOCK_KEY_BASE	4096
#define PGQ_LOCK_INSTALLATIONS	8192

/* Candidate blocks read per scan step. */
#define PGQ_ADVISORY_BATCH	16

/* A block lock this session holds, or an item lock (of a queue). */
typedef struct HeldBlock
{
	int64		block_id;		/* the block's id, or the item's */
	PgqGroupRef group;
	int64		position;		/* where the hint goes when it is given back:
								 * the block's id, or the item's place in
								 * claim order (pgq_item_position()) */
	uint16		installation;	/* of the lock's tag */
	Oid			role;			/* its lock is counted for this role */
} HeldBlock;

static HeldBlock *held = NULL;	/* in TopMemoryContext */
static int	nheld = 0;
static int	maxheld = 0;
static bool exit_callback_registered = false;

/*
 * A worker this session registered, whose placeholder lock it may still
 * hold; the lock is counted against the limits.  Until the registering
 * transaction commits, "subid" is the subtransaction that took it: should
 * that abort, the registry row is gone and so must the lock be.
 */
typedef struct OwnWorker
{
	int64		worker_id;
	uint16		installation;	/* of the lock's tag */
	SubTransactionId subid;		/* InvalidSubTransactionId once committed */
	Oid			role;			/* its lock is counted for this role */
} OwnWorker;

static OwnWorker *own_workers = NULL;	/* in TopMemoryContext */
static int	nown_workers = 0;
static int	maxown_workers = 0;
static bool own_worker_callbacks_registered = false;

/*
 * The installation of the extension that this session's locks belong to:
 * the OID of its pgq.blocks, which tells cheaply when the extension was
 * created again, and its key in lock tags.
 */
static Oid	installation_blocks = InvalidOid;
static uint16 installation = 0;

static int	pgq_max_locks_per_session = 256;
static int	pgq_max_locks = -1;
static int	pgq_max_locks_per_role = -1;

/* The role the last lock budget taken was counted for. */
static Oid	budget_role = InvalidOid;

PG_FUNCTION_INFO_V1(pgq_register_worker);
PG_FUNCTION_INFO_V1(pgq_check_worker);
PG_FUNCTION_INFO_V1(pgq_relock);

/* Define the settings; called from _PG_init(). */
void
pgq_advisory_init(void)
{
	DefineCustomIntVariable("pgq.max_locks_per_session",
							"Most advisory locks one session may hold: advisory-mode blocks and worker registrations.",
							NULL,
							&pgq_max_locks_per_session,
							256, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pgq.max_locks",
							"Most advisory locks all sessions together may hold: advisory-mode blocks and worker registrations.",
							"-1 means half of the lock table: max_locks_per_transaction * (max_connections + max_prepared_transactions + worker processes) / 2.  Applies only when pgq is preloaded.",
							&pgq_max_locks,
							-1, -1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pgq.max_locks_per_role",
							"Most advisory locks the sessions of one role together may hold: advisory-mode blocks and worker registrations.",
							"-1 means half of pgq.max_locks.  Counted for the role that calls pgq.  Applies only when pgq is preloaded.",
							&pgq_max_locks_per_role,
							-1, -1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
}

/* The cluster-wide limit in force. */
static int
cluster_lock_limit(void)
{
	if (pgq_max_locks >= 0)
		return pgq_max_locks;
	return (int) Min((int64) INT_MAX,
					 (int64) max_locks_per_xact *
					 (MaxBackends + max_prepared_xacts) / 2);
}

/* The per-role limit in force. */
static int
role_lock_limit(void)
{
	if (pgq_max_locks_per_role >= 0)
		return pgq_max_locks_per_role;
	return Max(cluster_lock_limit() / 2, 1);
}

/*
 * The lock tag of a block or worker id, in the key space of an installation
 * of the extension (see the top of the file).
 */
static void
set_tag(LOCKTAG *tag, int64 id, uint16 kind, uint16 inst)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (id >> 32),
						 (uint32) id,
						 PGQ_LOCK_KEY_BASE + kind * PGQ_LOCK_INSTALLATIONS + inst);
}

/* Does this session hold the lock (as the lock manager sees it)? */
static bool
lock_held(int64 id, uint16 kind, uint16 inst)
{
	LOCKTAG		tag;

	set_tag(&tag, id, kind, inst);
#if PG_VERSION_NUM >= 170000
	return LockHeldByMe(&tag, ExclusiveLock, false);
#else
	return LockHeldByMe(&tag, ExclusiveLock);
#endif
}

/*
 * LockAcquire() without waiting.  It fails when the lock table is full; the
 * lock was counted against pgq.max_locks already, so give the count back
 * before the error goes on.
 */
static LockAcquireResult
acquire_counted(const LOCKTAG *tag)
{
	LockAcquireResult result = LOCKACQUIRE_NOT_AVAIL;

	PG_TRY();
	{
		result = LockAcquire(tag, ExclusiveLock, true, true);
	}
	PG_CATCH();
	{
		pgq_advisory_locks_give(budget_role);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return result;
}

/*
 * Try to lock without waiting.  False if another session holds the lock, or
 * if this one already does: a session lock is re-entrant, and a block held
 * twice would be processed twice.
 */
static bool
try_lock(int64 id, uint16 kind)
{
	LOCKTAG		tag;

	set_tag(&tag, id, kind, installation);
	switch (acquire_counted(&tag))
	{
		case LOCKACQUIRE_OK:
			return true;
		case LOCKACQUIRE_ALREADY_HELD:
		case LOCKACQUIRE_ALREADY_CLEAR:
			LockRelease(&tag, ExclusiveLock, true);
			return false;
		default:
			return false;
	}
}

/* Release one count of a session lock this session holds. */
static void
unlock(int64 id, uint16 kind, uint16 inst)
{
	LOCKTAG		tag;

	set_tag(&tag, id, kind, inst);
	LockRelease(&tag, ExclusiveLock, true);
}

/* Index of block_id in the held list, or -1. */
static int
find_held(int64 block_id)
{
	for (int i = 0; i < nheld; i++)
	{
		if (held[i].block_id == block_id)
			return i;
	}
	return -1;
}

/*
 * Like find_held(), for a block of a known group: block ids repeat after
 * DROP EXTENSION and CREATE EXTENSION.
 */
static int
find_held_in(const PgqGroupRef *group, int64 block_id)
{
	int			i = find_held(block_id);

	if (i >= 0 && (held[i].group.group_id != group->group_id ||
				   held[i].group.created_at != group->created_at))
		return -1;
	return i;
}

/*
 * Forget held[i]: unlock it if the lock is still there and uncount it.  If
 * the block is still pending ("back"), let claims find it again.  Allocates
 * nothing and cannot fail, so it may run at transaction end and at backend
 * exit.
 */
static void
forget_held(int i, bool back)
{
	HeldBlock	block = held[i];

	if (lock_held(block.block_id, PGQ_LOCK_BLOCK, block.installation))
		unlock(block.block_id, PGQ_LOCK_BLOCK, block.installation);
	held[i] = held[--nheld];
	pgq_advisory_locks_give(block.role);

	/* the hint after the unlock, the claimed count after the hint */
	if (back)
		pgq_hint_lower(&block.group, block.position);
	if (pgq_xact_count_claimed(&block.group, -1) || back)
		pgq_wake_group(&block.group);
}

/*
 * Forget own_workers[i]: unlock its placeholder if the lock is still there
 * and uncount it.  Allocates nothing and cannot fail.
 */
static void
forget_own_worker(int i)
{
	OwnWorker	worker = own_workers[i];

	if (lock_held(worker.worker_id, PGQ_LOCK_WORKER, worker.installation))
		unlock(worker.worker_id, PGQ_LOCK_WORKER, worker.installation);
	own_workers[i] = own_workers[--nown_workers];
	pgq_advisory_locks_give(worker.role);
}

/*
 * At backend exit, give every block back before the lock manager does: the
 * lock manager would release the locks only late in the exit, and nobody
 * would lower the groups' hints or counts.
 */
static void
release_all_at_exit(int code, Datum arg)
{
	while (nheld > 0)
		forget_held(nheld - 1, true);
	while (nown_workers > 0)
		forget_own_worker(nown_workers - 1);
}

/* Be ready to give this session's locks back at exit. */
static void
register_exit_callback(void)
{
	if (!exit_callback_registered)
	{
		before_shmem_exit(release_all_at_exit, (Datum) 0);
		exit_callback_registered = true;
	}
}

/*
 * Make room for one more held block, and be ready to give blocks back at
 * exit, before a lock is taken: nothing may fail between taking a lock and
 * remembering it.
 */
static void
reserve_held(void)
{
	register_exit_callback();
	if (nheld >= maxheld)
	{
		int			newmax = Max(16, maxheld * 2);

		if (held == NULL)
			held = MemoryContextAlloc(TopMemoryContext,
									  newmax * sizeof(HeldBlock));
		else
			held = repalloc(held, newmax * sizeof(HeldBlock));
		maxheld = newmax;
	}
}

/*
 * Add a block or item to the held list, and count it as claimed (out of what
 * a scan for pending blocks counted ahead, if it did); its lock is taken and
 * counted against the limits already.  "position" is where the hint goes
 * when it is given back (see HeldBlock).
 */
static void
remember_held(const PgqGroup *group, int64 block_id, int64 position)
{
	Assert(nheld < maxheld && exit_callback_registered);
	held[nheld].block_id = block_id;
	held[nheld].group = group->ref;
	held[nheld].position = position;
	held[nheld].installation = installation;
	held[nheld].role = budget_role;
	nheld++;
	pgq_xact_count_claimed(&group->ref, 1);
}

/*
 * Forget held blocks and placeholders whose lock vanished without pgq
 * knowing: pg_advisory_unlock_all() and DISCARD ALL release every advisory
 * lock.
 */
static void
forget_lost_locks(void)
{
	for (int i = nheld - 1; i >= 0; i--)
	{
		if (!lock_held(held[i].block_id, PGQ_LOCK_BLOCK, held[i].installation))
			forget_held(i, true);
	}
	for (int i = nown_workers - 1; i >= 0; i--)
	{
		if (!lock_held(own_workers[i].worker_id, PGQ_LOCK_WORKER,
					   own_workers[i].installation))
			forget_own_worker(i);
	}
}

/*
 * Find out which installation of the extension is current and, if it is not
 * the one this session's locks were taken under, let go of them all: the
 * blocks and workers they name went with DROP EXTENSION.  Every entry point
 * of advisory mode starts here (transaction callbacks excepted: they only
 * touch blocks that their transaction claimed, after this ran).  pgq.blocks'
 * OID is kept up to date by relcache invalidations; only a new one costs a
 * catalog lookup.
 */
static void
check_installation(void)
{
	Oid			blocks = pgq_rel_oid("blocks");

	if (blocks == installation_blocks)
		return;
	installation = get_extension_oid("pgq", false) % PGQ_LOCK_INSTALLATIONS;
	installation_blocks = blocks;
	while (nheld > 0)
		forget_held(nheld - 1, false);
	while (nown_workers > 0)
		forget_own_worker(nown_workers - 1);
}

/*
 * Unlock a block that the current transaction completed or failed, now that
 * it committed.  Called from the transaction callback.  The block is gone,
 * or waits for a retry that claims find by its due time: no hint to lower.
 */
void
pgq_advisory_unlock(int64 block_id)
{
	int			i = find_held(block_id);

	if (i >= 0)
		forget_held(i, false);
}

/*
 * The transaction that claimed block_id aborted: the claim is undone, as in
 * the other modes.  Called from the transaction callbacks.
 */
void
pgq_advisory_undo_claim(int64 block_id)
{
	int			i = find_held(block_id);

	if (i >= 0)
		forget_held(i, true);
}

/*
 * A block this session may hold no longer exists (its group was dropped, or
 * the extension re-created): let go of it.  Unless this transaction deleted
 * it: then the lock must stay until the commit.
 */
void
pgq_advisory_forget_block(int64 block_id)
{
	int			i;

	check_installation();
	i = find_held(block_id);
	if (i >= 0 && !pgq_xact_unlocking(block_id))
		forget_held(i, false);
}

/*
 * The group was dropped (and the drop committed): its blocks are gone, and
 * so are this session's claims on them.  Called from the transaction
 * callbacks.
 */
void
pgq_advisory_forget_group(const PgqGroupRef *group)
{
	for (int i = nheld - 1; i >= 0; i--)
	{
		if (held[i].group.group_id == group->group_id &&
			held[i].group.dbid == group->dbid &&
			held[i].group.created_at == group->created_at)
			forget_held(i, false);
	}
}

/*
 * Refuse a worker id whose placeholder lock this session does not hold, and
 * say what probably happened.
 */
void
pgq_advisory_check_worker_held(int64 worker_id)
{
	check_installation();
	if (!lock_held(worker_id, PGQ_LOCK_WORKER, installation))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("worker " INT64_FORMAT " is not registered in this session",
						worker_id),
				 errdetail("This session does not hold the worker's placeholder lock."),
				 errhint("The session's advisory locks are gone if the server restarted or failed over, a connection pooler moved the client to another session, pg_advisory_unlock_all() or DISCARD ALL ran, or the extension was dropped and created again.  Register again with pgq.register_worker() and take blocks back with pgq.relock().")));
}

/*
 * Check, with a fresh snapshot, that a block just locked is still claimable:
 * it may have been completed, or failed again, between the scan that found
 * it and the lock, and a retry must have come due.  Fills *block, or
 * returns false.  "found", when given, is the scan that found the block,
 * positioned on it: the row version it saw is read again by its TID, which
 * is all a claim usually needs; if that version is gone, the block is looked
 * up through the primary key, where a newer version would be.
 */
static bool
verify_locked(const PgqGroup *group, int64 block_id, PgqBlockScan *found,
			  PgqClaimed *block, MemoryContext cxt)
{
	PgqBlockScan scan;
	PgqBlockScan *row = found;
	bool		ok = false;
	bool		isnull;

	if (found != NULL)
	{
		ItemPointerData tid = found->slot->tts_tid;

		ok = pgq_block_refetch(found, &tid);
		Assert(!ok || DatumGetInt64(pgq_block_attr(found, Anum_blocks_block_id,
												   &isnull)) == block_id);
	}
	if (!ok)
	{
		ScanKeyData keys[2];

		row = &scan;
		pgq_block_scan_open(&scan, "blocks_pkey", AccessShareLock);
		pgq_block_key(keys, group->ref.group_id, block_id);
		pgq_block_scan_keys(&scan, keys, 2);
		ok = pgq_block_scan_next(&scan);
	}
	if (ok)
	{
		char		state = DatumGetChar(pgq_block_attr(row, Anum_blocks_state,
														&isnull));
		Datum		due = pgq_block_attr(row, Anum_blocks_lease_until,
										 &isnull);

		ok = state == 'p' ||
			(state == 'r' && !isnull &&
			 DatumGetTimestampTz(due) <= GetCurrentTimestamp());
	}
	if (ok)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

		memset(block, 0, sizeof(PgqClaimed));
		block->id = block_id;
		block->ids = PointerGetDatum(PG_DETOAST_DATUM_COPY(pgq_block_attr(row, Anum_blocks_ids, &isnull)));
		block->attempt = DatumGetInt32(pgq_block_attr(row,
													  Anum_blocks_attempt,
													  &isnull)) + 1;
		MemoryContextSwitchTo(oldcxt);
	}
	if (row == &scan)
		pgq_block_scan_close(&scan);
	return ok;
}

/*
 * verify_locked() for an item of a queue: it must still be pending, or wait
 * for a retry (or a delayed run) whose time came; items behind the head of
 * their ordering key wait in another state.  Fills *item with what a claim
 * returns, the attempt being the one after those that ended.
 */
static bool
verify_locked_item(const PgqGroup *group, int64 item_id, PgqBlockScan *found,
				   PgqClaimed *item, MemoryContext cxt)
{
	PgqBlockScan scan;
	PgqBlockScan *row = found;
	bool		ok = false;
	bool		isnull;

	if (found != NULL)
	{
		ItemPointerData tid = found->slot->tts_tid;

		ok = pgq_block_refetch(found, &tid);
	}
	if (!ok)
	{
		row = &scan;
		pgq_item_scan_open(&scan, pgq_item_id_index(), AccessShareLock);
		ok = pgq_scan_find_id(&scan, item_id, Anum_items_item_id) &&
			DatumGetInt64(pgq_block_attr(&scan, Anum_items_group_id,
										 &isnull)) == group->ref.group_id;
	}
	if (ok)
	{
		char		state = DatumGetChar(pgq_block_attr(row, Anum_items_state,
														&isnull));
		Datum		due = pgq_block_attr(row, Anum_items_due_at, &isnull);

		Assert(DatumGetInt64(pgq_block_attr(row, Anum_items_item_id,
											&isnull)) == item_id);
		ok = state == 'p' ||
			(state == 'r' && !isnull &&
			 DatumGetTimestampTz(due) <= GetCurrentTimestamp());
	}
	if (ok)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
		Datum		value;

		memset(item, 0, sizeof(PgqClaimed));
		item->id = item_id;
		item->attempt = DatumGetInt32(pgq_block_attr(row, Anum_items_attempt,
													 &isnull)) + 1;
		item->priority = DatumGetInt32(pgq_block_attr(row,
													  Anum_items_priority,
													  &isnull));
		value = pgq_block_attr(row, Anum_items_payload, &isnull);
		if (!isnull)
			item->payload = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
		value = pgq_block_attr(row, Anum_items_data, &isnull);
		if (!isnull)
			item->data = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
		value = pgq_block_attr(row, Anum_items_key, &isnull);
		if (!isnull)
			item->key = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
		MemoryContextSwitchTo(oldcxt);
	}
	if (row == &scan)
		pgq_block_scan_close(&scan);
	return ok;
}

/*
 * Lock a block or an item, already counted against the limits, check that
 * it is still claimable, and hold it.  False, with the count given back, if
 * another session holds it or it is no longer claimable.  Should the
 * transaction abort, the claim is undone.  "found" is the scan positioned on
 * the row, if one found it (see verify_locked); an item's place in claim
 * order is known then, else only once the check read the item (0 until
 * then: the start of the queue, where an abort may safely send the hint).
 */
static bool
take_block(const PgqGroup *group, int64 block_id, PgqBlockScan *found,
		   PgqClaimed *block, MemoryContext cxt)
{
	bool		items = group->kind == PGQ_KIND_QUEUE;
	int64		position = block_id;
	bool		isnull;

	bool		claimable;

	if (!try_lock(block_id, PGQ_LOCK_BLOCK))
	{
		pgq_advisory_locks_give(budget_role);
		return false;
	}

	/*
	 * Remember the lock before the check, which may fail: the abort then
	 * gives the block back.  Room for both was reserved.
	 */
	if (items)
		position = found == NULL ? 0 :
			pgq_item_position(DatumGetInt32(pgq_block_attr(found,
														   Anum_items_priority,
														   &isnull)),
							  block_id);
	remember_held(group, block_id, position);
	pgq_xact_remember_advisory(&group->ref, block_id);
	PGQ_INJECTION_POINT("pgq-advisory-scan-locked");
	if (items)
		claimable = verify_locked_item(group, block_id, found, block, cxt);
	else
		claimable = verify_locked(group, block_id, found, block, cxt);
	if (claimable && items)
		held[find_held(block_id)].position =
			pgq_item_position(block->priority, block_id);
	if (claimable)
		return true;
	forget_held(find_held(block_id), false);
	return false;
}

/*
 * Count one more advisory lock against the limits.  NULL if it fits (and is
 * counted); otherwise the name of the setting whose limit it would pass.
 */
static const char *
take_lock_budget(void)
{
	if (nheld + nown_workers >= pgq_max_locks_per_session)
		return "pgq.max_locks_per_session";
	budget_role = OidIsValid(pgq_caller) ? pgq_caller : GetUserId();
	switch (pgq_advisory_locks_take(cluster_lock_limit(), budget_role,
									role_lock_limit()))
	{
		case PGQ_LOCKS_OK:
			return NULL;
		case PGQ_LOCKS_CLUSTER:
			return "pgq.max_locks";
		case PGQ_LOCKS_ROLE:
			return "pgq.max_locks_per_role";
	}
	pg_unreachable();
}

/*
 * Check the limits before taking one more block lock.  With nothing taken
 * yet, passing a limit is an error; otherwise the claim returns what it has.
 */
static bool
may_lock_more(int taken)
{
	const char *setting = take_lock_budget();

	if (setting == NULL)
		return true;
	if (taken > 0)
		return false;
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("cannot claim another advisory-mode block"),
			 errdetail_plural("The limit set by %s is reached; this session holds %d advisory lock (blocks and worker registrations).",
					   "The limit set by %s is reached; this session holds %d advisory locks (blocks and worker registrations).",
					   nheld + nown_workers, setting, nheld + nown_workers),
			 errhint("Complete or release blocks first, or raise %s.", setting)));
	pg_unreachable();
}

/*
 * Walk the candidate rows of a scan whose keys are set, blocks or items of
 * the group, and lock up to "limit" of those in state "state".  "taken" is
 * how many the claim holds already.  *last gets the id of the last candidate
 * looked at (an item's place in claim order), if any.  Returns how many
 * were taken; *stop is set when a limit on locks ends the claim.
 */
static int
lock_candidates(const PgqGroup *group, PgqBlockScan *scan, char state,
				int limit, int taken, PgqClaimed *blocks, MemoryContext cxt,
				int64 *last, bool *stop)
{
	bool		items = group->kind == PGQ_KIND_QUEUE;
	int			n = 0;

	while (n < limit && pgq_block_scan_next(scan))
	{
		bool		isnull;
		int64		block_id;

		if (DatumGetChar(pgq_block_attr(scan,
										items ? Anum_items_state :
										Anum_blocks_state,
										&isnull)) != state)
			continue;
		block_id = DatumGetInt64(pgq_block_attr(scan,
												items ? Anum_items_item_id :
												Anum_blocks_block_id,
												&isnull));
		reserve_held();
		pgq_xact_reserve(1);
		pgq_xact_claiming_count(limit - n);
		PGQ_INJECTION_POINT("pgq-advisory-scan-counted");
		if (!may_lock_more(taken + n))
		{
			*stop = true;
			break;
		}
		*last = !items ? block_id :
			pgq_item_position(DatumGetInt32(pgq_block_attr(scan,
														   Anum_items_priority,
														   &isnull)),
							  block_id);
		if (take_block(group, block_id, scan, &blocks[n], cxt))
			n++;
	}
	return n;
}

/*
 * Lock up to "limit" pending blocks from block id "from" on, through the
 * primary key: first in a window just wide enough for the claim and the
 * claims racing it, then past it (see claim.c).  "taken" is how many blocks
 * the claim holds already.  *last gets the last candidate looked at (0 if
 * none).
 */
static int
lock_pending(const PgqGroup *group, int64 from, int limit, int taken,
			 PgqClaimed *blocks, MemoryContext cxt, int64 *last)
{
	PgqBlockScan scan;
	int			n = 0;
	bool		stop = false;

	*last = 0;
	pgq_block_scan_open(&scan, "blocks_pkey", AccessShareLock);
	for (int pass = 0; pass < 2 && n < limit && !stop; pass++)
	{
		pgq_block_scan_claim_pass(&scan, group->ref.group_id, from, limit,
								  pass);
		n += lock_candidates(group, &scan, 'p', limit - n, taken + n,
							 blocks + n, cxt, last, &stop);
	}
	pgq_block_scan_close(&scan);
	return n;
}

/*
 * Lock up to "limit" blocks whose retry came due, oldest first, as a walk of
 * the group's blocks in flight finds them (pgq_block_due()).  Due blocks
 * that others hold stay due rows (an advisory claim writes nothing), in the
 * way of the walk's earliest: look a little further than "limit" and, while
 * that comes up short with the window full, twice as far again.  Due blocks
 * left over by a claim that stopped (full, or at its lock limit), or maybe
 * left past a full window, wake the group's waiting claims.
 */
static int
lock_due(const PgqGroup *group, int limit, PgqClaimed *blocks,
		 MemoryContext cxt)
{
	int			want = Min(limit + PGQ_ADVISORY_BATCH, INT_MAX / 4);
	int			n = 0;

	for (;;)
	{
		PgqDueBlock *due;
		int			ndue;
		int			i;
		bool		stop = false;

		ndue = pgq_block_due(&group->ref, GetCurrentTimestamp(), want, &due);
		for (i = 0; i < ndue && n < limit; i++)
		{
			bool		taken;

			CHECK_FOR_INTERRUPTS();
			reserve_held();
			pgq_xact_reserve(1);
			if (!may_lock_more(n))
			{
				stop = true;
				break;
			}

			/* a scan of one block, counted before it is taken (C1, shmem.c) */
			pgq_xact_claiming(&group->ref, due[i].block_id);
			pgq_xact_claiming_count(1);
			taken = take_block(group, due[i].block_id, NULL, &blocks[n], cxt);
			pgq_xact_claiming_done();
			if (taken)
				n++;
		}
		if (due != NULL)
			pfree(due);
		if (n >= limit || stop || want >= INT_MAX / 8)
		{
			/*
			 * Waiting claims did not look while this one did: wake them if
			 * some are left, or may be, past a full window.  (Not when the
			 * walk saw every due block and took what it could: the rest are
			 * held, and a waiting claim that woke itself would spin.)
			 */
			if (i < ndue || ndue == want)
				pgq_wake_group(&group->ref);
			break;
		}
		if (ndue < want)
			break;
		want *= 2;
	}
	return n;
}

/* The ids of the group's blocks that this session holds, as a bigint[]. */
Datum
pgq_advisory_held_ids(const PgqGroupRef *group)
{
	Datum	   *ids = palloc(Max(nheld, 1) * sizeof(Datum));
	int			n = 0;

	for (int i = 0; i < nheld; i++)
	{
		if (held[i].group.group_id == group->group_id &&
			held[i].group.dbid == group->dbid &&
			held[i].group.created_at == group->created_at)
			ids[n++] = Int64GetDatum(held[i].block_id);
	}
	return PointerGetDatum(construct_array(ids, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* Blocks of the group that this session holds. */
int64
pgq_advisory_held_in_group(const PgqGroupRef *group)
{
	int64		n = 0;

	for (int i = 0; i < nheld; i++)
	{
		if (held[i].group.group_id == group->group_id &&
			held[i].group.dbid == group->dbid &&
			held[i].group.created_at == group->created_at)
			n++;
	}
	return n;
}

/*
 * Lock up to "limit" items of a queue whose retry or delayed run came due,
 * oldest due first, as items_due_idx has them.  Items held by others are
 * skipped.  One scan, counted as claims' scans are (invariant C1 in
 * shmem.c), though a queue is never taken for exhausted: the count is what
 * pgq.inflight() reports.
 */
static int
lock_due_items(const PgqGroup *group, int limit, PgqClaimed *items,
			   MemoryContext cxt)
{
	PgqBlockScan scan;
	ScanKeyData keys[2];
	int64		last;
	bool		stop = false;
	int			n;

	pgq_item_scan_open(&scan, "items_due_idx", AccessShareLock);
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(group->ref.group_id));
	ScanKeyInit(&keys[1], 2, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
				TimestampTzGetDatum(GetCurrentTimestamp()));
	pgq_block_scan_keys(&scan, keys, 2);
	pgq_xact_claiming(&group->ref, 0);
	n = lock_candidates(group, &scan, 'r', limit, 0, items, cxt, &last,
						&stop);
	pgq_xact_claiming_done();
	pgq_block_scan_close(&scan);
	return n;
}

/*
 * Lock up to "limit" pending items of a queue from place "from" in claim
 * order on (pgq_item_position(); 0: from the start), as items_pending_idx
 * has them: highest priority first, then first in.  The index is on
 * (group_id, priority DESC, item_id): the rest of from's priority, then the
 * lower priorities, in two passes.  "taken" is how many items the claim
 * holds already.  *last gets the place of the last candidate looked at (0
 * if none).
 */
static int
lock_pending_items(const PgqGroup *group, int64 from, int limit, int taken,
				   PgqClaimed *items, MemoryContext cxt, int64 *last)
{
	PgqBlockScan scan;
	int			n = 0;
	bool		stop = false;

	*last = 0;
	pgq_item_scan_open(&scan, "items_pending_idx", AccessShareLock);
	for (int pass = 0; n < limit && !stop &&
		 pgq_item_scan_pending_pass(&scan, group->ref.group_id, from, pass);
		 pass++)
		n += lock_candidates(group, &scan, 'p', limit - n, taken + n,
							 items + n, cxt, last, &stop);
	pgq_block_scan_close(&scan);
	return n;
}

/*
 * Lock up to "limit" pending blocks, or items, of the group from block id
 * (or place in claim order) "from" on; "taken" is how many the claim holds
 * already.  *last gets the last candidate's (0 if none).
 */
static int
lock_pending_any(const PgqGroup *group, int64 from, int limit, int taken,
				 PgqClaimed *out, MemoryContext cxt, int64 *last)
{
	if (group->kind == PGQ_KIND_QUEUE)
		return lock_pending_items(group, from, limit, taken, out, cxt, last);
	return lock_pending(group, from, limit, taken, out, cxt, last);
}

/*
 * Lock up to "limit" pending blocks, or items, of the group: from the hint
 * on, a scan that moves the hint past what it found consumed or held, then,
 * should that come up short, from the start when pgq_full_scan_due() says
 * so (see claim.c).  Blocks and items held by others are skipped; the hint
 * moves past them, and their holders lower it again when they let go.
 * "taken" is how many the claim holds already.
 */
static int
lock_from_hint(const PgqGroup *group, int limit, int taken, PgqClaimed *out,
			   MemoryContext cxt)
{
	int64		hint;
	uint64		gen;
	int64		last;
	int			n;

	(void) pgq_claim_hint(&group->ref, &hint, &gen);
	pgq_xact_claiming(&group->ref, hint);
	n = lock_pending_any(group, hint, limit, taken, out, cxt, &last);
	/* ended, so that the count that decides a full scan is of holders */
	pgq_xact_claiming_done_advance(gen, last <= 0 ? 0 :
								   group->kind == PGQ_KIND_QUEUE ?
								   pgq_item_position_after(last) :
								   last + 1);
	if (n < limit && hint > 0 && nheld < pgq_max_locks_per_session &&
		pgq_full_scan_due(&group->ref, pgq_advisory_held_in_group(&group->ref)))
	{
		int			below;

		pgq_xact_claiming(&group->ref, 0);
		below = lock_pending_any(group, 0, limit - n, taken + n, out + n, cxt,
								 &last);
		/* stranded below the hint: the first found is the first in order */
		if (below > 0)
			pgq_hint_lower(&group->ref, group->kind == PGQ_KIND_QUEUE ?
						   pgq_item_position(out[n].priority, out[n].id) :
						   out[n].id);
		n += below;
		pgq_xact_claiming_done();
	}
	return n;
}

/*
 * Claim up to max_blocks blocks of an advisory-mode group, or items of an
 * advisory-mode queue, into blocks[] (in cxt), writing nothing: retries
 * (and delayed items) that came due, oldest first, then pending ones from
 * the hint, then below it (lock_from_hint()).  Blocks come back in block id
 * order; items in the order found, which queue.c sorts into claim order.
 *
 * For a queue the hint is a place in claim order, and keeps claims from
 * walking the index entries of every item finished since the last vacuum.
 * Each item is held by a session-level advisory lock until pgq.complete()
 * or pgq.fail() commits, pgq.release() gives it back or the session ends;
 * the item's row stays as it was, so that a claim lost with the session's
 * locks (a restart, a failover) leaves it claimable.
 */
int
pgq_advisory_claim(const PgqGroup *group, int max_blocks,
				   PgqClaimed *blocks, MemoryContext cxt)
{
	bool		items = group->kind == PGQ_KIND_QUEUE;
	int			n;

	check_installation();
	forget_lost_locks();
	n = items ? lock_due_items(group, max_blocks, blocks, cxt) :
		lock_due(group, max_blocks, blocks, cxt);
	if (n < max_blocks)
		n += lock_from_hint(group, max_blocks - n, n, blocks + n, cxt);
	if (!items)
		qsort(blocks, n, sizeof(PgqClaimed), pgq_compare_claimed);
	return n;
}

/*
 * Is block_id of the group held by this session, and not already being
 * completed by this transaction?
 */
static bool
holds_block(const PgqGroupRef *group, int64 block_id)
{
	int			i;

	check_installation();
	i = find_held_in(group, block_id);
	return i >= 0 &&
		lock_held(block_id, PGQ_LOCK_BLOCK, held[i].installation) &&
		!pgq_xact_unlocking(block_id);
}

/*
 * Is block_id (or an item) of the group in this session's held list, even
 * if this transaction is completing or failing it?  Blocks the session holds
 * do not keep its own waiting claims from taking the group for exhausted.
 */
bool
pgq_advisory_held_here(const PgqGroupRef *group, int64 id)
{
	return find_held_in(group, id) >= 0;
}

/*
 * Does this session hold the item (or block) of the group, and is this
 * transaction not already finishing it?  Once it does, and has changed the
 * row, pgq_xact_unlock_at_commit() lets go of it.
 */
bool
pgq_advisory_holds(const PgqGroupRef *group, int64 id)
{
	return holds_block(group, id);
}

/*
 * Consume a block this session holds: delete it, and unlock it when the
 * transaction commits.
 */
bool
pgq_advisory_complete(const PgqGroup *group, int64 block_id)
{
	if (!holds_block(&group->ref, block_id))
		return false;
	if (!pgq_block_delete(group->ref.group_id, block_id, NULL))
	{
		/* gone meanwhile (a drop that the delete waited for) */
		pgq_advisory_forget_block(block_id);
		return false;
	}
	pgq_xact_unlock_at_commit(&group->ref, block_id);
	return true;
}

/* Give back a block this session holds, at once. */
bool
pgq_advisory_release(const PgqGroup *group, int64 block_id)
{
	if (!holds_block(&group->ref, block_id))
		return false;
	forget_held(find_held(block_id), true);
	pgq_notify_group(group->name);
	return true;
}

/*
 * Record a failed attempt of a block this session holds: it is retried from
 * retry_after on, or dead-lettered once max_attempts failures are counted.
 * The lock goes when the transaction commits.
 */
bool
pgq_advisory_fail(const PgqGroup *group, int64 block_id, text *error,
				  Interval *retry_after)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	TimestampTz now = GetCurrentTimestamp();
	int			rc;

	if (!holds_block(&group->ref, block_id))
		return false;
	if (plan == NULL)
	{
		Oid			argtypes[5] = {INT8OID, TIMESTAMPTZOID, TEXTOID, INT4OID,
		INT8OID};

		plan = pgq_keep_plan("UPDATE pgq.blocks SET "
							 "attempt = attempt " OP("+") " 1, "
							 "state = CASE WHEN attempt " OP("+") " 1 " OP(">=") " $4 "
							 "THEN 'f'::pg_catalog.\"char\" "
							 "ELSE 'r'::pg_catalog.\"char\" END, "
							 "lease_until = CASE WHEN attempt " OP("+") " 1 " OP(">=") " $4 "
							 "THEN NULL ELSE $2 END, "
							 "last_error = $3 "
							 "WHERE group_id " OP("=") " $5 "
							 "AND block_id " OP("=") " $1 "
							 "AND state " OP("=") " ANY ('{p,r}'::pg_catalog.\"char\"[])",
							 5, argtypes);
	}
	values[0] = Int64GetDatum(block_id);
	values[1] = TimestampTzGetDatum(retry_after ?
									pgq_time_after(now, retry_after) : now);
	values[2] = PointerGetDatum(error);
	if (error == NULL)
		nulls[2] = 'n';
	values[3] = Int32GetDatum(group->max_attempts);
	values[4] = Int64GetDatum(group->ref.group_id);
	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not fail block: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		/* gone meanwhile (a drop that the update waited for) */
		pgq_advisory_forget_block(block_id);
		return false;
	}
	pgq_xact_unlock_at_commit(&group->ref, block_id);
	pgq_notify_group(group->name);
	return true;
}

/*
 * Delete registrations whose session is gone (or lost its locks): they stay
 * behind otherwise.  Inside SPI.  Reads pg_locks, whose cost grows with the
 * whole cluster's locks, so only maintenance passes run it.  Rows another
 * transaction holds locked are left for the next time: maintenance never
 * waits for a user's transaction.
 */
void
pgq_forget_dead_workers(void)
{
	Oid			argtypes[2] = {OIDOID, INT2OID};
	Datum		values[2];
	int			rc;

	check_installation();
	values[0] = ObjectIdGetDatum(MyDatabaseId);
	values[1] = Int16GetDatum(PGQ_LOCK_KEY_BASE +
							  PGQ_LOCK_WORKER * PGQ_LOCK_INSTALLATIONS +
							  installation);
	rc = SPI_execute_with_args("DELETE FROM pgq.worker_registry "
							   "WHERE worker_id IN (SELECT w.worker_id "
							   "FROM pgq.worker_registry w "
							   "WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_locks l "
							   "WHERE l.locktype " OP("=") " 'advisory' AND l.granted "
							   "AND l.database " OP("=") " $1 "
							   "AND l.objsubid " OP("=") " $2 "
							   "AND l.pid " OP("=") " w.pid "
							   "AND (l.classid::pg_catalog.int8 " OP("<<") " 32 "
							   OP("|") " l.objid::pg_catalog.int8) " OP("=") " w.worker_id) "
							   "FOR UPDATE OF w SKIP LOCKED)",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not clean up workers: %s", SPI_result_code_string(rc));
}

/*
 * Delete the registrations of this backend's process id whose placeholder
 * this session does not hold: those of a session that is gone and had the
 * same process id, and this session's own that pg_advisory_unlock_all() or
 * DISCARD ALL let go of.  Inside SPI.  Maintenance passes clear out the
 * rest; this bounds what is left behind without them.
 */
static void
forget_own_dead_workers(void)
{
	Oid			argtypes[2] = {INT4OID, INT8ARRAYOID};
	Datum		values[2];
	Datum	   *ids;
	int			rc;

	forget_lost_locks();
	ids = palloc(Max(nown_workers, 1) * sizeof(Datum));
	for (int i = 0; i < nown_workers; i++)
		ids[i] = Int64GetDatum(own_workers[i].worker_id);
	values[0] = Int32GetDatum(MyProcPid);
	values[1] = PointerGetDatum(construct_array(ids, nown_workers, INT8OID,
												8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	rc = SPI_execute_with_args("DELETE FROM pgq.worker_registry "
							   "WHERE pid " OP("=") " $1 "
							   "AND worker_id " OP("<>") " ALL ($2)",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not clean up workers: %s", SPI_result_code_string(rc));
	pfree(ids);
}

/*
 * At the end of the top-level transaction: the workers it registered stay
 * with the session if it committed, and go if it aborted.  Allocates nothing
 * and cannot fail.
 */
static void
own_worker_xact_callback(XactEvent event, void *arg)
{
	for (int i = nown_workers - 1; i >= 0; i--)
	{
		if (own_workers[i].subid == InvalidSubTransactionId)
			continue;
		switch (event)
		{
			case XACT_EVENT_COMMIT:
			case XACT_EVENT_PARALLEL_COMMIT:
			case XACT_EVENT_PREPARE:
				own_workers[i].subid = InvalidSubTransactionId;
				break;
			case XACT_EVENT_ABORT:
			case XACT_EVENT_PARALLEL_ABORT:
				forget_own_worker(i);
				break;
			default:
				break;
		}
	}
}

/*
 * At the end of a subtransaction: the workers it registered go to the
 * parent on commit, and away on abort.
 */
static void
own_worker_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							SubTransactionId parentSubid, void *arg)
{
	for (int i = nown_workers - 1; i >= 0; i--)
	{
		if (own_workers[i].subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			own_workers[i].subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			forget_own_worker(i);
	}
}

/*
 * Make room to remember one more registered worker, before its placeholder
 * lock is taken: nothing may fail between taking a lock and remembering it.
 */
static void
reserve_worker(void)
{
	register_exit_callback();
	if (!own_worker_callbacks_registered)
	{
		RegisterXactCallback(own_worker_xact_callback, NULL);
		RegisterSubXactCallback(own_worker_subxact_callback, NULL);
		own_worker_callbacks_registered = true;
	}
	if (nown_workers >= maxown_workers)
	{
		int			newmax = Max(4, maxown_workers * 2);

		if (own_workers == NULL)
			own_workers = MemoryContextAlloc(TopMemoryContext,
											 newmax * sizeof(OwnWorker));
		else
			own_workers = repalloc(own_workers, newmax * sizeof(OwnWorker));
		maxown_workers = newmax;
	}
}

/*
 * Error out because the limit set by "setting" leaves no room for another
 * worker's placeholder lock.
 */
static void
report_worker_limit(const char *setting)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("cannot register another advisory-mode worker"),
			 errdetail_plural("The limit set by %s is reached; this session holds %d advisory lock (blocks and worker registrations).",
							  "The limit set by %s is reached; this session holds %d advisory locks (blocks and worker registrations).",
							  nheld + nown_workers, setting, nheld + nown_workers),
			 errhint("A worker's placeholder lock counts against the limits on advisory locks until its session ends.  Register once per session, or raise %s.",
					 setting)));
}

/*
 * Take a new worker id from pgq.worker_id_seq and its placeholder lock,
 * counted against the limits, and remember the worker, to be let go should
 * the (sub)transaction abort.  Inside SPI.
 *
 * Only a session from before DROP EXTENSION and CREATE EXTENSION can hold
 * the lock of an id that the sequence has not handed out: one whose
 * installation's key in lock tags is the same as this one's (see the top of
 * the file), which has not called pgq since.  Its lock names a worker that
 * is gone: the next id is taken instead.  Every turn takes a new id, and
 * those sessions hold finitely many locks.
 */
static int64
lock_new_worker(void)
{
	for (;;)
	{
		int64		worker_id;
		const char *setting;
		bool		isnull;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		rc = SPI_execute("SELECT pg_catalog.nextval('pgq.worker_id_seq')",
						 false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not take a worker id: %s",
				 SPI_result_code_string(rc));
		worker_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1,
												&isnull));
		SPI_freetuptable(SPI_tuptable);

		reserve_worker();
		setting = take_lock_budget();
		if (setting != NULL)
			report_worker_limit(setting);
		if (try_lock(worker_id, PGQ_LOCK_WORKER))
		{
			own_workers[nown_workers].worker_id = worker_id;
			own_workers[nown_workers].installation = installation;
			own_workers[nown_workers].subid = GetCurrentSubTransactionId();
			own_workers[nown_workers].role = budget_role;
			nown_workers++;
			return worker_id;
		}
		pgq_advisory_locks_give(budget_role);
	}
}

/*
 * pgq.register_worker(worker_name) -> bigint
 *
 * Register this session as an advisory-mode worker, and take the worker's
 * placeholder lock, counted against the limits on advisory locks as a
 * block's lock is.  The id comes from a logged sequence: ids never repeat,
 * not even across a crash.  Costs the same however many locks the cluster
 * holds: it does not read pg_locks.
 */
Datum
pgq_register_worker(PG_FUNCTION_ARGS)
{
	Oid			argtypes[4] = {TEXTOID, INT4OID, REGROLEOID, INT8OID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	int64		worker_id;
	int			rc;
	PgqScope	scope;

	pgq_check_not_in_recovery("register a worker");
	values[1] = Int32GetDatum(MyProcPid);

	pgq_enter(&scope);
	values[2] = ObjectIdGetDatum(pgq_caller);
	SPI_connect();

	check_installation();
	forget_own_dead_workers();

	if (PG_ARGISNULL(0))
		nulls[0] = 'n';
	else
		values[0] = PG_GETARG_DATUM(0);

	/* the lock first: the registry row says that its holder is alive */
	worker_id = lock_new_worker();
	values[3] = Int64GetDatum(worker_id);

	/* the registering role: pgq.workers shows a worker to its role only */
	if (get_attnum(get_relname_relid("worker_registry",
									 get_namespace_oid("pgq", false)),
				   "owner") != InvalidAttrNumber)
		rc = SPI_execute_with_args("INSERT INTO pgq.worker_registry "
								   "(worker_id, worker_name, pid, owner) "
								   "VALUES ($4, $1, $2, $3)",
								   4, argtypes, values, nulls, false, 0);
	else						/* a database not updated from 0.1 yet */
		rc = SPI_execute_with_args("INSERT INTO pgq.worker_registry "
								   "(worker_id, worker_name, pid) "
								   "VALUES ($4, $1, $2)",
								   4, argtypes, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "could not register worker: %s", SPI_result_code_string(rc));
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_INT64(worker_id);
}

/*
 * pgq.check_worker(worker_id) -> boolean
 *
 * True only if the worker's registry row exists and this session holds its
 * placeholder lock: false after a crash (the registry was emptied), a clean
 * restart or failover (the locks are gone), on another backend (a pooler
 * moved the client), and after pg_advisory_unlock_all() or DISCARD ALL.
 */
Datum
pgq_check_worker(PG_FUNCTION_ARGS)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	int64		worker_id;
	int			rc;
	bool		registered;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "worker_id");
	worker_id = PG_GETARG_INT64(0);
	check_installation();
	if (!lock_held(worker_id, PGQ_LOCK_WORKER, installation))
		PG_RETURN_BOOL(false);

	pgq_enter(&scope);
	SPI_connect();
	values[0] = Int64GetDatum(worker_id);
	rc = SPI_execute_with_args("SELECT FROM pgq.worker_registry "
							   "WHERE worker_id " OP("=") " $1",
							   1, argtypes, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read worker: %s", SPI_result_code_string(rc));
	registered = SPI_processed > 0;
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(registered);
}

/* Find the group of a block or item, if it is an advisory-mode one. */
static bool
lookup_advisory_block(int64 block_id, PgqGroup *group)
{
	return (pgq_lookup_block(block_id, group) ||
			pgq_lookup_item(block_id, group)) &&
		group->mode == PGQ_MODE_ADVISORY;
}

/*
 * pgq.relock(block_ids, worker_id) -> bigint[]
 *
 * Take back blocks and items after the session's locks were lost, or make
 * sure they are still held.  Returns the ids this session holds afterwards,
 * in the order given; the others were consumed or went to other workers.
 */
Datum
pgq_relock(PG_FUNCTION_ARGS)
{
	ArrayType  *input;
	Datum	   *elems;
	bool	   *elemnulls;
	int			nelems;
	Datum	   *regained;
	int			nregained = 0;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "block_ids");
	pgq_check_arg_not_null(fcinfo, 1, "worker_id");
	pgq_check_not_in_recovery("relock blocks");
	if (XactIsoLevel != XACT_READ_COMMITTED)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("pgq.relock() requires the READ COMMITTED isolation level"),
				 errdetail("An older snapshot could show a block that another worker has completed since."),
				 errhint("Start the transaction with BEGIN ISOLATION LEVEL READ COMMITTED.")));
	input = PG_GETARG_ARRAYTYPE_P(0);
	pgq_enter(&scope);
	pgq_advisory_check_worker_held(PG_GETARG_INT64(1));
	deconstruct_array(input, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &elemnulls, &nelems);
	regained = palloc(Max(nelems, 1) * sizeof(Datum));

	forget_lost_locks();

	SPI_connect();
	for (int i = 0; i < nelems; i++)
	{
		int64		block_id;
		PgqGroup	group;
		PgqClaimed block;

		CHECK_FOR_INTERRUPTS();
		if (elemnulls[i])
			continue;
		block_id = DatumGetInt64(elems[i]);
		reserve_held();
		if (!lookup_advisory_block(block_id, &group))
			continue;
		pgq_check_privilege(&group, PGQ_PRIV_CONSUME);
		if (holds_block(&group.ref, block_id))
		{
			regained[nregained++] = elems[i];
			continue;
		}
		pgq_xact_reserve(1);
		(void) may_lock_more(0);	/* errors out at a limit */

		/*
		 * A scan of one block, or item: counted before it is taken (C1 in
		 * shmem.c).  Should it end in an error, the hint goes back to the
		 * block, or to the start of the queue (an item's place is not known
		 * yet).
		 */
		pgq_xact_claiming(&group.ref,
						  group.kind == PGQ_KIND_QUEUE ? 0 : block_id);
		pgq_xact_claiming_count(1);
		if (take_block(&group, block_id, NULL, &block, CurrentMemoryContext))
			regained[nregained++] = elems[i];
		pgq_xact_claiming_done();
	}
	SPI_finish();
	pgq_leave(&scope);

	PG_RETURN_ARRAYTYPE_P(construct_array(regained, nregained, INT8OID, 8,
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}
