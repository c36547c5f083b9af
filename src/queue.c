/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  Queues: items that producers enqueue, with payloads, keys, priorities,
 *	  delays, retries with backoff, dead-letter and results.
 *
 * A queue is a group of kind 'queue' (pgq.create_queue) whose work is rows
 * of pgq.items, one per enqueued item.  Items are claimed highest priority
 * first, then in the order they were enqueued, through the same pgq.claim()
 * as blocks, in any of the three modes:
 *
 *	- lease: a claim commits state 'c' with a deadline and counts an attempt;
 *	  pgq.complete() stores the result and marks the item done ('d'),
 *	  pgq.fail() schedules a retry ('r') after a backoff, or dead-letters the
 *	  item ('f') once max_attempts are used up, and pgq.release() hands it
 *	  back.  A lease that runs out counts as a failed attempt.
 *	- transaction: a claim marks the item done in the claiming transaction;
 *	  COMMIT keeps that, ROLLBACK gives the item back.  pgq.complete() and
 *	  pgq.fail() in that transaction store a result or turn it into a retry.
 *	- advisory: a claim takes a session-level advisory lock on the item and
 *	  writes nothing (advisory.c); pgq.complete() and pgq.fail() change the
 *	  row as in lease mode, counting the attempt then, and the lock goes when
 *	  their transaction commits.  A claim lost with the session's locks (a
 *	  restart, a failover) leaves the item as it was: claimable again.
 *
 * Delayed items and retries wait in state 'r' until due_at; expired leases
 * stay 'c'.  A lease-mode claim first moves the due ones back to pending
 * (or to dead-letter), so that they take their place in priority order;
 * claims of the other modes take due items first, oldest due first.
 *
 * A key is unique per queue, through a unique index: however enqueues race,
 * one inserts and the others find its item.  Done and dead items keep their
 * keys until retention removes them (see worker.c); pgq.item() looks an
 * item up by its key.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "common/pg_prng.h"

#include "pgq.h"
#include "advisory.h"
#include "blockscan.h"
#include "claim.h"
#include "due.h"
#include "events.h"
#include "group.h"
#include "iteminsert.h"
#include "itemwrite.h"
#include "lease.h"
#include "ordering.h"
#include "privilege.h"
#include "queue.h"
#include "quota.h"
#include "shmem.h"
#include "wait.h"
#include "worker.h"
#include "xact.h"

/* InitMaterializedSRF() appeared in 15.1, after SetSingleFuncCall() in 15.0 */
#if PG_VERSION_NUM < 150001
#define InitMaterializedSRF(fcinfo, flags) SetSingleFuncCall(fcinfo, flags)
#endif

/* Limits on user input. */
#define PGQ_MAX_KEY_BYTES	1024

/*
 * At most this many due items beyond what it asks for are dead-lettered by
 * one claim (promote_due()): a backlog of them is worked off by several.
 */
#define PGQ_PROMOTE_DEAD_LIMIT	1000

PG_FUNCTION_INFO_V1(pgq_create_queue);
PG_FUNCTION_INFO_V1(pgq_enqueue);
PG_FUNCTION_INFO_V1(pgq_enqueue_many);
PG_FUNCTION_INFO_V1(pgq_complete_many);
PG_FUNCTION_INFO_V1(pgq_retry);
PG_FUNCTION_INFO_V1(pgq_retry_key);
PG_FUNCTION_INFO_V1(pgq_result);
PG_FUNCTION_INFO_V1(pgq_item);

/*
 * Appends one entry to an item's error history: what failed, at which
 * attempt and when ($err, attempt $attempt, $at), and the binary error, if
 * any ($data), in base64 under "data".
 */
#define APPEND_ERROR(attempt, err, at, data) \
	"errors = COALESCE(errors, '[]'::pg_catalog.jsonb) " OP("||") " " \
	"pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(" \
	"'attempt', " attempt ", 'error', " err ", 'at', " at ") " OP("||") " " \
	"CASE WHEN " data " IS NULL THEN '{}'::pg_catalog.jsonb " \
	"ELSE pg_catalog.jsonb_build_object('data', " \
	"pg_catalog.encode(" data ", 'base64')) END) "

/* The item held under attempt $3, in queue $1. */
#define HELD_ITEM \
	"WHERE group_id " OP("=") " $1 AND item_id " OP("=") " $2 " \
	"AND state " OP("=") " 'c' AND attempt " OP("=") " $3"

/* The item claimed by the calling transaction (transaction mode). */
#define OWN_ITEM \
	"WHERE group_id " OP("=") " $1 AND item_id " OP("=") " $2 " \
	"AND state " OP("=") " 'd'"

/*
 * An item of an advisory-mode queue that the caller holds (as its lock
 * proves): a claim took it pending, or due for a retry.
 */
#define ADVISORY_ITEM \
	"WHERE group_id " OP("=") " $1 AND item_id " OP("=") " $2 " \
	"AND state " OP("=") " ANY ('{p,r}'::pg_catalog.\"char\"[])"

/*
 * Does pgq.items have the columns of fenced attempt numbers, tries and
 * epoch (see lease.c)?  Not in a database still at 0.1.
 */
static bool
items_fenced(void)
{
	return get_attnum(pgq_rel_oid("items"), "epoch") != InvalidAttrNumber;
}

/*
 * The claims of an item that max_attempts counts: tries, or the attempt
 * number where tries was never set (an item not claimed since the update
 * from 0.1), or at 0.1.
 */
#define TRIES_FENCED "COALESCE(i.tries, i.attempt)"
#define TRIES_0_1 "i.attempt"

/*
 * Look up a queue by name; an error if there is none, or it is a query
 * group.  A caller that may not see the group does not learn which.
 */
static void
lookup_queue(text *name, PgqGroup *group)
{
	pgq_lookup_group_cached(name, group);
	if (!pgq_may_see_group(group))
		pgq_check_privilege(group, PGQ_PRIV_USE);
	if (group->kind != PGQ_KIND_QUEUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a query group, not a queue", group->name),
				 errhint("Query groups take their ids from their query; create a queue with pgq.create_queue().")));
}

/*
 * Look up the queue to enqueue into, check that the caller may produce, and
 * lock it against a drop (see pgq_lock_group()): in that order, so that a
 * caller that may not produce holds up nobody's drop.  Should the queue have
 * been dropped before the lock was had, it is looked up again, and is gone.
 */
static void
lock_queue_to_produce(text *name, PgqGroup *group)
{
	for (;;)
	{
		PgqGroup	locked;

		CHECK_FOR_INTERRUPTS();
		lookup_queue(name, group);
		pgq_check_privilege(group, PGQ_PRIV_PRODUCE);
		pgq_lock_group(group->ref.group_id, false);
		lookup_queue(name, &locked);
		if (locked.ref.group_id == group->ref.group_id &&
			locked.ref.created_at == group->ref.created_at)
		{
			/* a revoke may have committed meanwhile */
			*group = locked;
			pgq_check_privilege(group, PGQ_PRIV_PRODUCE);
			return;
		}
		pgq_unlock_group(group->ref.group_id, false);
	}
}

/*
 * Does an existing queue's row (columns 2 and 3: retention, key_retention)
 * have the retention settings that create_queue was given (arguments 7 and
 * 8 of values and nulls)?  Those not given match any.
 */
static bool
retention_matches(HeapTuple row, TupleDesc tupdesc, const char *nulls,
				  const Datum *values)
{
	for (int i = 0; i < 2; i++)
	{
		bool		isnull;
		Datum		have = SPI_getbinval(row, tupdesc, i + 2, &isnull);

		if (nulls[7 + i] == ' ' &&
			!pgq_retention_equal(isnull, have, false, values[7 + i]))
			return false;
	}
	return true;
}

/*
 * pgq.create_queue(group_name, mode, lease, max_attempts, backoff,
 *					max_backoff, owner, retention, key_retention) -> boolean
 *
 * True for the caller that created the queue, false for callers that find
 * it with the same settings and may join it (see pgq_check_join()); other
 * settings under the name are an error.  retention and key_retention (NULL:
 * pgq.retention) are compared only when given, as pgq.set_retention() may
 * have changed them since.
 */
