/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Per-group state kept in shared memory: the claim hint and the count of
 *	  blocks (and items) held by open transactions and sessions.
 *
 * Nothing here is ever written to a table: a per-group counter row would
 * serialise every consumer, and a claim that scans the blocks index from its
 * head would walk the dead entries of every consumed block.  Instead each
 * group has an entry, keyed by (database, group id): the claim hint, the
 * count of blocks held by open transactions and sessions, what the last
 * look for due blocks found, and how far such looks must walk.  What each
 * field promises is listed once, as invariants, above struct PgqGroupEntry
 * below; the functions that read or write a field name the invariants they
 * rely on or keep.  Each field was measured against a build without it
 * (bench/ab; see bench/README.md).
 *
 * The hash table holds at most pgq.max_groups entries.  When it is full, the
 * entry of a group without claims in flight makes room; when every entry has
 * claims in flight, the new group is claimed from the start of its index and
 * claimed counts of groups without an entry become unknown (NULL) until the
 * claims that could not be counted end (uncounted; C2).  No claim is ever
 * wrong, only slower, and a waiting claim whose group's count is unknown
 * does not take the group for exhausted.  So that one role cannot take the
 * table, each entry is charged to the role whose call made it, and a role
 * holds at most pgq.max_groups_per_role entries: past that, its new entry
 * takes the place of one of its own idle entries, or its group goes without
 * one.
 *
 * The advisory locks that pgq counts (pgq.max_locks) are also counted per
 * role (pgq.max_locks_per_role), in a second table keyed by role, which
 * holds the entries charged to each role as well.
 *
 * The entries vanish with shared memory on a crash restart, which is exactly
 * right: every claim of a transaction-mode group died with its backend.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "pgq.h"
#include "privilege.h"
#include "shmem.h"

#define PGQ_SHMEM_VERSION	6

typedef struct PgqGroupKey
{
	Oid			dbid;
	int64		group_id;
} PgqGroupKey;

