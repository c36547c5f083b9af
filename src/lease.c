/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Lease mode: claims that commit, with a deadline and an attempt number.
 *
 * A claim sets the block's state to 'c', counts an attempt, and sets
 * lease_until.  pgq.complete() deletes the block, pgq.extend() moves the
 * deadline, pgq.release() and pgq.fail() hand it back (state 'r', claimable
 * from lease_until on) or, once max_attempts is used up, dead-letter it
 * (state 'f').  Every one of them names the attempt it holds: once a lease
 * has run out and another consumer has claimed the block, the attempt is
 * higher, and the late holder's call changes nothing.
 *
 * A claim first takes blocks whose lease ran out or whose retry came due
 * (oldest first), then pending blocks from the group's hint, like a
 * transaction-mode claim.  No index names the columns a claim changes, and
 * pgq.blocks leaves more than half of each page free (fillfactor 45): a
 * claim is a HOT update, which writes no index entry.  Due blocks are found
 * by walking the group's blocks in flight instead (pgq_block_due()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/sysattr.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender_private.h"
#include "storage/bufmgr.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "blockscan.h"
#include "claim.h"
#include "due.h"
#include "lease.h"
#include "shmem.h"
#include "wait.h"
#include "xact.h"

/*
 * Lease claims and durability
 *
 * A transaction whose only writes are lease claims, outside a transaction
 * block, commits asynchronously: that is what makes a claim cheap.  The
 * decision is made when the transaction commits (pre-commit), as
 * RecordTransactionCommit() reads synchronous_commit only then: any other
 * write of the transaction, before or after the claim (an INSERT ... SELECT
 * FROM pgq.claim(), a complete), keeps the commit as durable as the caller
 * asked.  A write shows as an assigned transaction id before the first
 * claim, and as WAL records written between or after claims: every write
 * that a crash would not lose writes WAL (writes to temporary and unlogged
 * tables are lost anyway).  WAL that is no write (pruning a page during a
 * scan) makes the commit durable too, which is only slower.
 *
 * A claim lost in a crash must not let its attempt number be handed out
 * again.  Numbers are kept unique with an epoch: pgq.epoch_seq, taken once
 * per run of the server and database and made durable (see make_durable())
 * before anything uses it.  A run is what lies between two starts of the
 * server; a crash
 * restart and a promotion count as starts.  (A start after a clean shutdown
 * need not move the epoch, but this run cannot tell whether the run that
 * took the last epoch ended cleanly.)  A block records the epoch in which
 * its number was set, or it was made (pgq.blocks.epoch).  Two rules bound
 * what a crash can lose:
 *
 * - A claim of a block that was claimed before waits until the commit that
 *   wrote the block's current row version is durable.  So at most one
 *   number per block is not durable at any time: the last one.
 * - A claim of a block whose epoch is older than the run's skips one
 *   number per epoch since: attempt + 1 + (epoch - the block's epoch).  A
 *   run that began after the block's epoch lost at most attempt + 1 + (its
 *   epoch - the block's epoch), and the epochs only grow.
 *
 * "Durable" is what make_durable() waits for: on disk, and on the
 * synchronous standbys that a promotion may choose, whatever the caller's
 * synchronous_commit says.
 *
 * Without pgq in shared_preload_libraries there is no shared memory to
 * learn whether a run took its epoch: a backend would take one of its own,
 * and busy servers would run through the epochs.  There no claim commits
 * asynchronously (and every claiming transaction commits durably, whatever
 * synchronous_commit says), so no run loses a number, and claims use as
 * their epoch one more than the last value pgq.epoch_seq handed out, without
 * taking it: higher than the epoch of any run that may have lost numbers.
 *
 * max_attempts counts claims (pgq.blocks.tries), not numbers.  A database
 * still at 0.1 has neither column: there every lease claim commits durably
 * (the numbers handed out by a commit that is still in flight at a crash
 * can then come again).
 */
static bool claimed = false;	/* a lease claim in this transaction */
static bool claim_xact = false;		/* a claim outside a transaction block */
static bool other_writes = false;	/* ... and writes of the caller's own */
static bool durable_xact = false;	/* complete, release, fail */
static bool claim_running = false;	/* between claim begin and end */
static int64 claim_wal_mark = 0;	/* WAL records written when the last
									 * claim ended */

/* An epoch per database and run of the server, in shared memory. */
#define PGQ_EPOCH_SLOTS 64

typedef struct PgqEpochSlot
{
	Oid			dbid;
	Oid			seqid;			/* pgq.epoch_seq: a new extension starts over */
	int32		epoch;
} PgqEpochSlot;

typedef struct PgqEpochShared
{
	slock_t		mutex;
	PgqEpochSlot slots[PGQ_EPOCH_SLOTS];
} PgqEpochShared;

