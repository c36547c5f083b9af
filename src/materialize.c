/*-------------------------------------------------------------------------
 *
 * materialize.c
 *	  Asynchronous materialization: a reader and a writer worker per group.
 *
 * pgq.create_group(..., async => true) inserts the group's row, in state
 * 'materializing', and starts a writer worker before it returns.  A process
 * cannot commit blocks while the cursor of the query is open (a cursor does
 * not survive COMMIT), so the work is split in two:
 *
 *	- the reader runs the query in one transaction, read-only, as the role
 *	  that created the group (SetUserIdAndSecContext, as REFRESH MATERIALIZED
 *	  VIEW does), with the search_path and settings captured at creation and
 *	  the group's timeout armed, and streams the ids over a shm_mq;
 *	- the writer cuts them into blocks and commits them in batches, each one
 *	  waking the group's waiting claims, so that consumers start while the
 *	  query still runs.  It marks the group 'ready' after the last block, or
 *	  'failed' with the reason.
 *
 * Both wait for the creating transaction to end, and exit if the group's
 * row is not there then (the transaction rolled back).
 *
 * The creator waits until the writer holds a session lock on the group and
 * has started the reader, so that: a group that anyone can see as
 * materializing has a live writer exactly while its lock is held; and the
 * lack of a worker slot, for either worker, is the creator's error.  A
 * writer that dies (crash, restart, pg_terminate_backend) leaves the group
 * 'materializing' with its lock free: the maintenance pass marks it failed,
 * since the query's order need not be repeatable and the blocks consumers
 * already took cannot be told from those they did not.  A dropped group's
 * writer notices within a second, stops the reader, and exits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shm_mq.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/wait_event.h"

#include "pgq.h"
#include "group.h"
#include "materialize.h"
#include "privilege.h"
#include "shmem.h"
#include "wait.h"
#include "worker.h"
#include "xact.h"

/* field4 of the advisory lock tag that a group's writer holds */
#define PGQ_LOCK_MATERIALIZE	20563

/* Size of the queue from reader to writer. */
#define PGQ_READER_QUEUE_SIZE	(1024 * 1024)

/* A writer commits a batch after this many ids, or this many blocks... */
#define PGQ_BATCH_IDS		100000
#define PGQ_BATCH_BLOCKS	1000
/* ... or whenever the reader has nothing more ready. */

/* How often an idle writer checks that its group was not dropped (ms). */
#define PGQ_WRITER_CHECK_MS	1000

/* What the creator tells its workers, in bgw_extra. */
typedef struct PgqMaterializeArgs
{
	Oid			dboid;
	Oid			role;			/* whom the workers connect as */
	Oid			charged;		/* whose materialization it counts as */
	int64		group_id;
	TransactionId xid;			/* the creating transaction */
} PgqMaterializeArgs;

/*
 * Who gives back the count of a running materialization (shared memory
 * behind the creator's queue): the writer takes it over just before it
 * tells the creator that it started; a creator that fails before then
 * takes it back.  Whoever wins gives it back.
 */
#define PGQ_COUNT_CREATOR	0
#define PGQ_COUNT_WRITER	1
#define PGQ_COUNT_REVOKED	2

/* Size of the creator's queue, before the word above. */
#define PGQ_CREATOR_QUEUE_SIZE	MAXALIGN(shm_mq_minimum_size + 64)

static int	pgq_max_materializations_per_role = -1;

/* The role whose materialization the writer counts, for its exit. */
static Oid	counted_role = InvalidOid;

/* What a worker's log lines are about, once it knows. */
static char worker_database[NAMEDATALEN];
static char worker_group[NAMEDATALEN + 64];

/* Messages from the reader to the writer. */
typedef enum PgqMessageKind
{
	PGQ_MSG_IDS,				/* followed by int64 ids */
	PGQ_MSG_END,				/* the query ended; count = its ids */
	PGQ_MSG_ERROR				/* the query failed; followed by the reason */
} PgqMessageKind;

typedef struct PgqMessage
{
	int32		kind;			/* a PgqMessageKind */
	int64		count;
} PgqMessage;