/*
 * A group's entry.  The invariants below hold whenever the entry's mutex is
 * free.  One rule covers them all: a field that describes the group's rows
 * changes only once the change it describes is visible, at or after the
 * commit that made it (xact.c's callbacks), with two exceptions that only
 * make claims look more: the hint may be lowered and "claimed" raised at
 * any time.  "Unique" generations come from gen_seed, so that no entry ever
 * reuses one, not even an entry made again after an eviction.
 *
 * The claim hint: where claims of pending blocks start.
 *	H1	No pending block has an id below "hint", except blocks that an open
 *		transaction or a session (advisory mode) holds, which lower the
 *		hint when they give one back (an abort, an advisory release, a
 *		retry's commit, a scan cut short by an error), and blocks let go
 *		without pgq knowing (a row lock or an advisory lock taken or
 *		dropped by hand), which only full scans find (F1).  A lease claim
 *		does not move the hint past a pending block that another
 *		transaction only row-locks: an UPDATE or DELETE keeps such a lock on
 *		a row it found changed (a purge or a late holder that met a retry),
 *		and its end lowers nothing.
 *	H2	Every call that lowers the hint (even to where it is) sets "gen" to
 *		a new unique value.  A claim raises the hint, past blocks its scan
 *		found consumed or held, only if "gen" is still the one it read
 *		before the scan.
 *	Worth 25-30% of lease and advisory claims, 8% of transaction-mode ones,
 *	and the dead index entries of every consumed block (sql/hint.sql).
 *	A queue's hint is a place in claim order instead (pgq_item_position():
 *	priority, then item id), and H1 and H2 hold with items for blocks: what
 *	makes an item pending (an enqueue, an ordering key handed on, a retry,
 *	a release, a lease or retry come due) lowers the hint to it at commit
 *	(pgq_xact_remember_pending()), a lease or transaction-mode claim's
 *	abort lowers it to what the claim took, such a claim does not move it
 *	past an item that another transaction only row-locks (whose end lowers
 *	nothing: an UPDATE keeps such a lock on a row it found changed, as a
 *	late holder's extend, release or fail of an item moved back to pending
 *	does), a session that gives an advisory item back lowers it at once,
 *	and a full scan finds what was let go by hand, what a prepared
 *	transaction made pending (COMMIT PREPARED lowers nothing), and an
 *	advisory item that a retry made pending between its holder's commit
 *	and its unlock (the holder does not lower the hint for an item it
 *	finished).  A transaction-mode queue's retries that came due are
 *	claimed by SQL, from items_due_idx, without a hint.
 *	Worth the walk of the index entries of every item finished since the
 *	last vacuum, which took a quarter of an advisory item's cycle after
 *	10 s (186 pages per claim).
 *
 * Blocks held by open transactions, and by sessions (advisory mode).
 *	C1	"claimed" + "scanning" is at least the number of the group's
 *		blocks that open transactions or sessions hold: claimed in
 *		transaction mode, leases and retries not committed yet, advisory
 *		locks.  A pending block is counted before it is taken, so before
 *		any claim can pass it over and move the hint past it, and a block
 *		given back leaves the count only after the hint was lowered to it:
 *		a claim that reads the count and then the hint, and finds no claims
 *		but its own, reads a hint at or below every claimable block (except
 *		as C2 says).  A scan for pending blocks adds the most it may take
 *		to "scanning" when it finds its first candidate, and when it ends
 *		takes that back and adds what it took to "claimed"
 *		(pgq_xact_claiming_count()).  Pending items of every mode are
 *		counted so too, and lease mode's due blocks (claim_due()); advisory
 *		mode's due blocks and pgq.relock's block each as a scan of one.  The
 *		retries of transaction-mode queues that came due are counted right
 *		after they are taken: a queue is never taken for exhausted.
 *	C2	Claims made while their group had no entry (the table was full)
 *		are counted in the group's slot of "uncounted" instead, and an
 *		entry made for the group later may be given them back when they
 *		end: it then counts too few.  Such an entry is "unsure": made while
 *		its slot was not 0, or found by a claim that had just counted into
 *		the slot.  The count of an unsure entry is not known (NULL) until
 *		the slot is 0 again: the claims it held have ended, and nothing is
 *		owed.  (Waiting claims learn that at their next recheck.)
 *	C3	A commit that brings "claimed" down to "wait_floor" wakes the
 *		group's waiting claims (advisory mode's releases and completions
 *		wake them whatever the count): "wait_floor" is at least what any
 *		waiting claim holds of the group itself (0 for most), raised as the
 *		claim reads the count, and set back to 0 by the wake.  A waiting
 *		claim kept asleep only by what scans counted ahead ("claimed" at
 *		or below what it holds, "scanning" not 0), whether it read the
 *		count so or a commit made it so, is owed a wake ("wake_owed"),
 *		which the scan that brings "scanning" to 0 gives.
 *	It is group_stats.claimed, and tells waiting claims that a group is
 *	exhausted (no block can come back) and full scans when they may run.
 *
 * Full scans below the hint: a rule of rate, not a promise about rows.
 *	F1	A claim that came up short scans the group from its start when the
 *		count says that no other transaction holds blocks of it (a count
 *		not known says nothing), and otherwise at most once a second
 *		("last_full_scan"), so that consumers polling the end of a
 *		group do not each walk its dead entries.  Lease claims, whose
 *		committed leases the count does not hold, and transaction-mode
 *		claims of queues, which consumers poll when empty, go by the rate
 *		alone.
 *	Worth 34 times the claims at the end of a group of 10,000 leased blocks
 *	(bench/ab's lease_poll).
 *
 * Due blocks: leases that ran out, retries that came due.  No index is kept
 * on the deadlines (claims would not be HOT updates); looks walk the
 * group's primary key instead (due.c).
 *	D1	If "due_checked" is not 0, no lease of the group ends and no retry
 *		comes due before "due_from": so found a look that began at
 *		"due_checked", trusted for PGQ_DUE_TRUST after it.  Every commit that
 *		may bring a deadline sooner keeps this true: a lease claim's lowers
 *		"due_from" to its lease's end (pgq_due_lower()); any other (release,
 *		fail, SQL by hand) forgets: "due_checked" 0, a new unique "due_gen",
 *		"due_looking" 0 (pgq_due_forget()).
 *	D2	A look records what it found only if "due_gen" has not changed
 *		since it began: its snapshot may predate the change that forgot.
 *	D3	"due_lowered" is the earliest lease end committed since the last
 *		record; a record sets "due_from" no later than that, since the
 *		look's snapshot may not show those leases.
 *	D4	While "due_looking" is not 0, and for at most PGQ_DUE_TRUST, one
 *		claim is looking (the one that began at that time), and the others
 *		go on without looking: looks that overlap are correct, and the one
 *		looking wakes the group's waiting claims for the due blocks it
 *		leaves, or, should it end in an error, for all of them
 *		(pgq_block_due_abort()).  Worth 15% of single lease claims (nothing
 *		measurable on batches).
 *	D1 has exceptions, each seen within PGQ_DUE_TRUST by claims (the
 *	maintenance worker trusts a record until its time): a deadline brought
 *	sooner by a prepared transaction's commit or by SQL with the trigger
 *	disabled, and a look that recorded after another one did (see
 *	pgq_due_found()).  A lease-mode queue's look (promote_due() in
 *	queue.c) holds D1 to D4 with items for blocks, except that it sees no
 *	deadline beyond its time: it records none due for PGQ_DUE_TRUST (lease
 *	claims lower that at commit as for blocks), and a delayed item or a
 *	retry that comes due within that time is moved back to pending up to
 *	that much later.  What brings an item's deadline sooner forgets at
 *	commit: SQL, through the trigger pgq.items_inflight (a fail, an
 *	ordering key handed on to a retry), and a delayed enqueue, which
 *	writes without SQL.  A look that saw its transaction's own writes is
 *	forgotten if the transaction aborts (xact.c).
 *	Worth 27% of single lease claims and 40% of batches of 100.
 *
 * How far a look for due blocks walks.
 *	B1	If "inflight_epoch" is the epoch of the trigger in place
 *		(pgq_block_inflight_epoch(); 0: not known), no committed row version
 *		of a block above "inflight_max" is claimed under a lease or waits for
 *		a retry (state 'c' or 'r'), once the commit callbacks of the
 *		transactions that committed it ran.  Those commits raise it: lease
 *		claims (xact.c) and SQL (the trigger pgq.blocks_inflight).  A walk
 *		whose snapshot shows a claim may thus read the bound from before its
 *		raise; the claim is counted until after it (C1), which is how
 *		pgq_group_exhausted() learns that its walk may have missed a lease.
 *		(SQL's raise is counted by nothing: a block leased by hand may be
 *		missed so for as long as its commit takes.)  A walk whose snapshot
 *		is older than the walk that learned the bound may see above it a
 *		version since deleted or dead-lettered: blocks leave 'c' and 'r' no
 *		other way, so that version never comes due.
 *		SQL run while the trigger was missing or disabled raised nothing:
 *		the epoch then differs, and the next look walks the whole group.
 *	B2	"inflight_gen" is unique to each making of the entry: a walk of the
 *		whole group learns the bound only into the entry it began with.
 *	Worth 19% of single lease claims and 24% of batches in a group of a
 *	million blocks (once a second, a look walks the group up to the bound).
 */
typedef struct PgqGroupEntry
{
	PgqGroupKey key;			/* hash key: must be first */
	TimestampTz created_at;		/* which incarnation of the group id */
	Oid			role;			/* charged with the entry; fixed */
	slock_t		mutex;			/* protects the fields below */
	int64		hint;			/* H1 */
	uint64		gen;			/* H2 */
	int64		claimed;		/* C1 */
	int64		scanning;		/* C1, C3 */
	int64		wait_floor;		/* C3 */
	bool		unsure;			/* C2 */
	bool		wake_owed;		/* C3 */
	TimestampTz last_full_scan; /* F1 */
	TimestampTz due_from;		/* D1 */
	TimestampTz due_checked;	/* D1 */
	uint64		due_gen;		/* D1, D2 */
	TimestampTz due_lowered;	/* D3 */
	TimestampTz due_looking;	/* D4 */
	int64		inflight_max;	/* B1 */
	uint64		inflight_epoch; /* B1 */
	uint64		inflight_gen;	/* B2 */
} PgqGroupEntry;

