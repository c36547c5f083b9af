// One measurement of one queue system, for bench/run's peers cases.
//
//   node measure.mjs CASE SYSTEM
//
// CASE:   enqueue_batch | drain_batch | drain_single | latency | held
// SYSTEM: pgq | pgmq | gw (graphile-worker) | boss (pg-boss); for latency also
//         pgq-wc, pgq's loop of claim(wait =>, complete =>) in one statement
//
// Prints one JSON line.  Every system runs in this one Node process through
// node-postgres (the driver graphile-worker and pg-boss use), with the same
// ~100-byte jsonb payload, the same number of clients, and the server's
// durable commits; each system has a database of its own, peers_<system>,
// which bench/run prepared.  bench/run copies this file next to a
// node_modules with pg, graphile-worker and pg-boss (ES modules find
// packages from the script's directory).
//
// Environment: PGHOST, PGPORT, PGUSER; PEERS_SECONDS (10), PEERS_CLIENTS (8),
// PEERS_ITEMS (items preloaded for a drain), PEERS_LAT_WORKERS (4),
// PEERS_LAT_RATE (200 jobs/s), PEERS_HELD ("20 60 10": seconds before,
// during and after the held snapshot).

import pg from 'pg';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

const env = process.env;
const num = (k, d) => (env[k] ? Number(env[k]) : d);
const SECONDS = num('PEERS_SECONDS', 10);
const CLIENTS = num('PEERS_CLIENTS', 8);
const BATCH = 100;
const LEASE = 30; // lease / visibility timeout, seconds
const [, , CASE, SYS] = process.argv;
const SYSTEM = (SYS || '').split('-')[0];
const now = () => performance.now();

// ~100 bytes of JSON, numbered so that every job is checked off once
const payload = (seq) => ({ kind: 'email', to: `user${String(seq % 1e6).padStart(6, '0')}@example.com`,
  template: 'welcome-v2', locale: 'en-US', seq });
// the handler: it must see the payload
function handle(p) {
  if (p == null || typeof p.seq !== 'number') throw new Error('bad payload ' + JSON.stringify(p));
  return p.seq;
}

async function connect() {
  const c = new pg.Client({ database: 'peers_' + SYSTEM, application_name: 'peers-' + SYS });
  await c.connect();
  return c;
}
async function sql(...qs) {
  const c = await connect();
  try { for (const q of qs) await c.query(q); } finally { await c.end(); }
}
const pool = (max) => {
  const p = new pg.Pool({ database: 'peers_' + SYSTEM, max, application_name: 'peers-' + SYS });
  p.on('error', (e) => console.error(`[${SYS} pool]`, e.message));
  return p;
};

// n connections, each running loop(conn, stopped) until it returns
async function sqlWorkers(n, loop) {
  const conns = [];
  for (let i = 0; i < n; i++) conns.push(await connect());
  let stopping = false;
  const done = Promise.all(conns.map((c) => loop(c, () => stopping)));
  return { done, async stop() { stopping = true; await done; for (const c of conns) await c.end(); } };
}

// ---- the systems.  Each: reset() makes an empty queue "q"; producers(n)
// gives n callers {one(p), many(ps)} and close(); workers(kind, n, onJob)
// starts n workers (kind: single, batch, wait) and returns {done, stop()},
// done resolving when SQL loops found the queue empty.

