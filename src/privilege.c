/*-------------------------------------------------------------------------
 *
 * privilege.c
 *	  Who may do what with a group: its owner, and the roles it was granted
 *	  to.
 *
 * pgq's tables belong to the extension's owner and are granted to nobody.
 * Its functions run as their caller (SECURITY INVOKER), check what the
 * caller may do with the group at hand, and then read and write pgq's
 * tables as the tables' owner (pgq_enter()), the way a SECURITY DEFINER
 * function would, but knowing who called.  Every statement they run that
 * way names its relations, functions, operators and types with their
 * schema, and takes user input as parameters only.
 *
 * A group's owner is the role that created it.  Members of the owner role
 * (and superusers) may do everything with the group: use it, drop it, and
 * grant or revoke:
 *
 *	- consume: claim, complete, release, fail, extend; read results and
 *	  retry items; join the group with create_group / create_queue;
 *	- produce (queues): enqueue; read results and retry items.
 *
 * Grants name roles (stored as regrole, so they survive pg_dump by name),
 * or PUBLIC.  The views show the groups the caller may do something with.
 * A group's query always runs as its owner, wherever it runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "pgq.h"
#include "group.h"
#include "privilege.h"

PG_FUNCTION_INFO_V1(pgq_grant);
PG_FUNCTION_INFO_V1(pgq_revoke);
PG_FUNCTION_INFO_V1(pgq_may_see);
PG_FUNCTION_INFO_V1(pgq_has_group_privilege);

/* The role whose call of a pgq function is being served (see pgq_enter()). */
Oid			pgq_caller = InvalidOid;

/*
 * The calls being served, innermost last: for each, the caller of the call
 * around it and the subtransaction it began in.  An error that ends calls
 * skips their pgq_leave(); the subtransaction's abort then pops them, as it
 * puts the user back, so that the caller is right again wherever the error
 * is caught.  Kept in TopMemoryContext, emptied at the end of a transaction.
 */
typedef struct CallerFrame
{
	Oid			outer_caller;
	SubTransactionId subid;
} CallerFrame;

static CallerFrame *caller_frames = NULL;
static int	ncaller_frames = 0;
static int	max_caller_frames = 0;

/* The owner of pgq's tables: the role pgq_enter() switches to. */
static Oid
tables_owner(void)
{
	Oid			relid;
	HeapTuple	tuple;
	Oid			owner;

	relid = get_relname_relid("groups", get_namespace_oid("pgq", false));
	if (!OidIsValid(relid))
		elog(ERROR, "pgq.groups does not exist");
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* At the end of a transaction, no call is being served any more. */
static void
reset_caller(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
	{
		pgq_caller = InvalidOid;
		ncaller_frames = 0;
	}
}

/*
 * A subtransaction that aborts ends the calls begun in it, whose
 * pgq_leave() the error skipped; one that commits hands the calls still
 * being served to its parent.
 */
static void
subxact_caller(SubXactEvent event, SubTransactionId mySubid,
			   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (ncaller_frames > 0 &&
			   caller_frames[ncaller_frames - 1].subid == mySubid)
			pgq_caller = caller_frames[--ncaller_frames].outer_caller;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = ncaller_frames - 1;
			 i >= 0 && caller_frames[i].subid == mySubid; i--)
			caller_frames[i].subid = parentSubid;
	}
}

/*
 * Start serving a call: remember the caller, and act as the owner of pgq's
 * tables until pgq_leave().  An error on the way rolls the (sub)transaction
 * back, which puts the user and the caller back by itself.
 */
void
pgq_enter(PgqScope *scope)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(reset_caller, NULL);
		RegisterSubXactCallback(subxact_caller, NULL);
		registered = true;
	}
	if (ncaller_frames == max_caller_frames)
	{
		int			n = Max(8, max_caller_frames * 2);

		caller_frames = caller_frames == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(CallerFrame)) :
			repalloc(caller_frames, n * sizeof(CallerFrame));
		max_caller_frames = n;
	}
	GetUserIdAndSecContext(&scope->save_userid, &scope->save_sec_context);
	scope->save_caller = pgq_caller;
	scope->owner = tables_owner();
	caller_frames[ncaller_frames].outer_caller = pgq_caller;
	caller_frames[ncaller_frames].subid = GetCurrentSubTransactionId();
	ncaller_frames++;
	pgq_caller = scope->save_userid;
	pgq_become_owner(scope);
}

/* End serving a call begun with pgq_enter(). */
void
pgq_leave(PgqScope *scope)
{
	SetUserIdAndSecContext(scope->save_userid, scope->save_sec_context);
	Assert(ncaller_frames > 0 &&
		   caller_frames[ncaller_frames - 1].outer_caller == scope->save_caller);
	if (ncaller_frames > 0)
		ncaller_frames--;
	pgq_caller = scope->save_caller;
}