/* The writer's reply to the creator, once the reader is started. */
#define PGQ_STARTED		'S'
#define PGQ_NO_SLOT		'N'

/* pg_stat_activity's backend_type of the workers */
#define PGQ_WRITER_TYPE "pgq materialize writer"
#define PGQ_READER_TYPE "pgq materialize reader"

PGDLLEXPORT void pgq_writer_main(Datum arg);
PGDLLEXPORT void pgq_reader_main(Datum arg);

/* The reader, for the writer's exit callback. */
static BackgroundWorkerHandle *reader_handle = NULL;

/* The advisory lock tag that says a group has a live writer. */
static void
materialize_lock_tag(LOCKTAG *tag, int64 group_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (group_id >> 32),
						 (uint32) group_id, PGQ_LOCK_MATERIALIZE);
}

/* Fill in a worker's registration, for the group of args. */
static void
init_worker(BackgroundWorker *worker, const PgqMaterializeArgs *args,
			const char *function, const char *type, dsm_handle handle)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker->bgw_library_name, "pgq", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	snprintf(worker->bgw_name, BGW_MAXLEN, "%s of group " INT64_FORMAT,
			 type, args->group_id);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
	worker->bgw_main_arg = UInt32GetDatum(handle);
	worker->bgw_notify_pid = MyProcPid;
	StaticAssertStmt(sizeof(PgqMaterializeArgs) <= BGW_EXTRALEN,
					 "PgqMaterializeArgs does not fit in bgw_extra");
	memcpy(worker->bgw_extra, args, sizeof(*args));
}

/* Define the settings of this file; called from _PG_init(). */
void
pgq_materialize_define_settings(void)
{
	DefineCustomIntVariable("pgq.max_materializations_per_role",
							"Most asynchronous materializations of one role that may run at once.",
							"-1 means half of what pgq allows at once (rounded up): (max_worker_processes - 1 for pgq's launcher - 1 for a maintenance pass) / 2.  Applies only when pgq is preloaded.",
							&pgq_max_materializations_per_role,
							-1, -1, 10000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
}

/*
 * How many asynchronous materializations may run at once in the cluster:
 * two worker slots each, leaving one for the launcher and, with
 * maintenance on, one for a maintenance pass.
 */
static int
cluster_materializations(void)
{
	int			reserved = 1 + (pgq_maintenance_on() ? 1 : 0);

	return Max((max_worker_processes - reserved) / 2, 0);
}

/* The per-role limit in force. */
static int
role_materializations(void)
{
	if (pgq_max_materializations_per_role >= 0)
		return pgq_max_materializations_per_role;
	return Max((cluster_materializations() + 1) / 2, 1);
}

/* A materialization counted for counted_role ended: the writer's exit. */
static void
give_back_count(int code, Datum arg)
{
	pgq_materialization_give(counted_role);
}

/*
 * Count the materialization about to start for the calling role, or refuse
 * it: one role may not take every worker slot, nor pgq the slot its
 * maintenance needs.
 */
static void
count_materialization(Oid role)
{
	switch (pgq_materialization_take(cluster_materializations(), role,
									 role_materializations()))
	{
		case PGQ_LOCKS_OK:
			return;
		case PGQ_LOCKS_CLUSTER:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start a materialization worker"),
					 errdetail("%d asynchronous materializations are running, as many as max_worker_processes (%d) allows while keeping a slot free for pgq's maintenance.",
							   cluster_materializations(), max_worker_processes),
					 errhint("Raise max_worker_processes, wait for running materializations to finish, or use async => false.")));
			break;
		case PGQ_LOCKS_ROLE:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many asynchronous materializations of role \"%s\" are running",
							GetUserNameFromId(role, false)),
					 errdetail("The limit set by pgq.max_materializations_per_role is %d.",
							   role_materializations()),
					 errhint("Wait for one to finish, or use async => false.")));
			break;
	}
}