const pgq = {
  reset: () => sql(`SELECT pgq.drop_group(group_name) FROM pgq.groups WHERE group_name = 'q'`,
    `SELECT pgq.create_queue('q', lease => '${LEASE} s')`),
  async producers(n) {
    const cs = [];
    for (let i = 0; i < n; i++) cs.push(await connect());
    return {
      callers: cs.map((c) => ({
        one: (p) => c.query({ name: 'e1', text: `SELECT pgq.enqueue('q', $1::jsonb)`, values: [p] }),
        many: (ps) => c.query({ name: 'em', text: `SELECT cardinality(pgq.enqueue_many('q', $1::jsonb[]))`, values: [ps] }),
      })),
      close: () => Promise.all(cs.map((c) => c.end())),
    };
  },
  workers(kind, n, onJob) {
    const claim = (c, name, args, values = []) =>
      c.query({ name, text: `SELECT block_id, attempt, payload FROM pgq.claim('q'${args})`, values });
    if (kind === 'batch') return sqlWorkers(n, async (c, stopped) => {
      while (!stopped()) {
        const r = await claim(c, 'cb', `, ${BATCH}`);
        if (!r.rows.length) return;
        for (const row of r.rows) onJob(row.payload);
        await c.query({ name: 'km', text: `SELECT cardinality(pgq.complete_many($1::bigint[], $2::int[]))`,
          values: [r.rows.map((x) => x.block_id), r.rows.map((x) => x.attempt)] });
      }
    });
    // single: the one-round-trip loop, claim(complete => the previous item);
    // wait: the loop docs/claim-modes.md recommends to a waiting worker, the
    // same claim, and claim(wait =>) only when it found nothing; wait with
    // pgq-wc: claim(wait =>, complete =>), one statement
    return sqlWorkers(n, async (c, stopped) => {
      let prev = null, att = null;
      while (!stopped()) {
        let r;
        if (kind === 'wait' && SYS === 'pgq-wc')
          r = await claim(c, 'cwc', `, wait => '1 s', complete => $1::bigint, attempt => $2::int`, [prev, att]);
        else if (kind === 'wait' && prev === null)
          r = await claim(c, 'cw', `, wait => '1 s'`);
        else
          r = await claim(c, 'c1', `, complete => $1::bigint, attempt => $2::int`, [prev, att]);
        prev = att = null;
        if (!r.rows.length) {
          if (kind === 'single') return;
          continue;
        }
        onJob(r.rows[0].payload);
        prev = r.rows[0].block_id;
        att = r.rows[0].attempt;
      }
      if (prev !== null) await c.query(`SELECT pgq.complete($1::bigint, attempt => $2::int)`, [prev, att]);
    });
  },
};

const pgmq = {
  reset: () => sql(`SELECT pgmq.drop_queue(queue_name) FROM pgmq.meta WHERE queue_name = 'q'`,
    `SELECT pgmq.create('q')`),
  async producers(n) {
    const cs = [];
    for (let i = 0; i < n; i++) cs.push(await connect());
    return {
      callers: cs.map((c) => ({
        one: (p) => c.query({ name: 'e1', text: `SELECT pgmq.send('q', $1::jsonb)`, values: [p] }),
        many: (ps) => c.query({ name: 'em', text: `SELECT count(*) FROM pgmq.send_batch('q', $1::jsonb[])`, values: [ps] }),
      })),
      close: () => Promise.all(cs.map((c) => c.end())),
    };
  },
  // single: read(vt, 1) then delete(id); batch: read(vt, 100) then
  // delete(ids); wait: read_with_poll, 1 s at most, polling every 10 ms
  // (its default is 100 ms), then delete
  workers(kind, n, onJob) {
    const read = kind === 'batch' ? `pgmq.read('q', ${LEASE}, ${BATCH})`
      : kind === 'wait' ? `pgmq.read_with_poll('q', ${LEASE}, 1, 1, 10)` : `pgmq.read('q', ${LEASE}, 1)`;
    return sqlWorkers(n, async (c, stopped) => {
      while (!stopped()) {
        const r = await c.query({ name: 'r', text: `SELECT msg_id, message FROM ${read}` });
        if (!r.rows.length) {
          if (kind === 'wait') continue;
          return;
        }
        for (const row of r.rows) onJob(row.message);
        if (kind === 'batch')
          await c.query({ name: 'db', text: `SELECT count(*) FROM pgmq.delete('q', $1::bigint[])`, values: [r.rows.map((x) => x.msg_id)] });
        else
          await c.query({ name: 'd1', text: `SELECT pgmq.delete('q', $1::bigint)`, values: [r.rows[0].msg_id] });
      }
    });
  },
};