/* Act as the owner of pgq's tables again, within pgq_enter(). */
void
pgq_become_owner(const PgqScope *scope)
{
	SetUserIdAndSecContext(scope->owner,
						   scope->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/* Act as the caller again, within pgq_enter(): to run its group's query. */
void
pgq_become_caller(const PgqScope *scope)
{
	SetUserIdAndSecContext(scope->save_userid, scope->save_sec_context);
}

/* The role being served: the caller within pgq_enter(), else the user. */
static Oid
current_caller(void)
{
	return OidIsValid(pgq_caller) ? pgq_caller : GetUserId();
}

/*
 * Does a regrole[] grant something to "role" (directly, by membership, or to
 * PUBLIC)?
 */
static bool
granted_to(Oid role, Datum grantees)
{
	ArrayType  *array = DatumGetArrayTypeP(grantees);
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(array, REGROLEOID, sizeof(Oid), true, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		Oid			grantee;

		if (nulls[i])
			continue;
		grantee = DatumGetObjectId(elems[i]);
		if (grantee == InvalidOid || has_privs_of_role(role, grantee))
			return true;
	}
	return false;
}

/*
 * Work out what the caller may do with a group, from its owner and its
 * grantees (regrole[] Datums).
 */
void
pgq_set_privileges(PgqGroup *group, Oid owner, Datum consumers,
				   Datum producers)
{
	Oid			role = current_caller();

	group->owner = owner;
	group->may_admin = has_privs_of_role(role, owner);
	group->may_consume = group->may_admin || granted_to(role, consumers);
	group->may_produce = group->may_admin || granted_to(role, producers);
}

/*
 * May the caller see the group: consume or produce, or own it?  The views
 * show such groups; for the others, a call that names a group by id acts as
 * if there were no such id, and one that names it by name learns no more
 * than that the name is taken.
 */
bool
pgq_may_see_group(const PgqGroup *group)
{
	return group->may_consume || group->may_produce || group->may_admin;
}

/* The name of a privilege, for messages and for pgq.grant(). */
static const char *const privilege_names[] = {"consume", "produce", "admin"};

/*
 * Error out unless the caller may do "what" with the group.  PGQ_PRIV_USE
 * is either consume or produce.  A caller that may not see the group is
 * told only that: not what the group is, nor whose.
 */
void
pgq_check_privilege(const PgqGroup *group, PgqPrivilege what)
{
	bool		ok;
	char	   *owner_name;

	switch (what)
	{
		case PGQ_PRIV_CONSUME:
			ok = group->may_consume;
			break;
		case PGQ_PRIV_PRODUCE:
			ok = group->may_produce;
			break;
		case PGQ_PRIV_USE:
			ok = group->may_consume || group->may_produce;
			break;
		default:
			ok = group->may_admin;
			break;
	}
	if (ok)
		return;

	/*
	 * No grant allows what only the owner may do, and who the owner is is
	 * none of this caller's business: no hint for that.
	 */
	if (!pgq_may_see_group(group))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for group \"%s\"", group->name),
				 what != PGQ_PRIV_ADMIN ?
				 errhint("The group's owner can grant privileges on it with pgq.grant().") : 0));
	owner_name = GetUserNameFromId(group->owner, true);
	if (what != PGQ_PRIV_ADMIN)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for group \"%s\"", group->name),
				 errdetail("This needs the %s privilege on the group.",
						   what == PGQ_PRIV_USE ? "consume or produce" :
						   privilege_names[what]),
				 errhint("The group's owner can grant it with pgq.grant().")));

	/* owning is no privilege that pgq.grant() gives: say what will do */
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for group \"%s\"", group->name),
			 errdetail("Only the group's owner, %s, and its members may do this.",
					   owner_name ? owner_name : "(dropped role)"),
			 owner_name ?
			 errhint("Ask %s or a superuser to do it.", owner_name) :
			 errhint("Ask a superuser to do it.")));
}

/* "group" or "queue", for messages about joining one. */
static const char *
kind_word(PgqGroupKind kind)
{
	return kind == PGQ_KIND_QUEUE ? "queue" : "group";
}

/*
 * Error out unless the caller may join an existing group or queue, found
 * under the name that it asked create_group or create_queue ("kind") to
 * create; "owner" is their owner argument, InvalidOid for none.
 *
 * A name is taken by whoever comes first, so that a group of the name may
 * be a stranger's, made to look like the one the caller meant (the same
 * query text, which runs as the stranger, or the same queue settings) and
 * granted to PUBLIC.  Hence joining takes more than the privilege to use
 * the group: it must be the caller's own (its owner is the caller or a role
 * the caller is a member of; superusers are no exception), or owner must
 * name its owner (or a role its owner is a member of).  A caller that may
 * not see the group learns only that the name is taken.
 */
