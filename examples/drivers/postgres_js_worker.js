#!/usr/bin/env node
// pgq workers in JavaScript with postgres.js (npm: postgres).  Checked by
// hand, not in CI: postgres.js is not in Debian.
//
//   node postgres_js_worker.js group NAME [WORKERS]
//   node postgres_js_worker.js queue NAME [WORKERS]
//   node postgres_js_worker.js traps
//
// group: WORKERS (default 2) workers drain the query group NAME together, in
//        its claim mode (transaction, lease or advisory), each storing its
//        blocks' ids in processed(id, block_id) in the transaction that
//        consumes them.  Lease-mode workers claim 2 blocks at a time and
//        complete them with pgq.complete_many.
// queue: WORKERS workers drain the lease-mode queue NAME, whose payloads are
//        {"n": N}: each stores (N, item id) in processed and completes the
//        item with the result {"square": N*N}, in one transaction.
// traps: shows what bites with postgres.js, on scratch groups it creates.
//
// postgres.js is a pool (sql): each worker reserves a connection of its own
// for its whole life (sql.reserve()), as an advisory-mode worker must.
// Connects with PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD.  Exits 0 once
// the group is drained or the queue is empty.  See docs/drivers.md.
'use strict';
const postgres = require('postgres');

const WAIT = '1 second';   // a string: the server reads it as an interval

// sql.begin() takes any connection of the pool: on a reserved one, run
// BEGIN and COMMIT (or ROLLBACK, if fn throws) by hand
async function inTransaction(c, fn) {
  await c`BEGIN`;
  try {
    await fn(c);
  } catch (e) {
    await c`ROLLBACK`;
    throw e;
  }
  await c`COMMIT`;
}

async function groupWorker(sql, group, mode, n) {
  const c = await sql.reserve();
  let blocks = 0;
  try {
    const w = mode === 'advisory'
      ? (await c`SELECT pgq.register_worker(${'postgres.js-' + n}) AS w`)[0].w : null;
    for (;;) {
      let claimed = 0;
      if (mode === 'transaction') {
        // BEGIN; claim; store; COMMIT
        await inTransaction(c, async (tx) => {
          const rows = await tx`SELECT block_id, ids FROM pgq.claim(${group}, wait => ${WAIT})`;
          for (const b of rows)
            await tx`INSERT INTO processed (id, block_id) SELECT unnest(${b.ids}::bigint[]), ${b.block_id}`;
          claimed = rows.length;
        });
      } else {
        const rows = await c`SELECT block_id, attempt, ids
                             FROM pgq.claim(${group}, max_blocks => ${mode === 'lease' ? 2 : 1},
                                            wait => ${WAIT}, worker_id => ${w})`;
        claimed = rows.length;
        if (claimed > 0) {
          await inTransaction(c, async (tx) => {
            let done;
            if (mode === 'lease') {
              // bigint[] and integer[]: name the element types (20, 23);
              // sql.array(x) alone would type them from x[0] (see traps)
              done = (await tx`SELECT pgq.complete_many(${tx.array(rows.map((b) => b.block_id), 20)},
                                                       ${tx.array(rows.map((b) => b.attempt), 23)}) AS done`)[0].done;
            } else {
              const ok = (await tx`SELECT pgq.check_worker(${w}) AS ok`)[0].ok &&
                (await tx`SELECT pgq.complete(${rows[0].block_id}, worker_id => ${w}) AS ok`)[0].ok;
              done = ok ? [rows[0].block_id] : [];
            }
            // store the blocks completed, those still ours
            for (const b of rows.filter((b) => done.includes(b.block_id)))
              await tx`INSERT INTO processed (id, block_id) SELECT unnest(${b.ids}::bigint[]), ${b.block_id}`;
          });
        }
      }
      if (claimed === 0) {
        const [st] = await c`SELECT state FROM pgq.group_stats WHERE group_name = ${group}`;
        if (st.state === 'drained') break;
        continue;
      }
      blocks += claimed;
      console.log(`worker ${n}: ${claimed} block(s) stored`);
    }
  } finally {
    c.release();
  }
  return blocks;
}

