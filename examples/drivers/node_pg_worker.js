#!/usr/bin/env node
// pgq workers in JavaScript with node-postgres (npm: pg).
//
//   node node_pg_worker.js group NAME [WORKERS]
//   node node_pg_worker.js queue NAME [WORKERS]
//   node node_pg_worker.js traps
//
// group: WORKERS (default 2) workers drain the query group NAME together, in
//        its claim mode (transaction, lease or advisory), each storing its
//        blocks' ids in processed(id, block_id) in the transaction that
//        consumes them.
// queue: WORKERS workers drain the lease-mode queue NAME, whose payloads are
//        {"n": N}: each stores (N, item id) in processed and completes the
//        item with the result {"square": N*N}, in one transaction.
// traps: shows what bites with node-postgres, on scratch queues it creates.
//
// The workers share one pg.Pool, and each takes a client of its own from it
// for its whole life (pool.connect()): an advisory-mode worker's locks live
// in its session, and pool.query() runs each call on whichever client is
// free.  Connects with PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD.  Exits
// 0 once the group is drained or the queue is empty.  See docs/drivers.md.
'use strict';
const pg = require('pg');

// A waiting claim waits up to WAIT inside the server.  The time limit that
// guards it is statement_timeout, which the server enforces by cancelling
// the claim (nothing stays claimed), and it is longer than WAIT.  Not
// query_timeout: that one only stops the client from waiting (see traps()).
const WAIT = '1 second';
const config = { statement_timeout: 10000 };

async function groupWorker(pool, group, mode, n) {
  const c = await pool.connect();
  let blocks = 0;
  try {
    let w = null;
    if (mode === 'advisory')
      w = (await c.query('SELECT pgq.register_worker($1) AS w', [`node-pg-${n}`])).rows[0].w;
    for (;;) {
      if (mode === 'transaction') await c.query('BEGIN');
      const { rows } = await c.query(
        'SELECT block_id, attempt, ids FROM pgq.claim($1, wait => $2, worker_id => $3)',
        [group, WAIT, w]);
      if (rows.length === 0) {
        if (mode === 'transaction') await c.query('COMMIT');
        const st = await c.query('SELECT state FROM pgq.group_stats WHERE group_name = $1', [group]);
        if (st.rows[0].state === 'drained') break;
        continue;
      }
      const b = rows[0];
      if (mode !== 'transaction') await c.query('BEGIN');
      await c.query('INSERT INTO processed (id, block_id) SELECT unnest($1::bigint[]), $2',
                    [b.ids, b.block_id]);
      let held = true;
      if (mode === 'lease') {
        held = (await c.query('SELECT pgq.complete($1, attempt => $2) AS ok',
                              [b.block_id, b.attempt])).rows[0].ok;
      } else if (mode === 'advisory') {
        held = (await c.query('SELECT pgq.check_worker($1) AS ok', [w])).rows[0].ok &&
          (await c.query('SELECT pgq.complete($1, worker_id => $2) AS ok',
                         [b.block_id, w])).rows[0].ok;
      }
      await c.query(held ? 'COMMIT' : 'ROLLBACK');
      blocks++;
      console.log(`worker ${n}: block ${b.block_id} stored`);
    }
  } finally {
    c.release();
  }
  return blocks;
}

async function queueWorker(pool, queue, n) {
  const c = await pool.connect();
  let items = 0;
  try {
    for (;;) {
      const { rows } = await c.query(
        'SELECT block_id, attempt, payload FROM pgq.claim($1, wait => $2)', [queue, WAIT]);
      if (rows.length === 0) {
        const st = await c.query(
          'SELECT pending + scheduled + running AS left FROM pgq.queue_stats WHERE queue_name = $1',
          [queue]);
        if (Number(st.rows[0].left) === 0) break;
        continue;
      }
      const item = rows[0], v = item.payload.n;
      await c.query('BEGIN');
      await c.query('INSERT INTO processed (id, block_id) VALUES ($1, $2)', [v, item.block_id]);
      const ok = (await c.query('SELECT pgq.complete($1, result => $2, attempt => $3) AS ok',
                                [item.block_id, { square: v * v }, item.attempt])).rows[0].ok;
      await c.query(ok ? 'COMMIT' : 'ROLLBACK');
      items++;
      console.log(`worker ${n}: item ${item.block_id} done`);
    }
  } finally {
    c.release();
  }
  return items;
}