/*
 * PGQ_DUE_TRUST (shmem.h), how long a look for due blocks is trusted, is the
 * bound on how late a claim sees a deadline that no commit announced (one
 * changed by a prepared transaction, or by an UPDATE with the trigger
 * disabled), or one that a look recorded after a later look had (the
 * exceptions to D1).
 */

/* What a role holds of the shared resources (see the file header). */
typedef struct PgqRoleEntry
{
	Oid			role;			/* hash key */
	int32		locks;			/* advisory locks counted for it */
	int32		entries;		/* group entries charged to it */
	int32		materializations;	/* asynchronous ones running */
} PgqRoleEntry;

/*
 * Claims in flight that no entry counts, in slots by group (C2): a group's
 * count is unknown only while claims of a group in its slot are uncounted,
 * so that groups of other databases and roles do not lose theirs.
 */
#define PGQ_UNCOUNTED_SLOTS	256

typedef struct PgqSharedState
{
	int			version;
	LWLock	   *lock;			/* protects the hash table's structure */
	LWLock	   *role_lock;		/* protects the table of roles */
	pg_atomic_uint64 uncounted[PGQ_UNCOUNTED_SLOTS];	/* C2 */
	pg_atomic_uint32 advisory_locks;	/* advisory locks held by all sessions */
	int32		materializations;	/* running; protected by role_lock */
	pg_atomic_uint64 gen_seed;	/* generations, unique across entries, so
								 * that a claim that read an evicted entry
								 * cannot match a new one */
	Latch	   *volatile launcher_latch;	/* the maintenance launcher's, or
											 * NULL */
} PgqSharedState;

static PgqSharedState *pgq_state = NULL;

static void uncounted_add(const PgqGroupKey *key, int64 delta);
static uint64 uncounted_get(const PgqGroupKey *key);
static HTAB *pgq_groups = NULL;
static HTAB *pgq_roles = NULL;

int			pgq_max_groups_per_role = -1;

/*
 * Roles that may hold locks or entries at once: each session has one current
 * role at a time, and may have switched roles while it held some.
 */
#define PGQ_ROLE_SLOTS	(2 * (MaxConnections + max_worker_processes) + 64)

/* Size of the shared state, for the shmem request. */
Size
pgq_shmem_size(void)
{
	return add_size(add_size(MAXALIGN(sizeof(PgqSharedState)),
							 hash_estimate_size(pgq_max_groups,
												sizeof(PgqGroupEntry))),
					hash_estimate_size(PGQ_ROLE_SLOTS, sizeof(PgqRoleEntry)));
}

/*
 * Attach to (or, in the postmaster, create) the shared state.  Called from
 * the shmem_startup_hook with AddinShmemInitLock held.
 */
void
pgq_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	pgq_state = ShmemInitStruct("pgq shared state", sizeof(PgqSharedState),
								&found);
	if (!found)
	{
		pgq_state->version = PGQ_SHMEM_VERSION;
		pgq_state->lock = &(GetNamedLWLockTranche("pgq"))[0].lock;
		pgq_state->role_lock = &(GetNamedLWLockTranche("pgq"))[1].lock;
		for (int i = 0; i < PGQ_UNCOUNTED_SLOTS; i++)
			pg_atomic_init_u64(&pgq_state->uncounted[i], 0);
		pgq_state->materializations = 0;
		pg_atomic_init_u32(&pgq_state->advisory_locks, 0);
		pg_atomic_init_u64(&pgq_state->gen_seed, 1);
		pgq_state->launcher_latch = NULL;
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(PgqGroupKey);
	info.entrysize = sizeof(PgqGroupEntry);
	pgq_groups = ShmemInitHash("pgq groups", pgq_max_groups, pgq_max_groups,
							   &info, HASH_ELEM | HASH_BLOBS);

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(PgqRoleEntry);
	pgq_roles = ShmemInitHash("pgq roles", PGQ_ROLE_SLOTS, PGQ_ROLE_SLOTS,
							  &info, HASH_ELEM | HASH_BLOBS);
}

/*
 * The role a call acts for: the caller of the pgq function being served, or
 * the current user.  Shared resources are charged to it.
 */
static Oid
charged_role(void)
{
	return OidIsValid(pgq_caller) ? pgq_caller : GetUserId();
}

/*
 * Add "locks" and "entries" to what the role holds, unless that would pass
 * the limits given (-1: none); false, with nothing changed, if it would, or
 * if the table of roles has no room.  Called with role_lock held
 * exclusively.
 */
static bool
role_take(Oid role, int locks, int lock_limit, int entries, int entry_limit)
{
	PgqRoleEntry *entry;
	bool		found;

	entry = hash_search(pgq_roles, &role, HASH_ENTER_NULL, &found);
	if (entry == NULL)
		return false;
	if (!found)
	{
		entry->locks = 0;
		entry->entries = 0;
		entry->materializations = 0;
	}
	if ((lock_limit >= 0 && entry->locks + locks > lock_limit) ||
		(entry_limit >= 0 && entry->entries + entries > entry_limit))
	{
		if (entry->locks == 0 && entry->entries == 0 &&
			entry->materializations == 0)
			hash_search(pgq_roles, &role, HASH_REMOVE, NULL);
		return false;
	}
	entry->locks += locks;
	entry->entries += entries;
	return true;
}

/*
 * Take back what role_take() added.  Called with role_lock held
 * exclusively; allocates nothing and cannot fail.
 */
static void
role_give(Oid role, int locks, int entries)
{
	PgqRoleEntry *entry = hash_search(pgq_roles, &role, HASH_FIND, NULL);

	if (entry == NULL)
		return;
	entry->locks = Max(entry->locks - locks, 0);
	entry->entries = Max(entry->entries - entries, 0);
	if (entry->locks == 0 && entry->entries == 0 &&
		entry->materializations == 0)
		hash_search(pgq_roles, &role, HASH_REMOVE, NULL);
}

/* The limit on the entries of one role now in force. */
static int
role_entry_limit(void)
{
	if (pgq_max_groups_per_role >= 0)
		return pgq_max_groups_per_role;
	return Max(pgq_max_groups / 2, 1);
}

/* Is the shared state there, that is, was pgq in shared_preload_libraries? */
bool
pgq_shmem_ready(void)
{
	return pgq_state != NULL && pgq_state->version == PGQ_SHMEM_VERSION;
}

