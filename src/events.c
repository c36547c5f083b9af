/*-------------------------------------------------------------------------
 *
 * events.c
 *	  Hearing when work is finished: waiting for a set of items, and the
 *	  NOTIFY that a queue may send for its finished and dead items.
 *
 * pgq.results() waits for any or all of a set of items of one queue as
 * pgq.result() waits for one: on the queue's condition variable (wait.c),
 * woken by the commits that finish its items, looking again with a fresh
 * snapshot each time.  Each look reads only the items not yet seen finished.
 *
 * A queue whose owner turned on pgq.notify_finished() announces its items
 * that a transaction leaves done or dead on its finished channel
 * (pgq.channel(queue, finished => true)).  The statements that finish items
 * note them here, with the state they left them in; a later statement of the
 * transaction may take that back (a transaction-mode claim's failure, a
 * retry), and a subtransaction's abort takes back its notes.  Just before
 * the transaction commits (XACT_EVENT_PRE_COMMIT, where PostgreSQL's own
 * triggers still run and an error still aborts the transaction), the last
 * note of each item is sent with Async_Notify(): PostgreSQL delivers it at
 * the commit, and only if the transaction commits.  Nothing is sent from
 * the commit itself.
 *
 * Queues that did not opt in pay one lookup in a per-backend cache per
 * statement that finishes items: the cache says which queues announce, and
 * is emptied by the invalidation that every change of pgq.groups sends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "pgq.h"
#include "claim.h"
#include "events.h"
#include "group.h"
#include "privilege.h"
#include "queue.h"
#include "wait.h"

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#endif

PG_FUNCTION_INFO_V1(pgq_results);
PG_FUNCTION_INFO_V1(pgq_notify_finished);

/* A NOTIFY payload must be shorter than this (async.c). */
#define PGQ_PAYLOAD_LIMIT	(BLCKSZ - NAMEDATALEN - 128)

/* Whether a queue announces its finished items, as last read. */
typedef struct AnnouncingQueue
{
	int64		group_id;		/* hash key */
	TimestampTz created_at;
	bool		announces;
	char		channel[NAMEDATALEN];	/* its finished channel */
} AnnouncingQueue;

static HTAB *announcing = NULL;
static Oid	announcing_relid = InvalidOid;	/* pgq.groups, when filled */
static bool announcing_stale = false;

/* A queue whose items this transaction noted. */
typedef struct NotedQueue
{
	int64		group_id;
	char		channel[NAMEDATALEN];
} NotedQueue;

/* An item that a statement of this transaction left in "state". */
typedef struct Note
{
	int64		item_id;
	int			queue;			/* in noted_queues[] */
	int			nest_level;		/* (sub)transaction that made the note */
	int			seq;			/* the later note of an item wins */
	char		state;
} Note;

/* In TopTransactionContext; appended in the order the statements ran. */
static NotedQueue *noted_queues = NULL;
static int	nnoted_queues = 0;
static int	maxnoted_queues = 0;
static Note *notes = NULL;
static int	nnotes = 0;
static int	maxnotes = 0;

/* Relcache callback: pgq.groups changed (or everything did). */
static void
announcing_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == announcing_relid)
		announcing_stale = true;
}

/*
 * Read whether the queue announces its finished items, and its finished
 * channel, into *entry: with a fresh snapshot, as group lookups read groups.
 * A database still at 0.1 has no such setting.  In a nested SPI
 * connection, so that the caller's current SPI result stays.
 */
static void
read_announcing(const PgqGroupRef *ref, AnnouncingQueue *entry)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];
	int			rc;

	entry->announces = false;
	entry->channel[0] = '\0';
	if (!pgq_groups_have_column("notify_finished"))
		return;
	SPI_connect();
	if (plan == NULL)
		plan = pgq_keep_plan("SELECT channel FROM pgq.groups "
							 "WHERE group_id " OP("=") " $1 "
							 "AND created_at " OP("=") " $2 "
							 "AND notify_finished",
							 2, argtypes);
	values[0] = Int64GetDatum(ref->group_id);
	values[1] = TimestampTzGetDatum(ref->created_at);
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
	{
		char	   *channel = SPI_getvalue(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1);

		entry->announces = true;
		snprintf(entry->channel, sizeof(entry->channel), "%s%s", channel,
				 PGQ_FINISHED_SUFFIX);
	}
	SPI_finish();
}

