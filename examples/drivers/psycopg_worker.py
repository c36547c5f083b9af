#!/usr/bin/env python3
"""A pgq worker in Python with psycopg 3 and its pipeline mode (Debian:
python3-psycopg).

    psycopg_worker.py group NAME
    psycopg_worker.py queue NAME
    psycopg_worker.py traps

group: drains the query group NAME, in its claim mode (transaction or
       lease), storing each block's ids in processed(id, block_id) in the
       transaction that consumes the block.  Lease mode claims up to 10
       blocks at a time and completes them in one pipeline.
queue: drains the lease-mode queue NAME, whose payloads are {"n": N}: stores
       (N, item id) in processed and completes the item with the result
       {"square": N*N}, in one statement.
traps: shows what bites with psycopg, on a scratch group it creates.

For every mode and more options, see ../python/consumer.py.  Connects with
libpq's PGHOST, PGPORT, PGDATABASE, PGUSER ...  Exits 0 once the group is
drained or the queue is empty.  See docs/drivers.md.
"""

import sys

import psycopg
from psycopg.types.json import Jsonb

WAIT = '1 second'

# One statement that completes a lease and stores the results only if the
# lease was still ours: no round trip is needed to decide on COMMIT or
# ROLLBACK, so it can be pipelined.
STORE_BLOCK = """
    WITH c AS (SELECT pgq.complete(%(block)s, attempt => %(attempt)s) AS ok)
    INSERT INTO processed (id, block_id)
    SELECT unnest(%(ids)s::bigint[]), %(block)s FROM c WHERE ok"""
STORE_ITEM = """
    WITH c AS (SELECT pgq.complete(%(item)s, result => %(result)s, attempt => %(attempt)s) AS ok)
    INSERT INTO processed (id, block_id) SELECT %(n)s, %(item)s FROM c WHERE ok"""


def drained(conn, group):
    return conn.execute('SELECT state FROM pgq.group_stats WHERE group_name = %s',
                        (group,)).fetchone()[0] == 'drained'


def group(name):
    with psycopg.connect(autocommit=True) as conn:
        row = conn.execute('SELECT mode FROM pgq.group_stats WHERE group_name = %s',
                           (name,)).fetchone()
        if row is None or row[0] not in ('transaction', 'lease'):
            sys.exit(f'{name}: no such group in transaction or lease mode')
        mode, blocks = row[0], 0
        while True:
            if mode == 'transaction':
                # BEGIN; claim; store; COMMIT.  A client-side cursor (the
                # default) reads every row the claim returns.
                with conn.transaction():
                    claimed = conn.execute(
                        'SELECT block_id, ids FROM pgq.claim(%s, wait => %s)',
                        (name, WAIT)).fetchall()
                    for block, ids in claimed:
                        conn.execute('INSERT INTO processed (id, block_id) '
                                     'SELECT unnest(%s::bigint[]), %s', (ids, block))
            else:
                claimed = conn.execute(
                    'SELECT block_id, attempt, ids FROM pgq.claim(%s, 10, wait => %s)',
                    (name, WAIT)).fetchall()
                # one round trip and one commit for the whole batch
                with conn.pipeline(), conn.transaction():
                    conn.cursor().executemany(STORE_BLOCK, [
                        {'block': b, 'attempt': a, 'ids': ids} for b, a, ids in claimed])
            if not claimed:
                if drained(conn, name):
                    break
                continue
            blocks += len(claimed)
            print(f'stored {len(claimed)} block(s)', flush=True)
        print(f'group {name} is drained; this worker stored {blocks} blocks')


def queue(name):
    items = 0
    with psycopg.connect(autocommit=True) as conn:
        while True:
            row = conn.execute('SELECT block_id, attempt, payload FROM pgq.claim(%s, wait => %s)',
                               (name, WAIT)).fetchone()
            if row is None:
                left = conn.execute('SELECT pending + scheduled + running FROM pgq.queue_stats '
                                    'WHERE queue_name = %s', (name,)).fetchone()[0]
                if left == 0:
                    break
                continue
            item, attempt, payload = row
            n = payload['n']
            conn.execute(STORE_ITEM, {'item': item, 'attempt': attempt, 'n': n,
                                      'result': Jsonb({'square': n * n})})
            items += 1
            print(f'item {item} done', flush=True)
    print(f'queue {name} is empty; this worker did {items} items')


def traps():
    with psycopg.connect(autocommit=True) as conn:
        conn.execute("""SELECT pgq.create_group('psycopg_trap', 'SELECT g FROM generate_series(1, 100) g',
                                                block_size => 10)""")

        def pending_claimed():
            return conn.execute("SELECT pending, claimed FROM pgq.group_stats "
                                "WHERE group_name = 'psycopg_trap'").fetchone()

        # 1. a server-side cursor fetching 1 row of a claim of 5 blocks
        with psycopg.connect() as c2:
            cur = c2.cursor(name='claims')
            cur.itersize = 1
            cur.execute("SELECT block_id FROM pgq.claim('psycopg_trap', 5)")
            cur.fetchone()
            print(f'server-side cursor, max_blocks 5: read 1 row, {pending_claimed()[1]} blocks claimed')
            cur.close()
            c2.commit()
        print(f'... and after COMMIT, {10 - pending_claimed()[0]} blocks consumed')
        # 2. in a pipeline, the statements up to a sync are one transaction,
        # even in autocommit: an error undoes the lease claims before it
        conn.execute("""SELECT pgq.create_group('psycopg_trap_lease', 'SELECT g FROM generate_series(1, 100) g',
                                                block_size => 10, mode => 'lease')""")
        try:
            with conn.pipeline():
                cur = conn.execute("SELECT block_id FROM pgq.claim('psycopg_trap_lease')")
                conn.execute('SELECT 1 / 0')
        except psycopg.Error as e:
            print(f'pipeline, a lease claim then an error: {e.sqlstate} {str(e).splitlines()[0]}')
        n = conn.execute("SELECT claimed FROM pgq.group_stats "
                         "WHERE group_name = 'psycopg_trap_lease'").fetchone()[0]
        print(f'... blocks claimed after it: {n}')
        conn.execute("SELECT pgq.drop_group('psycopg_trap_lease')")
        conn.execute("SELECT pgq.drop_group('psycopg_trap')")
        # 3. a list of str is sent untyped: passed positionally to pgq.claim,
        # the server takes it for one group name (the one-name form)
        names = ['psycopg_trap_a', 'psycopg_trap_b']
        for q in names:
            conn.execute('SELECT pgq.create_queue(%s)', (q,))
        conn.execute("SELECT pgq.enqueue('psycopg_trap_b', '{}')")
        try:
            conn.execute('SELECT count(*) FROM pgq.claim(%s)', (names,))
        except psycopg.Error as e:
            print(f'a list, positionally: {e.sqlstate} {e.diag.message_primary}')
        row = conn.execute('SELECT group_name FROM pgq.claim(group_names => %s)',
                           (names,)).fetchone()
        print(f'a list, as group_names => %s: claimed from {row[0]}')
        for q in names:
            conn.execute('SELECT pgq.drop_group(%s)', (q,))


if __name__ == '__main__':
    args = sys.argv[1:]
    try:
        if args[:1] == ['group'] and len(args) == 2:
            group(args[1])
        elif args[:1] == ['queue'] and len(args) == 2:
            queue(args[1])
        elif args == ['traps']:
            traps()
        else:
            print(__doc__, file=sys.stderr)
            sys.exit(2)
    except psycopg.Error as e:
        sys.exit(f'error: {e.sqlstate} {e}')
