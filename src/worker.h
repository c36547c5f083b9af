/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  Background maintenance: registering its launcher, and whether it runs;
 *	  queues' retention settings.
 *
 * IDENTIFICATION
 *	  src/worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_WORKER_H
#define PGQ_WORKER_H

#include "datatype/timestamp.h"

extern void pgq_worker_init(void);
extern bool pgq_maintenance_on(void);
extern void pgq_check_retention(const char *argname, const Interval *span);
extern void pgq_check_key_retention(bool has_retention, Datum retention,
									bool has_key_retention,
									Datum key_retention);
extern bool pgq_retention_equal(bool isnull1, Datum d1, bool isnull2, Datum d2);

#endif							/* PGQ_WORKER_H */