/* The error for a lack of worker slots. */
static void
report_no_slot(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("could not start a materialization worker"),
			 errdetail("An asynchronous materialization needs two background worker slots while it runs."),
			 errhint("Raise max_worker_processes (now %d), wait for running materializations to finish, or use async => false.",
					 max_worker_processes)));
}

/* The role that owns the extension: the workers connect as it. */
static Oid
extension_owner(void)
{
	bool		isnull;
	int			rc;

	rc = SPI_execute("SELECT extowner FROM pg_catalog.pg_extension "
					 "WHERE extname " OP("=") " 'pgq'", true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not find the owner of extension pgq");
	return DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Wait for the writer's reply on the creator's queue: PGQ_STARTED, or
 * PGQ_NO_SLOT or another byte if a worker could not be started, or '\0' if
 * the writer exited without a reply.
 */
static char
wait_for_writer(shm_mq *mq, dsm_segment *seg, BackgroundWorkerHandle *handle)
{
	shm_mq_handle *mqh = shm_mq_attach(mq, seg, handle);
	shm_mq_result res;
	Size		len;
	void	   *data;
	char		reply;

	res = shm_mq_receive(mqh, &len, &data, false);
	if (res != SHM_MQ_SUCCESS)
		reply = '\0';
	else if (len != 1)
		reply = PGQ_NO_SLOT;
	else
		reply = *(char *) data;
	shm_mq_detach(mqh);
	return reply;
}

/*
 * The creator failed before the writer took the count of the running
 * materialization over: unless the writer took it after all, give it back.
 */
static void
revoke_count(pg_atomic_uint32 *owner, Oid charged)
{
	uint32		expected = PGQ_COUNT_CREATOR;

	if (pg_atomic_compare_exchange_u32(owner, &expected, PGQ_COUNT_REVOKED))
		pgq_materialization_give(charged);
}

/*
 * Start the workers that materialize a group the current transaction has
 * just inserted, inside SPI.  Returns once the writer holds the group's lock
 * and has started the reader; an error if there is no worker slot for
 * either.
 */
void
pgq_start_materialization(int64 group_id)
{
	PgqMaterializeArgs args;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	dsm_segment *seg;
	shm_mq	   *mq;
	volatile char reply = '\0';
	pg_atomic_uint32 *owner;

	args.dboid = MyDatabaseId;
	args.role = extension_owner();
	args.charged = OidIsValid(pgq_caller) ? pgq_caller : GetUserId();
	args.group_id = group_id;
	args.xid = GetTopTransactionId();

	/* a one-byte reply fits any queue; this is the smallest there is */
	seg = dsm_create(PGQ_CREATOR_QUEUE_SIZE + sizeof(pg_atomic_uint32), 0);
	mq = shm_mq_create(dsm_segment_address(seg), PGQ_CREATOR_QUEUE_SIZE);
	shm_mq_set_receiver(mq, MyProc);
	owner = (pg_atomic_uint32 *) ((char *) dsm_segment_address(seg) +
								  PGQ_CREATOR_QUEUE_SIZE);
	pg_atomic_init_u32(owner, PGQ_COUNT_CREATOR);

	count_materialization(args.charged);
	init_worker(&worker, &args, "pgq_writer_main", PGQ_WRITER_TYPE,
				dsm_segment_handle(seg));
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		pgq_materialization_give(args.charged);
		report_no_slot();
	}

	PG_TRY();
	{
		reply = wait_for_writer(mq, seg, handle);
	}
	PG_CATCH();
	{
		/* canceled while waiting: a writer that starts later has no creator */
		revoke_count(owner, args.charged);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (reply != PGQ_STARTED)
		revoke_count(owner, args.charged);
	if (reply == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("the materialization worker exited before it started"),
				 errhint("The server log may say why.")));
	if (reply != PGQ_STARTED)
		report_no_slot();
	dsm_detach(seg);
}

/*
 * Is a writer working on the group?  Called by the maintenance pass for a
 * group it sees as 'materializing': a committed group has a live writer
 * exactly while the writer's lock is held.
 */
bool
pgq_materializer_alive(int64 group_id)
{
	LOCKTAG		tag;

	materialize_lock_tag(&tag, group_id);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ExclusiveLock, false);
	return false;
}