// What bites: one line per trap, for the reader and for test/t/065_drivers.pl.
async function traps() {
  const admin = new pg.Client();
  await admin.connect();
  for (const q of ['node_pg_trap_qt', 'node_pg_trap_st'])
    await admin.query("SELECT pgq.create_queue($1, lease => '1 hour')", [q]);
  const running = async (q) => (await admin.query(
    'SELECT running FROM pgq.queue_stats WHERE queue_name = $1', [q])).rows[0].running;

  // 1. query_timeout: the client stops waiting, the server does not
  const c = new pg.Client({ query_timeout: 500 });
  await c.connect();
  const t0 = Date.now();
  try {
    await c.query("SELECT block_id FROM pgq.claim('node_pg_trap_qt', wait => '3 seconds')");
  } catch (e) {
    console.log(`query_timeout 500 ms, wait 3 s: the client gave up: ${e.message}`);
  }
  // the next query queues behind the claim, which still waits in the server
  try {
    await c.query('SELECT 1');
    console.log('query_timeout: the next query ran');
  } catch (e) {
    console.log(`query_timeout: the next query failed too: ${e.message} after ${Date.now() - t0} ms`);
  }
  // an item enqueued now goes to the abandoned claim
  await admin.query("SELECT pgq.enqueue('node_pg_trap_qt', '{}')");
  // this query runs once the abandoned claim has returned
  await c.query({ text: 'SELECT 1', query_timeout: 60000 });
  console.log(`query_timeout: items leased to nobody: ${await running('node_pg_trap_qt')}`);
  await c.end();

  // 2. statement_timeout: the server cancels the claim, nothing is claimed
  const s = new pg.Client({ statement_timeout: 500 });
  await s.connect();
  try {
    await s.query("SELECT block_id FROM pgq.claim('node_pg_trap_st', wait => '3 seconds')");
  } catch (e) {
    console.log(`statement_timeout 500 ms, wait 3 s: ${e.code} ${e.message}`);
  }
  await admin.query("SELECT pgq.enqueue('node_pg_trap_st', '{}')");
  console.log(`statement_timeout: items leased to nobody: ${await running('node_pg_trap_st')}`);
  await s.end();

  // 3. advisory mode through pool.query(): any call may land on another
  // connection than the one the worker registered on
  await admin.query(`SELECT pgq.create_group('node_pg_trap_adv', 'SELECT g FROM generate_series(1, 10) g',
                                             mode => 'advisory')`);
  const pool = new pg.Pool({ max: 2 });
  const w = (await pool.query('SELECT pgq.register_worker() AS w')).rows[0].w;
  const other = await pool.connect();   // meanwhile, someone takes that connection
  try {
    await pool.query("SELECT block_id FROM pgq.claim('node_pg_trap_adv', worker_id => $1)", [w]);
    console.log('advisory through pool.query(): no error');
  } catch (e) {
    console.log(`advisory through pool.query(): ${e.code} ${e.message}`);
  }
  other.release();
  await pool.end();
  for (const q of ['node_pg_trap_qt', 'node_pg_trap_st'])
    await admin.query('SELECT pgq.drop_group($1)', [q]);
  await admin.query("SELECT pgq.drop_group('node_pg_trap_adv')");
  await admin.end();
}

async function main(argv) {
  if (argv.length === 1 && argv[0] === 'traps') return traps();
  if (![2, 3].includes(argv.length) || !['group', 'queue'].includes(argv[0])) {
    console.error('usage: node_pg_worker.js group NAME [WORKERS] | queue NAME [WORKERS] | traps');
    process.exit(2);
  }
  const [kind, name] = argv, workers = Number(argv[2] || 2);
  const pool = new pg.Pool({ ...config, max: workers });
  try {
    if (kind === 'group') {
      const m = await pool.query('SELECT mode FROM pgq.group_stats WHERE group_name = $1', [name]);
      if (m.rows.length === 0) throw new Error(`group ${name} does not exist`);
      const done = await Promise.all([...Array(workers).keys()].map(
        (i) => groupWorker(pool, name, m.rows[0].mode, i + 1)));
      console.log(`group ${name} is drained; the workers stored [${done.join(', ')}] blocks`);
    } else {
      const done = await Promise.all([...Array(workers).keys()].map(
        (i) => queueWorker(pool, name, i + 1)));
      console.log(`queue ${name} is empty; the workers did [${done.join(', ')}] items`);
    }
  } finally {
    await pool.end();
  }
}

main(process.argv.slice(2)).catch((e) => {
  console.error(`error: ${e.code || ''} ${e.message}`);
  process.exit(1);
});
