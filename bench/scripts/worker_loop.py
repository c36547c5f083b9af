#!/usr/bin/env python3
"""Which worker loop gives the lowest latency?  A by-hand benchmark of pgq
worker loops as a client runs them (psycopg 3, one statement per round trip).

    python3 bench/scripts/worker_loop.py --dsn "host=/tmp/x port=5432 dbname=bench" \
        [--rounds 3] [--items 200] [--backlog 2000]

One worker and one producer, on lease-mode queues that the script makes
(wl_<loop>, dropped and made again before each run).  The loops:

  two        claim(q, wait => W), then pgq.complete(id, attempt => a):
             two statements per item
  one-wait   claim(q, wait => W, complete => last, attempt => a): one
             statement per item, which completes the item before
  one-then-wait
             claim(q, complete => last, attempt => a) without wait; only when
             that returns nothing, claim(q, wait => W): one statement per item
             while there is work, two when the worker has to wait
  listen     LISTEN on pgq.channel(q) (the producer sets pgq.notify = on);
             claim(q) without wait, and when it returns nothing, sleep until
             a notification comes; then pgq.complete: two statements per item

Two runs per loop and round, the loops alternating within each round:

  trickle    the producer enqueues --items + 1 items one at a time, each in a
             transaction of its own, a random 0-100 ms apart: the worker waits
             for each.  Per item (the last one left out): "pickup", from just
             before the producer's COMMIT to the worker's statement returning
             the item, and "done", from the same moment to the worker's
             statement that committed its completion returning.  Times are
             time.monotonic() of each process: one clock for the machine.
  backlog    --backlog items enqueued first, then one worker drains them:
             items per second, the round trips' cost when there is no wait.

Prints the medians over the rounds of each run's p50 and p99, and each
round's figures.  Needs pgq preloaded; W is 10 seconds.
"""

import argparse
import multiprocessing as mp
import random
import select
import statistics
import time

import psycopg

LOOPS = ['two', 'one-wait', 'one-then-wait', 'listen']
W = '10 seconds'