static PgqEpochShared *epoch_shared = NULL;

/*
 * This backend's epoch (of pgq.epoch_seq my_epoch_seq), valid for the
 * backend's life: a crash restart ends every backend.  Once the slots are
 * taken by other databases, each backend takes an epoch of its own, which
 * only skips more numbers.  Without shared memory, the epoch is not taken
 * but read (my_epoch_read), and claims commit durably (see above).
 */
static Oid	my_epoch_seq = InvalidOid;
static int32 my_epoch = 0;
static bool my_epoch_read = false;

/* The latest commit that this claim's numbers wait for (see above). */
static bool reclaimed = false;
static XLogRecPtr reclaimed_lsn = InvalidXLogRecPtr;

/* Size of the epoch slots, for the shmem request. */
Size
pgq_lease_shmem_size(void)
{
	return MAXALIGN(sizeof(PgqEpochShared));
}

/*
 * Attach to (or, in the postmaster, create) the epoch slots.  Called from
 * the shmem_startup_hook with AddinShmemInitLock held.
 */
void
pgq_lease_shmem_init(void)
{
	bool		found;

	epoch_shared = ShmemInitStruct("pgq lease epochs", sizeof(PgqEpochShared),
								   &found);
	if (!found)
	{
		SpinLockInit(&epoch_shared->mutex);
		memset(epoch_shared->slots, 0, sizeof(epoch_shared->slots));
	}
}

/*
 * Have the synchronous standbys flushed the WAL up to "lsn", or are there
 * none to wait for?  (As SyncRepWaitForLSN() decides, before the checkpointer
 * has published the setting, by the setting.)
 */
static bool
standbys_have(XLogRecPtr lsn)
{
	bool		defined;
	bool		have;

	LWLockAcquire(SyncRepLock, LW_SHARED);
#ifdef SYNC_STANDBY_DEFINED
	if (WalSndCtl->sync_standbys_status & SYNC_STANDBY_INIT)
		defined = (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED) != 0;
	else
		defined = SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';
#else
	defined = WalSndCtl->sync_standbys_defined;
#endif
	have = !defined || WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH] >= lsn;
	LWLockRelease(SyncRepLock);
	return have;
}

/*
 * Wait until the WAL up to "lsn" is flushed here and by the synchronous
 * standbys, which a promotion may choose: what attempt numbers wait for
 * before they are handed out.  The standbys are waited for whatever the
 * caller's synchronous_commit says (at least "on"), since a number must not
 * come again after a promotion even if the caller's own commits may be
 * lost.  With an invalid "lsn", only for the standbys, up to what is
 * flushed here.
 *
 * SyncRepWaitForLSN() ends its wait at a cancel with a warning, not an
 * error: then nothing may be handed out, and the cancel becomes an error
 * here.
 */
static void
make_durable(XLogRecPtr lsn)
{
	int			nestlevel;

	if (XLogRecPtrIsInvalid(lsn))
		lsn = GetFlushRecPtr(NULL);
	else
		XLogFlush(lsn);
	nestlevel = NewGUCNestLevel();
	if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
		(void) set_config_option("synchronous_commit", "on",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	HOLD_INTERRUPTS();
	SyncRepWaitForLSN(lsn, false);
	RESUME_INTERRUPTS();
	AtEOXact_GUC(true, nestlevel);
	if (!standbys_have(lsn))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling statement due to user request"),
				 errdetail("The synchronous standbys had not confirmed the attempt numbers of a lease claim.")));
}

/*
 * Read a sequence's tuple: the last value it handed out (or will hand out
 * next, if none yet), and the end of the WAL record that last changed it,
 * which makes the values it handed out durable, also those of later
 * nextval() calls that wrote no record of their own.  (The insert position
 * is no flush target: on a page boundary it points past the page header,
 * beyond any record.)  As sequence.c's read_seq_tuple(), but without the
 * privilege check: pgq reads its own sequence for whoever claims.
 */
static int64
read_sequence(Oid seqid, XLogRecPtr *lsn)
{
	Relation	rel = relation_open(seqid, AccessShareLock);
	Buffer		buf = ReadBuffer(rel, 0);
	Page		page;
	ItemId		lp;
	HeapTupleHeader tuple;
	int64		last_value;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	lp = PageGetItemId(page, FirstOffsetNumber);
	Assert(ItemIdIsNormal(lp));
	tuple = (HeapTupleHeader) PageGetItem(page, lp);
	last_value = ((Form_pg_sequence_data) ((char *) tuple + tuple->t_hoff))->last_value;
	*lsn = PageGetLSN(page);
	UnlockReleaseBuffer(buf);
	relation_close(rel, AccessShareLock);
	return last_value;
}

