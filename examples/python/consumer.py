#!/usr/bin/env python3
"""A pgq consumer for query groups, in Python with psycopg 3.

    consumer.py --group NAME --results TABLE [--query SQL] [--mode MODE] ...

It claims blocks of a pgq group until the group is drained, works on each
block's ids in Python (process() below: put your work there) and stores the
results in TABLE, exactly once, with the protocol of the group's claim mode:

transaction  BEGIN; claim; work; store the results; COMMIT.  The block is
             consumed by the COMMIT that stores its results; any failure
             before it rolls back and gives the block back.

lease        the claim commits at once (no transaction stays open during the
             work); long work extends the lease with pgq.extend as it goes;
             then one transaction stores the results and calls
             pgq.complete(block, attempt => n), and is rolled back if
             complete returns false (the lease ran out and another consumer
             took the block: its results count, ours do not).  Work that
             raises gives the block back with pgq.fail: it is retried, and
             dead-lettered after the group's max_attempts.

advisory     the worker registers (pgq.register_worker) and claims with its
             worker id: the claim is an advisory lock and writes nothing.
             The results commit in one transaction with
             pgq.complete(block, worker_id => w), after pgq.check_worker(w)
             said, in that transaction, that the worker still holds its
             locks.  A worker that lost them (a reconnect after a restart,
             crash or failover, or a pooler that moved it) registers again
             and takes its block back with pgq.relock, or learns that
             another worker has it.  Work that raises: pgq.fail, as above.

TABLE needs the columns (id bigint, block_id bigint); process() returns the
ids to store.  Other columns can have defaults, e.g.
    worker text DEFAULT current_setting('application_name')
records which consumer (--name) stored each row.

Behaviour:
  - one line of output per block, with the group's progress;
  - exits 0 when the group is drained (a claim returned nothing and
    pgq.group_stats says 'drained');
  - SIGTERM or SIGINT (Ctrl-C): finishes the block at hand, then exits 0;
    a second signal quits at once (the block goes back, as after a crash);
  - when the connection fails (server restart, crash, failover), reconnects,
    waiting 0.5, 1, 2 ... 30 seconds between attempts, and carries on with
    the block it held (lease, advisory) or claims again (transaction);
  - exits 1 on other errors (a missing table, a group in another mode ...),
    2 on bad usage.

Connection: --dsn takes a libpq connection string or URI; without it, the
usual PGHOST, PGPORT, PGDATABASE, PGUSER ... apply.
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


NAME = f"{socket.gethostname()}-{os.getpid()}"   # --name


def log(msg):
    print(f"{NAME}: {msg}", flush=True)


class Stop:
    """SIGTERM and SIGINT ask the consumer to stop after the block at hand."""

    requested = False

    def __init__(self):
        # the signal module writes a byte here on every signal: a sleep that
        # selects on it wakes up at once
        self.rfd, wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)

    def handler(self, signum, frame):
        if self.requested:
            # second signal: quit now (psycopg cancels a running statement
            # on KeyboardInterrupt)
            raise KeyboardInterrupt
        self.requested = True
        # print() is not safe in a signal handler (it may interrupt another
        # print); os.write is
        os.write(sys.stdout.fileno(), f"{NAME}: {signal.Signals(signum).name}: "
                 "stopping after the block at hand (signal again to quit at once)\n"
                 .encode())

    def sleep(self, seconds):
        """Sleep, waking up early for a stop request."""
        if not self.requested:
            select.select([self.rfd], [], [], seconds)
        try:
            os.read(self.rfd, 512)
        except BlockingIOError:
            pass


STOP = None   # the Stop instance, made in main()


class BlockLost(Exception):
    """The block is not ours any more: the lease ran out and another consumer
    claimed it, or another worker took it while we had lost our locks."""


class Fatal(Exception):
    """An error that stops the consumer (exit status 1)."""


class Block:
    def __init__(self, block_id, attempt, ids):
        self.block_id = block_id
        self.attempt = attempt
        self.ids = ids
        self.results = None   # what process() returned, once it has run


def process(block, heartbeat, args):
    """The work on one block: replace this with yours.

    Returns the ids to store in the results table.  Work that takes long
    calls heartbeat() every now and then: in lease mode it extends the lease
    when a third of it has gone by, in advisory mode it checks every few
    seconds that the worker still holds its locks; it raises BlockLost when
    the block is no longer ours, which abandons the work.  An exception
    raised here is a failed attempt: pgq.fail in lease and advisory mode.
    """
    if args.simulate_failures and block.block_id % args.simulate_failures == 0 \
            and block.attempt == 1:
        raise RuntimeError(f"simulated failure of the first attempt at block {block.block_id}")
    deadline = time.monotonic() + args.work_ms / 1000
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))   # the "work"
        heartbeat()
    return block.ids


class Consumer:
    def __init__(self, args):
        self.args = args
        self.table = sql.Identifier(*args.results.split("."))
        self.conn = None
        self.mode = None          # the group's claim mode
        self.lease = None         # the group's lease (lease mode)
        self.worker_id = None     # advisory mode: our registration
        self.held = None          # lease and advisory: the block we hold,
                                  # kept across reconnects
        self.group_checked = False
        self.blocks = self.ids = 0
        self.last_beat = 0.0

    # -- connection ------------------------------------------------------

    def run(self):
        """Consume until drained or stopped, reconnecting as needed.
        Returns 'drained' or 'stopped'."""
        delay = 0.5
        while not STOP.requested:
            try:
                self.conn = psycopg.connect(self.args.dsn, autocommit=True,
                                            application_name=NAME)
            except psycopg.OperationalError as e:
                log(f"cannot connect: {first_line(e)}; trying again in {delay:g}s")
                STOP.sleep(delay)
                delay = min(delay * 2, 30)
                continue
            try:
                self.setup()
                delay = 0.5
                return self.consume()
            except psycopg.Error as e:
                if not self.conn.closed:
                    self.give_back()
                    raise
                # the server went away: whatever transaction was open rolled
                # back; a lease or an advisory claim may still be ours
                log(f"lost the connection: {first_line(e)}; reconnecting")
            except Fatal:
                self.give_back()
                raise
            finally:
                self.conn.close()
        if self.held:
            log(f"stopped without finishing block {self.held.block_id}: "
                + ("its lease runs out, then it is claimed again"
                   if self.mode == "lease" else "it went back to the group"))
        return "stopped"

    def give_back(self):
        """Before exiting on an error: release the block we hold, if any,
        rather than leave it leased until the lease runs out."""
        if self.held is None or self.mode == "transaction":
            return
        try:
            proof = self.held.attempt if self.mode == "lease" else self.worker_id
            self.conn.execute(
                sql.SQL("SELECT pgq.release(%s, {} => %s)").format(
                    sql.Identifier("attempt" if self.mode == "lease" else "worker_id")),
                [self.held.block_id, proof])
            log(f"released block {self.held.block_id}")
        except psycopg.Error:
            pass

    def setup(self):
        """On every (re)connection: the group, then (advisory mode) the
        worker registration and the blocks we held."""
        if not self.group_checked:
            self.create_or_join()
            self.group_checked = True
        if self.mode == "advisory":
            self.register()
        elif self.mode == "lease" and self.held:
            # a committed lease outlives the connection: finish the block;
            # pgq.complete says whether it is still ours
            log(f"still holding block {self.held.block_id} (attempt "
                f"{self.held.attempt}): finishing it")

    def create_or_join(self):
        a = self.args
        if a.query is not None:
            # every consumer may run this: the first creates the group, the
            # others join it (same query and settings, or an error)
            named = {"block_size": a.block_size, "mode": a.mode,
                     "lease": a.lease, "max_attempts": a.max_attempts}
            named = {k: v for k, v in named.items() if v is not None}
            query = sql.SQL("SELECT pgq.create_group(%s, %s{})").format(
                sql.SQL("").join(sql.SQL(", {} => %s").format(sql.Identifier(k))
                                 for k in named))
            created = self.conn.execute(
                query, [a.group, a.query, *named.values()]).fetchone()[0]
            log(f"{'created' if created else 'joined'} group {a.group}")
        row = self.conn.execute(
            "SELECT mode, lease FROM pgq.group_stats WHERE group_name = %s",
            [a.group]).fetchone()
        if row is None:
            raise Fatal(f"group {a.group} does not exist (give --query to create it)")
        self.mode, self.lease = row
        if a.mode is not None and a.mode != self.mode:
            raise Fatal(f"group {a.group} is in {self.mode} mode, not {a.mode}")
        log(f"consuming group {a.group} ({self.mode} mode)")

    def register(self):
        """Advisory mode: register this session as a worker; if we held a
        block (we lost our locks with the old session), relock it."""
        old = self.worker_id
        self.worker_id = self.conn.execute(
            "SELECT pgq.register_worker(%s)", [NAME]).fetchone()[0]
        if old is not None:
            log(f"registered again: worker {old} is now worker {self.worker_id}")
        if self.held:
            got = self.conn.execute("SELECT pgq.relock(%s::bigint[], %s)",
                                    [[self.held.block_id], self.worker_id]).fetchone()[0]
            if self.held.block_id in got:
                log(f"took block {self.held.block_id} back")
            else:
                log(f"block {self.held.block_id} went to another worker")
                self.held = None

    # -- the loop ----------------------------------------------------------

    def consume(self):
        while True:
            if self.mode == "transaction":
                if STOP.requested:
                    return "stopped"
                block = self.transaction_step()
            else:
                if self.held is None:
                    if STOP.requested:
                        return "stopped"
                    self.held = self.claim()
                block = self.held
                if block is not None:
                    self.finish(block)
                    self.held = None
            if block is None and self.drained():
                return "drained"

    def claim(self):
        """One claim (waiting up to --wait in the server); a Block or None."""
        try:
            row = self.conn.execute(
                "SELECT block_id, attempt, ids"
                "  FROM pgq.claim(%s, wait => %s::interval, worker_id => %s)",
                [self.args.group, self.args.wait, self.worker_id]).fetchone()
        except psycopg.errors.ObjectNotInPrerequisiteState as e:
            # advisory: our registration's placeholder lock is gone
            # (pg_advisory_unlock_all, DISCARD ALL, another backend)
            log(f"{first_line(e)}: registering again")
            self.register()
            return None
        except psycopg.errors.UndefinedObject as e:
            raise Fatal(first_line(e))
        return Block(*row) if row else None

    def transaction_step(self):
        """Transaction mode: claim, work and store in one transaction."""
        block = None
        try:
            with self.conn.transaction():
                row = self.conn.execute(
                    "SELECT block_id, attempt, ids"
                    "  FROM pgq.claim(%s, wait => %s::interval)",
                    [self.args.group, self.args.wait]).fetchone()
                if row is None:
                    return None
                block = Block(*row)
                block.results = process(block, lambda: None, self.args)
                self.store(block)
        except psycopg.Error:
            raise
        except Exception as e:
            # attempts cannot be counted in transaction mode (the rollback
            # undoes everything): give the block back and stop, rather than
            # fail on it again and again
            raise Fatal(f"block {block.block_id}: {e}; rolled back, the block "
                        "went back to the group")
        self.done(block)
        return block

    def finish(self, block):
        """Lease and advisory mode: work on a claimed block, then store its
        results and complete it in one transaction."""
        if block.results is None:
            self.last_beat = time.monotonic()
            try:
                block.results = process(block, lambda: self.heartbeat(block), self.args)
            except BlockLost as e:
                log(str(e))
                return
            except psycopg.Error:
                raise
            except Exception as e:
                self.fail(block, e)
                return
        while True:
            outcome = self.store_and_complete(block)
            if outcome == "done":
                self.done(block)
                return
            if outcome == "lost":
                log(f"block {block.block_id}: no longer ours, results rolled back"
                    + (f" (lease of attempt {block.attempt} ran out)"
                       if self.mode == "lease" else ""))
                return
            # advisory, locks lost: register again and relock the block
            log(f"worker {self.worker_id} lost its locks")
            self.register()
            if self.held is None:
                return

    def store_and_complete(self, block):
        """'done', 'lost' (complete said false: rolled back), or 'relock'
        (advisory: check_worker said false: rolled back)."""
        outcome = "done"
        with self.conn.transaction():
            self.store(block)
            if self.mode == "lease":
                ok = self.conn.execute(
                    "SELECT pgq.complete(%s, attempt => %s)",
                    [block.block_id, block.attempt]).fetchone()[0]
            else:
                if not self.conn.execute("SELECT pgq.check_worker(%s)",
                                         [self.worker_id]).fetchone()[0]:
                    outcome = "relock"
                    raise psycopg.Rollback
                ok = self.conn.execute(
                    "SELECT pgq.complete(%s, worker_id => %s)",
                    [block.block_id, self.worker_id]).fetchone()[0]
            if not ok:
                outcome = "lost"
                raise psycopg.Rollback   # leaves the with block, rolled back
        return outcome

    def heartbeat(self, block):
        """Called by long work: extend the lease (lease mode) or check the
        registration (advisory mode) now and then."""
        now = time.monotonic()
        if self.mode == "lease":
            if now - self.last_beat < self.lease.total_seconds() / 3:
                return
            ok = self.conn.execute(
                "SELECT pgq.extend(%s, %s, attempt => %s)",
                [block.block_id, self.lease, block.attempt]).fetchone()[0]
            if not ok:
                raise BlockLost(f"block {block.block_id}: lease lost, abandoning the work")
            log(f"block {block.block_id}: extended the lease by {self.lease}")
        else:
            if now - self.last_beat < 5:
                return
            if not self.conn.execute("SELECT pgq.check_worker(%s)",
                                     [self.worker_id]).fetchone()[0]:
                log(f"worker {self.worker_id} lost its locks")
                self.register()
                if self.held is None:
                    raise BlockLost(f"block {block.block_id}: another worker has it, "
                                    "abandoning the work")
        self.last_beat = now

    def fail(self, block, error):
        """Record a failed attempt; the block is retried after --retry-after,
        or dead-lettered once the group's max_attempts are used up."""
        proof = "attempt" if self.mode == "lease" else "worker_id"
        ok = self.conn.execute(
            sql.SQL("SELECT pgq.fail(%s, %s, retry_after => %s::interval, {} => %s)")
            .format(sql.Identifier(proof)),
            [block.block_id, str(error), self.args.retry_after,
             block.attempt if self.mode == "lease" else self.worker_id]).fetchone()[0]
        log(f"block {block.block_id}: attempt {block.attempt} failed: {error}"
            + ("" if ok else " (and the block was no longer ours)"))

    def store(self, block):
        self.conn.execute(
            sql.SQL("INSERT INTO {} (id, block_id) SELECT unnest(%s::bigint[]), %s")
            .format(self.table),
            [block.results, block.block_id])

    # -- progress ----------------------------------------------------------

    def stats(self):
        return self.conn.execute(
            "SELECT state, done, total_blocks, claimed, pending, failed,"
            "       percent_done"
            "  FROM pgq.group_stats WHERE group_name = %s",
            [self.args.group]).fetchone()

    def done(self, block):
        self.blocks += 1
        self.ids += len(block.ids)
        st = self.stats()
        if st:
            state, done, total, claimed, pending, failed, pct = st
            log(f"block {block.block_id}: {len(block.ids)} ids stored"
                f" (attempt {block.attempt}); group: {done}/{total} blocks done"
                f" ({pct}%), {claimed} claimed, {pending} pending"
                + (f", {failed} failed" if failed else ""))

    def drained(self):
        st = self.stats()
        if st is None:
            raise Fatal(f"group {self.args.group} no longer exists")
        if st[0] != "drained":
            # nothing claimable right now, but blocks held by others may
            # come back: claim (and wait) again
            return False
        if st[5]:
            log(f"{st[5]} blocks of the group were dead-lettered: see "
                "pgq.blocks.last_error")
        return True