/* Build the hash key of a group. */
static void
make_key(PgqGroupKey *key, Oid dbid, int64 group_id)
{
	/* the key is hashed as bytes: clear the padding */
	memset(key, 0, sizeof(*key));
	key->dbid = dbid;
	key->group_id = group_id;
}

/*
 * Make room in a full table by removing an entry that counts nothing (no
 * claim counted in it is in flight, and no scan counted any ahead: C1),
 * preferably one that knows no bound on its blocks in flight: that group
 * loses its hint, its next claim scans from the head again, and its next
 * look for due blocks walks the whole group.
 * Dynahash would otherwise take the room from the shared memory slack that
 * the lock table needs.  With a valid "role", only an entry charged to that
 * role.  Called with the table lock held exclusively.
 * (Keeps B1 and B2: the entry goes whole.)
 */
static bool
evict_idle_entry(Oid role)
{
	/* first one that has not learned a bound on its blocks in flight */
	for (int pass = 0; pass < 2; pass++)
	{
		HASH_SEQ_STATUS status;
		PgqGroupEntry *entry;

		hash_seq_init(&status, pgq_groups);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			bool		idle;

			if (OidIsValid(role) && entry->role != role)
				continue;
			SpinLockAcquire(&entry->mutex);
			idle = entry->claimed == 0 && entry->scanning == 0 &&
				(pass > 0 || entry->inflight_epoch == 0);
			SpinLockRelease(&entry->mutex);
			if (idle)
			{
				Oid			charged = entry->role;

				hash_seq_term(&status);
				hash_search(pgq_groups, &entry->key, HASH_REMOVE, NULL);
				LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
				role_give(charged, 0, 1);
				LWLockRelease(pgq_state->role_lock);
				return true;
			}
		}
	}
	return false;
}

/*
 * Start an entry afresh for the group it now describes: no hint, nothing
 * known of its due blocks or of its bound, and new generations, which no
 * claim or look begun before can hold (H2, D2, B2).  The claimed count is
 * the caller's to set.  Called with the table lock held exclusively;
 * allocates nothing and cannot fail.
 */
static void
entry_reset(PgqGroupEntry *entry)
{
	entry->hint = 0;
	entry->gen = pg_atomic_fetch_add_u64(&pgq_state->gen_seed, 1);
	entry->last_full_scan = 0;
	entry->due_from = 0;
	entry->due_checked = 0;
	entry->due_gen = pg_atomic_fetch_add_u64(&pgq_state->gen_seed, 1);
	entry->due_lowered = DT_NOEND;
	entry->due_looking = 0;
	entry->inflight_max = 0;
	entry->inflight_epoch = 0;
	entry->inflight_gen = pg_atomic_fetch_add_u64(&pgq_state->gen_seed, 1);
}

/*
 * Find the group's entry, with the table lock held on success (in shared
 * mode, or exclusively if the entry was just made).  An entry left by an
 * earlier incarnation of the same group id is treated as missing.  With
 * "create", a missing entry is made; NULL means there is no room, or no
 * shared state at all.
 */
static PgqGroupEntry *
entry_lock(const PgqGroupRef *group, bool create)
{
	PgqGroupKey key;
	PgqGroupEntry *entry;
	bool		found;

	if (!pgq_shmem_ready())
		return NULL;

	make_key(&key, group->dbid, group->group_id);
	LWLockAcquire(pgq_state->lock, LW_SHARED);
	entry = hash_search(pgq_groups, &key, HASH_FIND, NULL);
	if (entry != NULL && entry->created_at == group->created_at)
		return entry;
	LWLockRelease(pgq_state->lock);
	if (!create)
		return NULL;

	LWLockAcquire(pgq_state->lock, LW_EXCLUSIVE);
	entry = hash_search(pgq_groups, &key, HASH_FIND, &found);
	if (entry != NULL && entry->created_at > group->created_at)
	{
		/* a later incarnation of the group id has it: this one is gone */
		LWLockRelease(pgq_state->lock);
		return NULL;
	}
	if (entry == NULL)
	{
		Oid			role = charged_role();
		int			limit = role_entry_limit();
		bool		charged;

		/* a role at its limit makes room among its own idle entries */
		LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
		charged = role_take(role, 0, -1, 1, limit);
		LWLockRelease(pgq_state->role_lock);
		if (!charged && evict_idle_entry(role))
		{
			LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
			charged = role_take(role, 0, -1, 1, limit);
			LWLockRelease(pgq_state->role_lock);
		}
		if (charged &&
			hash_get_num_entries(pgq_groups) >= pgq_max_groups &&
			!evict_idle_entry(InvalidOid))
			entry = NULL;
		else if (charged)
			entry = hash_search(pgq_groups, &key, HASH_ENTER_NULL, &found);
		if (entry == NULL)
		{
			if (charged)
			{
				LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
				role_give(role, 0, 1);
				LWLockRelease(pgq_state->role_lock);
			}
			LWLockRelease(pgq_state->lock);
			return NULL;
		}
		entry->role = role;
	}
	if (!found || entry->created_at != group->created_at)
	{
		/*
		 * An earlier incarnation's holders give their blocks back to an
		 * entry that no longer matches them: they leave uncounted (C2).
		 */
		if (found && entry->claimed + entry->scanning > 0)
			uncounted_add(&key, entry->claimed + entry->scanning);
		entry->created_at = group->created_at;
		SpinLockInit(&entry->mutex);
		entry_reset(entry);
		entry->claimed = 0;
		entry->scanning = 0;
		entry->wait_floor = 0;
		entry->wake_owed = false;
		entry->unsure = uncounted_get(&key) > 0;
	}

	/* returned with the lock held exclusively: the caller only releases it */
	return entry;
}

/*
 * The group's hint and generation, from its entry, made first if "create";
 * false (hint 0) when there is none.
 */
static bool
hint_read(const PgqGroupRef *group, bool create, int64 *hint, uint64 *gen)
{
	PgqGroupEntry *entry = entry_lock(group, create);

	*hint = 0;
	*gen = 0;
	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	*hint = entry->hint;
	*gen = entry->gen;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return true;
}

/*
 * Where a claim should start scanning, and the generation to hand back to
 * pgq_scan_end().  Returns false (hint 0) when no hint is kept.
 * (Relies on H1 and H2.)
 */