/*
 * This database's epoch slot for the sequence seqid, or NULL; with free_slot,
 * also the first slot a new epoch may take (empty, or of an extension of this
 * database dropped since), or NULL.  The caller holds the spinlock.
 */
static PgqEpochSlot *
epoch_slot(Oid seqid, PgqEpochSlot **free_slot)
{
	if (free_slot != NULL)
		*free_slot = NULL;
	for (int i = 0; i < PGQ_EPOCH_SLOTS; i++)
	{
		PgqEpochSlot *slot = &epoch_shared->slots[i];

		if (slot->dbid == MyDatabaseId && slot->seqid == seqid)
			return slot;
		if (free_slot != NULL && *free_slot == NULL &&
			(slot->dbid == InvalidOid || slot->dbid == MyDatabaseId))
			*free_slot = slot;
	}
	return NULL;
}

/*
 * Empty the epoch slots of databases dropped since they took them, so that
 * the slots do not run out on a server whose databases come and go.  The
 * catalog is read outside the spinlock; a slot is emptied only if it still
 * names the database found dropped.
 */
static void
free_dropped_slots(void)
{
	Oid			dbids[PGQ_EPOCH_SLOTS];

	SpinLockAcquire(&epoch_shared->mutex);
	for (int i = 0; i < PGQ_EPOCH_SLOTS; i++)
		dbids[i] = epoch_shared->slots[i].dbid;
	SpinLockRelease(&epoch_shared->mutex);

	for (int i = 0; i < PGQ_EPOCH_SLOTS; i++)
	{
		if (!OidIsValid(dbids[i]) ||
			SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dbids[i])))
			continue;
		SpinLockAcquire(&epoch_shared->mutex);
		if (epoch_shared->slots[i].dbid == dbids[i])
			epoch_shared->slots[i].dbid = InvalidOid;
		SpinLockRelease(&epoch_shared->mutex);
	}
}

/*
 * Know the epoch of this run for pgq.epoch_seq "seqid": from shared memory,
 * or taken by the first caller of the run (made durable first).  Callers
 * that race to take it may take one each; the first to publish wins, and
 * the others' numbers are skipped.  Without shared memory, read (see the
 * rules above).
 */
static void
know_epoch(Oid seqid)
{
	PgqEpochSlot *slot;
	PgqEpochSlot *free_slot;
	XLogRecPtr	lsn;
	int64		value;

	if (my_epoch_seq == seqid)
		return;
	if (epoch_shared == NULL)
	{
		value = read_sequence(seqid, &lsn) + 1;
		if (value > PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
					 errmsg("pgq.epoch_seq has reached its maximum value")));
		my_epoch = (int32) value;
		my_epoch_read = true;
		my_epoch_seq = seqid;
		return;
	}

	SpinLockAcquire(&epoch_shared->mutex);
	slot = epoch_slot(seqid, &free_slot);
	if (slot != NULL)
		my_epoch = slot->epoch;
	SpinLockRelease(&epoch_shared->mutex);
	if (slot != NULL)
	{
		my_epoch_seq = seqid;
		return;
	}
	if (free_slot == NULL)
		free_dropped_slots();

	/* the sequence is an integer one: an error before it goes too far */
	value = nextval_internal(seqid, false);
	(void) read_sequence(seqid, &lsn);
	make_durable(lsn);

	SpinLockAcquire(&epoch_shared->mutex);
	slot = epoch_slot(seqid, &free_slot);
	if (slot != NULL)
		value = slot->epoch;	/* another caller was first */
	else if (free_slot != NULL)
	{
		free_slot->dbid = MyDatabaseId;
		free_slot->seqid = seqid;
		free_slot->epoch = (int32) value;
	}
	SpinLockRelease(&epoch_shared->mutex);
	if (slot == NULL && free_slot == NULL)
		ereport(LOG,
				(errmsg("pgq: no epoch slot is free for database \"%s\": this connection takes an epoch of its own",
						get_database_name(MyDatabaseId)),
				 errdetail("All %d epoch slots are taken by other databases that used pgq since the server started.",
						   PGQ_EPOCH_SLOTS)));
	my_epoch = (int32) value;
	my_epoch_seq = seqid;
}

/*
 * The epoch to record in a block made now (a database at 0.2), for
 * materialization: see the rules above.
 */
int32
pgq_lease_epoch(void)
{
	know_epoch(pgq_rel_oid("epoch_seq"));
	return my_epoch;
}

#if PG_VERSION_NUM >= 170000
#define PGQ_OLDEST_CLOG_XID (TransamVariables->oldestClogXid)
#else
#define PGQ_OLDEST_CLOG_XID (ShmemVariableCache->oldestClogXid)
#endif