let gwMod;
const gwLoad = async () => {
  gwMod ||= await import('graphile-worker');
  return { ...gwMod, logger: new gwMod.Logger(() => (level, msg) => { if (level === 'error') console.error('[gw]', msg); }) };
};
const gw = {
  async reset() {
    const { runMigrations, logger } = await gwLoad();
    const p = pool(2);
    await runMigrations({ pgPool: p, logger });
    await p.query(`TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues`);
    await p.end();
  },
  async producers(n) {
    const { makeWorkerUtils, logger } = await gwLoad();
    const p = pool(n);
    const u = await makeWorkerUtils({ pgPool: p, logger });
    const caller = {
      one: (x) => u.addJob('t', x),
      many: (xs) => u.addJobs(xs.map((x) => ({ identifier: 't', payload: x }))),
    };
    return { callers: Array(n).fill(caller), async close() { await u.release(); await p.end(); } };
  },
  // run() with concurrency n, LISTEN/NOTIFY, defaults otherwise; batch:
  // localQueue of 100 jobs and completeJobBatchDelay 0
  async workers(kind, n, onJob) {
    const { run, logger } = await gwLoad();
    const p = pool(n + 2);
    const worker = kind === 'batch' ? { localQueue: { size: BATCH }, completeJobBatchDelay: 0 } : {};
    const runner = await run({ pgPool: p, concurrency: n, noHandleSignals: true, pollInterval: 2000, logger,
      taskList: { t: async (x) => { onJob(x); } }, preset: { worker } });
    return { done: new Promise(() => {}), async stop() { await runner.stop(); await p.end(); } };
  },
};

let bossMod;
async function bossStart(max, extra = {}) {
  bossMod ||= await import('pg-boss');
  const b = new bossMod.PgBoss({ database: 'peers_boss', max, application_name: 'peers-boss', ...extra });
  b.on('error', (e) => console.error('[boss]', e.message));
  await b.start();
  return b;
}
const boss = {
  async reset() {
    const b = await bossStart(2);
    await b.deleteQueue('q').catch(() => {});
    await b.createQueue('q', CASE === 'latency' ? { notify: true } : {});
    await b.stop({ graceful: false, wait: true });
  },
  async producers(n) {
    const b = await bossStart(n, { supervise: false, schedule: false });
    const caller = { one: (x) => b.send('q', x), many: (xs) => b.insert('q', xs.map((x) => ({ data: x }))) };
    return { callers: Array(n).fill(caller), close: () => b.stop({ graceful: false, wait: true }) };
  },
  // single and batch: n loops of fetch (1 or 100 jobs) then complete (its
  // work() waits a polling interval between fetches); wait: work() with
  // LISTEN/NOTIFY (useListenNotify, a queue made with notify: true)
  async workers(kind, n, onJob) {
    if (kind === 'wait') {
      const b = await bossStart(n + 3, { useListenNotify: true });
      await b.work('q', { localConcurrency: n, batchSize: 1, pollingIntervalSeconds: 0.5 },
        async (jobs) => { for (const j of jobs) onJob(j.data); });
      return { done: new Promise(() => {}), stop: () => b.stop({ graceful: true, wait: true, timeout: 5000 }) };
    }
    const b = await bossStart(n + 2);
    let stopping = false;
    const bs = kind === 'batch' ? BATCH : 1;
    const done = Promise.all(Array.from({ length: n }, async () => {
      while (!stopping) {
        const jobs = await b.fetch('q', { batchSize: bs });
        if (!jobs || !jobs.length) return;
        for (const j of jobs) onJob(j.data);
        await b.complete('q', jobs.map((j) => j.id));
      }
    }));
    return { done, async stop() { stopping = true; await done; await b.stop({ graceful: false, wait: true }); } };
  },
};

const S = { pgq, pgmq, gw, boss }[SYSTEM];

