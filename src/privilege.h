/*-------------------------------------------------------------------------
 *
 * privilege.h
 *	  Who may do what with a group, and acting as the owner of pgq's tables.
 *
 * IDENTIFICATION
 *	  src/privilege.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_PRIVILEGE_H
#define PGQ_PRIVILEGE_H

#include "pgq.h"

/* What a caller may do with a group. */
typedef enum PgqPrivilege
{
	PGQ_PRIV_CONSUME,
	PGQ_PRIV_PRODUCE,
	PGQ_PRIV_ADMIN,
	PGQ_PRIV_USE				/* consume or produce */
} PgqPrivilege;

/* The caller and the user to go back to, while pgq acts as its tables' owner */
typedef struct PgqScope
{
	Oid			save_userid;
	int			save_sec_context;
	Oid			save_caller;
	Oid			owner;
} PgqScope;

extern Oid	pgq_caller;
extern void pgq_enter(PgqScope *scope);
extern void pgq_leave(PgqScope *scope);
extern void pgq_become_owner(const PgqScope *scope);
extern void pgq_become_caller(const PgqScope *scope);
extern void pgq_set_privileges(PgqGroup *group, Oid owner, Datum consumers,
							   Datum producers);
extern bool pgq_may_see_group(const PgqGroup *group);
extern void pgq_check_privilege(const PgqGroup *group, PgqPrivilege what);
extern void pgq_check_join(const PgqGroup *existing, PgqGroupKind kind,
						   Oid owner);
extern void pgq_report_join(const PgqGroup *existing);
extern void pgq_check_create_owner(text *name, PgqGroupKind kind, Oid owner);

#endif							/* PGQ_PRIVILEGE_H */