void
pgq_check_join(const PgqGroup *existing, PgqGroupKind kind, Oid owner)
{
	Oid			role = current_caller();
	char	   *owner_name;

	if (!pgq_may_see_group(existing))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for group \"%s\"", existing->name),
				 errdetail("The name is taken by a group or queue that you may not use."),
				 errhint("Choose another name, or ask the owner of the group for a grant.")));
	if (existing->kind != kind)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 kind == PGQ_KIND_QUERY ?
				 errmsg("\"%s\" is a queue, not a query group", existing->name) :
				 errmsg("\"%s\" is a query group, not a queue", existing->name),
				 errhint("Use another name, or drop the %s first with pgq.drop_group().",
						 kind_word(existing->kind))));
	pgq_check_privilege(existing,
						kind == PGQ_KIND_QUERY ? PGQ_PRIV_CONSUME : PGQ_PRIV_USE);

	owner_name = GetUserNameFromId(existing->owner, true);
	if (owner_name == NULL)
		owner_name = "(dropped role)";
	if (!OidIsValid(owner) && !is_member_of_role_nosuper(role, existing->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s \"%s\" belongs to role \"%s\"",
						kind_word(kind), existing->name, owner_name),
				 errdetail("A %s of another role is joined only when owner => names its owner.",
						   kind_word(kind)),
				 errhint("If you meant to join the %s of %s, pass owner => '%s'; otherwise, choose another name.",
						 kind_word(kind), owner_name,
						 quote_identifier(owner_name))));
	if (OidIsValid(owner) && !is_member_of_role_nosuper(existing->owner, owner))
	{
		char	   *wanted = GetUserNameFromId(owner, false);

		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s \"%s\" belongs to role \"%s\", not to \"%s\"",
						kind_word(kind), existing->name, owner_name, wanted),
				 errhint("Another role took the name first: choose another name, or drop that %s if it may be dropped.",
						 kind_word(kind))));
	}
}

/*
 * After the caller joined an existing group or queue: if it is another
 * role's, say whose, as CREATE ... IF NOT EXISTS names what it found.
 */
void
pgq_report_join(const PgqGroup *existing)
{
	char	   *owner_name;

	if (is_member_of_role_nosuper(current_caller(), existing->owner))
		return;
	owner_name = GetUserNameFromId(existing->owner, true);
	ereport(NOTICE,
			(errmsg("%s \"%s\" of role \"%s\" exists, joining it",
					kind_word(existing->kind), existing->name,
					owner_name ? owner_name : "(dropped role)")));
}

/*
 * Error out if create_group or create_queue just created a group that was
 * asked for as another role's: with owner => a role the caller is not a
 * member of, the caller means to join that role's group, which does not
 * exist (yet).  The error undoes the creation.
 */
void
pgq_check_create_owner(text *name, PgqGroupKind kind, Oid owner)
{
	if (OidIsValid(owner) && !is_member_of_role_nosuper(current_caller(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("%s \"%s\" of role \"%s\" does not exist",
						kind_word(kind), text_to_cstring(name),
						GetUserNameFromId(owner, false)),
				 errhint("owner => names the role whose %s to join; only that role and its members create it.",
						 kind_word(kind))));
}

/* Parse a privilege name given to pgq.grant() or pgq.revoke(). */
static const char *
grant_column(text *privilege)
{
	char	   *name = text_to_cstring(privilege);

	if (strcmp(name, "consume") == 0)
		return "consumers";
	if (strcmp(name, "produce") == 0)
		return "producers";
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown privilege \"%s\"", name),
			 errhint("The privileges are \"consume\" and \"produce\"; the owner has both, and may drop the group.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * The role that pgq.grant() and pgq.revoke() name, InvalidOid for PUBLIC.
 * As in has_table_privilege() and the other functions that take a role as
 * text, the text is the role's name as it is stored, and public, in lower
 * case, means PUBLIC; a name in double quotes is read as a quoted identifier,
 * as GRANT would read it, so that "public" is the name of a role (which no
 * role may have) and "Public" that of the role Public.
 */
static Oid
grantee_role(const char *given)
{
	size_t		len = strlen(given);

	if (strcmp(given, "public") == 0)
		return InvalidOid;
	if (len >= 2 && given[0] == '"' && given[len - 1] == '"')
	{
		StringInfoData name;

		initStringInfo(&name);
		for (size_t i = 1; i < len - 1; i++)
		{
			/* inside the quotes, "" stands for one " */
			if (given[i] == '"')
			{
				if (i + 1 == len - 1 || given[i + 1] != '"')
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_NAME),
							 errmsg("invalid role name: %s", given),
							 errhint("Within a quoted name, write a double quote as two.")));
				i++;
			}
			appendStringInfoChar(&name, given[i]);
		}
		return get_role_oid(name.data, false);
	}
	return get_role_oid(given, false);
}