// the same preparation for every system before a measured run
const settle = () => sql('VACUUM ANALYZE', 'CHECKPOINT');
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
const pct = (s, p) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] : null);
const r2 = (x) => (x == null ? null : Math.round(x * 100) / 100);
const r3 = (x) => (x == null ? null : Math.round(x * 1000) / 1000);

// n items with the system's own bulk insert, 4 connections, 1000 per call
async function preload(n) {
  const P = await S.producers(4);
  let next = 0;
  await Promise.all(P.callers.map(async (c) => {
    while (next < n) {
      const a = next;
      next = Math.min(n, a + 1000);
      const ps = [];
      for (let i = a; i < next; i++) ps.push(payload(i));
      await c.many(ps);
    }
  }));
  await P.close();
}

// CLIENTS callers enqueue BATCH items per call for SECONDS: items/s
async function enqueueBatch() {
  await S.reset();
  await settle();
  const P = await S.producers(CLIENTS);
  let seq = 0, calls = 0;
  const c0 = cpu(), t0 = now(), tEnd = t0 + SECONDS * 1000;
  await Promise.all(P.callers.map(async (c) => {
    while (now() < tEnd) {
      const ps = [];
      for (let i = 0; i < BATCH; i++) ps.push(payload(seq++));
      await c.many(ps);
      calls++;
    }
  }));
  const secs = (now() - t0) / 1000, cpuMs = cpu() - c0;
  await P.close();
  return { value: (calls * BATCH) / secs, unit: 'items/s', items: calls * BATCH, seconds: r2(secs), client_cpu: r2(cpuMs / 10 / secs) };
}

// preload PEERS_ITEMS items, then CLIENTS workers take them until the queue
// is empty or SECONDS have passed since the first job: jobs/s from the
// first job to the last
async function drain(kind) {
  const n = num('PEERS_ITEMS', (kind === 'batch' ? 40000 : 5000) * SECONDS);
  await S.reset();
  await preload(n);
  await settle();
  const seen = new Uint8Array(n);
  let done = 0, dup = 0, tFirst = null, tLast = 0, c0 = 0, finish;
  const finished = new Promise((r) => (finish = r));
  const onJob = (p) => {
    const s = handle(p);
    if (tFirst === null) {
      tFirst = now();
      c0 = cpu();
      setTimeout(finish, SECONDS * 1000);
    }
    if (seen[s]) dup++; else { seen[s] = 1; done++; }
    tLast = now();
    if (done === n) finish();
  };
  const W = await S.workers(kind, CLIENTS, onJob);
  await Promise.race([finished, W.done]);
  const cpuMs = cpu() - c0, counted = done, secs = (tLast - tFirst) / 1000;
  await W.stop();
  return { value: counted / secs, unit: 'jobs/s', items: counted, preloaded: n, emptied: counted === n,
    duplicates: dup, seconds: r2(secs), client_cpu: r2(cpuMs / 10 / secs) };
}

