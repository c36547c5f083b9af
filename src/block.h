/*-------------------------------------------------------------------------
 *
 * block.h
 *	  Completing a held block or item from inside pgq.claim().
 *
 * IDENTIFICATION
 *	  src/block.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PGQ_BLOCK_H
#define PGQ_BLOCK_H

extern bool pgq_complete_held(int64 block_id, NullableDatum attempt,
							  NullableDatum worker_id);

#endif							/* PGQ_BLOCK_H */