/*
 * The commit LSN of a row's xmin, or InvalidXLogRecPtr once pg_xact may no
 * longer hold its status: a row keeps its xmin for as long as nobody updates
 * it (a retry due in days, a lease in a paused group), and asking pg_xact
 * about a truncated xid is an error.  Such a commit is long durable.  As
 * TransactionIdInRecentPast() does, hold XactTruncationLock while asking.
 */
static XLogRecPtr
commit_lsn_if_known(TransactionId xid)
{
	XLogRecPtr	lsn = InvalidXLogRecPtr;

	LWLockAcquire(XactTruncationLock, LW_SHARED);
	if (!TransactionIdPrecedes(xid, PGQ_OLDEST_CLOG_XID))
		lsn = TransactionIdGetCommitLSN(xid);
	LWLockRelease(XactTruncationLock);
	return lsn;
}

/*
 * Note that this claim's numbers wait until the commit of "xmin" is durable:
 * it wrote a row version with an earlier number (see the rules above).
 */
static void
wait_for_commit_of(TransactionId xmin)
{
	if (TransactionIdIsCurrentTransactionId(xmin))
	{
		/*
		 * The row version is this transaction's own (it released the block,
		 * or failed it with a retry at once): the claim before is that of
		 * the version it changed, whose commit came before the change, and
		 * so before the WAL this transaction wrote.
		 */
		if (XactLastRecEnd > reclaimed_lsn)
			reclaimed_lsn = XactLastRecEnd;
	}
	else if (TransactionIdIsNormal(xmin))
	{
		XLogRecPtr	lsn = commit_lsn_if_known(xmin);

		if (lsn > reclaimed_lsn)
			reclaimed_lsn = lsn;
	}
	reclaimed = true;
}

/*
 * A lease-mode queue's claim moved an item whose row version had "xmin" back
 * to pending, to claim it again: the row version it claims is its own, and
 * the claim before is that of xmin.
 */
void
pgq_lease_promoted(TransactionId xmin)
{
	wait_for_commit_of(xmin);
}

/*
 * The attempt number of a new claim of a block (or a queue's item) whose
 * row version has "attempt", "epoch" (NULL in rows made before the update
 * from 0.1) and "xmin" (see the rules above).  Notes what the claim must
 * wait for before its numbers are handed out (pgq_lease_claim_done()).
 */
static int32
next_attempt(int32 attempt, bool epoch_isnull, int32 epoch,
			 TransactionId xmin)
{
	int64		next = (int64) attempt + 1;

	/* the claim before this one must be durable first */
	if (attempt > 0)
		wait_for_commit_of(xmin);

	if (epoch_isnull)
		next += my_epoch;
	else if (epoch < my_epoch)
		next += my_epoch - epoch;
	if (next > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("attempt number out of range")));
	return (int32) next;
}

/*
 * The attempt number of a new claim of the locked row in "slot" (every
 * column extracted), a block or a queue's item, whose attempt and epoch are
 * columns attempt_att and epoch_att: next_attempt(), once the claim learned
 * the epoch (pgq_lease_epoch()).
 */
int32
pgq_lease_next_attempt(TupleTableSlot *slot, AttrNumber attempt_att,
					   AttrNumber epoch_att)
{
	bool		isnull;
	TransactionId xmin;

	xmin = DatumGetTransactionId(slot_getsysattr(slot,
												 MinTransactionIdAttributeNumber,
												 &isnull));
	return next_attempt(DatumGetInt32(slot->tts_values[attempt_att - 1]),
						slot->tts_isnull[epoch_att - 1],
						DatumGetInt32(slot->tts_values[epoch_att - 1]), xmin);
}

/*
 * Wait for what next_attempt() noted: the claims before this one of the
 * blocks (and items) it took again.
 */
static void
wait_reclaimed(void)
{
	if (reclaimed)
		make_durable(reclaimed_lsn);
	reclaimed = false;
	reclaimed_lsn = InvalidXLogRecPtr;
}

/*
 * Complete, release and fail are durable: the transaction that made them
 * commits as the caller's setting says, even if it also claimed.
 */
void
pgq_lease_durable(void)
{
	durable_xact = true;
}

/*
 * A lease claim (or a lease-mode queue's) begins.  Outside a transaction
 * block, its transaction may commit asynchronously if it writes nothing
 * else: note whether it wrote before.  pgq.claim() calls this before its
 * attempts, and each attempt again: WAL between the two (a page pruned
 * while planning) is the claim's.
 */
void
pgq_lease_claim_async(void)
{
	claimed = true;
	if (IsTransactionBlock() || claim_running)
		return;
	if (!claim_xact)
	{
		claim_xact = true;
		other_writes = TransactionIdIsValid(GetTopTransactionIdIfAny());
	}
	else if (pgWalUsage.wal_records != claim_wal_mark)
		other_writes = true;
	claim_running = true;
}