Datum
pgq_create_queue(PG_FUNCTION_ARGS)
{
	const char *argnames[] = {"group_name", "mode", "lease", "max_attempts",
	"backoff", "max_backoff"};
	text	   *name;
	PgqMode		mode;
	Oid			argtypes[9] = {TEXTOID, TEXTOID, INTERVALOID, INT4OID,
	INTERVALOID, INTERVALOID, REGROLEOID, INTERVALOID, INTERVALOID};
	Oid			join_argtypes[6] = {INT8OID, TEXTOID, INTERVALOID, INT4OID,
	INTERVALOID, INTERVALOID};
	Datum		join_values[6];
	Datum		values[9];
	char		nulls[9];
	bool		has_retention;
	Oid			owner;
	int			rc;
	PgqScope	scope;

	for (int i = 0; i < 6; i++)
		pgq_check_arg_not_null(fcinfo, i, argnames[i]);
	name = PG_GETARG_TEXT_PP(0);
	pgq_check_name(name);
	mode = pgq_parse_mode(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	pgq_check_lease(PG_GETARG_INTERVAL_P(2));
	if (PG_GETARG_INT32(3) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be at least 1"),
				 errdetail("The value given is %d.", PG_GETARG_INT32(3))));
	pgq_check_duration("backoff", PG_GETARG_INTERVAL_P(4));
	pgq_check_duration("max_backoff", PG_GETARG_INTERVAL_P(5));
	/* owner => (since 0.2) */
	owner = PG_NARGS() > 6 && !PG_ARGISNULL(6) ? PG_GETARG_OID(6) : InvalidOid;
	/* retention =>, key_retention => (since 0.2) */
	has_retention = PG_NARGS() > 8;
	memset(nulls, ' ', sizeof(nulls));
	for (int i = 7; i < 9; i++)
	{
		nulls[i] = 'n';
		values[i] = (Datum) 0;
		if (has_retention && !PG_ARGISNULL(i))
		{
			pgq_check_retention(i == 7 ? "retention" : "key_retention",
								PG_GETARG_INTERVAL_P(i));
			nulls[i] = ' ';
			values[i] = PG_GETARG_DATUM(i);
		}
	}
	pgq_check_key_retention(nulls[7] == ' ', values[7],
							nulls[8] == ' ', values[8]);
	pgq_check_not_in_recovery("create a queue");

	for (int i = 0; i < 6; i++)
		values[i] = PG_GETARG_DATUM(i);
	values[1] = CStringGetTextDatum(pgq_mode_name(mode));

	pgq_enter(&scope);
	values[6] = ObjectIdGetDatum(pgq_caller);
	SPI_connect();
	for (;;)
	{
		PgqGroup	existing;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		/* the retention settings are typed as interval: binary coercible */
#define INSERT_QUEUE(cols, vals) \
	"INSERT INTO pgq.groups " \
	"(group_name, kind, mode, block_size, state, " \
	"owner, search_path, settings, lease, " \
	"max_attempts, backoff, max_backoff, " \
	"total_ids, total_blocks, ready_at" cols ") " \
	"VALUES ($1, 'queue', $2, 1, 'ready', $7, " \
	"pg_catalog.current_setting('search_path'), " \
	"'{}', $3, $4, $5, $6, 0, 0, " \
	"pg_catalog.clock_timestamp()" vals ") " \
	"ON CONFLICT (group_name) DO NOTHING"
		if (has_retention)
			rc = SPI_execute_with_args(INSERT_QUEUE(", retention, key_retention",
													", $8, $9"),
									   9, argtypes, values, nulls, false, 0);
		else
			rc = SPI_execute_with_args(INSERT_QUEUE("", ""),
									   7, argtypes, values, nulls, false, 0);
#undef INSERT_QUEUE
		if (rc != SPI_OK_INSERT)
			elog(ERROR, "could not insert a queue: %s", SPI_result_code_string(rc));
		if (SPI_processed == 1)
		{
			pgq_check_create_owner(name, PGQ_KIND_QUEUE, owner);
			/* should this roll back, this backend forgets what it cached */
			pgq_invalidate_groups();
			SPI_finish();
			pgq_leave(&scope);
			PG_RETURN_BOOL(true);
		}

		/*
		 * The name is taken.  Joining a queue is for those who may use it,
		 * and whose queue it is or who named its owner; nobody else learns
		 * its settings.  Then: by the same queue?
		 */
		if (!pgq_find_group(name, &existing))
			continue;			/* dropped meanwhile: try again */
		pgq_check_join(&existing, PGQ_KIND_QUEUE, owner);
		join_values[0] = Int64GetDatum(existing.ref.group_id);
		for (int i = 1; i < 6; i++)
			join_values[i] = values[i];
#define JOIN_QUEUE(cols) \
	"SELECT mode " OP("=") " $2 " \
	"AND lease " OP("=") " $3 " \
	"AND max_attempts " OP("=") " $4 " \
	"AND backoff " OP("=") " $5 " \
	"AND max_backoff " OP("=") " $6" cols " " \
	"FROM pgq.groups WHERE group_id " OP("=") " $1"
		rc = pgq_execute_fresh(has_retention ?
							   JOIN_QUEUE(", retention, key_retention") :
							   JOIN_QUEUE(""),
							   6, join_argtypes, join_values);
#undef JOIN_QUEUE
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read group: %s", SPI_result_code_string(rc));
		if (SPI_processed == 0)
			continue;			/* dropped meanwhile: try again */
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull)) ||
			(has_retention &&
			 !retention_matches(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								nulls, values)))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("queue \"%s\" already exists with other settings",
							text_to_cstring(name)),
					 errhint("See pgq.queue_stats for its settings, or drop it first with pgq.drop_group().")));
		pgq_report_join(&existing);
		SPI_finish();
		pgq_leave(&scope);
		PG_RETURN_BOOL(false);
	}
}

/* Check an item's priority. */
static void
check_priority(int32 priority)
{
	if (priority < 0 || priority > PGQ_MAX_PRIORITY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority must be between 0 and %d", PGQ_MAX_PRIORITY),
				 errdetail("The value given is %d.", priority),
				 errhint("Higher priorities are claimed first; 0 is the default.")));
}

/* Check an item's key. */
static void
check_key(text *key)
{
	if (VARSIZE_ANY_EXHDR(key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key must not be empty"),
				 errhint("Pass NULL for an item without a key.")));
	if (VARSIZE_ANY_EXHDR(key) > PGQ_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("key is too long"),
				 errdetail("The key has %zu bytes; the limit is %d.",
						   VARSIZE_ANY_EXHDR(key), PGQ_MAX_KEY_BYTES),
				 errhint("Use a hash of the key, such as md5(key).")));
}

/* The error for an item without payload and data. */
static void
report_no_payload(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("an item needs a payload or data"),
			 errhint("Pass payload => jsonb, data => bytea, or both.")));
}

/*
 * Conditions that, each with "group_id = $1", find every item of a queue
 * once: *conds gets them, and the count is returned.  From 0.2 the primary
 * key of pgq.items is the item id alone, and a queue's items are found
 * state by state, each state through the partial index that holds it:
 * items_pending_idx, items_due_idx, items_ordering_idx (items waiting
 * behind their ordering key's head), items_finished_idx and
 * items_kept_keys_idx.  A database still at 0.1 has them in its primary
 * key on (group_id, item_id): one condition, true.
 */
int
pgq_item_classes(const char *const **conds)
{
	static const char *const by_state[] = {
		"state " OP("=") " 'p'",
		"state " OP("=") " ANY ('{c,r}'::pg_catalog.\"char\"[])",
		"state " OP("=") " 'w' AND ordering_key IS NOT NULL",
		"state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) "
		"AND (payload IS NOT NULL OR data IS NOT NULL)",
		"state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) "
		"AND payload IS NULL AND data IS NULL",
	};
	static const char *const all[] = {"true"};

	if (strcmp(pgq_item_id_index(), "items_pkey") == 0)
	{
		*conds = by_state;
		return lengthof(by_state);
	}
	*conds = all;
	return lengthof(all);
}

/*
 * Is an item enqueued with run_at pending at once?  Otherwise it waits in
 * state 'r' until then.
 */
static bool
due_now(bool has_run_at, TimestampTz run_at)
{
	return !has_run_at || run_at <= GetCurrentTransactionStartTimestamp();
}

/* The id of the queue's item with this key, or 0 if there is none. */
static int64
item_with_key(const PgqGroup *group, text *key)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2];
	bool		isnull;
	int			rc;

	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, TEXTOID};

		plan = pgq_keep_plan("SELECT item_id FROM pgq.items "
							 "WHERE group_id " OP("=") " $1 AND key " OP("=") " $2",
							 2, argtypes);
	}
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = PointerGetDatum(key);
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read items: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return 0;
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Enqueue one item, or find the item of its key: the insert that loses a
 * race for a key waits for the winner, then finds its item.  Should that be
 * removed in between, insert again.  *added tells which it was.
 */
static int64
enqueue_one(PgqItemInserter *ins, const PgqGroup *group,
			const PgqNewItem *item, bool *added)
{
	for (;;)
	{
		int64		id;

		CHECK_FOR_INTERRUPTS();
		id = pgq_item_insert(ins, item);
		*added = id != 0;
		if (id == 0)
			id = item_with_key(group, item->key);
		if (id != 0)
			return id;
	}
}

/*
 * The row of an item to enqueue into the queue, but for its payload, data
 * and key: pending, or waiting in state 'r' until run_at if that is later
 * than the transaction's start.
 */
static void
new_item(PgqNewItem *item, const PgqGroup *group, int32 priority,
		 bool has_run_at, TimestampTz run_at)
{
	memset(item, 0, sizeof(PgqNewItem));
	item->group_id = group->ref.group_id;
	item->priority = priority;
	item->has_due_at = !due_now(has_run_at, run_at);
	item->due_at = item->has_due_at ? run_at : 0;
}

/*
 * pgq.enqueue(group_name, payload, key, priority, run_at, data,
 *			   ordering_key) -> bigint
 *
 * The new item's id; for a key the queue holds already, that item's id,
 * adding nothing.  An item whose ordering key has an unfinished item waits
 * behind it (ordering.c).
 */