/*
 * The queue's index in noted_queues[] if it announces its finished items,
 * else -1.  Inside SPI; the caller's current SPI result stays.
 */
static int
noted_queue(const PgqGroupRef *ref)
{
	AnnouncingQueue *entry;
	AnnouncingQueue fresh;
	bool		found;
	MemoryContext old;

	if (announcing == NULL || announcing_stale)
	{
		HASHCTL		ctl;

		if (announcing == NULL)
			CacheRegisterRelcacheCallback(announcing_callback, (Datum) 0);
		else
			hash_destroy(announcing);
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(AnnouncingQueue);
		ctl.hcxt = CacheMemoryContext;
		announcing = hash_create("pgq queues that announce finished items", 16,
								 &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		announcing_relid = get_relname_relid("groups",
											 get_namespace_oid("pgq", false));
		announcing_stale = false;
	}
	entry = hash_search(announcing, &ref->group_id, HASH_FIND, &found);
	if (!found || entry->created_at != ref->created_at)
	{
		fresh.group_id = ref->group_id;
		fresh.created_at = ref->created_at;
		read_announcing(ref, &fresh);
		entry = &fresh;
		/* an invalidation taken in while reading: read again next time */
		if (!announcing_stale)
		{
			entry = hash_search(announcing, &ref->group_id, HASH_ENTER, &found);
			*entry = fresh;
		}
	}
	if (!entry->announces)
		return -1;

	for (int i = nnoted_queues - 1; i >= 0; i--)
	{
		if (noted_queues[i].group_id == ref->group_id)
			return i;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	if (nnoted_queues == maxnoted_queues)
	{
		maxnoted_queues = Max(4, maxnoted_queues * 2);
		noted_queues = noted_queues == NULL ?
			palloc(maxnoted_queues * sizeof(NotedQueue)) :
			repalloc(noted_queues, maxnoted_queues * sizeof(NotedQueue));
	}
	MemoryContextSwitchTo(old);
	noted_queues[nnoted_queues].group_id = ref->group_id;
	strlcpy(noted_queues[nnoted_queues].channel, entry->channel, NAMEDATALEN);
	return nnoted_queues++;
}

/* Append a note of the item in queue "queue" (an index in noted_queues[]). */
static void
add_note(int queue, int64 item_id, char state)
{
	if (nnotes == maxnotes)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		maxnotes = Max(64, maxnotes * 2);
		notes = notes == NULL ? palloc(maxnotes * sizeof(Note)) :
			repalloc(notes, maxnotes * sizeof(Note));
		MemoryContextSwitchTo(old);
	}
	notes[nnotes].item_id = item_id;
	notes[nnotes].queue = queue;
	notes[nnotes].nest_level = GetCurrentTransactionNestLevel();
	notes[nnotes].seq = nnotes;
	notes[nnotes].state = state;
	nnotes++;
}

/*
 * A statement left items of the queue in "state": note them, if the queue
 * announces its finished items.  A state other than done or dead takes back
 * an earlier note of the item.  Inside SPI; the caller's current SPI result
 * stays.
 */
void
pgq_events_note(const PgqGroupRef *group, const int64 *item_ids, int n,
				char state)
{
	int			queue;

	if (n <= 0)
		return;
	queue = noted_queue(group);
	if (queue < 0)
		return;
	for (int i = 0; i < n; i++)
		add_note(queue, item_ids[i], state);
}

/*
 * Note the rows of the caller's current SPI result: item ids in column
 * "idcol", of the queue "group", or else of the queues whose (group_id,
 * created_at) are in the columns from "groupcol" on; in the states of
 * column "statecol", or else all in "state".
 */
void
pgq_events_note_rows(const PgqGroupRef *group, int idcol, int groupcol,
					 int statecol, char state)
{
	SPITupleTable *rows = SPI_tuptable;
	uint64		nrows = SPI_processed;
	int64		previous = 0;
	int			queue = -1;

	for (uint64 i = 0; i < nrows; i++)
	{
		HeapTuple	row = rows->vals[i];
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (group != NULL)
		{
			if (i == 0)
				queue = noted_queue(group);
		}
		else if (i == 0 ||
				 DatumGetInt64(SPI_getbinval(row, rows->tupdesc, groupcol,
											 &isnull)) != previous)
		{
			PgqGroupRef ref;

			pgq_group_ref_from_tuple(row, rows->tupdesc, groupcol, &ref);
			previous = ref.group_id;
			queue = noted_queue(&ref);
		}
		if (queue < 0)
			continue;
		add_note(queue,
				 DatumGetInt64(SPI_getbinval(row, rows->tupdesc, idcol, &isnull)),
				 statecol > 0 ?
				 DatumGetChar(SPI_getbinval(row, rows->tupdesc, statecol, &isnull)) :
				 state);
	}
}

/* A transaction-mode claim marked the items done. */
void
pgq_events_note_claimed(const PgqGroupRef *group, const PgqClaimed *items,
						int n)
{
	int			queue;

	if (n <= 0)
		return;
	queue = noted_queue(group);
	if (queue < 0)
		return;
	for (int i = 0; i < n; i++)
		add_note(queue, items[i].id, 'd');
}

/*
 * A statement changed the item, and what it left is what the item's row says
 * now: note that, if the queue announces its finished items.
 */
void
pgq_events_note_current(const PgqGroupRef *group, int64 item_id)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	int			queue = noted_queue(group);
	int			rc;

	if (queue < 0)
		return;
	SPI_connect();
	if (plan == NULL)
		plan = pgq_keep_plan("SELECT state FROM pgq.items "
							 "WHERE group_id " OP("=") " $1 "
							 "AND item_id " OP("=") " $2",
							 2, argtypes);
	values[0] = Int64GetDatum(group->group_id);
	values[1] = Int64GetDatum(item_id);
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read item: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
	{
		bool		isnull;

		add_note(queue, item_id,
				 DatumGetChar(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 1,
											&isnull)));
	}
	SPI_finish();
}