/*
 * A lease claim ended: before its numbers are handed out, wait for the
 * claims before them (next_attempt()).  WAL written from here on is someone
 * else's.
 */
void
pgq_lease_claim_done(void)
{
	wait_reclaimed();
	claim_running = false;
	if (claim_xact)
		claim_wal_mark = pgWalUsage.wal_records;
}

/*
 * At pre-commit, make the commit of a transaction that only claimed
 * asynchronous; or, with an epoch that was read, not taken, the commit of
 * any transaction that claimed durable.  The setting goes back at the end of
 * the transaction.
 */
static void
lease_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT || !claimed)
		return;
	if (my_epoch_read)
	{
		if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
			(void) set_config_option("synchronous_commit", "on",
									 PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
	}
	else if (claim_xact && !other_writes && !durable_xact &&
			 pgWalUsage.wal_records == claim_wal_mark)
		(void) set_config_option("synchronous_commit", "off",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * A subtransaction aborted: a claim in it ended without saying so, and what
 * it wrote cannot be told from what the caller writes next.  The commit
 * stays durable.
 */
static void
lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && claim_running)
	{
		claim_running = false;
		other_writes = true;
	}
}

/* Module load: watch commits for claims that may commit asynchronously. */
void
pgq_lease_init(void)
{
	RegisterXactCallback(lease_xact_callback, NULL);
	RegisterSubXactCallback(lease_subxact_callback, NULL);
}

/* The transaction ended: a new one starts with its own setting. */
void
pgq_lease_xact_end(void)
{
	claimed = false;
	claim_xact = false;
	other_writes = false;
	durable_xact = false;
	claim_running = false;
	reclaimed = false;
	reclaimed_lsn = InvalidXLogRecPtr;
}

/*
 * Where a claim changes pgq.blocks: the table, its kept indexes and a scan
 * of its primary key (pgq_writer_open()).  Mostly there are no index
 * entries to add: a claim is a HOT update when the block's page has room.
 */
typedef struct BlockWriter
{
	PgqRowWriter row;
	bool		fenced;			/* pgq.blocks has tries and epoch (0.2) */
} BlockWriter;

/* Open pgq.blocks to claim blocks, and learn the epoch or make it durable. */
static void
writer_open(BlockWriter *w)
{
	pgq_writer_open(&w->row, "blocks", "blocks_pkey");
	w->fenced = RelationGetDescr(w->row.scan.heap)->natts >= Anum_blocks_epoch;
	if (w->fenced)
		know_epoch(pgq_rel_oid("epoch_seq"));
	else
		pgq_lease_durable();
}

/* The claims counted of the locked block in w->row.scan.slot (fenced only). */
static int32
block_tries(BlockWriter *w)
{
	TupleTableSlot *old = w->row.scan.slot;

	/* not claimed since the update from 0.1: its attempt counts them */
	if (old->tts_isnull[Anum_blocks_tries - 1])
		return DatumGetInt32(old->tts_values[Anum_blocks_attempt - 1]);
	return DatumGetInt32(old->tts_values[Anum_blocks_tries - 1]);
}

/*
 * Replace the locked block in w->row.scan.slot by a copy with state "state",
 * attempt "attempt", lease_until "until" (0: NULL) and, with "error" not
 * NULL, that last_error.  A claim ("claim") also counts a try and records
 * the epoch.
 */
static void
writer_update(BlockWriter *w, char state, int32 attempt, bool claim,
			  TimestampTz until, const char *error)
{
	TupleTableSlot *newslot = pgq_writer_new_version(&w->row);

	newslot->tts_values[Anum_blocks_state - 1] = CharGetDatum(state);
	newslot->tts_values[Anum_blocks_attempt - 1] = Int32GetDatum(attempt);
	newslot->tts_values[Anum_blocks_lease_until - 1] = TimestampTzGetDatum(until);
	newslot->tts_isnull[Anum_blocks_lease_until - 1] = until == 0;
	if (claim && w->fenced)
	{
		newslot->tts_values[Anum_blocks_tries - 1] = Int32GetDatum(block_tries(w) + 1);
		newslot->tts_isnull[Anum_blocks_tries - 1] = false;
		newslot->tts_values[Anum_blocks_epoch - 1] = Int32GetDatum(my_epoch);
		newslot->tts_isnull[Anum_blocks_epoch - 1] = false;
	}
	if (error != NULL)
	{
		MemoryContext oldcxt;

		oldcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(w->row.estate));
		newslot->tts_values[Anum_blocks_last_error - 1] = CStringGetTextDatum(error);
		newslot->tts_isnull[Anum_blocks_last_error - 1] = false;
		MemoryContextSwitchTo(oldcxt);
	}
	pgq_writer_update(&w->row);
}