// LAT_WORKERS waiting workers; one producer enqueues one job at a time,
// LAT_RATE a second, for SECONDS.  Latency: from the producer's enqueue call
// to the handler's start (p50, p99), and from the return of that call (its
// commit acknowledged) to the handler's start (ack_p50, ack_p99: negative
// when the job reached a worker before the acknowledgement reached the
// producer).
async function latency() {
  const workers = num('PEERS_LAT_WORKERS', 4), rate = num('PEERS_LAT_RATE', 200);
  const total = Math.round(rate * SECONDS);
  await S.reset();
  await settle();
  const tAck = new Float64Array(total), tSend = new Float64Array(total), tStart = new Float64Array(total);
  let got = 0, all;
  const allDone = new Promise((r) => (all = r));
  const W = await S.workers('wait', workers, (p) => {
    const s = handle(p);
    if (!tStart[s]) { tStart[s] = now(); if (++got === total) all(); }
  });
  const P = await S.producers(1);
  await sleep(1500); // the workers settle into their waits
  const t0 = now(), c0 = cpu();
  for (let i = 0; i < total; i++) {
    const w = t0 + (i * 1000) / rate - now();
    if (w > 0) await sleep(w);
    tSend[i] = now();
    await P.callers[0].one(payload(i));
    tAck[i] = now();
  }
  await Promise.race([allDone, sleep(10000)]);
  const cpuMs = cpu() - c0, secs = (now() - t0) / 1000;
  await W.stop();
  await P.close();
  const lat = [], ack = [], enq = [];
  for (let i = 0; i < total; i++) {
    enq.push(tAck[i] - tSend[i]);
    if (tStart[i]) { lat.push(tStart[i] - tSend[i]); ack.push(tStart[i] - tAck[i]); }
  }
  for (const a of [lat, ack, enq]) a.sort((x, y) => x - y);
  return { p50: r3(pct(lat, 50)), p99: r3(pct(lat, 99)), ack_p50: r3(pct(ack, 50)), ack_p99: r3(pct(ack, 99)),
    unit: 'ms', jobs: total, received: got, max: r3(lat[lat.length - 1]), enqueue_p50: r3(pct(enq, 50)),
    enqueue_p99: r3(pct(enq, 99)), client_cpu: r2(cpuMs / 10 / secs) };
}

// the single-job drain on a backlog that lasts the run; after BEFORE s a
// REPEATABLE READ transaction of the same database takes a snapshot and
// keeps it HOLD s, then AFTER s more: jobs/s before (after 5 s of warm-up),
// during and after
async function held() {
  const [before, hold, after] = (env.PEERS_HELD || '20 60 10').split(' ').map(Number);
  const n = num('PEERS_ITEMS', 300000);
  await S.reset();
  await preload(n);
  await settle();
  let done = 0;
  const W = await S.workers('single', CLIENTS, (p) => { handle(p); done++; });
  const holder = await connect();
  const series = [];
  const t0 = now();
  for (let s = 1, last = 0; s <= before + hold + after; s++) {
    if (s === before + 1) {
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.query('SELECT count(*) FROM pg_class');
    }
    if (s === before + hold + 1) await holder.query('COMMIT');
    const w = t0 + s * 1000 - now();
    if (w > 0) await sleep(w);
    series.push(done - last);
    last = done;
  }
  await holder.end();
  await W.stop();
  const mean = (a) => (a.length ? a.reduce((x, y) => x + y, 0) / a.length : null);
  const b = mean(series.slice(5, before)), d = mean(series.slice(before, before + hold));
  return { value: d / b, unit: 'during/before', before_per_s: Math.round(b), during_per_s: Math.round(d),
    after_per_s: Math.round(mean(series.slice(before + hold))), preloaded: n, processed: done, emptied: done >= n, series };
}

const CASES = { enqueue_batch: enqueueBatch, drain_batch: () => drain('batch'), drain_single: () => drain('single'), latency, held };
if (!CASES[CASE] || !S || (SYS === 'pgq-wc' && CASE !== 'latency')) {
  console.error('usage: node measure.mjs enqueue_batch|drain_batch|drain_single|latency|held pgq|pgmq|gw|boss|pgq-wc');
  process.exit(2);
}
const res = await CASES[CASE]();
const summary = res.unit === 'ms'
  ? `p50 ${res.p50} ms, p99 ${res.p99} ms (from the enqueue's return: ${res.ack_p50}, ${res.ack_p99})`
  : res.unit === 'during/before' ? `${res.before_per_s} jobs/s before, ${res.during_per_s} during: ${r2(res.value)}`
  : `${Math.round(res.value)} ${res.unit}${res.emptied ? ' (the backlog ran out)' : ''}`;
console.log(JSON.stringify({ round: env.PEERS_ROUND || null, case: CASE, system: SYS, ...res,
  summary: summary + (res.client_cpu != null ? `; client CPU ${Math.round(res.client_cpu)}%` : '') }));
process.exit(0);