/* qsort comparator: notes by queue, then item, then in the order made */
static int
compare_notes(const void *a, const void *b)
{
	const Note *x = (const Note *) a;
	const Note *y = (const Note *) b;

	if (x->queue != y->queue)
		return (x->queue > y->queue) - (x->queue < y->queue);
	if (x->item_id != y->item_id)
		return (x->item_id > y->item_id) - (x->item_id < y->item_id);
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Queue one notification of done and dead ids on the channel, and reset. */
static void
send_payload(const char *channel, StringInfo done, StringInfo dead)
{
	StringInfoData payload;

	if (done->len == 0 && dead->len == 0)
		return;
	initStringInfo(&payload);
	appendStringInfoChar(&payload, '{');
	if (done->len > 0)
		appendStringInfo(&payload, "\"done\": [%s]", done->data);
	if (done->len > 0 && dead->len > 0)
		appendStringInfoString(&payload, ", ");
	if (dead->len > 0)
		appendStringInfo(&payload, "\"dead\": [%s]", dead->data);
	appendStringInfoChar(&payload, '}');
	Async_Notify(channel, payload.data);
	pfree(payload.data);
	resetStringInfo(done);
	resetStringInfo(dead);
}

/*
 * Before the commit: queue the notifications of the items that the
 * transaction leaves done or dead, each queue's in as few payloads as fit
 * NOTIFY's limit, ids ascending.  An error here still aborts the
 * transaction.
 */
static void
send_notes(void)
{
	/* {"done": [], "dead": []} and the longest id with its separator */
	const int	room = PGQ_PAYLOAD_LIMIT - 1 - 24 - 22;
	StringInfoData done;
	StringInfoData dead;

	qsort(notes, nnotes, sizeof(Note), compare_notes);
	initStringInfo(&done);
	initStringInfo(&dead);
	for (int i = 0; i < nnotes; i++)
	{
		const Note *note = &notes[i];
		StringInfo	list;

		/* the last note of each item counts */
		if (i + 1 < nnotes && notes[i + 1].queue == note->queue &&
			notes[i + 1].item_id == note->item_id)
			continue;
		if (note->state == 'd')
			list = &done;
		else if (note->state == 'f')
			list = &dead;
		else
			list = NULL;
		if (list != NULL)
		{
			if (done.len + dead.len > room)
				send_payload(noted_queues[note->queue].channel, &done, &dead);
			appendStringInfo(list, list->len > 0 ? ", " INT64_FORMAT : INT64_FORMAT,
							 note->item_id);
		}
		if (i + 1 == nnotes || notes[i + 1].queue != note->queue)
			send_payload(noted_queues[note->queue].channel, &done, &dead);
	}
}

/*
 * At the end of the transaction: send the notes before it commits, refuse
 * PREPARE with notes to send (a prepared transaction cannot NOTIFY), and
 * forget them once it is over.  COMMIT and ABORT only reset pointers.
 */
static void
events_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (nnotes > 0)
				send_notes();
			return;
		case XACT_EVENT_PRE_PREPARE:
			if (nnotes > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that finished items of a queue that announces them"),
						 errdetail("The queue's notifications are sent at commit, and a prepared transaction cannot send notifications."),
						 errhint("Commit or roll back the transaction instead.")));
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* TopTransactionContext goes, and the notes with it */
			noted_queues = NULL;
			nnoted_queues = 0;
			maxnoted_queues = 0;
			notes = NULL;
			nnotes = 0;
			maxnotes = 0;
			return;
		default:
			return;
	}
}

