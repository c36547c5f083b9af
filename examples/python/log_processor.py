#!/usr/bin/env python3
"""Each log file exactly once, from at-least-once deliveries (psycopg 3).

    log_processor.py --queue NAME [--dsn DSN] --deliver FILE ...
    log_processor.py --queue NAME [--dsn DSN] [--until-empty]

The README's "each log file exactly once" example:

--deliver  what a message service's "file ready" notices turn into: each
           FILE is enqueued with the file name as the item's key
           (pgq.enqueue(queue, '{}', key => FILE)); a file delivered again
           (while its item is kept, see pgq.retention) adds nothing.  Creates
           the queue if needed.

otherwise  a worker: claims files (pgq.claim(queue, wait => '5 seconds'), a
           lease that commits at once), processes them (process() below:
           counts the lines of the file, or takes the length of its name if
           it does not exist here), then in ONE transaction records the
           result in processed_logs (file text PRIMARY KEY, lines int,
           created if missing) and calls pgq.complete(id, attempt => n); if
           complete returns false (the lease ran out and another worker has
           the file) the transaction rolls back and records nothing.  A
           file whose processing raises is reported with pgq.fail: retried
           later, dead-lettered after the queue's max_attempts.

Worker behaviour:
  - one line of output per file;
  - --until-empty: exits 0 once the queue has had items and a claim finds
    nothing while pgq.queue_stats shows none pending, scheduled or running;
  - SIGTERM or SIGINT (Ctrl-C): finishes the file at hand, then exits 0;
    a second signal quits at once;
  - when the connection fails (server restart, crash, failover), reconnects,
    waiting 0.5, 1, 2 ... 30 seconds between attempts, and finishes the file
    it held;
  - exits 1 on other errors, 2 on bad usage.

Connection: --dsn takes a libpq connection string or URI; without it, the
usual PGHOST, PGPORT, PGDATABASE, PGUSER ... apply.
"""

import argparse
import os
import select
import signal
import socket
import sys

import psycopg


NAME = f"{socket.gethostname()}-{os.getpid()}"


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


def first_line(e):
    return str(e).strip().split("\n")[0]


class Stop:
    """SIGTERM and SIGINT ask the worker to stop after the file at hand."""

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
                 "stopping after the file at hand (signal again to quit at once)\n"
                 .encode())

    def sleep(self, seconds):
        if not self.requested:
            select.select([self.rfd], [], [], seconds)
        try:
            os.read(self.rfd, 512)
        except BlockingIOError:
            pass


def process(file):
    """The work on one file: replace this with yours.  Returns its line
    count (the length of its name for a file that is not here)."""
    try:
        with open(file, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return len(file)


def deliver(args):
    with psycopg.connect(args.dsn, autocommit=True, application_name=NAME) as conn:
        conn.execute("SELECT pgq.create_queue(%s)", [args.queue])
        new = 0
        for file in args.deliver:
            # one statement per delivery, as a message service would send them;
            # a key that is taken returns the existing item's id
            with conn.transaction():
                before = conn.execute(
                    "SELECT count(*) FROM pgq.items i JOIN pgq.groups g USING (group_id)"
                    " WHERE g.group_name = %s AND i.key = %s",
                    [args.queue, file]).fetchone()[0]
                conn.execute("SELECT pgq.enqueue(%s, '{}'::jsonb, key => %s)",
                             [args.queue, file])
            new += before == 0
        log(f"delivered {len(args.deliver)} files, {new} new")
    return 0


class Worker:
    def __init__(self, args, stop):
        self.args = args
        self.stop = stop
        self.conn = None
        self.held = None        # (id, attempt, key, lines): kept across reconnects
        self.had_items = False
        self.recorded = self.lost = 0

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
                try:
                    self.conn.execute(
                        "CREATE TABLE IF NOT EXISTS processed_logs"
                        " (file text PRIMARY KEY, lines int)")
                except (psycopg.errors.UniqueViolation,
                        psycopg.errors.DuplicateTable,
                        psycopg.errors.DuplicateObject):
                    pass   # another worker created it at the same moment
                return self.loop()
            except psycopg.Error as e:
                if not self.conn.closed:
                    raise
                log(f"lost the connection: {first_line(e)}; reconnecting")
            finally:
                self.conn.close()
        if self.held:
            log(f"stopped without finishing {self.held[2]}: its lease runs out, "
                "then it is claimed again")
        return "stopped"

    def loop(self):
        while True:
            if self.held is None:
                if self.stop.requested:
                    return "stopped"
                try:
                    row = self.conn.execute(
                        "SELECT block_id, attempt, key"
                        "  FROM pgq.claim(%s, wait => '5 seconds')",
                        [self.args.queue]).fetchone()
                except psycopg.errors.UndefinedObject:
                    # no such queue (yet): look again soon
                    log(f"waiting for queue {self.args.queue} to be created")
                    self.stop.sleep(1)
                    continue
                if row is None:
                    if self.args.until_empty and self.empty():
                        return "empty"
                    continue
                self.held = [*row, None]
            self.finish()
            self.held = None

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

    def finish(self):
        item_id, attempt, file, lines = self.held
        if lines is None:
            try:
                lines = self.held[3] = process(file)
            except Exception as e:
                self.conn.execute("SELECT pgq.fail(%s, %s, attempt => %s)",
                                  [item_id, str(e), attempt])
                log(f"{file}: attempt {attempt} failed: {e}")
                return

        class NotOurs(Exception):
            pass

        try:
            with self.conn.transaction():
                self.conn.execute(
                    "INSERT INTO processed_logs (file, lines) VALUES (%s, %s)",
                    [file, lines])
                ok = self.conn.execute("SELECT pgq.complete(%s, attempt => %s)",
                                       [item_id, attempt]).fetchone()[0]
                if not ok:
                    raise NotOurs
        except NotOurs:
            # rolled back: another worker has the file now
            self.lost += 1
            log(f"{file}: no longer ours (lease of attempt {attempt} ran out); rolled back")
            return
        self.recorded += 1
        log(f"{file}: {lines} lines recorded (item {item_id}, attempt {attempt})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queue", required=True)
    p.add_argument("--dsn", default="")
    p.add_argument("--deliver", nargs="+", metavar="FILE",
                   help="enqueue these files (their names are the keys) and exit")
    p.add_argument("--until-empty", action="store_true",
                   help="exit once the queue has had items and has none left")
    args = p.parse_args()
    try:
        if args.deliver:
            return deliver(args)
        stop = Stop()
        w = Worker(args, stop)
        how = w.run()
        log(("queue %s is empty" % args.queue if how == "empty" else "stopped")
            + f"; this worker recorded {w.recorded} files")
        return 0
    except psycopg.Error as e:
        log(f"error: {first_line(e)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