bool
pgq_hint_get(const PgqGroupRef *group, int64 *hint, uint64 *gen)
{
	return hint_read(group, true, hint, gen);
}

/*
 * The hint, without making an entry for a group that has none (0 then): a
 * claim over a list probes every queue of the list, most of them idle, and
 * must not fill the table with their entries.  (Relies on H1.)
 */
int64
pgq_hint_peek(const PgqGroupRef *group)
{
	int64		hint;
	uint64		gen;

	(void) hint_read(group, false, &hint, &gen);
	return hint;
}

/*
 * A block (at "block_id"; for a queue, an item at that place in claim
 * order) is claimable again (a claim undone, a retry committed, an
 * advisory lock let go), or held by the caller: the hint must not stay above
 * it.  Call it once the block is visible as claimable: a claim that reads
 * the new generation before then may move the hint past the block again.
 * Safe in transaction callbacks: it allocates nothing and cannot fail.
 * (Keeps H1 and H2.)
 */
void
pgq_hint_lower(const PgqGroupRef *group, int64 block_id)
{
	PgqGroupEntry *entry = entry_lock(group, false);
	uint64		gen;

	if (entry == NULL)
		return;
	gen = pg_atomic_fetch_add_u64(&pgq_state->gen_seed, 1);
	SpinLockAcquire(&entry->mutex);
	if (entry->hint > block_id)
		entry->hint = block_id;
	entry->gen = gen;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * May a claim at "now" skip looking for the group's due blocks, since the
 * last look found nothing due before a later time, or since another claim
 * is looking?  If not, the caller is now the one looking, and *gen gets the
 * generation to hand to pgq_due_found() after the look.
 * (Relies on D1; keeps D4.)
 */
bool
pgq_due_none(const PgqGroupRef *group, TimestampTz now, uint64 *gen)
{
	PgqGroupEntry *entry = entry_lock(group, true);
	bool		none;

	*gen = 0;
	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	none = entry->due_checked != 0 && now < entry->due_from &&
		now >= entry->due_checked && now - entry->due_checked < PGQ_DUE_TRUST;
	if (!none && entry->due_looking != 0 && now >= entry->due_looking &&
		now - entry->due_looking < PGQ_DUE_TRUST)
		none = true;
	else if (!none)
		entry->due_looking = now;
	*gen = entry->due_gen;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return none;
}

/*
 * A look for due blocks at "now", begun at generation "gen", is done: it
 * found no block due before "earliest" (DT_NOEND: none at all).  If that is
 * later than "now", remember it, unless the deadlines were forgotten
 * meanwhile.  Leases committed meanwhile may not be in the look's snapshot:
 * remember the earliest of them if it comes first.  (Looks may overlap, one
 * beginning when another is PGQ_DUE_TRUST old: one that records after the
 * other did, whichever began first, may miss a lease committed after its
 * own snapshot was taken and before the other recorded, whose lowering
 * that record took.  Such a lease is seen once the record is PGQ_DUE_TRUST
 * old.)
 * (Keeps D1 through D4.)
 */
void
pgq_due_found(const PgqGroupRef *group, uint64 gen, TimestampTz now,
			  TimestampTz earliest)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_looking == now)
		entry->due_looking = 0;
	if (entry->due_gen == gen && earliest > now)
	{
		entry->due_from = Min(earliest, entry->due_lowered);
		entry->due_lowered = DT_NOEND;
		entry->due_checked = now;
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * Before what time did the last look for due blocks find nothing due, as
 * lowered by the lease commits since?  0 if no look recorded anything since
 * the deadlines were last forgotten.  However old the look.
 * (Relies on D1, without its time limit.)
 */
TimestampTz
pgq_due_recorded(const PgqGroupRef *group)
{
	PgqGroupEntry *entry = entry_lock(group, false);
	TimestampTz from = 0;

	if (entry == NULL)
		return 0;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_checked != 0)
		from = entry->due_from;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return from;
}

/*
 * The look for due blocks that began at "now" ended with an error: let other
 * claims look.  Safe in transaction callbacks: it allocates nothing and
 * cannot fail.
 * (Keeps D4.)
 */
void
pgq_due_look_abandoned(const PgqGroupRef *group, TimestampTz now)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_looking == now)
		entry->due_looking = 0;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * A transaction whose lease claims end at "until" committed: claims must
 * look for due blocks again by then.  A look that began before, and whose
 * snapshot may not show these leases, records no later time (see
 * pgq_due_found()).  Safe in transaction callbacks: it allocates nothing and
 * cannot fail.
 * (Keeps D1 and D3.)
 */
void
pgq_due_lower(const PgqGroupRef *group, TimestampTz until)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (until < entry->due_from)
		entry->due_from = until;
	if (until < entry->due_lowered)
		entry->due_lowered = until;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * A transaction that may have made a deadline of group group_id (of database
 * dbid, of any incarnation) come sooner committed: the group's next claims
 * look for due blocks.  Safe in transaction callbacks: it allocates nothing
 * and cannot fail.
 * (Keeps D1, D2 and D4.)
 */
void
pgq_due_forget(Oid dbid, int64 group_id)
{
	PgqGroupKey key;
	PgqGroupEntry *entry;

	if (!pgq_shmem_ready())
		return;
	make_key(&key, dbid, group_id);
	LWLockAcquire(pgq_state->lock, LW_SHARED);
	entry = hash_search(pgq_groups, &key, HASH_FIND, NULL);
	if (entry != NULL)
	{
		uint64		gen = pg_atomic_fetch_add_u64(&pgq_state->gen_seed, 1);

		SpinLockAcquire(&entry->mutex);
		entry->due_checked = 0;
		entry->due_gen = gen;
		entry->due_looking = 0;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(pgq_state->lock);
}

/* Has the group an entry (of its incarnation)? */
bool
pgq_group_has_entry(const PgqGroupRef *group)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return false;
	LWLockRelease(pgq_state->lock);
	return true;
}