def first_line(e):
    return str(e).strip().split("\n")[0]


def main():
    global NAME, STOP
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", required=True, help="the group to consume")
    p.add_argument("--results", required=True, metavar="TABLE",
                   help="table (id bigint, block_id bigint) for the results")
    p.add_argument("--dsn", default="", help="libpq connection string or URI")
    p.add_argument("--mode", choices=["transaction", "lease", "advisory"],
                   help="the group's claim mode: with --query, the mode it is created "
                        "in; otherwise checked against the group's (default: the group's)")
    p.add_argument("--query", help="create the group from this query if it does not exist")
    p.add_argument("--block-size", type=int, help="with --query (default 5000)")
    p.add_argument("--lease", help="with --query: the lease, e.g. '5 minutes'")
    p.add_argument("--max-attempts", type=int, help="with --query")
    p.add_argument("--wait", default="5 seconds",
                   help="how long one claim waits in the server (default %(default)s); "
                        "also how long a stop may take while nothing is claimable")
    p.add_argument("--retry-after", default="10 seconds",
                   help="after a failed attempt, when the block may be claimed again "
                        "(default %(default)s)")
    p.add_argument("--name", help="worker name, in the output and as application_name "
                                  "(default: host name and process id)")
    p.add_argument("--work-ms", type=int, default=0,
                   help="simulated work per block, in milliseconds")
    p.add_argument("--simulate-failures", type=int, metavar="N", default=0,
                   help="make the first attempt at every block whose id is a multiple "
                        "of N fail (lease and advisory mode: to see pgq.fail at work)")
    args = p.parse_args()
    if args.name:
        NAME = args.name
    STOP = Stop()

    consumer = Consumer(args)
    try:
        outcome = consumer.run()
    except Fatal as e:
        log(f"error: {e}")
        return 1
    except psycopg.Error as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        log("quit")
        return 130
    if outcome == "drained":
        log(f"group {args.group} is drained; this worker stored "
            f"{consumer.blocks} blocks ({consumer.ids} ids)")
    else:
        log(f"stopped; this worker stored {consumer.blocks} blocks ({consumer.ids} ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