/*
 * Claim the locked block in w->row.scan.slot until "until", under the next
 * attempt number, and hand it to the caller.
 */
static void
writer_claim(BlockWriter *w, TimestampTz until, PgqClaimed *block,
			 MemoryContext cxt)
{
	TupleTableSlot *old = w->row.scan.slot;
	int32		attempt = DatumGetInt32(old->tts_values[Anum_blocks_attempt - 1]);
	MemoryContext oldcxt;

	if (w->fenced)
		attempt = pgq_lease_next_attempt(old, Anum_blocks_attempt,
										 Anum_blocks_epoch);
	else
		attempt++;
	writer_update(w, PGQ_BLOCK_CLAIMED, attempt, true, until, NULL);

	oldcxt = MemoryContextSwitchTo(cxt);

	memset(block, 0, sizeof(PgqClaimed));
	block->id = DatumGetInt64(old->tts_values[Anum_blocks_block_id - 1]);
	block->ids = PointerGetDatum(PG_DETOAST_DATUM_COPY(old->tts_values[Anum_blocks_ids - 1]));
	block->attempt = attempt;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Take up to "limit" blocks whose lease ran out or whose retry came due,
 * oldest deadline first, as walks of the group's blocks in flight find them
 * (pgq_block_due()): usually there is none.  Each is read again at the row
 * version the walk saw, and locked as pending blocks are; one that had its
 * last attempt already (its lease ran out, or it was released) is
 * dead-lettered instead, and does not count.  Due blocks left over wake the
 * group's waiting claims, which did not look while this one did.
 */
static int
claim_due(const PgqGroup *group, int limit, TimestampTz now,
		  TimestampTz until, PgqClaimed *blocks, MemoryContext cxt)
{
	int			n = 0;
	int64		widen = 1;

	while (n < limit)
	{
		/*
		 * Some candidates may be held by other claims: look at a few more,
		 * and twice as far again after a full window of them.
		 */
		int			max = (int) Min(((int64) Min(limit - n, INT_MAX / 4) * 2 + 16) *
									widen, INT_MAX / 4);
		BlockWriter w;
		PgqDueBlock *due;
		int			ndue;
		int			changed = 0;
		int			i;

		ndue = pgq_block_due(&group->ref, now, max, &due);
		if (ndue == 0)
			break;

		writer_open(&w);
		for (i = 0; i < ndue && n < limit; i++)
		{
			TupleTableSlot *old = w.row.scan.slot;
			bool		isnull;
			char		state;
			int32		attempt;

			CHECK_FOR_INTERRUPTS();
			if (!table_tuple_fetch_row_version(w.row.scan.heap, &due[i].tid,
											   w.row.scan.snapshot, old))
				continue;		/* changed since the walk */
			pgq_xact_claiming_count(limit - n);
			if (!pgq_writer_lock(&w.row))
				continue;

			/* the TID may hold another row now: check everything again */
			state = DatumGetChar(old->tts_values[Anum_blocks_state - 1]);
			if (DatumGetInt64(old->tts_values[Anum_blocks_group_id - 1]) != group->ref.group_id ||
				(state != PGQ_BLOCK_CLAIMED && state != 'r') ||
				old->tts_isnull[Anum_blocks_lease_until - 1] ||
				DatumGetTimestampTz(old->tts_values[Anum_blocks_lease_until - 1]) > now)
				continue;

			attempt = DatumGetInt32(old->tts_values[Anum_blocks_attempt - 1]);
			changed++;
			if ((w.fenced ? block_tries(&w) : attempt) >= group->max_attempts)
			{
				const char *error = NULL;

				(void) slot_getattr(old, Anum_blocks_last_error, &isnull);
				if (state == PGQ_BLOCK_CLAIMED)
					error = "lease expired";
				else if (isnull)
					error = "released on its last attempt";
				writer_update(&w, 'f', attempt, false, 0, error);
				/* that must stay, even if nothing else is claimed */
				pgq_claim_changed_more();
				continue;
			}
			writer_claim(&w, until, &blocks[n++], cxt);
		}
		pgq_writer_close(&w.row, changed > 0);
		pfree(due);

		if (n == limit && (i < ndue || ndue == max))
			pgq_wake_group(&group->ref);

		/* the walk kept only the earliest "max": look again for the rest */
		if (ndue < max || max >= INT_MAX / 4)
			break;
		if (changed == 0)
			widen *= 2;
	}
	return n;
}

/*
 * Take up to "limit" pending blocks from block id "from" on: every lease
 * claim's work, done without SQL (see blockscan.c).  The primary key is
 * walked as in transaction mode (claim.c); each pending block is locked,
 * skipping those that other transactions are changing (claiming), as FOR
 * UPDATE SKIP LOCKED would, and those changed since the scan's snapshot,
 * which are no longer pending, and then updated to claimed.  *next gets
 * where the hint may move: past the last block taken (0 if none), but not
 * past the first that another transaction only row-locks
 * (pgq_writer_only_locked(): a purge or a late holder that met a retried
 * block), since that lock's end lowers no hint (H1 in shmem.c).
 */
static int
claim_pending(const PgqGroup *group, int64 from, int limit,
			  TimestampTz until, PgqClaimed *blocks, MemoryContext cxt,
			  int64 *next)
{
	BlockWriter w;
	int			n = 0;
	int64		locked = 0;		/* the first block only row-locked */

	*next = 0;
	writer_open(&w);
	for (int pass = 0; pass < 2 && n < limit; pass++)
	{
		pgq_block_scan_claim_pass(&w.row.scan, group->ref.group_id, from, limit,
								  pass);

		while (n < limit && pgq_block_scan_next(&w.row.scan))
		{
			TupleTableSlot *old = w.row.scan.slot;

			slot_getallattrs(old);
			if (DatumGetChar(old->tts_values[Anum_blocks_state - 1]) != 'p')
				continue;
			pgq_xact_claiming_count(limit - n);
			if (!pgq_writer_lock(&w.row))
			{
				if (locked == 0 && pgq_writer_only_locked(&w.row))
					locked = DatumGetInt64(old->tts_values[Anum_blocks_block_id - 1]);
				continue;
			}
			writer_claim(&w, until, &blocks[n++], cxt);
			if (locked == 0)
				*next = blocks[n - 1].id + 1;
			PGQ_INJECTION_POINT("pgq-lease-scan-taken");
		}
	}
	pgq_writer_close(&w.row, n > 0);
	if (locked > 0 && n > 0)
		*next = Max(*next, locked);
	return n;
}

/*
 * Claim up to max_blocks blocks of a lease-mode group: due ones first, then
 * pending ones from the hint, then pending ones below it (see claim.c).
 * Outside a transaction block, a transaction that only claims commits
 * asynchronously: losing the claim in a crash only offers the block again,
 * under a new attempt number.
 */
int
pgq_lease_claim(const PgqGroup *group, int max_blocks, PgqClaimed *blocks,
				MemoryContext cxt)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = pgq_time_after(now, &group->lease);
	int64		hint;
	uint64		gen;
	int64		next;
	int			n;
	int			got;

	pgq_lease_claim_async();

	/*
	 * Each step is a scan counted ahead (C1 in shmem.c), whose blocks are
	 * remembered when it ends, so that an error in it or in a later step (a
	 * cancel during a long scan, say) wakes the waiting claims, and lowers
	 * the hint for what a scan of pending blocks took.  Due blocks are not
	 * pending: their scan leaves the hint where it is (PG_INT64_MAX).
	 */
	pgq_xact_reserve(max_blocks);

	pgq_xact_claiming(&group->ref, PG_INT64_MAX);
	n = claim_due(group, max_blocks, now, until, blocks, cxt);
	pgq_xact_remember_lease(&group->ref, blocks, n, until);
	pgq_xact_claiming_done();
	if (n < max_blocks)
	{
		(void) pgq_claim_hint(&group->ref, &hint, &gen);
		pgq_xact_claiming(&group->ref, hint);
		got = claim_pending(group, hint, max_blocks - n, until, blocks + n, cxt,
							&next);
		pgq_xact_remember_lease(&group->ref, blocks + n, got, until);
		pgq_xact_claiming_done_advance(gen, next);
		n += got;

		/*
		 * Committed leases are rows, not in the shared claimed count: look
		 * below the hint only at the rate pgq_full_scan_due() allows.
		 */
		if (n < max_blocks && hint > 0 && pgq_full_scan_due(&group->ref, -1))
		{
			pgq_xact_claiming(&group->ref, 0);
			got = claim_pending(group, 0, max_blocks - n, until, blocks + n, cxt,
								&next);
			pgq_xact_remember_lease(&group->ref, blocks + n, got, until);
			if (got > 0)
				pgq_hint_lower(&group->ref, blocks[n].id);
			n += got;
			pgq_xact_claiming_done();
		}
	}
	pgq_lease_claim_done();
	qsort(blocks, n, sizeof(PgqClaimed), pgq_compare_claimed);
	return n;
}

