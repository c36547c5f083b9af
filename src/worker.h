/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  Background maintenance: registering its launcher, and whether it runs.
 *
 * IDENTIFICATION
 *	  src/worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_WORKER_H
#define PGQ_WORKER_H

extern void pgq_worker_init(void);
extern bool pgq_maintenance_on(void);

#endif							/* PGQ_WORKER_H */