/* Wait for the creating transaction to end, whichever way. */
static void
wait_for_creator(TransactionId xid)
{
	StartTransactionCommand();
	XactLockTableWait(xid, NULL, NULL, XLTW_None);
	CommitTransactionCommand();
}

/*
 * Name the group and its database in the context of a worker's errors and
 * warnings (its own log lines name them themselves).
 */
static void
materialize_context(void *arg)
{
	if (geterrcode() == ERRCODE_SUCCESSFUL_COMPLETION)
		return;
	if (worker_database[0] != '\0')
		errcontext("pgq materialization of group %s in database \"%s\"",
				   worker_group, worker_database);
	else
		errcontext("pgq materialization of group %s", worker_group);
}

/*
 * Start naming the worker's group (by id until its name is known) in the
 * context of its errors.
 */
static void
push_materialize_context(ErrorContextCallback *context, int64 group_id)
{
	snprintf(worker_group, sizeof(worker_group), INT64_FORMAT, group_id);
	context->callback = materialize_context;
	context->arg = NULL;
	context->previous = error_context_stack;
	error_context_stack = context;
}

/* The group's name and database are known: name them.  In a transaction. */
static void
name_worker_group(const char *name)
{
	char	   *database = get_database_name(MyDatabaseId);

	if (database != NULL)
		strlcpy(worker_database, database, sizeof(worker_database));
	snprintf(worker_group, sizeof(worker_group), "\"%s\"", name);
}

/*
 * Stop the reader when the writer exits, whatever the reason: a reader left
 * alone would run its query to the end for nothing.  Registered with
 * before_shmem_exit(): TerminateBackgroundWorker() takes an LWLock, which a
 * process can no longer do once its PGPROC is gone (on_proc_exit time).
 */
static void
stop_reader(int code, Datum arg)
{
	if (reader_handle != NULL)
		TerminateBackgroundWorker(reader_handle);
}

/* The writer's state, across its transactions. */
typedef struct Writer
{
	PgqGroupRef group;
	char	   *name;
	PgqBlockWriter blocks;
	bool		in_batch;		/* a transaction is open */
	int64		batch_ids;		/* ids written in it */
	int64		batch_blocks;	/* blocks written in it */
} Writer;

/*
 * Read the group's row for the writer, locking it until the end of the
 * transaction so that a drop waits for the batch.  False if the group is
 * gone (the creator rolled back, or someone dropped it) or no longer
 * materializing.
 */
static bool
lock_group(Writer *w, int *block_size)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;
	int			rc;

	values[0] = Int64GetDatum(w->group.group_id);
	rc = SPI_execute_with_args("SELECT created_at, block_size, group_name "
							   "FROM pgq.groups "
							   "WHERE group_id " OP("=") " $1 "
							   "AND state " OP("=") " 'materializing' "
							   "FOR NO KEY UPDATE",
							   1, argtypes, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	w->group.created_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc,
															1, &isnull));
	if (block_size != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		*block_size = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc,
												  2, &isnull));
		w->name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
		MemoryContextSwitchTo(old);
	}
	return true;
}

/* Start a transaction for a batch of blocks; false if the group is gone. */
static bool
begin_batch(Writer *w)
{
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!lock_group(w, NULL))
	{
		PopActiveSnapshot();
		SPI_finish();
		AbortCurrentTransaction();
		return false;
	}
	w->in_batch = true;
	w->batch_ids = 0;
	w->batch_blocks = 0;
	return true;
}

/*
 * Commit the open batch, with the group's totals so far, and wake the
 * group's waiting claims.
 */
