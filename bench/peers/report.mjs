// The peers cases' tables: node report.mjs RESULTS.jsonl [ROWS.tsv]
//
// RESULTS.jsonl holds measure.mjs's lines, with bench/run's lines for the
// systems it could not install ({"system", "missing": why}) and for the
// measurements that failed ({"round", "case", "system", "error"}).  Prints,
// per case, each system's figure in every round with the median, then pgq
// against its peers: the ratio in each round and the median of those
// ratios.  With ROWS.tsv, also writes those ratios as rows of bench/run's
// table (case, pgq, baseline, ratio, target, met; separated by \x1f).
import { readFileSync, writeFileSync } from 'node:fs';

const lines = readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const missing = Object.fromEntries(lines.filter((l) => l.missing).map((l) => [l.system, l.missing]));
// the cases bench/run ran: their rows are there even when no system could run
const planned = (process.env.PEERS_CASES || '').split(' ');
const NAMES = { pgq: 'pgq', 'pgq-wc': 'pgq', pgmq: 'pgmq', gw: 'graphile-worker', boss: 'pg-boss' };
const PEERS = ['pgmq', 'gw', 'boss'];
const median = (a) => {
  const s = a.filter((x) => x != null).sort((x, y) => x - y);
  if (!s.length) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const f0 = (x) => (x == null ? '-' : String(Math.round(x)));
const f2 = (x) => (x == null ? '-' : x.toFixed(2));

// what each system runs, by case
const WHAT = {
  enqueue_batch: { pgq: 'pgq.enqueue_many(q, 100 payloads)', pgmq: 'pgmq.send_batch(q, 100 messages)',
    gw: 'addJobs(100 jobs)', boss: 'insert(q, 100 jobs)' },
  drain_batch: { pgq: 'claim(q, 100) + complete_many(ids, attempts)', pgmq: 'read(q, 30, 100) + delete(q, ids)',
    gw: 'run(), localQueue 100, completeJobBatchDelay 0', boss: 'fetch(q, batchSize 100) + complete(q, ids)' },
  drain_single: { pgq: 'claim(q, complete => last, attempt => ...)', pgmq: 'read(q, 30, 1) + delete(q, id)',
    gw: 'run(), concurrency 8', boss: 'fetch(q) + complete(q, id)' },
  latency: { pgq: 'claim(q, complete => last); claim(q, wait =>) when it got none', 'pgq-wc': 'claim(q, wait =>, complete => last)',
    pgmq: 'read_with_poll(q, 30, 1, 1, 10 ms) + delete', gw: 'run(), concurrency 4, LISTEN/NOTIFY', boss: 'work(), useListenNotify' },
  held: { pgq: 'claim(q, complete => last)', pgmq: 'read(q, 30, 1) + delete(q, id)', gw: 'run(), concurrency 8', boss: 'fetch(q) + complete(q, id)' },
};
// the sections: title, case, metric, higher is better, format, and the
// comparisons: pgq's system, the peer ('best': each round's best peer;
// null: pgq's own figure), the target, the row of bench/run's table ('' for
// none); latencies from the enqueue's acknowledgement can be negative, so
// they are compared as differences in ms, the others as ratios
const SECTIONS = [
  ['batch enqueue of 100, items/s', 'enqueue_batch', 'value', true, f0, [
    ['pgq', 'pgmq', ['>=', 1.5], 'enqueue_many(100) vs pgmq send_batch(100)'],
    ['pgq', 'best', null, 'enqueue_many(100) vs the best peer\'s bulk insert']]],
  ['batch drain of 100, jobs/s', 'drain_batch', 'value', true, f0, [
    ['pgq', 'pgmq', ['>=', 2], 'claim(100) + complete_many vs pgmq read(100) + delete'],
    ['pgq', 'best', null, 'claim(100) + complete_many vs the best peer']]],
  ['single-item drain, jobs/s', 'drain_single', 'value', true, f0, [
    ['pgq', 'best', ['>=', 2], 'single-item drain, claim(complete => last) vs the best peer']]],
  ['waiting-worker latency p50, ms from the enqueue call to the handler', 'latency', 'p50', false, f2, [
    ['pgq', 'gw', ['<=', 1], 'latency p50 (enqueue call to handler), the docs\' waiting loop vs graphile-worker'],
    ['pgq-wc', 'gw', null, 'latency p50, claim(wait =>, complete =>) vs graphile-worker']]],
  ['waiting-worker latency p99, ms from the enqueue call to the handler', 'latency', 'p99', false, f2, [
    ['pgq', 'gw', ['<=', 1], 'latency p99 (enqueue call to handler), the docs\' waiting loop vs graphile-worker'],
    ['pgq-wc', 'gw', null, 'latency p99, claim(wait =>, complete =>) vs graphile-worker']]],
  ['waiting-worker latency p50, ms from the enqueue\'s return to the handler', 'latency', 'ack_p50', false, f2, [
    ['pgq', 'gw', ['<=', 0], 'latency p50 (enqueue returned to handler), the docs\' waiting loop minus graphile-worker'],
    ['pgq-wc', 'gw', null, '']]],
  ['waiting-worker latency p99, ms from the enqueue\'s return to the handler', 'latency', 'ack_p99', false, f2, [
    ['pgq', 'gw', ['<=', 0], 'latency p99 (enqueue returned to handler), the docs\' waiting loop minus graphile-worker'],
    ['pgq-wc', 'gw', null, '']]],
  ['snapshot held during a single-item drain: jobs/s during / before', 'held', 'value', true, f2, [
    ['pgq', null, ['>=', 0.9], 'snapshot held during a single-item drain: during / before'],
    ['pgq', 'best', null, 'snapshot held: during / before vs the best peer\'s']]],
];

const out = [];
const tsv = [];
for (const [title, cs, metric, higher, fmt, comparisons] of SECTIONS) {
  const mine = lines.filter((l) => l.case === cs);
  if (!mine.length && !planned.includes(cs)) continue;
  const diff = metric.startsWith('ack_');
  const systems = cs === 'latency' ? ['pgq', 'pgq-wc', ...PEERS] : ['pgq', ...PEERS];
  const rounds = [...new Set(mine.map((l) => l.round))];
  const at = (sys, r) => mine.find((l) => l.system === sys && l.round === r);
  const val = (sys, r) => at(sys, r)?.[metric] ?? null;
  const cell = (sys, r) => {
    const l = at(sys, r);
    if (!l) return '-';
    if (l.error) return 'failed';
    if (cs === 'held') return `${fmt(l[metric])} (${l.before_per_s} to ${l.during_per_s}/s)${l.emptied ? '*' : ''}`;
    return fmt(l[metric]) + (l.client_cpu != null ? ` (${Math.round(l.client_cpu)}%)` : '') + (l.emptied ? '*' : '');
  };
  out.push(`\n${title}\n`);
  out.push(`| system: what it runs | ${rounds.map((r) => 'round ' + r).join(' | ')} | median |`);
  out.push(`|---|${rounds.map(() => '---:|').join('')}---:|`);
  for (const s of systems) {
    const what = `${NAMES[s]}: ${WHAT[cs][s]}`;
    const why = missing[s.split('-')[0]];
    if (why) out.push(`| ${what} | missing: ${why} |`);
    else out.push(`| ${what} | ${rounds.map((r) => cell(s, r)).join(' | ')} | ${fmt(median(rounds.map((r) => val(s, r))))} |`);
  }
  for (const [p, peer, target, rowLabel] of comparisons) {
    // per round: [ratio or difference, the peer it is against]
    const per = rounds.map((r) => {
      const v = val(p, r);
      if (v == null) return [null, null];
      if (peer === null) return [v, null];
      const cands = (peer === 'best' ? PEERS : [peer]).filter((s) => val(s, r) != null);
      if (!cands.length) return [null, null];
      const b = cands.reduce((x, y) => ((higher ? val(y, r) > val(x, r) : val(y, r) < val(x, r)) ? y : x));
      return [diff ? v - val(b, r) : v / val(b, r), b];
    });
    const m = median(per.map((x) => x[0]));
    const show = (x) => (x == null ? '-' : diff ? `${x > 0 ? '+' : ''}${f2(x)} ms` : `${f2(x)}x`);
    const vs = peer === null ? '' : peer === 'best' ? ' / the best peer' : `${diff ? ' - ' : ' / '}${NAMES[peer]}`;
    const label = `${NAMES[p]}${p === 'pgq-wc' ? ' (wait + complete)' : ''}${vs}`;
    const perText = per.map(([x, b]) => show(x) + (peer === 'best' && b ? ` (${NAMES[b]})` : ''));
    const gone = peer !== null && peer !== 'best' && missing[peer] ? `${NAMES[peer]} missing` : '';
    const met = !target ? '' : gone || (m == null ? '-' : (target[0] === '>=' ? m >= target[1] : m <= target[1]) ? 'yes' : 'NO');
    const tText = target ? `${target[0]} ${target[1]}${diff ? ' ms' : 'x'}` : '';
    out.push(`| **${label}** | ${perText.join(' | ')} | **${show(m)}** |` + (target ? ` target ${tText}: ${met} |` : ''));
    if (!rowLabel) continue;
    // bench/run's table: pgq's median, the peer's, the median of the rounds' ratios
    let base = 'the best peer of each round';
    if (peer === null) base = '-';
    else if (peer !== 'best') base = gone || `${fmt(median(rounds.map((r) => val(peer, r))))} ${NAMES[peer]}`;
    tsv.push([`peers: ${rowLabel}`, missing.pgq ? `not measured: ${missing.pgq}` : fmt(median(rounds.map((r) => val(p, r)))), base,
      m == null ? '-' : `${show(m)} [${per.map(([x]) => show(x)).join(', ')}]`, tText || '-', met].join('\x1f'));
  }
}
out.push('\n(N%): the Node client\'s CPU over the measured time, in % of one core; *: the backlog ran out before the time was up;');
if (lines.some((l) => l.case === 'held')) out.push('held: (jobs/s before to jobs/s during the snapshot);');
out.push('the best peer of a round: the highest figure among pgmq, graphile-worker and pg-boss (latency: the lowest).');
console.log(out.join('\n'));
if (process.argv[3]) writeFileSync(process.argv[3], tsv.map((l) => l + '\n').join(''));