Datum
pgq_enqueue(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	text	   *key = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	/* ordering_key => (since 0.2) */
	text	   *ordering_key = PG_NARGS() > 6 && !PG_ARGISNULL(6) ?
		PG_GETARG_TEXT_PP(6) : NULL;
	int32		priority;
	PgqNewItem	item;
	PgqItemInserter *ins;
	int64		id;
	bool		added;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_arg_not_null(fcinfo, 3, "priority");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1) && PG_ARGISNULL(5))
		report_no_payload();
	if (key != NULL)
		check_key(key);
	if (ordering_key != NULL)
		pgq_ordering_check_key(ordering_key, "ordering_key");
	priority = PG_GETARG_INT32(3);
	check_priority(priority);
	pgq_check_not_in_recovery("enqueue");

	pgq_enter(&scope);
	SPI_connect();
	lock_queue_to_produce(PG_GETARG_TEXT_PP(0), &group);
	new_item(&item, &group, priority, !PG_ARGISNULL(4),
			 PG_ARGISNULL(4) ? 0 : PG_GETARG_TIMESTAMPTZ(4));
	item.key = key;
	item.payload = PG_GETARG_DATUM(1);
	item.no_payload = PG_ARGISNULL(1);
	item.data = PG_GETARG_DATUM(5);
	item.no_data = PG_ARGISNULL(5);
	pgq_check_item_size(&item);
	pgq_check_queue_room(&group, 1);
	if (ordering_key != NULL)
	{
		item.ordering_key = ordering_key;
		item.waiting = pgq_ordering_must_wait(pgq_ordering_enqueue_begin(&group,
																		 &ordering_key, 1),
											  0);
	}
	ins = pgq_item_inserter_begin(items_fenced() ? pgq_lease_epoch() : 0);
	id = enqueue_one(ins, &group, &item, &added);
	pgq_item_inserter_end(ins);
	if (added && !item.has_due_at && !item.waiting)
	{
		pgq_xact_remember_pending(&group.ref, pgq_item_position(priority, id));
		pgq_announce_claimable(&group.ref, group.name);
	}
	else if (added && item.has_due_at && !item.waiting)
		pgq_xact_deadline_sooner(&group);
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_INT64(id);
}

/*
 * pgq.enqueue_many(group_name, payloads, keys, priority, run_at, data,
 *					ordering_keys) -> bigint[]
 *
 * Enqueue an item per element, in one statement: the arrays that are given
 * must have the same length.  Returns the items' ids in the order given; a
 * key the queue holds already (or that comes twice) gives the existing
 * item's id.  Items of one ordering key are handed out in the order given.
 */
Datum
pgq_enqueue_many(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	PgqArrayArg	payloads;
	PgqArrayArg	keys;
	PgqArrayArg	data;
	PgqArrayArg	ordering_keys;
	PgqOrderingEnqueue *oe = NULL;
	int			n = -1;
	int32		priority;
	PgqNewItem	item;
	PgqItemInserter *ins;
	int64		first_added = 0;	/* the id of the first item added pending */
	int64	   *ids;
	Datum	   *result;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_arg_not_null(fcinfo, 3, "priority");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	priority = PG_GETARG_INT32(3);
	check_priority(priority);
	pgq_get_array_arg(fcinfo, 1, "payloads", JSONBOID, &payloads);
	pgq_get_array_arg(fcinfo, 2, "keys", TEXTOID, &keys);
	pgq_get_array_arg(fcinfo, 5, "data", BYTEAOID, &data);
	/* ordering_keys => (since 0.2) */
	if (PG_NARGS() > 6)
		pgq_get_array_arg(fcinfo, 6, "ordering_keys", TEXTOID, &ordering_keys);
	else
		ordering_keys.n = -1;
	if (payloads.n < 0 && data.n < 0)
		report_no_payload();
	n = Max(payloads.n, data.n);
	if ((payloads.n >= 0 && payloads.n != n) || (data.n >= 0 && data.n != n) ||
		(keys.n >= 0 && keys.n != n))
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("payloads, keys and data must have the same number of elements")));
	if (ordering_keys.n >= 0 && ordering_keys.n != n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("ordering_keys must have one element per item"),
				 errhint("Pass NULL, or as many ordering keys as payloads, with NULL for items without one.")));
	for (int i = 0; i < n; i++)
	{
		if ((payloads.n < 0 || payloads.nulls[i]) && (data.n < 0 || data.nulls[i]))
			report_no_payload();
		if (keys.n >= 0 && !keys.nulls[i])
			check_key(DatumGetTextPP(keys.values[i]));
		if (ordering_keys.n >= 0 && !ordering_keys.nulls[i])
			pgq_ordering_check_key(DatumGetTextPP(ordering_keys.values[i]),
								   "ordering_keys element");
	}
	pgq_check_not_in_recovery("enqueue");
	/* in the caller's memory: SPI_finish() frees what is allocated after */
	ids = palloc(Max(n, 1) * sizeof(int64));

	pgq_enter(&scope);
	SPI_connect();
	lock_queue_to_produce(PG_GETARG_TEXT_PP(0), &group);
	if (n == 0)
	{
		/* nothing to add, but the queue and the privilege were checked */
		SPI_finish();
		pgq_leave(&scope);
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(INT8OID));
	}
	new_item(&item, &group, priority, !PG_ARGISNULL(4),
			 PG_ARGISNULL(4) ? 0 : PG_GETARG_TIMESTAMPTZ(4));
	pgq_check_queue_room(&group, n);
	if (ordering_keys.n >= 0)
	{
		text	  **okeys = palloc(n * sizeof(text *));

		for (int i = 0; i < n; i++)
			okeys[i] = ordering_keys.nulls[i] ? NULL :
				DatumGetTextPP(ordering_keys.values[i]);
		oe = pgq_ordering_enqueue_begin(&group, okeys, n);
	}
	ins = pgq_item_inserter_begin(items_fenced() ? pgq_lease_epoch() : 0);
	for (int i = 0; i < n; i++)
	{
		bool		added;

		item.key = keys.n < 0 || keys.nulls[i] ? NULL :
			DatumGetTextPP(keys.values[i]);
		item.payload = payloads.n < 0 ? (Datum) 0 : payloads.values[i];
		item.no_payload = payloads.n < 0 || payloads.nulls[i];
		item.data = data.n < 0 ? (Datum) 0 : data.values[i];
		item.no_data = data.n < 0 || data.nulls[i];
		item.ordering_key = ordering_keys.n < 0 || ordering_keys.nulls[i] ?
			NULL : DatumGetTextPP(ordering_keys.values[i]);
		item.waiting = oe != NULL && pgq_ordering_must_wait(oe, i);
		pgq_check_item_size(&item);
		ids[i] = enqueue_one(ins, &group, &item, &added);
		if (added && oe != NULL)
			pgq_ordering_enqueued(oe, i);
		if (added && !item.waiting && first_added == 0)
			first_added = ids[i];
	}
	pgq_item_inserter_end(ins);
	if (first_added != 0 && !item.has_due_at)
	{
		/* one priority for all: the first added comes first in claim order */
		pgq_xact_remember_pending(&group.ref,
								  pgq_item_position(priority, first_added));
		pgq_announce_claimable(&group.ref, group.name);
	}
	else if (first_added != 0)
		pgq_xact_deadline_sooner(&group);
	SPI_finish();
	pgq_leave(&scope);

	result = palloc(n * sizeof(Datum));
	for (int i = 0; i < n; i++)
		result[i] = Int64GetDatum(ids[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(result, n, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Is an item of the queue due by "now" still, after promote_due() moved
 * what it could lock?  It passed over the items that other transactions
 * hold locked (an extend, a complete or a fail of a lease that ran out):
 * should they roll back, those items are due, and a look must not have
 * recorded that none is.
 */
static bool
due_items_left(const PgqGroup *group, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2];
	int			rc;

	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, TIMESTAMPTZOID};

		plan = pgq_keep_plan("SELECT FROM pgq.items "
							 "WHERE group_id " OP("=") " $1 "
							 "AND state " OP("=") " ANY ('{c,r}'::pg_catalog.\"char\"[]) "
							 "AND due_at " OP("<=") " $2 LIMIT 1",
							 2, argtypes);
	}
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = TimestampTzGetDatum(now);
	/* not read-only: a fresh snapshot, which sees the items moved already */
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not look for due items: %s",
			 SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/*
 * Move up to "limit" of the queue's due items back to pending, oldest due
 * first: delayed items and retries whose time came, and claims whose lease
 * ran out, which count as a failed attempt and are dead-lettered if that
 * was the last one (handing their ordering keys on, from 0.2).  Items
 * locked by others are left to them.  The claim asks for as many as it
 * takes: those it moves and does not take stay hidden from other claims,
 * locked and pending in this transaction only, until it ends, which may
 * be long after the claim.  Items dead-lettered do not count: a claim
 * whose oldest due items ran out of attempts goes on to those behind them
 * (dead-lettering at most PGQ_PROMOTE_DEAD_LIMIT more than it asks for),
 * rather than come back empty while an item is due; the items that their
 * ordering keys are handed on to count as made pending.  Due items it
 * leaves past the limit wake the group's waiting claims at once, as
 * claim_due() in lease.c does.
 *
 * With fenced attempt numbers, the claim that follows may take such an item
 * in the row version written here: the claim before it is that of the
 * version moved, whose commit its numbers must wait for (lease.c), so the
 * statement returns that version's xmin.  Items made pending lower the
 * queue's hint to their places at commit, and the claim that follows starts
 * from them (pgq_claim_hint()).  Claims do not look while a look that found
 * nothing due is trusted, nor while another claim looks
 * (pgq_item_due_skip()): under a snapshot held for minutes, the look walks
 * the dead entries of every lease that ended since.
 */
static void
promote_due(const PgqGroup *group, TimestampTz now, bool fenced, int limit)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	Datum		values[4];
	int64		pending = PG_INT64_MAX; /* the first place made pending */
	int			moved = 0;		/* items made pending, or handed on */
	int			ndead = 0;		/* items dead-lettered */
	uint64		due_gen;
	bool		all;			/* moved every item due it could lock */
	int			rc;

#define PROMOTE_DUE(tries) \
	"UPDATE pgq.items i SET " \
	"state = CASE WHEN i.state " OP("=") " 'c' " \
	"AND " tries " " OP(">=") " $3 " \
	"THEN 'f'::pg_catalog.\"char\" " \
	"ELSE 'p'::pg_catalog.\"char\" END, " \
	"due_at = NULL, " \
	"finished_at = CASE WHEN i.state " OP("=") " 'c' " \
	"AND " tries " " OP(">=") " $3 THEN $2 END, " \
	"last_error = CASE WHEN i.state " OP("=") " 'c' " \
	"THEN 'lease expired' ELSE i.last_error END, " \
	"errors = CASE WHEN i.state " OP("=") " 'c' " \
	"THEN COALESCE(i.errors, '[]'::pg_catalog.jsonb) " \
	OP("||") " pg_catalog.jsonb_build_array(" \
	"pg_catalog.jsonb_build_object('attempt', i.attempt, " \
	"'error', 'lease expired', 'at', $2)) " \
	"ELSE i.errors END " \
	"FROM (SELECT ctid AS tid, xmin AS moved_xmin FROM pgq.items " \
	"WHERE group_id " OP("=") " $1 " \
	"AND state " OP("=") " ANY ('{c,r}'::pg_catalog.\"char\"[]) " \
	"AND due_at " OP("<=") " $2 " \
	"ORDER BY group_id, due_at LIMIT $4 " \
	"FOR UPDATE SKIP LOCKED) d " \
	"WHERE i.ctid " OP("=") " d.tid "
	if (plans[fenced] == NULL)
	{
		Oid			argtypes[4] = {INT8OID, TIMESTAMPTZOID, INT4OID, INT4OID};

#define PROMOTED(key) \
	"RETURNING d.moved_xmin, i.item_id, i.state, " key ", i.priority"
		plans[fenced] = pgq_keep_plan(fenced ?
									  PROMOTE_DUE(TRIES_FENCED)
									  PROMOTED("i.ordering_key") :
									  PROMOTE_DUE(TRIES_0_1)
									  PROMOTED("NULL::pg_catalog.text"),
									  4, argtypes);
#undef PROMOTED
	}
#undef PROMOTE_DUE
	if (pgq_item_due_skip(&group->ref, now, &due_gen))
		return;
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(group->max_attempts);

	/* until "limit" are pending, or none is left, or enough were dead */
	for (;;)
	{
		int			batch = limit - moved;

		CHECK_FOR_INTERRUPTS();
		values[3] = Int32GetDatum(batch);
		rc = SPI_execute_plan(plans[fenced], values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not update due items: %s",
				 SPI_result_code_string(rc));
		if (SPI_processed > 0)
			pgq_claim_changed_more();
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			HeapTuple	row = SPI_tuptable->vals[i];
			TupleDesc	rowdesc = SPI_tuptable->tupdesc;
			bool		isnull;
			char		state;

			if (fenced)
				pgq_lease_promoted(DatumGetTransactionId(SPI_getbinval(row, rowdesc,
																	   1, &isnull)));
			state = DatumGetChar(SPI_getbinval(row, rowdesc, 3, &isnull));
			if (state == 'f')
				ndead++;
			if (state == PGQ_ITEM_PENDING)
			{
				moved++;
				pending = Min(pending,
							  pgq_item_position(DatumGetInt32(SPI_getbinval(row, rowdesc,
																			5, &isnull)),
												DatumGetInt64(SPI_getbinval(row, rowdesc,
																			2, &isnull))));
			}
		}
		all = SPI_processed < (uint64) batch;
		if (fenced)
		{
			List	   *finished;

			pgq_events_note_rows(&group->ref, 2, 0, 3, 0);
			finished = pgq_ordering_finished_keys(3, 4);
			SPI_freetuptable(SPI_tuptable);
			/* the items handed on are pending in this transaction too */
			moved += pgq_ordering_hand_on(group, finished);
		}
		else
			SPI_freetuptable(SPI_tuptable);
		if (all || moved >= limit || ndead >= PGQ_PROMOTE_DEAD_LIMIT)
			break;
	}
	/* the queue's claims find them from their places on (H1, shmem.c) */
	if (pending != PG_INT64_MAX)
		pgq_xact_remember_pending(&group->ref, pending);
	/* this commit finished those: calls waiting for their results wake */
	if (ndead > 0)
		pgq_xact_wake_at_commit(&group->ref);
	PGQ_INJECTION_POINT("pgq-promote-moved");
	pgq_item_due_looked(&group->ref, due_gen, now,
						all && !due_items_left(group, now));

	/*
	 * Stopped at the limit: due items may be left, which the waiting claims
	 * that left the look to this one (D4 in shmem.c) must take now, not
	 * when this transaction ends.  (Not when it moved every item it could
	 * lock: the rest are locked, and their holders' ends wake the waiters.)
	 */
	if (!all)
		pgq_wake_group(&group->ref);
}