static void
commit_batch(Writer *w)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3];
	int			rc;

	values[0] = Int64GetDatum(w->group.group_id);
	values[1] = Int64GetDatum(w->blocks.nids);
	values[2] = Int64GetDatum(w->blocks.nblocks);
	rc = SPI_execute_with_args("UPDATE pgq.groups "
							   "SET total_ids = $2, total_blocks = $3 "
							   "WHERE group_id " OP("=") " $1",
							   3, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "could not update group " INT64_FORMAT,
			 w->group.group_id);
	if (w->batch_blocks > 0)
	{
		pgq_announce_claimable(&w->group, w->name);
		/* the first batch is the one that changes pgq.blocks' size most */
		if (w->blocks.nblocks == w->batch_blocks)
			pgq_invalidate_block_plans();
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	w->in_batch = false;
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Mark the group failed with the reason, in the open batch or a transaction
 * of its own.  The blocks written so far stay, for a look; claims no longer
 * hand them out.
 */
static void
fail_group(Writer *w, const char *reason)
{
	Oid			argtypes[4] = {INT8OID, TEXTOID, INT8OID, INT8OID};
	Datum		values[4];
	int			rc;

	if (!w->in_batch && !begin_batch(w))
		return;					/* dropped: nobody to tell */
	values[0] = Int64GetDatum(w->group.group_id);
	values[1] = CStringGetTextDatum(reason);
	values[2] = Int64GetDatum(w->blocks.nids);
	values[3] = Int64GetDatum(w->blocks.nblocks);
	rc = SPI_execute_with_args("UPDATE pgq.groups "
							   "SET state = 'failed', error = $2, "
							   "total_ids = $3, total_blocks = $4, "
							   "finished_at = pg_catalog.clock_timestamp() "
							   "WHERE group_id " OP("=") " $1",
							   4, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not mark group " INT64_FORMAT " failed",
			 w->group.group_id);
	/* waiters return at once from a failed group */
	pgq_xact_wake_at_commit(&w->group);
	pgq_invalidate_groups();
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	w->in_batch = false;
	ereport(LOG,
			(errmsg("pgq: database \"%s\": materialization of group \"%s\" failed: %s",
					worker_database, w->name, reason)));
}

/* Is the group still there and materializing?  Outside a batch. */
static bool
group_still_wanted(Writer *w)
{
	if (!begin_batch(w))
		return false;
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	w->in_batch = false;
	return true;
}

/*
 * Take one message from the reader.  Returns true when materialization is
 * over (the group is ready, failed or gone).
 */
static bool
handle_message(Writer *w, const char *data, Size len)
{
	PgqMessage	msg;
	const char *body = data + sizeof(PgqMessage);
	Size		bodylen;

	if (len < sizeof(PgqMessage))
		elog(ERROR, "pgq: short message from the reader");
	memcpy(&msg, data, sizeof(msg));
	bodylen = len - sizeof(PgqMessage);

	switch ((PgqMessageKind) msg.kind)
	{
		case PGQ_MSG_IDS:
			if (bodylen != (Size) msg.count * sizeof(int64))
				elog(ERROR, "pgq: malformed ids message from the reader");
			if (!w->in_batch)
			{
				if (!begin_batch(w))
					return true;
				pgstat_report_activity(STATE_RUNNING, "writing blocks");
			}
			{
				int64		before = w->blocks.nblocks;

				pgq_block_writer_add(&w->blocks, body, (int) msg.count);
				w->batch_blocks += w->blocks.nblocks - before;
				w->batch_ids += msg.count;
			}
			if (w->batch_ids >= PGQ_BATCH_IDS ||
				w->batch_blocks >= PGQ_BATCH_BLOCKS)
				commit_batch(w);
			return false;

		case PGQ_MSG_END:
			if (!w->in_batch && !begin_batch(w))
				return true;
			pgq_block_writer_finish(&w->blocks);
			if (msg.count != w->blocks.nids)
				elog(ERROR, "pgq: the reader sent " INT64_FORMAT " ids, the writer got " INT64_FORMAT,
					 msg.count, w->blocks.nids);
			pgq_mark_ready(w->group.group_id, w->blocks.nids,
						   w->blocks.nblocks);
			pgq_xact_wake_at_commit(&w->group);
			if (w->blocks.nblocks > 0)
				pgq_notify_group(w->name);
			PopActiveSnapshot();
			SPI_finish();
			CommitTransactionCommand();
			w->in_batch = false;
			ereport(DEBUG1,
					(errmsg("pgq: database \"%s\": group \"%s\" materialized: " INT64_FORMAT " ids in " INT64_FORMAT " blocks",
							worker_database, w->name, w->blocks.nids,
							w->blocks.nblocks)));
			return true;

		case PGQ_MSG_ERROR:
			fail_group(w, pnstrdup(body, bodylen));
			return true;
	}
	elog(ERROR, "pgq: unknown message kind %d from the reader", msg.kind);
	return true;				/* keep the compiler quiet */
}

/*
 * Start the reader, with a queue to it; NULL if no worker slot is free.
 * The queue's segment is mapped for the life of the process.
 */
static shm_mq_handle *
start_reader(const PgqMaterializeArgs *args)
{
	BackgroundWorker worker;
	dsm_segment *seg;
	shm_mq	   *mq;

	seg = dsm_create(PGQ_READER_QUEUE_SIZE, 0);
	mq = shm_mq_create(dsm_segment_address(seg), PGQ_READER_QUEUE_SIZE);
	shm_mq_set_receiver(mq, MyProc);
	init_worker(&worker, args, "pgq_reader_main", PGQ_READER_TYPE,
				dsm_segment_handle(seg));
	if (!RegisterDynamicBackgroundWorker(&worker, &reader_handle))
	{
		dsm_detach(seg);
		return NULL;
	}
	return shm_mq_attach(mq, seg, reader_handle);
}

/* Tell the creator how starting went, and let go of its segment. */
static void
reply_to_creator(dsm_segment *seg, char reply)
{
	shm_mq	   *mq = dsm_segment_address(seg);
	shm_mq_handle *mqh;
	shm_mq_iovec iov;

	shm_mq_set_sender(mq, MyProc);
	mqh = shm_mq_attach(mq, seg, NULL);
	iov.data = &reply;
	iov.len = 1;
	(void) shm_mq_sendv(mqh, &iov, 1, false, true);
	shm_mq_detach(mqh);
	dsm_detach(seg);
}

/*
 * The writer: see the file header.  Errors are recorded as the group's
 * failure; dying (SIGTERM, crash) leaves it to the maintenance pass.
 */
void
pgq_writer_main(Datum arg)
{
	PgqMaterializeArgs args;
	dsm_segment *creator_seg;
	shm_mq_handle *mqh;
	Writer		w;
	LOCKTAG		tag;
	int			block_size;
	bool		done = false;
	ErrorContextCallback context;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.role, 0);
	push_materialize_context(&context, args.group_id);
	pgstat_report_activity(STATE_RUNNING, "starting");

	/* the creator waits for us; if it is gone, so is its transaction */
	creator_seg = dsm_attach(DatumGetUInt32(arg));
	if (creator_seg == NULL)
		proc_exit(0);

	StartTransactionCommand();
	materialize_lock_tag(&tag, args.group_id);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	CommitTransactionCommand();

	before_shmem_exit(stop_reader, (Datum) 0);
	mqh = start_reader(&args);
	if (mqh != NULL)
	{
		pg_atomic_uint32 *owner;
		uint32		expected = PGQ_COUNT_CREATOR;

		/* the count of running materializations is the writer's now */
		owner = (pg_atomic_uint32 *) ((char *) dsm_segment_address(creator_seg) +
									  PGQ_CREATOR_QUEUE_SIZE);
		if (pg_atomic_compare_exchange_u32(owner, &expected,
										   PGQ_COUNT_WRITER))
		{
			counted_role = args.charged;
			before_shmem_exit(give_back_count, (Datum) 0);
		}
	}
	reply_to_creator(creator_seg, mqh != NULL ? PGQ_STARTED : PGQ_NO_SLOT);
	if (mqh == NULL)
		proc_exit(0);

	wait_for_creator(args.xid);

	memset(&w, 0, sizeof(w));
	w.group.dbid = MyDatabaseId;
	w.group.group_id = args.group_id;
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!lock_group(&w, &block_size))
	{
		/* rolled back, or dropped already */
		PopActiveSnapshot();
		SPI_finish();
		AbortCurrentTransaction();
		proc_exit(0);
	}
	name_worker_group(w.name);
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		pgq_block_writer_init(&w.blocks, args.group_id, block_size);
		MemoryContextSwitchTo(old);
	}

	PG_TRY();
	{
		while (!done)
		{
			shm_mq_result res;
			Size		len;
			void	   *data;

			CHECK_FOR_INTERRUPTS();
			res = shm_mq_receive(mqh, &len, &data, true);
			if (res == SHM_MQ_SUCCESS)
				done = handle_message(&w, data, len);
			else if (res == SHM_MQ_DETACHED)
			{
				fail_group(&w, "the reader worker exited before the query ended (see the server log)");
				done = true;
			}
			else if (w.in_batch)
				commit_batch(&w);	/* the reader is slower: publish */
			else
			{
				int			rc;

				rc = WaitLatch(MyLatch,
							   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   PGQ_WRITER_CHECK_MS, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				if ((rc & WL_TIMEOUT) && !group_still_wanted(&w))
					done = true;
			}
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *reason;

		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		w.in_batch = false;
		reason = psprintf("writing blocks failed: %s (SQLSTATE %s)",
						  edata->message, unpack_sql_state(edata->sqlerrcode));
		fail_group(&w, reason);
	}
	PG_END_TRY();

	proc_exit(0);
}

/*
 * Send a fetch of ids to the writer: a PgqIdSink.  An error if the writer
 * is gone, which ends the query.
 */
static void
send_ids(const int64 *ids, int n, void *arg)
{
	shm_mq_handle *mqh = (shm_mq_handle *) arg;
	PgqMessage	msg;
	shm_mq_iovec iov[2];

	memset(&msg, 0, sizeof(msg));	/* no uninitialized padding in the queue */
	msg.kind = PGQ_MSG_IDS;
	msg.count = n;
	iov[0].data = (const char *) &msg;
	iov[0].len = sizeof(msg);
	iov[1].data = (const char *) ids;
	iov[1].len = (Size) n * sizeof(int64);
	pgstat_report_activity(STATE_RUNNING, "running the group's query");
	if (shm_mq_sendv(mqh, iov, 2, false, true) != SHM_MQ_SUCCESS)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("the materialization writer exited")));
}