/*
 * Does pgq.blocks have the columns of fenced attempt numbers, tries and
 * epoch?  Not in a database still at 0.1.
 */
bool
pgq_blocks_fenced(void)
{
	return get_attnum(pgq_rel_oid("blocks"), "epoch") != InvalidAttrNumber;
}

/*
 * Run one of the statements below on the block held under "attempt".  True
 * if it changed the block: the caller held it.
 */
static bool
change_held_block(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
				  Datum *values, int expected_rc)
{
	int			rc;

	if (*plan == NULL)
		*plan = pgq_keep_plan(sql, nargs, argtypes);
	rc = SPI_execute_plan(*plan, values, NULL, false, 0);
	if (rc != expected_rc)
		elog(ERROR, "could not change block: %s", SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/*
 * The block held under "attempt".  Naming the group as well makes this a
 * primary key lookup, which no other index can win in the planner.
 */
#define HELD_BY_ATTEMPT \
	"WHERE group_id " OP("=") " $1 AND block_id " OP("=") " $2 " \
	"AND state " OP("=") " 'c' AND attempt " OP("=") " $3"

/*
 * Consume a block held under "attempt", without SQL (see blockscan.c): it
 * is every lease cycle's second half.  Waiters learn at commit whether the
 * group can yield more.
 */
bool
pgq_lease_complete(const PgqGroup *group, int64 block_id, int32 attempt)
{
	if (!pgq_block_delete(group->ref.group_id, block_id, &attempt))
		return false;
	pgq_lease_durable();
	pgq_xact_wake_at_commit(&group->ref);
	return true;
}

/*
 * Give a block back at once.  The next claim counts a new attempt: that is
 * what keeps this holder's attempt number from being valid again.
 */
bool
pgq_lease_release(const PgqGroup *group, int64 block_id, int32 attempt)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[4] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(group->ref.group_id),
		Int64GetDatum(block_id), Int32GetDatum(attempt),
	TimestampTzGetDatum(GetCurrentTimestamp())};

	if (!change_held_block(&plan,
						   "UPDATE pgq.blocks SET state = 'r', lease_until = $4 "
						   HELD_BY_ATTEMPT,
						   4, argtypes, values, SPI_OK_UPDATE))
	{
		pgq_xact_late_holder_locked(&group->ref);
		return false;
	}
	pgq_lease_durable();
	pgq_announce_claimable(&group->ref, group->name);
	return true;
}