/* qsort comparator: claimed items in claim order */
static int
compare_items(const void *a, const void *b)
{
	const PgqClaimed *x = (const PgqClaimed *) a;
	const PgqClaimed *y = (const PgqClaimed *) b;

	if (x->priority != y->priority)
		return (x->priority < y->priority) - (x->priority > y->priority);
	return (x->id > y->id) - (x->id < y->id);
}

/* A copy of a column of the current SPI row in the current context, or 0. */
static Datum
copy_column(HeapTuple tuple, TupleDesc tupdesc, int col)
{
	bool		isnull;
	Datum		value = SPI_getbinval(tuple, tupdesc, col, &isnull);

	if (isnull)
		return (Datum) 0;
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
}

/*
 * Copy the items the last SPI statement returned (item_id, attempt,
 * payload, data, key, priority) into items[] in cxt, free the statement's
 * result, and make them the transaction's claims (transaction mode).
 * Returns how many.
 */
static int
items_from_spi(const PgqGroup *group, PgqClaimed *items, MemoryContext cxt)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	int			n = (int) SPI_processed;

	for (int i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;

		items[i].id = DatumGetInt64(SPI_getbinval(tuple, tupdesc, 1, &isnull));
		items[i].attempt = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 2, &isnull));
		items[i].ids = (Datum) 0;
		items[i].payload = copy_column(tuple, tupdesc, 3);
		items[i].data = copy_column(tuple, tupdesc, 4);
		items[i].key = copy_column(tuple, tupdesc, 5);
		items[i].priority = DatumGetInt32(SPI_getbinval(tuple, tupdesc, 6, &isnull));
	}
	MemoryContextSwitchTo(oldcxt);
	SPI_freetuptable(SPI_tuptable);

	pgq_xact_remember_items(&group->ref, items, n);
	return n;
}

/* Remember the items a claim of pending items took (claim_pending_items()). */
static void
remember_pending_claims(const PgqGroup *group, const PgqClaimed *items, int n,
						TimestampTz until)
{
	if (until != 0)
		pgq_xact_remember_lease_items(&group->ref, items, n, until);
	else
		pgq_xact_remember_items(&group->ref, items, n);
}

/*
 * Claim up to max_items pending items of a queue, into items[] (in cxt):
 * under a lease until "until", or, with "until" 0 (transaction mode), done
 * at once in the caller's transaction, their ordering keys appended to
 * *keys.  From the queue's hint, a place in claim order past the items
 * found consumed or held, then, should that come up short, from the start
 * when pgq_full_scan_due() says so, as lease claims of blocks do
 * (lease.c).  Each scan is counted ahead (C1 in shmem.c), and its items are
 * remembered for the transaction's end, where an abort lowers the hint to
 * them.
 */
static int
claim_pending_items(const PgqGroup *group, int max_items, TimestampTz until,
					PgqClaimed *items, MemoryContext cxt, List **keys)
{
	int64		hint;
	uint64		gen;
	int64		last;
	int			n;

	pgq_xact_reserve(max_items);
	(void) pgq_claim_hint(&group->ref, &hint, &gen);
	pgq_xact_claiming(&group->ref, hint);
	n = pgq_item_claim_pending(&group->ref, hint, max_items, until, items,
							   cxt, &last, keys);
	remember_pending_claims(group, items, n, until);
	pgq_xact_claiming_done_advance(gen, last > 0 ?
								   pgq_item_position_after(last) : 0);

	/*
	 * By rate alone: committed leases are rows, not in the shared count, and
	 * consumers poll an empty queue, where a look from the start of every
	 * claim that found no others' claims would walk the dead entries.
	 */
	if (n < max_items && hint > 0 && pgq_full_scan_due(&group->ref, -1))
	{
		int			below;

		pgq_xact_claiming(&group->ref, 0);
		below = pgq_item_claim_pending(&group->ref, 0, max_items - n, until,
									   items + n, cxt, &last, keys);
		remember_pending_claims(group, items + n, below, until);
		/* stranded below the hint: the first found is the first in order */
		if (below > 0)
			pgq_hint_lower(&group->ref, pgq_item_position(items[n].priority,
														  items[n].id));
		n += below;
		pgq_xact_claiming_done();
	}
	return n;
}