/* Send the end of the query, or its failure, to the writer. */
static void
send_last(shm_mq_handle *mqh, PgqMessageKind kind, int64 count,
		  const char *reason)
{
	PgqMessage	msg;
	shm_mq_iovec iov[2];

	memset(&msg, 0, sizeof(msg));
	msg.kind = kind;
	msg.count = count;
	iov[0].data = (const char *) &msg;
	iov[0].len = sizeof(msg);
	iov[1].data = reason;
	iov[1].len = reason != NULL ? strlen(reason) : 0;
	(void) shm_mq_sendv(mqh, iov, reason != NULL ? 2 : 1, false, true);
}

/*
 * Set the captured settings, {name, value, ...}, for this session, as the
 * creator had them.
 */
static void
apply_settings(const char *search_path, Datum settings)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	(void) set_config_option("search_path", search_path,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SET, true, 0, false);
	deconstruct_array(DatumGetArrayTypeP(settings), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i + 1 < n; i += 2)
	{
		if (nulls[i] || nulls[i + 1])
			continue;
		(void) set_config_option(TextDatumGetCString(elems[i]),
								 TextDatumGetCString(elems[i + 1]),
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SET, true, 0, false);
	}
}

/*
 * Run the group's query as its creator, with the parameter values it bound,
 * and stream the ids; returns the number of ids, or -1 if the group is
 * gone.  Inside a transaction.
 */