/*
 * At the end of a subtransaction: its notes (the tail of the array) become
 * the parent's on commit, and are dropped on abort.
 */
static void
events_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			first = nnotes;

	while (first > 0 && notes[first - 1].nest_level >= level)
		first--;
	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			for (int i = first; i < nnotes; i++)
				notes[i].nest_level = level - 1;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			nnotes = first;
			break;
		default:
			break;
	}
}

/* Register the transaction callbacks; called from _PG_init(). */
void
pgq_events_init(void)
{
	RegisterXactCallback(events_xact_callback, NULL);
	RegisterSubXactCallback(events_subxact_callback, NULL);
}

/*
 * pgq.notify_finished(queue_name, enabled) -> boolean
 *
 * Turn the queue's notifications of finished items on or off, for the
 * transactions that start after this one commits; true if that changed the
 * setting.  For the queue's owner.
 */
Datum
pgq_notify_finished(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqScope	scope;
	Oid			argtypes[2] = {INT8OID, BOOLOID};
	Datum		values[2];
	int			rc;
	bool		changed;

	pgq_check_arg_not_null(fcinfo, 0, "queue_name");
	pgq_check_arg_not_null(fcinfo, 1, "enabled");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	pgq_check_not_in_recovery("change a queue");
	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group(PG_GETARG_TEXT_PP(0), &group);
	pgq_check_privilege(&group, PGQ_PRIV_ADMIN);
	if (group.kind != PGQ_KIND_QUEUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a query group, not a queue", group.name),
				 errdetail("Only queue items are finished one by one.")));
	values[0] = Int64GetDatum(group.ref.group_id);
	values[1] = PG_GETARG_DATUM(1);
	rc = pgq_execute_fresh("UPDATE pgq.groups SET notify_finished = $2 "
						   "WHERE group_id " OP("=") " $1 "
						   "AND notify_finished " OP("<>") " $2",
						   2, argtypes, values);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not update group: %s", SPI_result_code_string(rc));
	changed = SPI_processed > 0;
	if (changed)
		pgq_invalidate_groups();
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(changed);
}

/*
 * One distinct id asked for, and what the looks found: its state (0 while
 * unknown), and its row's columns once the item was seen finished, or on
 * the last look.
 */
typedef struct Asked
{
	int64		item_id;
	int			position;		/* of its first appearance in block_ids */
	char		state;			/* 0: not an item of the queue */
	bool		captured;		/* values[] hold its row */
	Datum		values[5];		/* result .. last_error_data */
	bool		nulls[5];
} Asked;

/* qsort and bsearch comparator: asked ids, ascending */
static int
compare_asked(const void *a, const void *b)
{
	return pgq_compare_int64(&((const Asked *) a)->item_id,
							 &((const Asked *) b)->item_id);
}

/* qsort comparator: asked ids in the order of block_ids */
static int
compare_positions(const void *a, const void *b)
{
	int			x = ((const Asked *) a)->position;
	int			y = ((const Asked *) b)->position;

	return (x > y) - (x < y);
}

/*
 * Copy the row's columns result .. last_error_data into *asked, detoasted,
 * in the current context.
 */
static void
capture(Asked *asked, HeapTuple row, TupleDesc rowdesc)
{
	for (int c = 0; c < 5; c++)
	{
		Datum		value = SPI_getbinval(row, rowdesc, c + 3, &asked->nulls[c]);

		if (asked->nulls[c])
			asked->values[c] = (Datum) 0;
		else if (c == 2)		/* attempt, an integer */
			asked->values[c] = value;
		else
			asked->values[c] = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
	}
	asked->captured = true;
}