/*
 * The columns items_from_spi() reads, of pgq.items as "i"; a claim that
 * finishes items (transaction mode) returns their ordering keys after them,
 * from 0.2.
 */
#define ITEM_COLUMNS \
	"i.item_id, i.attempt, i.payload, i.data, i.key, i.priority"
#define ORDERED_COLUMNS ITEM_COLUMNS ", i.ordering_key"

/*
 * Claim up to max_items items of a queue, highest priority first, then in
 * enqueue order, into items[] (in cxt).  In lease mode a claim counts an
 * attempt and sets a deadline; in transaction mode it marks the item done
 * in the caller's transaction.
 *
 * In lease mode, due items (delayed items whose time came, retries, expired
 * leases) are first moved back to pending, where they take their place in
 * priority order; the claim commits at once, as lease claims do outside a
 * transaction block.  A transaction-mode claim's transaction stays open
 * while the caller works, and items it moved to pending would stay hidden
 * from other consumers until then: it claims due items directly instead,
 * oldest due first, ahead of pending ones.
 */
int
pgq_queue_claim(const PgqGroup *group, int max_items, PgqClaimed *items,
				MemoryContext cxt)
{
	static SPIPlanPtr xact_due_plans[2] = {NULL, NULL};
	TimestampTz now = GetCurrentTimestamp();
	bool		ordered = group->mode == PGQ_MODE_TRANSACTION &&
		pgq_ordering_supported();
	List	   *finished = NIL;
	Datum		values[3];
	int			n = 0;
	int			rc;

	if (group->mode == PGQ_MODE_ADVISORY)
	{
		n = pgq_advisory_claim(group, max_items, items, cxt);
		qsort(items, n, sizeof(PgqClaimed), compare_items);
		return n;
	}
	if (group->mode == PGQ_MODE_LEASE)
	{
		pgq_lease_claim_async();
		promote_due(group, now, items_fenced(), max_items);
		n = claim_pending_items(group, max_items,
								pgq_time_after(now, &group->lease), items, cxt,
								NULL);
		pgq_lease_claim_done();
		qsort(items, n, sizeof(PgqClaimed), compare_items);
		return n;
	}

	/*
	 * Transaction mode: the retries that came due, by SQL (rare), then the
	 * pending items, through the AMs from the hint.  The claim finishes the
	 * items in this transaction: their ordering keys are handed on once
	 * both ran, so that one claim never returns two items of a key.
	 */
#define CLAIM_DUE_ITEMS(columns) \
	"UPDATE pgq.items i SET state = 'd', due_at = NULL, " \
	"attempt = i.attempt " OP("+") " 1, finished_at = $3 " \
	"WHERE i.ctid " OP("=") " ANY (ARRAY(" \
	"SELECT ctid FROM pgq.items " \
	"WHERE group_id " OP("=") " $1 " \
	"AND state " OP("=") " 'r' AND due_at " OP("<=") " $3 " \
	"ORDER BY group_id, due_at LIMIT $2 " \
	"FOR UPDATE SKIP LOCKED)) " \
	"RETURNING " columns
	if (xact_due_plans[ordered] == NULL)
	{
		Oid			argtypes[3] = {INT8OID, INT4OID, TIMESTAMPTZOID};

		xact_due_plans[ordered] =
			pgq_keep_plan(ordered ? CLAIM_DUE_ITEMS(ORDERED_COLUMNS) :
						  CLAIM_DUE_ITEMS(ITEM_COLUMNS),
						  3, argtypes);
	}
#undef CLAIM_DUE_ITEMS
	pgq_xact_reserve(max_items);
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int32GetDatum(max_items);
	values[2] = TimestampTzGetDatum(now);
	rc = SPI_execute_plan(xact_due_plans[ordered], values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not claim items: %s", SPI_result_code_string(rc));
	if (ordered)
		finished = pgq_ordering_finished_keys(0, 7);
	n = items_from_spi(group, items, cxt);
	if (n < max_items)
		n += claim_pending_items(group, max_items - n, 0, items + n, cxt,
								 ordered ? &finished : NULL);

	/*
	 * This commit finishes the items: it wakes the calls waiting for their
	 * results, as a complete's does.  The claimed count wakes the queue's
	 * waiters only when it falls to what they hold themselves (C3 in
	 * shmem.c), which another transaction's claim prevents.
	 */
	if (n > 0)
		pgq_xact_wake_at_commit(&group->ref);
	pgq_events_note_claimed(&group->ref, items, n);
	pgq_ordering_hand_on(group, finished);
	qsort(items, n, sizeof(PgqClaimed), compare_items);
	return n;
}

/*
 * Run a statement on an item with $1 group_id, $2 item_id, $3 attempt and
 * the caller's further arguments; true if it changed a row.  What it
 * returns, if anything, stays in SPI_tuptable.
 */
static bool
change_item(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
			Datum *values, const char *nulls)
{
	int			rc;

	if (*plan == NULL)
		*plan = pgq_keep_plan(sql, nargs, argtypes);
	rc = SPI_execute_plan(*plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE && rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not change item: %s", SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/*
 * Complete an item the caller holds, storing its result (arguments: 1
 * result, 2 attempt, 4 result_data).  In transaction mode the claim already
 * marked it done; this stores the result.
 */
bool
pgq_queue_complete(const PgqGroup *group, int64 item_id,
				   FunctionCallInfo fcinfo)
{
	static SPIPlanPtr xact_plan = NULL;
	Oid			argtypes[5] = {INT8OID, INT8OID, INT4OID, JSONBOID, BYTEAOID};
	Datum		values[5];
	char		nulls[5] = "     ";
	NullableDatum result;
	NullableDatum data;
	text	   *key;
	bool		done;

	result.value = PG_GETARG_DATUM(1);
	result.isnull = PG_ARGISNULL(1);
	data.value = PG_NARGS() > 4 ? PG_GETARG_DATUM(4) : (Datum) 0;
	data.isnull = PG_NARGS() <= 4 || PG_ARGISNULL(4);

	if (group->mode == PGQ_MODE_LEASE)
	{
		int32		attempt = pgq_required_attempt(fcinfo, 2, true);

		done = pgq_item_finish_held(group->ref.group_id, item_id, &attempt,
									result, data, &key);
		if (done)
		{
			if (key != NULL)
				pgq_ordering_hand_on(group, list_make1(key));
			pgq_lease_durable();
		}
	}
	else if (group->mode == PGQ_MODE_ADVISORY)
	{
		/* the claim wrote nothing: this is the item's one write */
		if (!pgq_advisory_holds(&group->ref, item_id))
			return false;
		if (!pgq_item_finish_held(group->ref.group_id, item_id, NULL, result,
								  data, &key))
		{
			/* gone meanwhile (a drop that the update waited for) */
			pgq_advisory_forget_block(item_id);
			return false;
		}
		if (key != NULL)
			pgq_ordering_hand_on(group, list_make1(key));
		pgq_xact_unlock_at_commit(&group->ref, item_id);
		done = true;
	}
	else
	{
		if (!pgq_xact_claimed(item_id))
			return false;
		values[0] = Int64GetDatum(group->ref.group_id);
		values[1] = Int64GetDatum(item_id);
		values[2] = Int32GetDatum(0);	/* unused: the claim proves holding */
		values[3] = result.value;
		nulls[3] = result.isnull ? 'n' : ' ';
		values[4] = data.value;
		nulls[4] = data.isnull ? 'n' : ' ';
		done = change_item(&xact_plan,
						   "UPDATE pgq.items SET result = $4, result_data = $5 "
						   OWN_ITEM,
						   5, argtypes, values, nulls);
	}
	if (done)
	{
		pgq_xact_wake_at_commit(&group->ref);
		pgq_events_note(&group->ref, &item_id, 1, 'd');
	}
	return done;
}

/* Give a lease-mode item back to the queue at once (argument 1: attempt). */
bool
pgq_queue_release(const PgqGroup *group, int64 item_id,
				  FunctionCallInfo fcinfo)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[3] = {INT8OID, INT8OID, INT4OID};
	Datum		values[3];
	bool		isnull;

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(item_id);
	values[2] = Int32GetDatum(pgq_required_attempt(fcinfo, 1, true));
	if (!change_item(&plan,
					 "UPDATE pgq.items SET state = 'p', due_at = NULL " HELD_ITEM
					 " RETURNING priority",
					 3, argtypes, values, NULL))
	{
		pgq_xact_late_holder_locked(&group->ref);
		return false;
	}
	/* its queue's claims find it from its place on (H1, shmem.c) */
	pgq_xact_remember_pending(&group->ref,
							  pgq_item_position(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
																			SPI_tuptable->tupdesc,
																			1, &isnull)),
												item_id));
	SPI_freetuptable(SPI_tuptable);
	pgq_lease_durable();
	pgq_announce_claimable(&group->ref, group->name);
	return true;
}

/*
 * The delay before retry number "attempt" + 1: backoff * 2^(attempt - 1),
 * at most max_backoff, of which a random part of up to half is taken off,
 * so that items that failed together do not all come back together.
 */
