#!/usr/bin/env python3
"""Tasks from a producer, results back: a pgq queue in Python (psycopg 3).

    tasks.py worker  --queue NAME [--dsn DSN] [--until-empty] [--retry-after INTERVAL]
    tasks.py produce --queue NAME --count N [--dsn DSN] [--poison] [--run RUN]

The README's "tasks from a scheduler, results back", as two programs:

produce  creates the queue if needed (lease mode, max_attempts 2), enqueues
         N tasks {"a": i, "b": 2*i} in one statement (pgq.enqueue_many, keys
         RUN/task-1 .. RUN/task-N; with --poison, one of them has "fail":
         true), then waits inside the server for each result (pgq.result(id,
         wait => ...)) and prints "done D, dead X".  Exits 0 when every task
         but the poisoned one is done with the right sum, 1 otherwise.

Why the keys, and why RUN in them: a key makes enqueueing idempotent.  The
queue holds one item per key, and enqueueing a key it holds adds nothing and
returns that item's id.  A producer that dies, or loses its connection,
after its enqueue committed but before it read the ids back cannot tell
whether its tasks went in; run again with the same --run, it enqueues
nothing twice and waits for the same tasks (and gets the results of those
already done).  The same property makes a key that is used again name the
old task: a run that reused another run's keys would enqueue nothing and
"wait" for the other run's results.  So keys say which run a task belongs
to: --run defaults to a new id (date, time and random letters) at every
start, and is printed; pass it only to take up a run again.  Keys stay
taken until retention removes the finished items (pgq.retention, 7 days by
default).

worker   claims tasks (pgq.claim(queue, wait => '5 seconds'), a lease that
         commits at once), runs them (run_task() below: put your work there)
         and hands the result back with pgq.complete(id, result => ...,
         attempt => n), the commit that wakes the producer's pgq.result; a
         task that raises is reported with pgq.fail(id, error, attempt => n):
         retried, dead-lettered after the queue's max_attempts.

Worker behaviour:
  - one line of output per task;
  - waits for the queue to be created, then for tasks, inside the server;
  - --until-empty: exits 0 once the queue has had tasks and a claim finds
    nothing while pgq.queue_stats shows none pending, scheduled (a retry
    to come) or running (held by another worker);
  - SIGTERM or SIGINT (Ctrl-C): finishes the task at hand, then exits 0;
    a second signal quits at once (the lease runs out, the task is retried);
  - when the connection fails (server restart, crash, failover), reconnects,
    waiting 0.5, 1, 2 ... 30 seconds between attempts, and finishes the task
    it held (its lease outlives the connection);
  - exits 1 on other errors, 2 on bad usage.

Connection: --dsn takes a libpq connection string or URI; without it, the
usual PGHOST, PGPORT, PGDATABASE, PGUSER ... apply.
"""

import argparse
import os
import secrets
import select
import signal
import socket
import sys
import time

import psycopg
from psycopg.types.json import Jsonb


NAME = f"{socket.gethostname()}-{os.getpid()}"


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


def first_line(e):
    return str(e).strip().split("\n")[0]


class Stop:
    """SIGTERM and SIGINT ask the worker to stop after the task at hand."""

    requested = False

    def __init__(self):
        self.rfd, wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)

    def handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        os.write(sys.stdout.fileno(), f"{NAME}: {signal.Signals(signum).name}: "
                 "stopping after the task at hand (signal again to quit at once)\n"
                 .encode())

    def sleep(self, seconds):
        """Sleep, waking up early for a stop request."""
        if not self.requested:
            select.select([self.rfd], [], [], seconds)
        try:
            os.read(self.rfd, 512)
        except BlockingIOError:
            pass


def run_task(payload, data):
    """The work on one task: replace this with yours.  Returns the result
    (stored as jsonb); an exception is a failed attempt."""
    if payload.get("fail"):
        raise RuntimeError(f"task {payload} asked to fail")
    return {"sum": payload["a"] + payload["b"]}


# -- worker -------------------------------------------------------------------

