#!/usr/bin/env python3
"""A pgq consumer that waits for work with LISTEN, in Python with psycopg 3.

    listen_consumer.py --group NAME --results TABLE [--dsn DSN] ...

Start it before the group exists: it looks for the group every --poll
seconds until it exists, then LISTENs on the group's channel
(pgq.channel(group), which only roles that may use the group can learn) and
claims blocks (without waiting in the server) until none is claimable, then
sleeps until a notification comes, and exits 0 once the group is drained.
consumer.py waits with waiting claims instead (pgq.claim(..., wait =>
...)), which need no LISTEN connection and work through a transaction-pooling
PgBouncer; LISTEN needs a session of its own.

pgq sends NOTIFY on the group's channel, with the group's name as payload,
only when pgq.notify is on in the session that commits the change (set it in
postgresql.conf, with ALTER SYSTEM or ALTER DATABASE ... SET pgq.notify =
on), and only for changes that make blocks claimable: creating a group, and
in lease and advisory mode a pgq.release or pgq.fail.  Nothing announces a
transaction-mode consumer that rolled back, a lease that ran out, a retry
that came due or a completion, so the worker also looks again every
--recheck seconds while the group is not drained.  And since pgq says
nothing when the last block is completed, the worker that sees the group
drained sends pg_notify(channel, group) itself, so that the others, asleep,
wake up and exit too.

Groups in transaction mode (claim, store, COMMIT in one transaction) and in
lease mode (the claim commits; the results commit with pgq.complete(attempt
=>), rolled back if complete says the lease was lost; an error in the work
calls pgq.fail, with a retry at once) are handled.  For advisory mode,
lease extensions and the rest, see consumer.py.

The results table needs the columns (id bigint, block_id bigint).  Stops
cleanly on SIGTERM or SIGINT (at once when asleep, else after the block at
hand); reconnects when the server goes away; exit status 0 when drained or
stopped, 1 on errors, 2 on bad usage.
"""

import argparse
import os
import select
import signal
import socket
import sys
import time

import psycopg
from psycopg import sql

NAME = f"{socket.gethostname()}-{os.getpid()}"
stop_requested = False
notified = set()        # group names the notifications named, not yet seen
channel = None          # the group's channel, once the group exists


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


def on_signal(signum, frame):
    global stop_requested
    if stop_requested:
        raise KeyboardInterrupt
    stop_requested = True
    os.write(sys.stdout.fileno(), f"{NAME}: {signal.Signals(signum).name}: stopping\n".encode())


def on_notify(n):
    # called by psycopg whenever a notification arrives, during any statement
    # or in wait() below
    if n.channel == channel:
        notified.add(n.payload)


def wait(conn, wakeup_fd, group, seconds):
    """Sleep until a notification names the group, a signal arrives, or the
    time is up."""
    deadline = time.monotonic() + seconds
    while group not in notified and not stop_requested:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready, _, _ = select.select([conn.fileno(), wakeup_fd], [], [], left)
        if conn.fileno() in ready:
            # the server sent something: a statement reads it, and hands the
            # notifications to on_notify (or fails if the server went away)
            conn.execute("SELECT 1")
        if wakeup_fd in ready:
            try:
                os.read(wakeup_fd, 512)
            except BlockingIOError:
                pass


def consume_one(conn, args, mode, table):
    """Claim one block and process it; False if nothing was claimable."""
    if mode == "transaction":
        with conn.transaction():
            row = conn.execute("SELECT block_id, ids FROM pgq.claim(%s)",
                               [args.group]).fetchone()
            if row is None:
                return False
            block_id, ids = row
            store(conn, table, block_id, process(ids))
    else:   # lease
        row = conn.execute("SELECT block_id, attempt, ids FROM pgq.claim(%s)",
                           [args.group]).fetchone()
        if row is None:
            return False
        block_id, attempt, ids = row
        try:
            results = process(ids)
        except Exception as e:
            # a failed attempt: the block is claimable again at once (and,
            # with pgq.notify on, the other workers hear of it)
            conn.execute("SELECT pgq.fail(%s, %s, attempt => %s)",
                         [block_id, str(e), attempt])
            log(f"block {block_id}: attempt {attempt} failed: {e}")
            return True
        lost = False
        with conn.transaction():
            store(conn, table, block_id, results)
            if not conn.execute("SELECT pgq.complete(%s, attempt => %s)",
                                [block_id, attempt]).fetchone()[0]:
                lost = True
                raise psycopg.Rollback
        if lost:
            log(f"block {block_id}: the lease ran out and another worker took it; "
                "rolled back")
            return True
    log(f"block {block_id}: {len(ids)} ids stored")
    return True