static int64
backoff_usecs(const PgqGroup *group, int32 attempt)
{
	int64		base = pgq_duration_usecs(&group->backoff);
	int64		cap = pgq_duration_usecs(&group->max_backoff);
	int64		delay = base;
	double		r;

	/* doubling from a positive base reaches the cap within 63 steps */
	for (int i = 1; i < attempt && delay > 0 && delay < cap; i++)
		delay *= 2;
	delay = Min(delay, cap);
	r = pg_prng_double(&pg_global_prng_state);
	return delay - (int64) (r * (delay / 2));
}

/*
 * Record a failed attempt of an item the caller holds (argument 3:
 * attempt; 5, from 0.2 on: error_data): retry it after retry_after, or the
 * queue's backoff, or dead-letter it with its errors once max_attempts are
 * used up.  In transaction mode, the caller's claim of the item becomes the
 * failure.  The binary error goes into the error history with the text
 * one (see APPEND_ERROR).
 */
bool
pgq_queue_fail(const PgqGroup *group, int64 item_id, FunctionCallInfo fcinfo,
			   text *error, Interval *retry_after)
{
	static SPIPlanPtr lease_plans[2] = {NULL, NULL};
	static SPIPlanPtr xact_plans[2] = {NULL, NULL};
	static SPIPlanPtr advisory_plans[2] = {NULL, NULL};
	Oid			argtypes[7] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID,
	TEXTOID, INT4OID, BYTEAOID};
	Datum		values[7];
	char		nulls[7] = "       ";
	TimestampTz now = GetCurrentTimestamp();
	int32		attempt;
	bool		fenced = false;
	bool		ordered = pgq_ordering_supported();
	bool		done;

	/*
	 * "tries": the claims that max_attempts counts (see TRIES_FENCED), with
	 * the failed one; "attempt", the failed attempt's number; "set", more
	 * columns to set.
	 */
#define FAIL_ITEM(tries, attempt, set, held) \
	"UPDATE pgq.items SET " \
	"state = CASE WHEN " tries " " OP(">=") " $6 THEN 'f'::pg_catalog.\"char\" " \
	"ELSE 'r'::pg_catalog.\"char\" END, " \
	"due_at = CASE WHEN " tries " " OP(">=") " $6 THEN NULL ELSE $4 END, " \
	"finished_at = CASE WHEN " tries " " OP(">=") " $6 " \
	"THEN pg_catalog.clock_timestamp() END, " \
	"result = NULL, result_data = NULL, " \
	"last_error = $5, " set \
	APPEND_ERROR(attempt, "$5", "pg_catalog.clock_timestamp()", "$7") \
	held

	if (group->mode == PGQ_MODE_LEASE)
	{
		attempt = pgq_required_attempt(fcinfo, 3, true);
		fenced = items_fenced();
	}
	else if (group->mode == PGQ_MODE_ADVISORY)
	{
		if (!pgq_advisory_holds(&group->ref, item_id))
			return false;
		PGQ_INJECTION_POINT("pgq-fail-held");
		attempt = 0;
	}
	else
	{
		if (!pgq_xact_claimed(item_id))
			return false;
		attempt = 0;
	}

	/* the delay: asked for, or the backoff after this attempt */
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(item_id);
	values[2] = Int32GetDatum(attempt);
	values[4] = PointerGetDatum(error);
	nulls[4] = error == NULL ? 'n' : ' ';
	values[5] = Int32GetDatum(group->max_attempts);
	values[6] = PG_NARGS() > 5 ? PG_GETARG_DATUM(5) : (Datum) 0;
	nulls[6] = PG_NARGS() <= 5 || PG_ARGISNULL(5) ? 'n' : ' ';
	if (retry_after != NULL)
		values[3] = TimestampTzGetDatum(pgq_time_after(now, retry_after));
	else
	{
		int32		tried = attempt;

		if (group->mode != PGQ_MODE_LEASE || fenced)
		{
			/*
			 * The claims counted: in transaction mode, the claim counted
			 * this one in this transaction; in advisory mode, it is the one
			 * after those that ended; in lease mode, the attempt number may
			 * have skipped some.
			 */
			static SPIPlanPtr tried_plans[3] = {NULL, NULL, NULL};
			int			which = fenced ? 0 :
				group->mode == PGQ_MODE_ADVISORY ? 1 : 2;
			bool		isnull;
			int			rc;

			if (tried_plans[which] == NULL)
				tried_plans[which] =
					pgq_keep_plan(fenced ?
								  "SELECT COALESCE(tries, attempt) "
								  "FROM pgq.items " HELD_ITEM :
								  group->mode == PGQ_MODE_ADVISORY ?
								  "SELECT attempt " OP("+") " 1 "
								  "FROM pgq.items " ADVISORY_ITEM :
								  "SELECT attempt FROM pgq.items " OWN_ITEM,
								  fenced ? 3 : 2, argtypes);
			rc = SPI_execute_plan(tried_plans[which], values, NULL, false, 1);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "could not read item: %s",
					 SPI_result_code_string(rc));
			if (SPI_processed != 1)
			{
				/* gone meanwhile (a drop committed since the check above) */
				if (group->mode == PGQ_MODE_ADVISORY)
					pgq_advisory_forget_block(item_id);
				return false;
			}
			tried = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1,
												&isnull));
		}
		values[3] = TimestampTzGetDatum(now + backoff_usecs(group, tried));
	}

	/*
	 * From 0.2 on (fenced, in lease mode) the new state and the ordering key
	 * come back: a lease-mode or advisory-mode item dead-lettered hands its
	 * key on; a transaction-mode item's claim did that already, and a retry
	 * takes it back.  An advisory-mode claim wrote nothing: the failed
	 * attempt is counted now, and the lock goes at commit.
	 */
#define RETURNING_ORDERING " RETURNING state, ordering_key"
	if (group->mode == PGQ_MODE_LEASE)
	{
		done = change_item(&lease_plans[fenced],
						   fenced ?
						   FAIL_ITEM("COALESCE(tries, attempt)", "attempt", "",
									 HELD_ITEM)
						   RETURNING_ORDERING :
						   FAIL_ITEM("attempt", "attempt", "", HELD_ITEM),
						   7, argtypes, values, nulls);
		if (done)
		{
			if (fenced)
				pgq_ordering_hand_on(group, pgq_ordering_finished_keys(1, 2));
			pgq_lease_durable();
		}
		else
			pgq_xact_late_holder_locked(&group->ref);
	}
	else if (group->mode == PGQ_MODE_ADVISORY)
	{
#define FAIL_ADVISORY_ITEM \
	FAIL_ITEM("attempt " OP("+") " 1", "attempt " OP("+") " 1", \
			  "attempt = attempt " OP("+") " 1, ", ADVISORY_ITEM)
		done = change_item(&advisory_plans[ordered],
						   ordered ?
						   FAIL_ADVISORY_ITEM RETURNING_ORDERING :
						   FAIL_ADVISORY_ITEM,
						   7, argtypes, values, nulls);
#undef FAIL_ADVISORY_ITEM
		if (done)
		{
			if (ordered)
				pgq_ordering_hand_on(group, pgq_ordering_finished_keys(1, 2));
			pgq_xact_unlock_at_commit(&group->ref, item_id);
		}
		else					/* gone meanwhile (a drop waited for) */
			pgq_advisory_forget_block(item_id);
	}
	else
	{
		done = change_item(&xact_plans[ordered],
						   ordered ?
						   FAIL_ITEM("attempt", "attempt", "", OWN_ITEM)
						   RETURNING_ORDERING :
						   FAIL_ITEM("attempt", "attempt", "", OWN_ITEM),
						   7, argtypes, values, nulls);
		if (done && ordered)
		{
			bool		no_key;
			bool		isnull;

			(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								 2, &no_key);
			if (!no_key &&
				DatumGetChar(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1,
										   &isnull)) == 'r')
				pgq_ordering_take_back(group, item_id);
		}
	}
#undef RETURNING_ORDERING
#undef FAIL_ITEM
	if (done)
	{
		pgq_xact_wake_at_commit(&group->ref);
		pgq_events_note_current(&group->ref, item_id);
	}
	return done;
}

/* Move the deadline of a lease-mode item held under "attempt". */
bool
pgq_queue_extend(const PgqGroup *group, int64 item_id, int32 attempt,
				 Interval *lease)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[4] = {INT8OID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4];

	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(item_id);
	values[2] = Int32GetDatum(attempt);
	values[3] = TimestampTzGetDatum(pgq_time_after(GetCurrentTimestamp(), lease));
	if (!change_item(&plan, "UPDATE pgq.items SET due_at = $4 " HELD_ITEM,
					 4, argtypes, values, NULL))
	{
		pgq_xact_late_holder_locked(&group->ref);
		return false;
	}
	pgq_xact_wake_on_abort(&group->ref);
	return true;
}

/*
 * What follows the completion of a run of items of one queue: a wake at
 * commit, the notes for pgq.results, and their ordering keys handed on.
 */
static void
items_completed(const PgqGroup *group, const int64 *ids, int n, List *keys)
{
	if (n == 0)
		return;
	pgq_xact_wake_at_commit(&group->ref);
	pgq_events_note(&group->ref, ids, n, 'd');
	pgq_ordering_hand_on(group, keys);
}

/*
 * Complete the lease-mode items among the first n ids, each under its
 * attempt and with its result, as pgq.complete() does, through the index
 * and table AMs (pgq_item_finish_held()), after checking that the caller
 * may consume their queues: items of queues it may not see are not held.
 * Their ids go to done[*ndone].  What follows a completion is done once per
 * run of items of one queue (a claim's items are all of one).
 */