/*
 * Record a failed attempt: the block is retried after retry_after (at once
 * if NULL), or dead-lettered with the error if it had its last attempt.
 */
bool
pgq_lease_fail(const PgqGroup *group, int64 block_id, int32 attempt,
			   text *error, Interval *retry_after)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	Oid			argtypes[6] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID,
	TEXTOID, INT4OID};
	bool		fenced = pgq_blocks_fenced();
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	TimestampTz now = GetCurrentTimestamp();
	int			rc;

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(block_id);
	values[2] = Int32GetDatum(attempt);
	values[3] = TimestampTzGetDatum(retry_after ? pgq_time_after(now, retry_after) : now);
	values[4] = PointerGetDatum(error);
	if (error == NULL)
		nulls[4] = 'n';
	values[5] = Int32GetDatum(group->max_attempts);

	/* the tries that max_attempts counts; at 0.1, the attempt number */
#define FAIL_BLOCK(tries) \
	"UPDATE pgq.blocks SET " \
	"state = CASE WHEN " tries " " OP(">=") " $6 " \
	"THEN 'f'::pg_catalog.\"char\" " \
	"ELSE 'r'::pg_catalog.\"char\" END, " \
	"lease_until = CASE WHEN " tries " " OP(">=") " $6 " \
	"THEN NULL ELSE $4 END, " \
	"last_error = $5 " \
	HELD_BY_ATTEMPT
	if (plans[fenced] == NULL)
		plans[fenced] = pgq_keep_plan(fenced ?
									  FAIL_BLOCK("COALESCE(tries, attempt)") :
									  FAIL_BLOCK("attempt"),
									  6, argtypes);
#undef FAIL_BLOCK
	rc = SPI_execute_plan(plans[fenced], values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not fail block: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		pgq_xact_late_holder_locked(&group->ref);
		return false;
	}
	pgq_lease_durable();
	pgq_announce_claimable(&group->ref, group->name);
	return true;
}

/* Move the deadline of a block held under "attempt" to now() + lease. */
bool
pgq_lease_extend(const PgqGroup *group, int64 block_id, int32 attempt,
				 Interval *lease)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[4] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(group->ref.group_id),
		Int64GetDatum(block_id), Int32GetDatum(attempt),
	TimestampTzGetDatum(pgq_time_after(GetCurrentTimestamp(), lease))};

	if (!change_held_block(&plan,
						   "UPDATE pgq.blocks SET lease_until = $4 "
						   HELD_BY_ATTEMPT,
						   4, argtypes, values, SPI_OK_UPDATE))
	{
		pgq_xact_late_holder_locked(&group->ref);
		return false;
	}
	pgq_xact_wake_on_abort(&group->ref);
	return true;
}