def process(ids):
    """The work on one block's ids: replace this with yours."""
    return ids


def store(conn, table, block_id, results):
    conn.execute(sql.SQL("INSERT INTO {} (id, block_id) SELECT unnest(%s::bigint[]), %s")
                 .format(table), [results, block_id])


def listen(conn, group):
    """LISTEN on the group's channel; False if the group does not exist."""
    global channel
    try:
        found = conn.execute("SELECT pgq.channel(%s)", [group]).fetchone()[0]
    except psycopg.errors.UndefinedObject:
        found = None
    if found != channel:
        if channel is not None:
            conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
        channel = found
        if channel is not None:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return channel is not None


def run(conn, args, wakeup_fd):
    """Consume until drained or stopped: 'drained' or 'stopped'."""
    global channel
    table = sql.Identifier(*args.results.split("."))
    conn.add_notify_handler(on_notify)
    channel = None              # a new session listens on nothing yet
    # our own pgq.fail calls (lease mode) then notify the other workers
    conn.execute("SET pgq.notify = on")
    said_waiting = False
    while not stop_requested:
        # forget what was announced so far: this round looks at everything
        notified.discard(args.group)
        row = None
        if listen(conn, args.group):
            row = conn.execute("SELECT mode FROM pgq.group_stats WHERE group_name = %s",
                               [args.group]).fetchone()
        if row is None:
            if not said_waiting:
                log(f"waiting for group {args.group} to be created")
                said_waiting = True
            # no channel to listen on yet: look again in --poll seconds
            wait(conn, wakeup_fd, args.group, min(args.poll, args.recheck))
            continue
        elif row[0] not in ("transaction", "lease"):
            log(f"group {args.group} is in {row[0]} mode: use consumer.py")
            return "error"
        else:
            said_waiting = False
            try:
                while not stop_requested and consume_one(conn, args, row[0], table):
                    pass
            except psycopg.errors.UndefinedObject:
                continue   # the group was dropped meanwhile: look again
            if stop_requested:
                break
            state = conn.execute("SELECT state FROM pgq.group_stats WHERE group_name = %s",
                                 [args.group]).fetchone()
            if state is not None and state[0] == "drained":
                # nothing tells the others that the last block is done: we do
                conn.execute("SELECT pg_notify(%s, %s)", [channel, args.group])
                return "drained"
            log(f"nothing claimable in group {args.group}: waiting for a notification")
        # sleep until a notification names the group (one that came in while
        # we were looking is in `notified` already, and ends the wait at once)
        wait(conn, wakeup_fd, args.group, args.recheck)
        if args.group in notified:
            log(f"notified: group {args.group}")
    return "stopped"


def main():
    global NAME
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", required=True)
    p.add_argument("--results", required=True, metavar="TABLE",
                   help="table (id bigint, block_id bigint) for the results")
    p.add_argument("--dsn", default="", help="libpq connection string or URI")
    p.add_argument("--recheck", type=float, default=10,
                   help="seconds between looks at the group without a notification "
                        "(default %(default)s)")
    p.add_argument("--poll", type=float, default=1,
                   help="seconds between looks for the group while it does not exist "
                        "(default %(default)s)")
    p.add_argument("--name", help="worker name (default: host name and process id)")
    args = p.parse_args()
    if args.name:
        NAME = args.name

    rfd, wfd = os.pipe()        # a signal writes a byte here: wakes select()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    delay = 0.5
    try:
        while not stop_requested:
            try:
                conn = psycopg.connect(args.dsn, autocommit=True, application_name=NAME)
            except psycopg.OperationalError as e:
                log(f"cannot connect: {str(e).strip().splitlines()[0]}; "
                    f"trying again in {delay:g}s")
                select.select([rfd], [], [], delay)
                delay = min(delay * 2, 30)
                continue
            try:
                delay = 0.5
                outcome = run(conn, args, rfd)
                if outcome == "drained":
                    log(f"group {args.group} is drained")
                elif outcome == "stopped":
                    log("stopped")
                return 0 if outcome != "error" else 1
            except psycopg.Error as e:
                if not conn.closed:
                    log(f"error: {e}")
                    return 1
                # notifications sent while we were away are lost: the next
                # round looks at the group anyway
                log(f"lost the connection: {str(e).strip().splitlines()[0]}; reconnecting")
            finally:
                conn.close()
    except KeyboardInterrupt:
        log("quit")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