static int64
read_group(const PgqMaterializeArgs *args, shm_mq_handle *mqh)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	bool		isnull;
	char	   *query;
	char	   *search_path;
	Datum		settings;
	Oid			owner;
	Datum		timeout;
	bool		no_timeout;
	Oid			save_userid;
	int			save_sec_context;
	Datum		param_values = (Datum) 0;
	Datum		param_types = (Datum) 0;
	PgqQueryParams params;
	SPIPlanPtr	plan;
	int64		total;
	int			rc;

	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	values[0] = Int64GetDatum(args->group_id);
	/* params and param_types (since 0.2) */
#define READ_GROUP(params) \
	"SELECT query, owner, search_path, settings, " \
	"materialize_timeout, group_name" params " " \
	"FROM pgq.groups " \
	"WHERE group_id " OP("=") " $1 " \
	"AND state " OP("=") " 'materializing'"
	rc = SPI_execute_with_args(pgq_groups_have_column("params") ?
							   READ_GROUP(", params, param_types") :
							   READ_GROUP(""),
							   1, argtypes, values, NULL, true, 1);
#undef READ_GROUP
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		PopActiveSnapshot();
		SPI_finish();
		return -1;
	}
	tuple = SPI_tuptable->vals[0];
	tupdesc = SPI_tuptable->tupdesc;
	query = SPI_getvalue(tuple, tupdesc, 1);
	owner = DatumGetObjectId(SPI_getbinval(tuple, tupdesc, 2, &isnull));
	search_path = SPI_getvalue(tuple, tupdesc, 3);
	settings = SPI_getbinval(tuple, tupdesc, 4, &isnull);
	timeout = SPI_getbinval(tuple, tupdesc, 5, &no_timeout);
	name_worker_group(SPI_getvalue(tuple, tupdesc, 6));
	if (tupdesc->natts > 6)
	{
		param_values = SPI_getbinval(tuple, tupdesc, 7, &isnull);
		if (!isnull)
			param_types = SPI_getbinval(tuple, tupdesc, 8, &isnull);
		if (isnull)
			param_values = (Datum) 0;
	}

	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the role that created the group no longer exists")));

	/* from here on, everything the query does is done as its owner */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	apply_settings(search_path, settings);
	memset(&params, 0, sizeof(params));
	if (param_values != (Datum) 0)
		pgq_load_group_params(param_types, param_values, &params);

	/* background workers do not arm statement_timeout: arm it here */
	if (!no_timeout)
		enable_timeout_at(STATEMENT_TIMEOUT,
						  TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  pgq_duration_usecs(DatumGetIntervalP(timeout)) / 1000));
	plan = pgq_prepare_group_query(query, &params);
	total = pgq_run_group_query(plan, &params, send_ids, mqh);
	if (!no_timeout)
		disable_timeout(STATEMENT_TIMEOUT, false);

	SetUserIdAndSecContext(save_userid, save_sec_context);
	PopActiveSnapshot();
	SPI_finish();
	return total;
}