static void
complete_items(PgqArrayArg *ids, PgqArrayArg *attempts, PgqArrayArg *results, int n,
			   int64 *done, int *ndone)
{
	PgqGroup	group;
	bool		have_group = false;
	int			first = *ndone; /* the current queue's run starts here */
	List	   *keys = NIL;

	for (int i = 0; i < n; i++)
	{
		int64		id = DatumGetInt64(ids->values[i]);
		int32		attempt = DatumGetInt32(attempts->values[i]);
		NullableDatum result = {(Datum) 0, true};
		NullableDatum data = {(Datum) 0, true};
		PgqGroup	found;
		text	   *key;

		CHECK_FOR_INTERRUPTS();
		if (!pgq_lookup_item(id, &found))
			continue;
		if (!have_group || found.ref.group_id != group.ref.group_id)
		{
			if (have_group)
				items_completed(&group, done + first, *ndone - first, keys);
			pgq_check_privilege(&found, PGQ_PRIV_CONSUME);
			group = found;
			have_group = true;
			first = *ndone;
			keys = NIL;
		}
		/* only lease mode has claimed items: the others are not held so */
		if (group.mode != PGQ_MODE_LEASE)
			continue;
		if (results->n >= 0)
		{
			result.value = results->values[i];
			result.isnull = results->nulls[i];
		}
		if (!pgq_item_finish_held(group.ref.group_id, id, &attempt, result,
								  data, &key))
			continue;
		done[(*ndone)++] = id;
		if (key != NULL)
			keys = lappend(keys, key);
	}
	if (have_group)
		items_completed(&group, done + first, *ndone - first, keys);
}

/*
 * pgq.complete_many(block_ids, attempts, results) -> bigint[]
 *
 * Complete many lease-mode claims, each under its attempt, one by one
 * through the index and table AMs, as pgq.complete() does: blocks of query
 * groups, and items of queues (with their results, if results is given).
 * A call usually completes what one claim returned, all blocks or all
 * items: the first id decides which are looked for first.  Returns the ids
 * completed: those the caller still held.  Only lease-mode claims are held
 * under an attempt, so claims of other modes are never touched.  The caller
 * must be allowed to consume every group concerned that it may see; ids of
 * the others are not held.
 */
Datum
pgq_complete_many(PG_FUNCTION_ARGS)
{
	PgqArrayArg	ids;
	PgqArrayArg	attempts;
	PgqArrayArg	results;
	int64	   *done;
	int			ndone = 0;
	int			nitems;			/* the items completed, sorted, first in done */
	int			nrest = 0;
	bool		blocks_first;
	PgqGroup	group;
	PgqScope	scope;

	pgq_check_arg_not_null(fcinfo, 0, "block_ids");
	pgq_get_array_arg(fcinfo, 0, "block_ids", INT8OID, &ids);
	pgq_get_array_arg(fcinfo, 1, "attempts", INT4OID, &attempts);
	pgq_get_array_arg(fcinfo, 2, "results", JSONBOID, &results);
	if (attempts.n != ids.n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("attempts must have one element per block id"),
				 errhint("Pass the attempts that pgq.claim() returned, in the same order.")));
	if (results.n >= 0 && results.n != ids.n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("results must have one element per block id")));
	for (int i = 0; i < ids.n; i++)
	{
		if (ids.nulls[i] || attempts.nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("block_ids and attempts must not contain NULL")));
	}
	pgq_check_not_in_recovery("complete items");
	if (ids.n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(INT8OID));

	done = palloc(ids.n * sizeof(int64));
	pgq_enter(&scope);
	SPI_connect();

	blocks_first = pgq_lookup_block(DatumGetInt64(ids.values[0]), &group);
	if (!blocks_first)
		complete_items(&ids, &attempts, &results, ids.n, done, &ndone);

	/*
	 * Blocks.  The ids that are not (or, after the items, not completed)
	 * keep their places at the front of the arrays, for complete_items().
	 */
	qsort(done, ndone, sizeof(int64), pgq_compare_int64);
	nitems = ndone;
	for (int i = 0; i < ids.n; i++)
	{
		int64		id = DatumGetInt64(ids.values[i]);

		CHECK_FOR_INTERRUPTS();
		if (!blocks_first &&
			bsearch(&id, done, nitems, sizeof(int64), pgq_compare_int64) != NULL)
			continue;			/* an item, completed */
		if (!pgq_lookup_block(id, &group))
		{
			ids.values[nrest] = ids.values[i];
			attempts.values[nrest] = attempts.values[i];
			if (results.n >= 0)
			{
				results.values[nrest] = results.values[i];
				results.nulls[nrest] = results.nulls[i];
			}
			nrest++;
			continue;
		}
		pgq_check_privilege(&group, PGQ_PRIV_CONSUME);
		if (group.mode == PGQ_MODE_LEASE &&
			pgq_lease_complete(&group, id, DatumGetInt32(attempts.values[i])))
			done[ndone++] = id;
	}
	if (blocks_first && nrest > 0)
		complete_items(&ids, &attempts, &results, nrest, done, &ndone);

	if (ndone > 0)
		pgq_lease_durable();
	SPI_finish();
	pgq_leave(&scope);

	/* the Datums made here, in the caller's memory, not SPI's */
	PG_RETURN_DATUM(pgq_sorted_ids(done, ndone));
}

/* The name a user sees for an item's state. */
const char *
pgq_item_state_name(char state)
{
	switch (state)
	{
		case 'p':
			return "pending";
		case 'c':
			return "running";
		case 'r':
			return "scheduled";
		case 'd':
			return "done";
		case 'f':
			return "dead";
		case PGQ_ITEM_WAITING:
			return "waiting";
	}
	return "unknown";
}

/*
 * A retry's UPDATE found the block or item no longer dead (or done): a
 * concurrent retry made it pending first, and the UPDATE, which waited for
 * that one, may have row-locked the new pending version (EvalPlanQual).
 * Claims pass the row over while it is locked, and waiting ones sleep: the
 * error's abort, which ends the lock, wakes them.
 */
static void
retry_missed(const PgqGroupRef *group)
{
	pgq_xact_late_holder_locked(group);
	PGQ_INJECTION_POINT("pgq-retry-missed");
}

/*
 * Set a done or dead item back to pending, with its claims counted from 0
 * and its result cleared (its error history stays); an error for an item
 * that is still pending, scheduled or running.
 */
static bool
retry_item(int64 item_id)
{
	PgqGroup	group;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	int32		priority;
	bool		isnull;
	int			rc;

	if (!pgq_lookup_item(item_id, &group))
	{
		/* a dead-lettered block of a query group can be retried too */
		if (pgq_lookup_block(item_id, &group))
		{
			pgq_check_privilege(&group, PGQ_PRIV_CONSUME);
			values[0] = Int64GetDatum(group.ref.group_id);
			values[1] = Int64GetDatum(item_id);
			/*
			 * Its claims are counted from 0 again (tries, from 0.2 on); its
			 * attempt numbers go on, as a number once handed out never comes
			 * again (lease.c).  A database at 0.1 has only the attempt.
			 */
#define RETRY_BLOCK(counter) \
	"UPDATE pgq.blocks SET state = 'p', " \
	counter "lease_until = NULL " \
	"WHERE group_id " OP("=") " $1 " \
	"AND block_id " OP("=") " $2 " \
	"AND state " OP("=") " 'f'"
			rc = SPI_execute_with_args(pgq_blocks_fenced() ?
									   RETRY_BLOCK("tries = 0, ") :
									   RETRY_BLOCK("attempt = 0, "),
									   2, argtypes, values, NULL, false, 0);
#undef RETRY_BLOCK
			if (rc != SPI_OK_UPDATE)
				elog(ERROR, "could not retry block: %s", SPI_result_code_string(rc));
			if (SPI_processed == 0)
			{
				retry_missed(&group.ref);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("block " INT64_FORMAT " is not dead-lettered", item_id),
						 errhint("Only dead-lettered blocks and done or dead-lettered items can be retried.")));
			}
			/*
			 * Others' claims find the block once the hint is lowered at
			 * commit; this transaction's own claims start at it before then
			 * (pgq_claim_hint()).
			 */
			pgq_xact_remember_retry(&group.ref, item_id);
			pgq_announce_claimable(&group.ref, group.name);
			return true;
		}
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("item " INT64_FORMAT " does not exist", item_id),
				 errhint("Done and dead-lettered items are removed once pgq.retention has passed.")));
	}

	pgq_check_privilege(&group, PGQ_PRIV_USE);
	/* an item with an ordering key becomes its key's head again */
	pgq_ordering_check_retry(&group, item_id);
	values[0] = Int64GetDatum(group.ref.group_id);
	values[1] = Int64GetDatum(item_id);
	/* as for blocks above: tries from 0 again, attempt numbers go on */
#define RETRY_ITEM(counter) \
	"UPDATE pgq.items SET state = 'p', " counter \
	"due_at = NULL, result = NULL, result_data = NULL, " \
	"finished_at = NULL " \
	"WHERE group_id " OP("=") " $1 " \
	"AND item_id " OP("=") " $2 " \
	"AND state " OP("=") " ANY ('{d,f}'::pg_catalog.\"char\"[]) " \
	"AND (payload IS NOT NULL OR data IS NOT NULL) " \
	"RETURNING priority"
	rc = SPI_execute_with_args(items_fenced() ?
							   RETRY_ITEM("tries = 0, ") : RETRY_ITEM("attempt = 0, "),
							   2, argtypes, values, NULL, false, 0);