/*
 * Add or remove a grantee in a group's consumers or producers, as its owner.
 * role is InvalidOid for PUBLIC.
 */
static void
change_grant(FunctionCallInfo fcinfo, bool grant)
{
	PgqScope	scope;
	PgqGroup	group;
	const char *column;
	char	   *sql;
	Oid			argtypes[2] = {INT8OID, REGROLEOID};
	Datum		values[2];
	Oid			role;
	int			rc;

	pgq_check_arg_not_null(fcinfo, 0, "group_name");
	pgq_check_arg_not_null(fcinfo, 1, "role");
	pgq_check_arg_not_null(fcinfo, 2, "privilege");
	pgq_check_name(PG_GETARG_TEXT_PP(0));
	column = grant_column(PG_GETARG_TEXT_PP(2));
	role = grantee_role(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	pgq_check_not_in_recovery(grant ? "grant a privilege" : "revoke a privilege");

	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group(PG_GETARG_TEXT_PP(0), &group);
	pgq_check_privilege(&group, PGQ_PRIV_ADMIN);

	/* column comes from the list above, never from the caller */
	if (grant)
		sql = psprintf("UPDATE pgq.groups SET %s = %s "
					   OP("||") " $2 "
					   "WHERE group_id " OP("=") " $1 "
					   "AND NOT ($2 " OP("=") " ANY (%s))",
					   column, column, column);
	else
		sql = psprintf("UPDATE pgq.groups SET %s = "
					   "pg_catalog.array_remove(%s, $2) "
					   "WHERE group_id " OP("=") " $1",
					   column, column);
	values[0] = Int64GetDatum(group.ref.group_id);
	values[1] = ObjectIdGetDatum(role);
	rc = pgq_execute_fresh(sql, 2, argtypes, values);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not change the grants of group \"%s\": %s",
			 group.name, SPI_result_code_string(rc));
	pgq_invalidate_groups();
	SPI_finish();
	pgq_leave(&scope);
}

/*
 * pgq.grant(group_name, role, privilege) -> void
 *
 * Let a role, given by name, or PUBLIC consume or produce: only the group's
 * owner may.
 */
Datum
pgq_grant(PG_FUNCTION_ARGS)
{
	change_grant(fcinfo, true);
	PG_RETURN_VOID();
}

/* pgq.revoke(group_name, role, privilege) -> void */
Datum
pgq_revoke(PG_FUNCTION_ARGS)
{
	change_grant(fcinfo, false);
	PG_RETURN_VOID();
}

/*
 * pgq.may_see(owner, consumers, producers) -> boolean
 *
 * May the current user do anything with a group of this owner and these
 * grantees?  The views show only such groups.
 */
Datum
pgq_may_see(PG_FUNCTION_ARGS)
{
	Oid			role = GetUserId();

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(has_privs_of_role(role, PG_GETARG_OID(0)) ||
				   granted_to(role, PG_GETARG_DATUM(1)) ||
				   granted_to(role, PG_GETARG_DATUM(2)));
}

/*
 * pgq.has_group_privilege(group_name, privilege) -> boolean  (since 0.2)
 *
 * Whether the current user may "consume", "produce" or "admin" (own) the
 * group, as pgq's functions decide it.  An error for a group that does not
 * exist, as has_table_privilege() gives for a table.
 */
Datum
pgq_has_group_privilege(PG_FUNCTION_ARGS)
{
	char	   *privilege = text_to_cstring(PG_GETARG_TEXT_PP(1));
	PgqScope	scope;
	PgqGroup	group;
	bool		result;

	pgq_check_name(PG_GETARG_TEXT_PP(0));
	if (strcmp(privilege, "consume") != 0 && strcmp(privilege, "produce") != 0 &&
		strcmp(privilege, "admin") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown privilege \"%s\"", privilege),
				 errhint("The privileges are \"consume\", \"produce\" and \"admin\".")));

	pgq_enter(&scope);
	SPI_connect();
	pgq_lookup_group(PG_GETARG_TEXT_PP(0), &group);
	SPI_finish();
	pgq_leave(&scope);

	if (strcmp(privilege, "consume") == 0)
		result = group.may_consume;
	else if (strcmp(privilege, "produce") == 0)
		result = group.may_produce;
	else
		result = group.may_admin;
	PG_RETURN_BOOL(result);
}