def pct(values, p):
    """Nearest-rank percentile."""
    v = sorted(values)
    return v[max(0, -(-len(v) * p // 100) - 1)]


def worker(dsn, loop, queue, n, ready, out):
    """Take n items off the queue with the loop; send {id: (got, done)} back."""
    got, done = {}, {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        if loop == 'listen':
            channel = conn.execute('SELECT pgq.channel(%s)', (queue,)).fetchone()[0]
            conn.execute(f'LISTEN "{channel}"')
            # notifications that come in during a statement go to handlers
            heard = []
            conn.add_notify_handler(heard.append)
        claim = conn.cursor()
        complete = conn.cursor()
        last = None                      # (id, attempt) done, not yet completed
        ready.set()
        while len(done) < n:
            if loop == 'two':
                row = claim.execute('SELECT block_id, attempt FROM pgq.claim(%s, wait => %s)',
                                    (queue, W)).fetchone()
                t = time.monotonic()
                if row:
                    got[row[0]] = t
                    complete.execute('SELECT pgq.complete(%s, attempt => %s)', row)
                    done[row[0]] = time.monotonic()
            elif loop == 'one-wait' or (loop == 'one-then-wait' and last is None):
                row = claim.execute(
                    'SELECT block_id, attempt FROM pgq.claim(%s, wait => %s, complete => %s, attempt => %s)',
                    (queue, W, last and last[0], last and last[1])).fetchone()
                t = time.monotonic()
                if last:
                    done[last[0]] = t
                    last = None
                if row:
                    got[row[0]] = t
                    last = row
            elif loop == 'one-then-wait':
                row = claim.execute(
                    'SELECT block_id, attempt FROM pgq.claim(%s, complete => %s, attempt => %s)',
                    (queue, last[0], last[1])).fetchone()
                t = time.monotonic()
                done[last[0]] = t
                last = None
                if row:
                    got[row[0]] = t
                    last = row
            else:   # listen
                row = claim.execute('SELECT block_id, attempt FROM pgq.claim(%s)',
                                    (queue,)).fetchone()
                t = time.monotonic()
                if row:
                    got[row[0]] = t
                    complete.execute('SELECT pgq.complete(%s, attempt => %s)', row)
                    done[row[0]] = time.monotonic()
                    continue
                # sleep until a notification (or 10 s), read without a
                # statement
                pg = conn.pgconn
                deadline = time.monotonic() + 10
                while not heard and time.monotonic() < deadline:
                    pg.consume_input()
                    while (nt := pg.notifies()) is not None:
                        heard.append(nt)
                    if not heard:
                        select.select([pg.socket], [], [], max(0, deadline - time.monotonic()))
                heard.clear()
            # the last item of a trickle run: complete it in the same loop's
            # way, then stop (left out of the figures)
            if len(got) == n and last and loop == 'one-wait':
                complete.execute('SELECT pgq.complete(%s, attempt => %s)', last)
                done[last[0]] = time.monotonic()
                last = None
        if last:
            complete.execute('SELECT pgq.complete(%s, attempt => %s)', last)
            done[last[0]] = time.monotonic()
    out.send({i: (got[i], done[i]) for i in got})


def fresh_queue(conn, queue):
    conn.execute('SELECT pgq.drop_group(g.group_name) FROM pgq.groups g WHERE g.group_name = %s',
                 (queue,))
    conn.execute("SELECT pgq.create_queue(%s, lease => '1 hour')", (queue,))
    conn.execute('CHECKPOINT')


def start_worker(dsn, loop, queue, n):
    ready = mp.Event()
    rx, tx = mp.Pipe(duplex=False)
    p = mp.Process(target=worker, args=(dsn, loop, queue, n, ready, tx), daemon=True)
    p.start()
    ready.wait()
    return p, rx


def trickle(dsn, loop, items):
    queue = 'wl_' + loop.replace('-', '_')
    with psycopg.connect(dsn, autocommit=True) as conn:
        fresh_queue(conn, queue)
        if loop == 'listen':
            conn.execute('SET pgq.notify = on')
        p, rx = start_worker(dsn, loop, queue, items + 1)
        sent = {}
        for _ in range(items + 1):
            time.sleep(random.uniform(0, 0.1))
            with conn.transaction():
                i = conn.execute("SELECT pgq.enqueue(%s, '{}')", (queue,)).fetchone()[0]
                sent[i] = time.monotonic()
        res = rx.recv()
        p.join()
    last = max(sent)
    pickup = [1000 * (res[i][0] - sent[i]) for i in sent if i != last]
    done = [1000 * (res[i][1] - sent[i]) for i in sent if i != last]
    return pickup, done


def backlog(dsn, loop, n):
    queue = 'wl_' + loop.replace('-', '_')
    with psycopg.connect(dsn, autocommit=True) as conn:
        fresh_queue(conn, queue)
        conn.execute("SELECT pgq.enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]))", (queue, n))
        t0 = time.monotonic()
        p, rx = start_worker(dsn, loop, queue, n)
        rx.recv()
        p.join()
        return n / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--dsn', default='')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--items', type=int, default=200, help='items of a trickle run (0: none)')
    ap.add_argument('--backlog', type=int, default=2000, help='items of a backlog run (0: none)')
    ap.add_argument('--loops', default=','.join(LOOPS))
    args = ap.parse_args()
    loops = args.loops.split(',')
    res = {loop: {'pickup50': [], 'pickup99': [], 'done50': [], 'done99': [], 'rate': []}
           for loop in loops}
    for r in range(1, args.rounds + 1):
        for loop in loops:
            x = res[loop]
            line = f'round {r}, {loop}:'
            if args.items:
                pickup, done = trickle(args.dsn, loop, args.items)
                x['pickup50'].append(pct(pickup, 50))
                x['pickup99'].append(pct(pickup, 99))
                x['done50'].append(pct(done, 50))
                x['done99'].append(pct(done, 99))
                line += (f' pickup p50 {pct(pickup, 50):.2f} ms, p99 {pct(pickup, 99):.2f} ms;'
                         f' done p50 {pct(done, 50):.2f} ms, p99 {pct(done, 99):.2f} ms;')
            if args.backlog:
                rate = backlog(args.dsn, loop, args.backlog)
                x['rate'].append(rate)
                line += f' backlog {rate:.0f} items/s'
            print(line, flush=True)
    print()
    print(f'medians of {args.rounds} rounds; trickle: {args.items} items, 0-100 ms apart; '
          f'backlog: {args.backlog} items, one worker')
    print('| loop | pickup p50 | pickup p99 | done p50 | done p99 | backlog |')
    print('|---|---|---|---|---|---|')
    def m(values, fmt):
        return fmt.format(statistics.median(values)) if values else '-'
    for loop in loops:
        x = res[loop]
        print(f'| {loop} | {m(x["pickup50"], "{:.2f} ms")} | {m(x["pickup99"], "{:.2f} ms")} | '
              f'{m(x["done50"], "{:.2f} ms")} | {m(x["done99"], "{:.2f} ms")} | '
              f'{m(x["rate"], "{:.0f} items/s")} [{m(x["rate"] and [min(x["rate"])], "{:.0f}")}-'
              f'{m(x["rate"] and [max(x["rate"])], "{:.0f}")}] |')


if __name__ == '__main__':
    main()