#undef RETRY_ITEM
	if (rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not retry item: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		char	   *state = "gone";

		retry_missed(&group.ref);

		rc = SPI_execute_with_args("SELECT state, payload IS NULL AND data IS NULL "
								   "FROM pgq.items "
								   "WHERE group_id " OP("=") " $1 "
								   "AND item_id " OP("=") " $2",
								   2, argtypes, values, NULL, false, 1);
		if (rc == SPI_OK_SELECT && SPI_processed == 1)
		{
			state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			/* past its queue's retention, only the key is left */
			if ((state[0] == 'd' || state[0] == 'f') &&
				DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 2, &isnull)))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("item " INT64_FORMAT " cannot be retried: its payload was dropped",
								item_id),
						 errdetail("The item is %s, and past its queue's retention: only its key is kept, until key_retention has passed.",
								   pgq_item_state_name(state[0])),
						 errhint("Enqueue the work again under another key; see pgq.set_retention() to keep payloads longer.")));
		}
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("item " INT64_FORMAT " is not done or dead-lettered", item_id),
				 errdetail("The item is %s.", pgq_item_state_name(state[0])),
				 errhint("Only done and dead-lettered items can be retried.")));
	}
	/* its queue's claims find it from its place on (H1, shmem.c) */
	priority = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	pgq_xact_remember_pending(&group.ref, pgq_item_position(priority, item_id));
	pgq_announce_claimable(&group.ref, group.name);
	pgq_events_note(&group.ref, &item_id, 1, 'p');
	return true;
}

/* pgq.retry(block_id) -> boolean */
Datum
pgq_retry(PG_FUNCTION_ARGS)
{
	bool		done;
	PgqScope	scope;

	pgq_check_not_in_recovery("retry an item");
	pgq_enter(&scope);
	SPI_connect();
	done = retry_item(PG_GETARG_INT64(0));
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(done);
}

/* pgq.retry(group_name, key) -> boolean */
Datum
pgq_retry_key(PG_FUNCTION_ARGS)
{
	PgqGroup	group;
	text	   *key = PG_GETARG_TEXT_PP(1);
	int64		item_id;
	bool		done;
	PgqScope	scope;

	pgq_check_name(PG_GETARG_TEXT_PP(0));
	check_key(key);
	pgq_check_not_in_recovery("retry an item");
	pgq_enter(&scope);
	SPI_connect();
	lookup_queue(PG_GETARG_TEXT_PP(0), &group);
	pgq_check_privilege(&group, PGQ_PRIV_USE);
	item_id = item_with_key(&group, key);
	if (item_id == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" has no item with key \"%s\"",
						group.name, text_to_cstring(key))));
	done = retry_item(item_id);
	SPI_finish();
	pgq_leave(&scope);
	PG_RETURN_BOOL(done);
}

/*
 * pgq.result(block_id, wait) -> (state, result, result_data, attempt,
 *								  last_error, last_error_data)
 *
 * An item's state and result.  With wait, waits inside the server until
 * the item is done or dead, or the time is up, woken by the commit that
 * finished it.  Waiting for an unfinished item whose row version the
 * calling transaction wrote (it enqueued, retried or claimed the item) is
 * refused at once: no worker can finish it before that transaction commits.
 */
Datum
pgq_result(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	int64		item_id;
	PgqGroup	group;
	TimestampTz deadline = 0;
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6];
	HeapTuple	result;
	PgqScope	scope;
	char		state;

	pgq_check_arg_not_null(fcinfo, 0, "block_id");
	item_id = PG_GETARG_INT64(0);
	if (!PG_ARGISNULL(1))
	{
		deadline = pgq_wait_deadline(PG_GETARG_INTERVAL_P(1));
		if (deadline != 0 && XactIsoLevel != XACT_READ_COMMITTED)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
					 errmsg("waiting for a result requires the READ COMMITTED isolation level"),
					 errdetail("The snapshot of this transaction would never see the result arrive.")));
	}
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	pgq_enter(&scope);
	SPI_connect();
	if (!pgq_lookup_item(item_id, &group))
	{
		if (pgq_lookup_block(item_id, &group))
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("block " INT64_FORMAT " belongs to query group \"%s\": only queue items have results",
							item_id, group.name)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("item " INT64_FORMAT " does not exist", item_id),
				 errhint("Done and dead-lettered items are removed once pgq.retention has passed.")));
	}
	pgq_check_privilege(&group, PGQ_PRIV_USE);
	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, INT8OID};

		/* the binary error: in the last entry of the error history */
		plan = pgq_keep_plan("SELECT state, result, result_data, attempt, last_error, "
							 "xmin, pg_catalog.decode(errors " OP("->") " (-1) "
							 OP("->>") " 'data', 'base64') "
							 "FROM pgq.items WHERE group_id " OP("=") " $1 "
							 "AND item_id " OP("=") " $2",
							 2, argtypes);
	}

	for (;;)
	{
		Datum		args[2];
		uint64		seen = pgq_wait_generation(&group.ref);
		TransactionId xmin;
		bool		isnull;
		int			rc;

		args[0] = Int64GetDatum(group.ref.group_id);
		args[1] = Int64GetDatum(item_id);
		rc = SPI_execute_plan(plan, args, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read item: %s", SPI_result_code_string(rc));
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("item " INT64_FORMAT " does not exist any more", item_id)));
		state = DatumGetChar(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
		if (state == 'd' || state == 'f' || deadline == 0)
			break;
		xmin = DatumGetTransactionId(SPI_getbinval(SPI_tuptable->vals[0],
												   SPI_tuptable->tupdesc, 6,
												   &isnull));
		if (TransactionIdIsCurrentTransactionId(xmin))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
					 errmsg("cannot wait for the result of item " INT64_FORMAT " before this transaction commits",
							item_id),
					 errdetail("This transaction enqueued the item, or retried or claimed it, and no worker sees that before the transaction commits: the wait could only run out."),
					 errhint("Commit first, then wait for the result in autocommit mode or in a new transaction.")));
		if (!pgq_wait_for_wakeup(&group.ref, deadline, seen))
			break;
		/* woken: look again, without keeping this look's row */
		SPI_freetuptable(SPI_tuptable);
	}
	if (deadline != 0)
		pgq_wait_done();

	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	rowdesc = SPI_tuptable->tupdesc;

		/* copied out of SPI's memory, which SPI_finish() frees */
		state = DatumGetChar(SPI_getbinval(row, rowdesc, 1, &nulls[0]));
		for (int c = 1; c < 5; c++)
		{
			values[c] = SPI_getbinval(row, rowdesc, c + 1, &nulls[c]);
			if (!nulls[c] && c != 3)
				values[c] = SPI_datumTransfer(values[c], false, -1);
		}
		/* last_error_data, since 0.2 */
		values[5] = SPI_getbinval(row, rowdesc, 7, &nulls[5]);
		if (!nulls[5])
			values[5] = SPI_datumTransfer(values[5], false, -1);
	}
	SPI_finish();
	pgq_leave(&scope);
	values[0] = CStringGetTextDatum(pgq_item_state_name(state));
	nulls[0] = false;
	result = heap_form_tuple(tupdesc, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}

/*
 * pgq.item(queue_name, key) -> (block_id, state, attempt, result,
 *								result_data, last_error, last_error_data)
 *
 * The item of a key, found without enqueuing anything: one row, or none if
 * the queue has no item with the key (never had one, or retention removed
 * it).  A producer that lost track of an id asks this rather than enqueue
 * again to learn it.  The queue is named, so a caller that may not see it
 * learns what pgq.retry(queue_name, key) tells it: that the name is taken.
 */
Datum
pgq_item(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *key = PG_GETARG_TEXT_PP(1);
	PgqGroup	group;
	PgqScope	scope;
	Datum		args[2];
	int			rc;

	pgq_check_name(PG_GETARG_TEXT_PP(0));
	check_key(key);
	InitMaterializedSRF(fcinfo, 0);

	pgq_enter(&scope);
	SPI_connect();
	lookup_queue(PG_GETARG_TEXT_PP(0), &group);
	pgq_check_privilege(&group, PGQ_PRIV_USE);
	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, TEXTOID};

		/* the binary error: in the last entry of the error history */
		plan = pgq_keep_plan("SELECT item_id, state, attempt, result, "
							 "result_data, last_error, "
							 "pg_catalog.decode(errors " OP("->") " (-1) "
							 OP("->>") " 'data', 'base64') "
							 "FROM pgq.items WHERE group_id " OP("=") " $1 "
							 "AND key " OP("=") " $2",
							 2, argtypes);
	}
	args[0] = Int64GetDatum(group.ref.group_id);
	args[1] = PointerGetDatum(key);
	rc = SPI_execute_plan(plan, args, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read item: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	rowdesc = SPI_tuptable->tupdesc;
		Datum		values[7];
		bool		nulls[7];

		for (int c = 0; c < 7; c++)
			values[c] = SPI_getbinval(row, rowdesc, c + 1, &nulls[c]);
		values[1] = CStringGetTextDatum(pgq_item_state_name(DatumGetChar(values[1])));
		/* the tuplestore copies the row into its own memory */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	pgq_leave(&scope);
	return (Datum) 0;
}
