/*-------------------------------------------------------------------------
 *
 * materialize.h
 *	  Asynchronous materialization: its settings, starting one, and whether
 *	  a group's writer is alive.
 *
 * IDENTIFICATION
 *	  src/materialize.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_MATERIALIZE_H
#define PGQ_MATERIALIZE_H

extern void pgq_materialize_define_settings(void);
extern void pgq_start_materialization(int64 group_id);
extern bool pgq_materializer_alive(int64 group_id);

#endif							/* PGQ_MATERIALIZE_H */