/*
 * The highest block id of the group that may be claimed under a lease or wait
 * for a retry, into *bound; PG_INT64_MAX, and false, if that is not known.
 * Then *gen is to be handed to pgq_inflight_found() with what a walk of the
 * whole group found, which keeps the higher of the two.  A claim raises the
 * bound in its commit callback, after its commit became visible: a walk
 * whose snapshot shows the claim may read the bound from before the raise,
 * whichever it takes first.  The same callback lowers "due_lowered" to the
 * claim's lease end (D3), so the claims that the walk's record would keep
 * from looking look again.  "epoch" names the version of the trigger that
 * keeps the bound now (not 0): a bound learned under another one is not
 * known.
 * (Relies on B1 and B2.)
 */
bool
pgq_inflight_bound(const PgqGroupRef *group, uint64 epoch, int64 *bound,
				   uint64 *gen)
{
	PgqGroupEntry *entry = entry_lock(group, true);
	bool		known = false;

	*bound = PG_INT64_MAX;
	*gen = 0;
	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	if (entry->inflight_epoch == epoch)
	{
		*bound = entry->inflight_max;
		known = true;
	}
	*gen = entry->inflight_gen;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return known;
}

/*
 * A group was just created: it has no block in flight, so whatever bound its
 * entry holds (0 in a new one) is right, and known, as long as the trigger
 * of epoch "epoch" keeps it (0: no trigger does, and the bound stays
 * unknown).  Its blocks are written pending, by this transaction or a
 * materializer; claims raise the bound as usual.
 * (Keeps B1.)
 */