class Worker:
    def __init__(self, args, stop):
        self.args = args
        self.stop = stop
        self.conn = None
        self.held = None        # (id, attempt, payload, data): kept across reconnects
        self.had_items = False  # --until-empty: the queue has had tasks
        self.done = self.failed = 0
        self.said = None        # the last "waiting for ..." line printed

    def run(self):
        delay = 0.5
        while not self.stop.requested:
            try:
                self.conn = psycopg.connect(self.args.dsn, autocommit=True,
                                            application_name=NAME)
            except psycopg.OperationalError as e:
                log(f"cannot connect: {first_line(e)}; trying again in {delay:g}s")
                self.stop.sleep(delay)
                delay = min(delay * 2, 30)
                continue
            delay = 0.5
            try:
                return self.loop()
            except psycopg.Error as e:
                if not self.conn.closed:
                    raise
                log(f"lost the connection: {first_line(e)}; reconnecting")
            finally:
                self.conn.close()
        if self.held:
            log(f"stopped without finishing task {self.held[0]}: its lease runs "
                "out, then it is claimed again")
        return "stopped"

    def loop(self):
        if self.held:
            log(f"still holding task {self.held[0]} (attempt {self.held[1]}): finishing it")
        while True:
            if self.held is None:
                if self.stop.requested:
                    return "stopped"
                self.held = self.claim()
                if self.held is None:
                    if self.args.until_empty and self.empty():
                        return "empty"
                    continue
            self.finish(*self.held)
            self.held = None

    def claim(self):
        try:
            row = self.conn.execute(
                "SELECT block_id, attempt, payload, data"
                "  FROM pgq.claim(%s, wait => '5 seconds')",
                [self.args.queue]).fetchone()
        except psycopg.errors.UndefinedObject:
            # the queue does not exist (yet): look again soon
            if self.said != "no queue":
                log(f"waiting for queue {self.args.queue} to be created")
                self.said = "no queue"
            self.stop.sleep(0.5)
            return None
        if row is None and self.said != "idle":
            log(f"waiting for tasks in queue {self.args.queue}")
            self.said = "idle"
        elif row is not None:
            self.said = None
        return row

    def empty(self):
        row = self.conn.execute(
            "SELECT pending, scheduled, running, pending + scheduled + running"
            "       + done + dead FROM pgq.queue_stats WHERE queue_name = %s",
            [self.args.queue]).fetchone()
        if row is None:
            return False
        pending, scheduled, running, total = row
        self.had_items = self.had_items or total > 0
        return self.had_items and pending == 0 and scheduled == 0 and running == 0

    def finish(self, item_id, attempt, payload, data):
        try:
            result = run_task(payload or {}, data)
        except Exception as e:
            kw = ""
            params = [item_id, str(e), attempt]
            if self.args.retry_after is not None:
                kw = ", retry_after => %s::interval"
                params.append(self.args.retry_after)
            self.conn.execute(
                f"SELECT pgq.fail(%s, %s, attempt => %s{kw})", params)
            self.failed += 1
            log(f"task {item_id}: attempt {attempt} failed: {e}")
            return
        ok = self.conn.execute(
            "SELECT pgq.complete(%s, result => %s::jsonb, attempt => %s)",
            [item_id, Jsonb(result), attempt]).fetchone()[0]
        if ok:
            self.done += 1
            log(f"task {item_id}: done (attempt {attempt}): {result}")
        else:
            log(f"task {item_id}: no longer ours (lease of attempt {attempt} ran out)")


def worker(args):
    stop = Stop()
    w = Worker(args, stop)
    how = w.run()
    if how == "empty":
        log(f"queue {args.queue} is empty; this worker completed {w.done} "
            f"tasks, {w.failed} attempts failed")
    else:
        log(f"stopped; this worker completed {w.done} tasks, {w.failed} attempts failed")
    return 0


# -- producer -------------------------------------------------------------------

def new_run_id():
    """A run id that no other run has: the time and random letters."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(4)


def produce(args):
    n = args.count
    run = args.run or new_run_id()
    poison = (n + 1) // 2 if args.poison else None
    payloads = []
    for i in range(1, n + 1):
        p = {"a": i, "b": 2 * i}
        if i == poison:
            p["fail"] = True
        payloads.append(Jsonb(p))
    # the run's own keys: see "Why the keys" at the top
    keys = [f"{run}/task-{i}" for i in range(1, n + 1)]
    with psycopg.connect(args.dsn, autocommit=True, application_name=NAME) as conn:
        created = conn.execute("SELECT pgq.create_queue(%s, max_attempts => 2)",
                               [args.queue]).fetchone()[0]
        log(f"{'created' if created else 'found'} queue {args.queue}")
        # autocommit: the enqueue commits before the waits below, as it must
        # (no worker sees a task before that)
        ids = conn.execute("SELECT pgq.enqueue_many(%s, %s::jsonb[], %s::text[])",
                           [args.queue, payloads, keys]).fetchone()[0]
        log(f"run {run}: enqueued tasks {keys[0]} .. {keys[-1]}; waiting for "
            f"their results (--run {run} takes this run up again)")
        done = dead = wrong = 0
        for i, item_id in enumerate(ids, 1):
            state, result, last_error = conn.execute(
                "SELECT state, result, last_error FROM pgq.result(%s, wait => '1 hour')",
                [item_id]).fetchone()
            if state == "done":
                done += 1
                if i == poison or result != {"sum": 3 * i}:
                    wrong += 1
                    log(f"{run}/task-{i}: unexpected result {result}")
            elif state == "dead":
                dead += 1
                log(f"{run}/task-{i}: dead: {last_error}")
                if i != poison:
                    wrong += 1
            else:
                wrong += 1
                log(f"{run}/task-{i}: still {state} after an hour")
    print(f"done {done}, dead {dead}", flush=True)
    return 0 if wrong == 0 and done == n - (1 if poison else 0) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="claim and run tasks")
    w.add_argument("--queue", required=True)
    w.add_argument("--dsn", default="")
    w.add_argument("--until-empty", action="store_true",
                   help="exit once the queue has had tasks and has none left")
    w.add_argument("--retry-after", default=None,
                   help="retry a failed task after this interval "
                        "(default: the queue's backoff)")
    pr = sub.add_parser("produce", help="enqueue tasks and wait for their results")
    pr.add_argument("--queue", required=True)
    pr.add_argument("--dsn", default="")
    pr.add_argument("--count", type=int, required=True)
    pr.add_argument("--poison", action="store_true",
                    help="make one task fail on every attempt")
    pr.add_argument("--run", default=None,
                    help="the run's id, the prefix of its keys: by default a "
                         "new one; give an earlier run's to take it up again")
    args = p.parse_args()
    try:
        return worker(args) if args.cmd == "worker" else produce(args)
    except psycopg.Error as e:
        log(f"error: {first_line(e)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