async function queueWorker(sql, queue, n) {
  const c = await sql.reserve();
  let items = 0;
  try {
    for (;;) {
      const rows = await c`SELECT block_id, attempt, payload FROM pgq.claim(${queue}, wait => ${WAIT})`;
      if (rows.length === 0) {
        const [st] = await c`SELECT pending + scheduled + running AS left FROM pgq.queue_stats
                             WHERE queue_name = ${queue}`;
        if (Number(st.left) === 0) break;
        continue;
      }
      const item = rows[0], v = item.payload.n;
      await c`BEGIN`;
      await c`INSERT INTO processed (id, block_id) VALUES (${v}, ${item.block_id})`;
      const [r] = await c`SELECT pgq.complete(${item.block_id}, result => ${c.json({ square: v * v })},
                                              attempt => ${item.attempt}) AS ok`;
      await (r.ok ? c`COMMIT` : c`ROLLBACK`);     // false: the lease ran out
      items++;
      console.log(`worker ${n}: item ${item.block_id} done`);
    }
  } finally {
    c.release();
  }
  return items;
}

// What bites: one line per trap.
async function traps(sql) {
  await sql`SELECT pgq.create_group('postgres_js_trap', 'SELECT g FROM generate_series(1, 100) g',
                                    block_size => 10, mode => 'lease')`;
  const claimed = async () => (await sql`SELECT claimed FROM pgq.group_stats
                                         WHERE group_name = 'postgres_js_trap'`)[0].claimed;
  // 1. sql.array() types the array from its first element
  const rows = await sql`SELECT block_id, attempt FROM pgq.claim('postgres_js_trap', 2)`;
  const ids = rows.map((b) => b.block_id), attempts = rows.map((b) => b.attempt);
  console.log(`bigint values arrive as: ${typeof ids[0]}`);
  try {
    await sql`SELECT pgq.complete_many(${sql.array(ids)}, ${sql.array(attempts)})`;
    console.log('sql.array(ids): no error');
  } catch (e) {
    console.log(`sql.array(ids): ${e.code} ${e.message}`);
  }
  const [r] = await sql`SELECT pgq.complete_many(${sql.array(ids, 20)}, ${sql.array(attempts, 23)}) AS done`;
  console.log(`sql.array(ids, 20), sql.array(attempts, 23): completed ${r.done.length}`);
  // 2. a cursor of 1 row over a claim of 5 blocks
  const before = await claimed();
  await sql.begin(async (tx) => {
    for await (const batch of tx`SELECT block_id FROM pgq.claim('postgres_js_trap', 5)`.cursor(1))
      break;
  });
  console.log(`cursor(1), max_blocks 5: read 1 row, ${(await claimed()) - before} blocks claimed`);
  // 3. advisory mode through the pool: a call may run on another connection
  await sql`SELECT pgq.create_group('postgres_js_trap_adv', 'SELECT g FROM generate_series(1, 10) g',
                                    mode => 'advisory')`;
  const [{ w }] = await sql`SELECT pgq.register_worker() AS w`;
  const other = await sql.reserve();    // meanwhile, someone takes that connection
  try {
    await sql`SELECT block_id FROM pgq.claim('postgres_js_trap_adv', worker_id => ${w})`;
    console.log('advisory through the pool: no error');
  } catch (e) {
    console.log(`advisory through the pool: ${e.code} ${e.message}`);
  }
  other.release();
  await sql`SELECT pgq.drop_group('postgres_js_trap')`;
  await sql`SELECT pgq.drop_group('postgres_js_trap_adv')`;
}

async function main(argv) {
  const traps_ = argv.length === 1 && argv[0] === 'traps';
  if (!traps_ && (![2, 3].includes(argv.length) || !['group', 'queue'].includes(argv[0]))) {
    console.error('usage: postgres_js_worker.js group NAME [WORKERS] | queue NAME [WORKERS] | traps');
    process.exit(2);
  }
  const [kind, name] = argv, workers = Number(argv[2] || 2);
  const sql = postgres({ max: traps_ ? 2 : workers + 1, onnotice: () => {} });
  try {
    if (traps_) {
      await traps(sql);
    } else if (kind === 'group') {
      const m = await sql`SELECT mode FROM pgq.group_stats WHERE group_name = ${name}`;
      if (m.length === 0) throw new Error(`group ${name} does not exist`);
      const done = await Promise.all([...Array(workers).keys()].map(
        (i) => groupWorker(sql, name, m[0].mode, i + 1)));
      console.log(`group ${name} is drained; the workers stored [${done.join(', ')}] blocks`);
    } else {
      const done = await Promise.all([...Array(workers).keys()].map(
        (i) => queueWorker(sql, name, i + 1)));
      console.log(`queue ${name} is empty; the workers did [${done.join(', ')}] items`);
    }
  } finally {
    await sql.end();
  }
}

main(process.argv.slice(2)).catch((e) => {
  console.error(`error: ${e.code || ''} ${e.message}`);
  process.exit(1);
});