void
pgq_inflight_none(const PgqGroupRef *group, uint64 epoch)
{
	PgqGroupEntry *entry;

	if (epoch == 0)
		return;
	entry = entry_lock(group, true);
	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	entry->inflight_epoch = epoch;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * A walk of the whole group, which read generation "gen" from
 * pgq_inflight_bound() before it began, found no block above "highest"
 * claimed under a lease or waiting for a retry: from now on the bound is
 * known, for as long as the trigger of epoch "epoch" keeps it.
 * (Keeps B1 and B2.)
 */
void
pgq_inflight_found(const PgqGroupRef *group, uint64 gen, int64 highest,
				   uint64 epoch)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (entry->inflight_gen == gen)
	{
		entry->inflight_max = Max(entry->inflight_max, highest);
		entry->inflight_epoch = epoch;
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * A transaction that made block block_id of group group_id (of database
 * dbid, of any incarnation) claimed under a lease or waiting for a retry
 * committed: raise the bound of pgq_inflight_bound() to it.  Without an
 * entry there is nothing to raise: an entry made from now on does not know
 * the bound, and the walk that learns it sees the block.  Safe in
 * transaction callbacks: it allocates nothing and cannot fail.
 * (Keeps B1.)
 */
void
pgq_inflight_raise(Oid dbid, int64 group_id, int64 block_id)
{
	PgqGroupKey key;
	PgqGroupEntry *entry;

	if (!pgq_shmem_ready())
		return;
	make_key(&key, dbid, group_id);
	LWLockAcquire(pgq_state->lock, LW_SHARED);
	entry = hash_search(pgq_groups, &key, HASH_FIND, NULL);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		if (entry->inflight_max < block_id)
			entry->inflight_max = block_id;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(pgq_state->lock);
}

/* The slot of "uncounted" of the group with this key. */
static pg_atomic_uint64 *
uncounted_slot(const PgqGroupKey *key)
{
	return &pgq_state->uncounted[hash_bytes((const unsigned char *) key,
											sizeof(*key)) %
								 PGQ_UNCOUNTED_SLOTS];
}

/*
 * Claims in flight of the group (and of others in its slot) that no entry
 * counts: add delta, never going below 0.  Allocates nothing and cannot
 * fail.
 */
static void
uncounted_add(const PgqGroupKey *key, int64 delta)
{
	pg_atomic_uint64 *slot = uncounted_slot(key);
	uint64		old = pg_atomic_read_u64(slot);
	uint64		new;

	do
	{
		if (delta >= 0)
			new = old + delta;
		else
			new = old > (uint64) -delta ? old + delta : 0;
	} while (!pg_atomic_compare_exchange_u64(slot, &old, new));
}

/* Claims that no entry counts in the slot of the group with this key. */
static uint64
uncounted_get(const PgqGroupKey *key)
{
	return pg_atomic_read_u64(uncounted_slot(key));
}

/*
 * A claim of the group was just counted in "uncounted", its group having no
 * entry: an entry made since, which read "uncounted" before that, must not
 * trust its count (C2).  The atomic add comes before the table lock taken
 * here, and an entry is made under that lock, so one of the two sees the
 * other.
 */
static void
mark_unsure(const PgqGroupRef *group)
{
	PgqGroupEntry *entry = entry_lock(group, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	entry->unsure = true;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * Count blocks taken (delta > 0) or given up (delta < 0).  A count that
 * cannot be kept makes the counts of the groups in its slot of "uncounted"
 * unknown, until the claims it counted are given up.  A claim given up that
 * was not counted in its group's entry (it got none then) is taken off the
 * uncounted ones, once an entry made since has counted too few (C2).  A
 * block given up that is claimable again is taken out of the count after
 * pgq_hint_lower() (C1).  Returns true if the waiting
 * claims must look again: the count fell to what the waiting claims hold
 * themselves, or is not kept (C3).  Safe in transaction callbacks when
 * delta < 0: it allocates nothing and cannot fail.
 * (Keeps C1, C2 and C3.)
 */
bool
pgq_claimed_add(const PgqGroupRef *group, int64 delta)
{
	PgqGroupEntry *entry;
	PgqGroupKey key;
	int64		claimed;
	bool		low = false;

	if (!pgq_shmem_ready())
		return true;
	make_key(&key, group->dbid, group->group_id);
	entry = entry_lock(group, delta > 0);
	if (entry == NULL)
	{
		uncounted_add(&key, delta);
		if (delta > 0)
			mark_unsure(group);
		return true;
	}
	SpinLockAcquire(&entry->mutex);
	claimed = entry->claimed + delta;
	entry->claimed = Max(claimed, 0);
	if (delta < 0 && claimed <= entry->wait_floor)
	{
		/* C3 */
		low = true;
		entry->wait_floor = 0;
		if (entry->scanning > 0)
			entry->wake_owed = true;
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);

	/* given back more than the entry counted: the rest was uncounted */
	if (claimed < 0)
		uncounted_add(&key, claimed);
	return low;
}

/*
 * A scan for pending blocks of the group found its first candidate: count
 * the most it may take, "n", as blocks being taken (C1).
 */
void
pgq_scan_count(const PgqGroupRef *group, int64 n)
{
	PgqGroupEntry *entry;
	PgqGroupKey key;

	if (!pgq_shmem_ready())
		return;
	make_key(&key, group->dbid, group->group_id);
	entry = entry_lock(group, true);
	if (entry == NULL)
	{
		uncounted_add(&key, n);
		mark_unsure(group);
		return;
	}
	SpinLockAcquire(&entry->mutex);
	entry->scanning += n;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
}

/*
 * A scan that counted "counted" with pgq_scan_count() ended, holding "taken"
 * blocks, which its records give back when they end: they move to
 * "claimed", and the rest leaves the count.  With "next" > 0, the scan,
 * which started from the hint of generation "gen", also found every block
 * below "next" consumed or held: the hint moves up to "next", in the same
 * visit to the entry, unless the hint was lowered since (H2: what it was
 * lowered to may lie below "next").
 * Returns true if the waiting claims are owed a wake (C3).  Safe in
 * transaction callbacks: it allocates nothing and cannot fail.
 * (Keeps C1, C2, C3 and H2.)
 */
bool
pgq_scan_end(const PgqGroupRef *group, int64 counted, int64 taken,
			 uint64 gen, int64 next)
{
	PgqGroupEntry *entry;
	PgqGroupKey key;
	int64		scanning;
	bool		owed = false;

	if (!pgq_shmem_ready())
		return false;
	make_key(&key, group->dbid, group->group_id);
	entry = entry_lock(group, false);
	if (entry == NULL)
	{
		/* counted in "uncounted" (C2), and its records give back there */
		uncounted_add(&key, taken - counted);
		return false;
	}
	SpinLockAcquire(&entry->mutex);
	scanning = entry->scanning - counted;
	entry->scanning = Max(scanning, 0);
	entry->claimed += taken;
	if (next > 0 && entry->gen == gen && entry->hint < next)
		entry->hint = next;
	if (entry->scanning == 0 && entry->wake_owed)
	{
		entry->wake_owed = false;
		owed = true;
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);

	/* counted while the group had no entry: that was in "uncounted" */
	if (scanning < 0)
		uncounted_add(&key, scanning);
	return owed;
}

/*
 * Read the count of the group's entry: blocks held, and with "scans" what
 * scans under way counted ahead.  With own >= 0 the reader is a waiting
 * claim that holds "own" blocks of the group, for which C3 is kept under
 * the same lock.  False when the count is not known (C2).  The slot of
 * "uncounted" is read under the entry's spinlock: read before it, it could
 * miss a claim that counted into it and then marked the entry unsure,
 * whose mark this would clear.  (Where 64-bit atomics are emulated, that
 * read takes the emulation's lock, a leaf, for one read.)
 */
static bool
claimed_read(const PgqGroupRef *group, bool scans, int64 own, int64 *claimed)
{
	PgqGroupEntry *entry;
	PgqGroupKey key;
	pg_atomic_uint64 *uncounted;
	bool		known;

	*claimed = 0;
	if (!pgq_shmem_ready())
		return false;
	make_key(&key, group->dbid, group->group_id);
	uncounted = uncounted_slot(&key);	/* hashed before the spinlock */
	entry = entry_lock(group, false);
	if (entry == NULL)
		return pg_atomic_read_u64(uncounted) == 0;
	SpinLockAcquire(&entry->mutex);
	if (own >= 0)
	{
		entry->wait_floor = Max(entry->wait_floor, own);
		if (entry->claimed <= own && entry->scanning > 0)
			entry->wake_owed = true;
	}
	if (entry->unsure && pg_atomic_read_u64(uncounted) == 0)
		entry->unsure = false;
	known = !entry->unsure;
	if (known)
		*claimed = entry->claimed + (scans ? entry->scanning : 0);
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return known;
}

/*
 * Blocks of the group held by open transactions and sessions, and with
 * "scans", the most that scans under way may take too: what tells whether
 * any but one's own may come back (C1), where the held ones alone are what
 * the statistics show.  False when that is not known: pgq is not preloaded,
 * or the table overflowed and this group may be one that got no entry, or
 * its entry may count too few (C2).
 * (Relies on C1 and C2.)
 */
bool
pgq_claimed_get(const PgqGroupRef *group, bool scans, int64 *claimed)
{
	return claimed_read(group, scans, -1, claimed);
}

/*
 * pgq_claimed_get(group, true, claimed), for a waiting claim that holds
 * "own" blocks of the group and, unless the group is exhausted, is about to
 * sleep.  Under the same lock as the read, it raises the wait floor to
 * "own", so that the commit that brings the count down to it wakes the
 * claim, and if the count is over "own" only by what scans counted ahead,
 * it has the scan that ends last wake the claim (C3).  Before the claim
 * sleeps, so that either this sees the other side's change or the other
 * side sees this one.
 * (Relies on C1 and C2; keeps C3.)
 */
bool
pgq_claimed_get_waiting(const PgqGroupRef *group, int64 own, int64 *claimed)
{
	return claimed_read(group, true, own, claimed);
}

/*
 * Drop the entry of a group being dropped (or whose blocks are made anew).
 * The caller has deleted the group's blocks, which waited for every
 * transaction holding one, but not for the sessions holding advisory locks
 * on some: while they do, the entry stays, started afresh, and counts them
 * until they let go (C1).  Safe in transaction callbacks: it allocates
 * nothing and cannot fail.
 */
void
pgq_group_forget(Oid dbid, int64 group_id)
{
	PgqGroupKey key;
	PgqGroupEntry *entry;

	if (!pgq_shmem_ready())
		return;
	make_key(&key, dbid, group_id);
	LWLockAcquire(pgq_state->lock, LW_EXCLUSIVE);
	entry = hash_search(pgq_groups, &key, HASH_FIND, NULL);
	if (entry != NULL && entry->claimed + entry->scanning > 0)
		entry_reset(entry);
	else if (entry != NULL)
	{
		LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
		role_give(entry->role, 0, 1);
		LWLockRelease(pgq_state->role_lock);
		hash_search(pgq_groups, &key, HASH_REMOVE, NULL);
	}
	LWLockRelease(pgq_state->lock);
}

/*
 * Count one more advisory lock against the cluster-wide limit and against
 * the role's ("role_limit", -1 for none).  Says which limit it would pass,
 * if any (and then counts nothing).  Without shared memory there is no
 * cluster-wide count, and only the per-session limit applies.
 */
PgqLockLimit
pgq_advisory_locks_take(int limit, Oid role, int role_limit)
{
	uint32		before;
	bool		taken;

	if (!pgq_shmem_ready())
		return PGQ_LOCKS_OK;
	before = pg_atomic_fetch_add_u32(&pgq_state->advisory_locks, 1);
	if (before >= (uint32) limit)
	{
		pg_atomic_fetch_sub_u32(&pgq_state->advisory_locks, 1);
		return PGQ_LOCKS_CLUSTER;
	}
	LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
	taken = role_take(role, 1, role_limit, 0, -1);
	LWLockRelease(pgq_state->role_lock);
	if (!taken)
	{
		pg_atomic_fetch_sub_u32(&pgq_state->advisory_locks, 1);
		return PGQ_LOCKS_ROLE;
	}
	return PGQ_LOCKS_OK;
}

/*
 * An advisory lock counted by pgq_advisory_locks_take() for the role is
 * gone.  Safe at transaction end and at exit: allocates nothing, cannot
 * fail.
 */
void
pgq_advisory_locks_give(Oid role)
{
	if (!pgq_shmem_ready())
		return;
	pg_atomic_fetch_sub_u32(&pgq_state->advisory_locks, 1);
	LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
	role_give(role, 1, 0);
	LWLockRelease(pgq_state->role_lock);
}

/*
 * Count one more asynchronous materialization of the role, unless the role
 * runs "role_limit" already or the cluster "limit".  Says which limit it
 * would pass, if any (and then counts nothing).  Without shared memory
 * nothing is counted.
 */
PgqLockLimit
pgq_materialization_take(int limit, Oid role, int role_limit)
{
	PgqRoleEntry *entry;
	PgqLockLimit result = PGQ_LOCKS_OK;
	bool		found;

	if (!pgq_shmem_ready())
		return PGQ_LOCKS_OK;
	LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
	if (pgq_state->materializations >= limit)
		result = PGQ_LOCKS_CLUSTER;
	else if ((entry = hash_search(pgq_roles, &role, HASH_ENTER_NULL,
								  &found)) == NULL)
		result = PGQ_LOCKS_ROLE;
	else
	{
		if (!found)
		{
			entry->locks = 0;
			entry->entries = 0;
			entry->materializations = 0;
		}
		if (entry->materializations >= role_limit)
		{
			if (!found)
				hash_search(pgq_roles, &role, HASH_REMOVE, NULL);
			result = PGQ_LOCKS_ROLE;
		}
		else
		{
			entry->materializations++;
			pgq_state->materializations++;
		}
	}
	LWLockRelease(pgq_state->role_lock);
	return result;
}

/*
 * A materialization counted by pgq_materialization_take() for the role
 * ended.  Safe at exit: allocates nothing, cannot fail.
 */
void
pgq_materialization_give(Oid role)
{
	PgqRoleEntry *entry;

	if (!pgq_shmem_ready())
		return;
	LWLockAcquire(pgq_state->role_lock, LW_EXCLUSIVE);
	pgq_state->materializations = Max(pgq_state->materializations - 1, 0);
	entry = hash_search(pgq_roles, &role, HASH_FIND, NULL);
	if (entry != NULL)
	{
		entry->materializations = Max(entry->materializations - 1, 0);
		if (entry->locks == 0 && entry->entries == 0 &&
			entry->materializations == 0)
			hash_search(pgq_roles, &role, HASH_REMOVE, NULL);
	}
	LWLockRelease(pgq_state->role_lock);
}

/*
 * Are all claims in flight on the group "own" ones?  Not if that is not
 * known.
 * (Relies on C1 and C2.)
 */
static bool
no_claims_by_others(const PgqGroupRef *group, int64 own)
{
	int64		claimed;

	if (!pgq_claimed_get(group, true, &claimed))
		return false;
	return claimed <= own;
}

/*
 * Should a claim that came up short look below the hint, from the start of
 * the group?  Blocks get there only as H1 lists, mostly when their holder
 * let go without pgq knowing: a row lock on pgq.blocks taken by hand, or an
 * advisory lock dropped by pg_advisory_unlock_all() or DISCARD ALL (and, in
 * queues, items that a prepared transaction made pending).  Look when no
 * other session holds claims in the group (the usual end of a group), and
 * otherwise at most once a second per group, so that consumers polling the
 * end of a group do not each walk its dead entries.  own < 0 means that the
 * claimed count does not cover the mode's claims (lease mode: committed
 * leases are rows): then only the rate applies.
 * (Keeps F1.)
 */
bool
pgq_full_scan_due(const PgqGroupRef *group, int64 own)
{
	PgqGroupEntry *entry;
	TimestampTz now;
	bool		due;

	if (own >= 0 && no_claims_by_others(group, own))
		return true;
	entry = entry_lock(group, false);
	if (entry == NULL)
		return true;
	now = GetCurrentTimestamp();
	SpinLockAcquire(&entry->mutex);
	due = now - entry->last_full_scan >= USECS_PER_SEC;
	if (due)
		entry->last_full_scan = now;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(pgq_state->lock);
	return due;
}


/*
 * Publish the maintenance launcher's latch (NULL when it exits).  Shared
 * memory is mapped at the same address in every process, so the pointer is
 * good everywhere; a stale one only wakes whichever process has that latch.
 */
void
pgq_launcher_latch_set(Latch *latch)
{
	if (pgq_shmem_ready())
		pgq_state->launcher_latch = latch;
}

/*
 * Wake the launcher, if there is one.  Safe in transaction callbacks: it
 * allocates nothing and cannot fail.
 */
bool
pgq_launcher_wake(void)
{
	Latch	   *latch;

	if (!pgq_shmem_ready())
		return false;
	latch = pgq_state->launcher_latch;
	if (latch == NULL)
		return false;
	SetLatch(latch);
	return true;
}