/*
 * pgq.results(queue_name, block_ids, wait, wait_for) ->
 *	  SETOF (block_id, state, result, result_data, attempt, last_error,
 *			 last_error_data)
 *
 * The state and result of each item of block_ids, once each, in the order
 * of block_ids.  With wait, waits inside the server until all of them
 * (wait_for 'all') or any one (wait_for 'any') are done or dead, or the time
 * is up, as pgq.result() waits for one.  An id that is not an item of the
 * queue (any more) gets a row with only its id, and neither ends nor holds
 * up the wait.  Each look reads the items not yet seen finished, through
 * the index, and finds their places by binary search.
 */
Datum
pgq_results(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PgqArrayArg ids;
	TimestampTz deadline = 0;
	bool		want_all = true;
	PgqGroup	group;
	PgqScope	scope;
	MemoryContext cxt;
	Asked	   *asked;
	int64	   *watch;
	int			nasked = 0;
	int			nwatch;
	int			nfinished = 0;
	bool		looked = false;

	pgq_check_arg_not_null(fcinfo, 0, "queue_name");
	pgq_check_arg_not_null(fcinfo, 1, "block_ids");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	pgq_get_array_arg(fcinfo, 1, "block_ids", INT8OID, &ids);
	for (int i = 0; i < ids.n; i++)
	{
		if (ids.nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("block_ids must not contain NULL")));
	}
	pgq_check_arg_not_null(fcinfo, 3, "wait_for");
	{
		char	   *wait_for = text_to_cstring(PG_GETARG_TEXT_PP(3));

		if (strcmp(wait_for, "any") == 0)
			want_all = false;
		else if (strcmp(wait_for, "all") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("wait_for must be \"any\" or \"all\"")));
	}
	if (!PG_ARGISNULL(2))
	{
		deadline = pgq_wait_deadline(PG_GETARG_INTERVAL_P(2));
		if (deadline != 0 && XactIsoLevel != XACT_READ_COMMITTED)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
					 errmsg("waiting for a result requires the READ COMMITTED isolation level"),
					 errdetail("The snapshot of this transaction would never see the result arrive.")));
	}
	InitMaterializedSRF(fcinfo, 0);

	/* the distinct ids, ascending, each with its first place */
	cxt = CurrentMemoryContext;
	asked = palloc(Max(ids.n, 1) * sizeof(Asked));
	watch = palloc(Max(ids.n, 1) * sizeof(int64));
	for (int i = 0; i < ids.n; i++)
	{
		asked[i].item_id = DatumGetInt64(ids.values[i]);
		asked[i].position = i;
		asked[i].state = 0;
		asked[i].captured = false;
	}
	qsort(asked, ids.n, sizeof(Asked), compare_asked);
	for (int i = 0; i < ids.n; i++)
	{
		if (nasked > 0 && asked[nasked - 1].item_id == asked[i].item_id)
		{
			asked[nasked - 1].position = Min(asked[nasked - 1].position,
											 asked[i].position);
			continue;
		}
		asked[nasked++] = asked[i];
	}

	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group_cached(PG_GETARG_TEXT_PP(0), &group);
	if (!pgq_may_see_group(&group))
		pgq_check_privilege(&group, PGQ_PRIV_USE);
	if (group.kind != PGQ_KIND_QUEUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a query group, not a queue", group.name),
				 errhint("Only queue items have results.")));
	pgq_check_privilege(&group, PGQ_PRIV_USE);
	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, INT8ARRAYOID};

		/* the binary error: in the last entry of the error history */
		plan = pgq_keep_plan("SELECT item_id, state, result, result_data, "
							 "attempt, last_error, "
							 "pg_catalog.decode(errors " OP("->") " (-1) "
							 OP("->>") " 'data', 'base64'), xmin "
							 "FROM pgq.items WHERE group_id " OP("=") " $1 "
							 "AND item_id " OP("=") " ANY ($2)",
							 2, argtypes);
	}

	/* look at the items not yet seen finished, until the wait is over */
	for (int i = 0; i < nasked; i++)
		watch[i] = asked[i].item_id;
	nwatch = nasked;
	while (nwatch > 0)
	{
		uint64		seen = pgq_wait_generation(&group.ref);
		Datum		args[2];
		Datum	   *elems;
		SPITupleTable *rows;
		uint64		nrows;
		int			rc;
		int			nwaiting = 0;
		bool		over;

		/* what this look does not find is not an item of the queue (now) */
		for (int i = 0; i < nwatch; i++)
		{
			Asked	   *a = bsearch(&watch[i], asked, nasked, sizeof(Asked),
									pgq_compare_int64);

			a->state = 0;
		}
		elems = palloc(nwatch * sizeof(Datum));
		for (int i = 0; i < nwatch; i++)
			elems[i] = Int64GetDatum(watch[i]);
		args[0] = Int64GetDatum(group.ref.group_id);
		args[1] = PointerGetDatum(construct_array(elems, nwatch, INT8OID,
												  sizeof(int64), FLOAT8PASSBYVAL,
												  TYPALIGN_DOUBLE));
		rc = SPI_execute_plan(plan, args, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read items: %s", SPI_result_code_string(rc));
		pfree(elems);
		pfree(DatumGetPointer(args[1]));
		rows = SPI_tuptable;
		nrows = SPI_processed;

		for (uint64 r = 0; r < nrows; r++)
		{
			HeapTuple	row = rows->vals[r];
			TupleDesc	rowdesc = rows->tupdesc;
			bool		isnull;
			int64		id = DatumGetInt64(SPI_getbinval(row, rowdesc, 1, &isnull));
			Asked	   *a = bsearch(&id, asked, nasked, sizeof(Asked),
									pgq_compare_int64);

			CHECK_FOR_INTERRUPTS();
			if (a == NULL)
				continue;
			a->state = DatumGetChar(SPI_getbinval(row, rowdesc, 2, &isnull));
			if (a->state == 'd' || a->state == 'f')
			{
				MemoryContext old = MemoryContextSwitchTo(cxt);

				capture(a, row, rowdesc);
				MemoryContextSwitchTo(old);
				nfinished++;
				continue;
			}
			nwaiting++;
			if (deadline != 0 &&
				TransactionIdIsCurrentTransactionId(DatumGetTransactionId(SPI_getbinval(row, rowdesc,
																						8, &isnull))))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
						 errmsg("cannot wait for the result of item " INT64_FORMAT " before this transaction commits",
								id),
						 errdetail("This transaction enqueued the item, or retried or claimed it, and no worker sees that before the transaction commits: the wait could only run out."),
						 errhint("Commit first, then wait for the result in autocommit mode or in a new transaction.")));
		}

		/* a queue dropped while the call waited: its items went with it */
		if (looked && nrows == 0)
		{
			PgqGroup	now;

			if (!pgq_find_group_id(group.ref.group_id, &now) ||
				now.ref.created_at != group.ref.created_at)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_OBJECT),
						 errmsg("queue \"%s\" does not exist any more",
								group.name)));
		}
		looked = true;

		over = deadline == 0 || nwaiting == 0 ||
			(!want_all && nfinished > 0);
		if (!over && !pgq_wait_for_wakeup(&group.ref, deadline, seen))
			over = true;
		if (over)
		{
			/* the last look: the rows of the items still unfinished */
			for (uint64 r = 0; r < nrows; r++)
			{
				HeapTuple	row = rows->vals[r];
				bool		isnull;
				int64		id = DatumGetInt64(SPI_getbinval(row, rows->tupdesc,
															 1, &isnull));
				Asked	   *a = bsearch(&id, asked, nasked, sizeof(Asked),
										pgq_compare_int64);

				if (a != NULL && !a->captured)
				{
					MemoryContext old = MemoryContextSwitchTo(cxt);

					capture(a, row, rows->tupdesc);
					MemoryContextSwitchTo(old);
				}
			}
			break;
		}
		SPI_freetuptable(rows);

		/* woken: the next look reads the items still to wait for */
		nwatch = 0;
		for (int i = 0; i < nasked; i++)
		{
			if (asked[i].state != 0 && asked[i].state != 'd' &&
				asked[i].state != 'f')
				watch[nwatch++] = asked[i].item_id;
		}
	}
	if (deadline != 0)
		pgq_wait_done();
	SPI_finish();
	pgq_leave(&scope);

	qsort(asked, nasked, sizeof(Asked), compare_positions);
	for (int i = 0; i < nasked; i++)
	{
		Datum		values[7];
		bool		nulls[7];

		CHECK_FOR_INTERRUPTS();
		memset(nulls, true, sizeof(nulls));
		values[0] = Int64GetDatum(asked[i].item_id);
		nulls[0] = false;
		if (asked[i].state != 0)
		{
			values[1] = CStringGetTextDatum(pgq_item_state_name(asked[i].state));
			nulls[1] = false;
			for (int c = 0; c < 5 && asked[i].captured; c++)
			{
				values[c + 2] = asked[i].values[c];
				nulls[c + 2] = asked[i].nulls[c];
			}
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
