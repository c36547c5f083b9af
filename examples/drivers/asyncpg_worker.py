#!/usr/bin/env python3
"""pgq workers in Python with asyncpg (Debian: python3-asyncpg).

    asyncpg_worker.py group NAME [WORKERS]
    asyncpg_worker.py queue NAME [WORKERS]
    asyncpg_worker.py traps

group: WORKERS (default 2) tasks drain the query group NAME together, in its
       claim mode (transaction, lease or advisory), each storing its blocks'
       ids in processed(id, block_id) in the transaction that consumes them.
queue: WORKERS tasks drain the lease-mode queue NAME, whose payloads are
       {"n": N}: each stores (N, item id) in processed and completes the item
       with the result {"square": N*N}, in one transaction.
traps: shows what bites with asyncpg, on a scratch group it creates.

The tasks share one connection pool, and each takes a connection of its own
from it for its whole life (pool.acquire()): an advisory-mode worker's locks
live in its session, and pool.fetch() would run each call on whichever
connection is free.  Connects with PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD.  Exits 0 once the group is drained or the queue is empty.  See
docs/drivers.md.
"""

import asyncio
import datetime
import json
import sys

import asyncpg

# asyncpg sends an interval argument as a datetime.timedelta, never a string
WAIT = datetime.timedelta(seconds=1)


async def init(conn):
    # jsonb as Python objects.  A codec in asyncpg's default text format
    # cannot decode a pgq.claimed row as a whole (SELECT pgq.claim(...)):
    # composite values arrive in binary.  The binary format of jsonb is a
    # version byte, 1, then the text.
    await conn.set_type_codec(
        'jsonb', schema='pg_catalog', format='binary',
        encoder=lambda v: b'\x01' + json.dumps(v).encode(),
        decoder=lambda b: json.loads(b[1:].decode()))


async def group_worker(pool, group, mode, n):
    blocks = 0
    async with pool.acquire() as conn:
        w = None
        if mode == 'advisory':
            w = await conn.fetchval('SELECT pgq.register_worker($1)', f'asyncpg-{n}')
        while True:
            tx = conn.transaction()
            if mode == 'transaction':
                await tx.start()
            rows = await conn.fetch(
                'SELECT block_id, attempt, ids FROM pgq.claim($1, wait => $2, worker_id => $3)',
                group, WAIT, w)
            if not rows:
                if mode == 'transaction':
                    await tx.commit()
                if await conn.fetchval(
                        'SELECT state FROM pgq.group_stats WHERE group_name = $1',
                        group) == 'drained':
                    break
                continue
            b = rows[0]
            if mode != 'transaction':
                await tx.start()
            await conn.execute(
                'INSERT INTO processed (id, block_id) SELECT unnest($1::bigint[]), $2',
                b['ids'], b['block_id'])
            if mode == 'lease':
                held = await conn.fetchval(
                    'SELECT pgq.complete($1, attempt => $2)', b['block_id'], b['attempt'])
            elif mode == 'advisory':
                held = (await conn.fetchval('SELECT pgq.check_worker($1)', w)
                        and await conn.fetchval('SELECT pgq.complete($1, worker_id => $2)',
                                                b['block_id'], w))
            else:
                held = True
            if held:
                await tx.commit()
            else:
                await tx.rollback()
            blocks += 1
            print(f'worker {n}: block {b["block_id"]} stored', flush=True)
    return blocks


async def queue_worker(pool, queue, n):
    items = 0
    async with pool.acquire() as conn:
        while True:
            # SELECT *: each column decoded on its own
            rows = await conn.fetch(
                'SELECT * FROM pgq.claim($1, wait => $2)', queue, WAIT)
            if not rows:
                if await conn.fetchval(
                        'SELECT pending + scheduled + running FROM pgq.queue_stats '
                        'WHERE queue_name = $1', queue) == 0:
                    break
                continue
            item = rows[0]
            value = item['payload']['n']
            async with conn.transaction():
                await conn.execute('INSERT INTO processed (id, block_id) VALUES ($1, $2)',
                                   value, item['block_id'])
                if not await conn.fetchval(
                        'SELECT pgq.complete($1, result => $2, attempt => $3)',
                        item['block_id'], {'square': value * value}, item['attempt']):
                    raise RuntimeError('lease lost')   # rolls the transaction back
            items += 1
            print(f'worker {n}: item {item["block_id"]} done', flush=True)
    return items


async def traps():
    conn = await asyncpg.connect()
    await conn.execute("""SELECT pgq.create_group('asyncpg_trap', 'SELECT g FROM generate_series(1, 100) g',
                                                  block_size => 10, mode => 'lease')""")
    claimed = 'SELECT claimed FROM pgq.group_stats WHERE group_name = $1'
    # 1. an interval as a string
    try:
        await conn.fetch('SELECT * FROM pgq.claim($1, wait => $2)', 'asyncpg_trap', '1 second')
        print('interval as str: no error')
    except asyncpg.DataError as e:
        print(f'interval as str: {type(e).__name__}: {e}')
    # 2. a jsonb codec in text format, and the claimed row as a whole
    text = await asyncpg.connect()
    await text.set_type_codec('jsonb', schema='pg_catalog',
                              encoder=json.dumps, decoder=json.loads)
    try:
        await text.fetch("SELECT pgq.claim('asyncpg_trap')")
        print('text jsonb codec, SELECT pgq.claim(...): no error')
    except asyncpg.exceptions.UnsupportedClientFeatureError as e:
        print(f'text jsonb codec, SELECT pgq.claim(...): {type(e).__name__}: {e}')
    print('... claimed meanwhile:', await conn.fetchval(claimed, 'asyncpg_trap'))
    rows = await text.fetch("SELECT * FROM pgq.claim('asyncpg_trap')")
    print(f'text jsonb codec, SELECT * FROM pgq.claim(...): {len(rows)} row')
    await text.close()
    # 3. a cursor that prefetches 1 row of a claim of 5 blocks
    before = await conn.fetchval(claimed, 'asyncpg_trap')
    async with conn.transaction():
        cur = await conn.cursor("SELECT block_id FROM pgq.claim('asyncpg_trap', 5)")
        await cur.fetchrow()
    after = await conn.fetchval(claimed, 'asyncpg_trap')
    print(f'cursor, max_blocks 5: read 1 row, {after - before} blocks claimed')
    await conn.execute("SELECT pgq.drop_group('asyncpg_trap')")
    await conn.close()


async def main(argv):
    if argv[:1] == ['traps'] and len(argv) == 1:
        return await traps()
    if len(argv) not in (2, 3) or argv[0] not in ('group', 'queue'):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    kind, name = argv[0], argv[1]
    workers = int(argv[2]) if len(argv) == 3 else 2
    async with asyncpg.create_pool(min_size=workers, max_size=workers, init=init) as pool:
        if kind == 'group':
            mode = await pool.fetchval(
                'SELECT mode FROM pgq.group_stats WHERE group_name = $1', name)
            if mode is None:
                sys.exit(f'group {name} does not exist')
            done = await asyncio.gather(*(group_worker(pool, name, mode, n)
                                          for n in range(1, workers + 1)))
            print(f'group {name} is drained; the workers stored {done} blocks')
        else:
            done = await asyncio.gather(*(queue_worker(pool, name, n)
                                          for n in range(1, workers + 1)))
            print(f'queue {name} is empty; the workers did {done} items')


if __name__ == '__main__':
    try:
        asyncio.run(main(sys.argv[1:]))
    except asyncpg.PostgresError as e:
        sys.exit(f'error: {e.sqlstate} {e}')
