/*-------------------------------------------------------------------------
 *
 * quota.c
 *	  Bounds on the storage that enqueues take: the size of one item
 *	  (pgq.max_payload_bytes) and the items one queue holds
 *	  (pgq.max_queue_items).
 *
 * pgq writes its tables as their owner, so a role that may write no table
 * at all can still fill pgq.items through a queue of its own.  Both bounds
 * are superuser settings, for every role in postgresql.conf or for one with
 * ALTER ROLE ... SET, and are checked by each enqueue with the settings of
 * the session that enqueues.
 *
 * Counting a queue's items costs a walk of its part of each partial index
 * of pgq.items (pgq_item_classes()), so an enqueue does not count every
 * time: a session counts when the items it enqueued into the queue since
 * its last count could have used up half of the room that count left.  A
 * queue far from its bound is counted a few times per session; one close to
 * it, at every enqueue.  Sessions that enqueue into one queue at once may
 * pass the bound by up to half of the room their last counts left each.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "pgq.h"
#include "iteminsert.h"
#include "queue.h"
#include "quota.h"

static int	pgq_max_queue_items = 0;	/* 0: no bound */
static int	pgq_max_payload_bytes = 0;	/* 0: no bound */

/* What this session knows of the items of a queue it enqueued into. */
typedef struct QueueCount
{
	PgqGroupRef group;
	int64		counted;		/* items at its last count */
	int64		since;			/* items this session enqueued since */
} QueueCount;

#define PGQ_QUEUE_COUNTS	16

static QueueCount counts[PGQ_QUEUE_COUNTS];
static int	ncounts = 0;
static int	next_victim = 0;

/* Define the settings; called from _PG_init(). */
void
pgq_quota_init(void)
{
	DefineCustomIntVariable("pgq.max_queue_items",
							"Most items one queue may hold, whatever their state, when an enqueue adds to it.",
							"0 means no limit.  Set by superusers; for one role with ALTER ROLE.",
							&pgq_max_queue_items,
							0, 0, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pgq.max_payload_bytes",
							"Largest item an enqueue may add: its payload, data and key together.",
							"0 means no limit.  Set by superusers; for one role with ALTER ROLE.",
							&pgq_max_payload_bytes,
							0, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
}

/* Refuse an item larger than pgq.max_payload_bytes. */
void
pgq_check_item_size(const PgqNewItem *item)
{
	Size		size = 0;

	if (pgq_max_payload_bytes == 0)
		return;
	if (!item->no_payload)
		size += toast_datum_size(item->payload);
	if (!item->no_data)
		size += toast_datum_size(item->data);
	if (item->key != NULL)
		size += VARSIZE_ANY(item->key);
	if (size > (Size) pgq_max_payload_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("item is too large"),
				 errdetail("The item's payload, data and key take %zu bytes; the limit set by pgq.max_payload_bytes is %d bytes.",
						   size, pgq_max_payload_bytes),
				 errhint("Store large payloads elsewhere and enqueue a reference to them, or ask an administrator to raise pgq.max_payload_bytes.")));
}

/*
 * The items of the queue, counted up to "limit" (more are not told apart).
 * Inside SPI.
 */
static int64
count_items(const PgqGroup *group, int64 limit)
{
	static SPIPlanPtr plan = NULL;
	static const char *const *plan_classes = NULL;
	const char *const *classes;
	int			nclasses = pgq_item_classes(&classes);
	Datum		values[2];
	bool		isnull;
	int			rc;
	int64		n;

	/*
	 * The statement follows the schema's version, which an update (or DROP
	 * EXTENSION and CREATE EXTENSION of another version) changes under the
	 * kept plan: a plan of other conditions is made again.
	 */
	if (plan != NULL && classes != plan_classes)
	{
		SPI_freeplan(plan);
		plan = NULL;
	}
	if (plan == NULL)
	{
		Oid			argtypes[2] = {INT8OID, INT8OID};
		StringInfoData sql;

		/* state by state, each through its index, until the bound */
		initStringInfo(&sql);
		appendStringInfoString(&sql, "SELECT pg_catalog.count(*) FROM (");
		for (int i = 0; i < nclasses; i++)
			appendStringInfo(&sql, "%sSELECT FROM pgq.items "
							 "WHERE group_id " OP("=") " $1 AND %s",
							 i > 0 ? " UNION ALL " : "", classes[i]);
		appendStringInfoString(&sql, " LIMIT $2) i");
		plan = pgq_keep_plan(sql.data, 2, argtypes);
		plan_classes = classes;
		pfree(sql.data);
	}
	values[0] = Int64GetDatum(group->ref.group_id);
	values[1] = Int64GetDatum(limit);
	/* not read-only: a fresh snapshot, which sees this command's inserts */
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not count items: %s", SPI_result_code_string(rc));
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	return n;
}

/* This session's count of the queue, made for it if there is none. */
static QueueCount *
queue_count(const PgqGroup *group)
{
	QueueCount *c;

	for (int i = 0; i < ncounts; i++)
	{
		c = &counts[i];
		if (c->group.dbid == group->ref.dbid &&
			c->group.group_id == group->ref.group_id &&
			c->group.created_at == group->ref.created_at)
			return c;
	}
	if (ncounts < PGQ_QUEUE_COUNTS)
		c = &counts[ncounts++];
	else
	{
		c = &counts[next_victim];
		next_victim = (next_victim + 1) % PGQ_QUEUE_COUNTS;
	}
	c->group = group->ref;
	c->counted = -1;			/* not counted yet */
	c->since = 0;
	return c;
}

/*
 * Refuse to add n items to a queue that would then hold more than
 * pgq.max_queue_items (see the file header for when it is counted).  Inside
 * SPI, as the tables' owner.
 */
void
pgq_check_queue_room(const PgqGroup *group, int n)
{
	int64		limit = pgq_max_queue_items;
	QueueCount *c;

	if (limit == 0 || n <= 0)
		return;
	c = queue_count(group);
	if (c->counted < 0 || c->counted + c->since + n > limit ||
		2 * (c->since + n) > limit - c->counted)
	{
		c->counted = count_items(group, limit + 1);
		c->since = 0;
	}
	if (c->counted + c->since + n > limit)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("queue \"%s\" is full", group->name),
				 c->counted > limit ?
				 errdetail("The queue holds more than " INT64_FORMAT " items, the limit set by pgq.max_queue_items.",
						   limit) :
				 errdetail("The queue holds " INT64_FORMAT " items, and the enqueue would add %d; the limit set by pgq.max_queue_items is " INT64_FORMAT ".",
						   c->counted + c->since, n, limit),
				 errhint("Items leave a queue when retention removes them after they are done or dead, or when pgq.purge() does.")));
	c->since += n;
}