/*
 * The reader: runs the group's query once the creating transaction has
 * committed, and sends its ids to the writer, then the end or the error.
 */
void
pgq_reader_main(Datum arg)
{
	PgqMaterializeArgs args;
	dsm_segment *seg;
	shm_mq_handle *mqh;
	int64		total = -1;
	ErrorContextCallback context;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.role, 0);
	push_materialize_context(&context, args.group_id);

	seg = dsm_attach(DatumGetUInt32(arg));
	if (seg == NULL)
		proc_exit(0);			/* the writer is gone */
	shm_mq_set_sender(dsm_segment_address(seg), MyProc);
	mqh = shm_mq_attach(dsm_segment_address(seg), seg, NULL);

	wait_for_creator(args.xid);

	PG_TRY();
	{
		StartTransactionCommand();
		total = read_group(&args, mqh);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* a timeout firing now would turn the report into a FATAL one */
		HOLD_INTERRUPTS();
		disable_all_timeouts(false);
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		send_last(mqh, PGQ_MSG_ERROR, 0,
				  psprintf("%s (SQLSTATE %s)", edata->message,
						   unpack_sql_state(edata->sqlerrcode)));
		RESUME_INTERRUPTS();
		proc_exit(0);
	}
	PG_END_TRY();

	if (total >= 0)
		send_last(mqh, PGQ_MSG_END, total, NULL);
	proc_exit(0);
}
