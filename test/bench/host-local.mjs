// host-local: ours (script and standalone executable) vs the Go reference vs
// `node -e 0`, side by side in one run.
// 1. ADD+DEL at 0, 1,000 and 60,000 existing reservations in a /16: each sample
//    is one ADD and one DEL of a new container; the contenders are interleaved so
//    drift on a shared machine hits them alike.
// 2. Our first ADD on a directory written by someone else (no index yet, and
//    after a Go ADD+DEL changed it), beside one Go ADD on the same directory.
// 3. ADD+DEL with stickyTTL beside without (a new pod each time: DEL parks;
//    the same pod recreated each time: ADD gets its parked address back).
// 4. The lock after a SIGKILL: how long the next call waits, once and in a storm.
// HOST_LOCAL=/path/to/host-local measures another build of ours.
import * as fs from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { fmt, median, peakRssKiB, ratio, table, timed } from './lib.mjs';

const OURS = resolve(process.env.HOST_LOCAL ?? 'bin/host-local');
const STANDALONE = resolve('dist/bin/host-local');
const GO = '/usr/lib/cni/host-local';
const SIZES = (process.env.BENCH_SIZES ?? '0,1000,60000').split(',').map(Number);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 21);
const FIRST_CALLS = Number(process.env.BENCH_FIRST_CALLS ?? 5);
const STORM = Number(process.env.BENCH_STORM ?? 8);

const root = fs.mkdtempSync(join(tmpdir(), 'bench-hl-'));
// In every contender's environment beside PATH: our code cache in a directory of this run's own (other
// builds on the machine evict each other's caches in the shared default); the others ignore it.
const CODE_CACHE = { CNI_TS_CODE_CACHE_DIR: join(root, 'code-cache') };
const conf = (dataDir, ipam = {}) =>
  JSON.stringify({ cniVersion: '1.0.0', name: 'bench', type: 'host-local', ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.200.0.0/16' }]], ...ipam } });
const env = (command, id, args = '') => ({ ...CODE_CACHE, CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/bench', CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent', CNI_ARGS: args });
const call = (bin, command, dataDir, id) => timed([bin], { env: env(command, id), input: conf(dataDir) });

/** Writes `n` reservations in the Go format, as a busy node would have them. */
function populate(dataDir, n) {
  const dir = join(dataDir, 'bench');
  fs.mkdirSync(dir, { recursive: true });
  let last = '';
  for (let i = 0; i < n; i++) {
    const ip = `10.200.${(i + 2) >> 8}.${(i + 2) & 255}`;
    fs.writeFileSync(join(dir, ip), `pre-${i}\r\neth0`);
    last = ip;
  }
  if (last) fs.writeFileSync(join(dir, 'last_reserved_ip.0'), last);
}

function addDel(bin, dataDir, id) {
  return { add: call(bin, 'ADD', dataDir, id), del: call(bin, 'DEL', dataDir, id) };
}

function steadyAndFirstCalls() {
  console.log(`host-local ADD+DEL (one ADD and one DEL, each a fresh process), medians of ${ITERATIONS}`);
  const rows = [['reservations', 'ours', 'standalone', 'go', 'node -e 0', 'ours/go', '(ours-2*node)/go', '(standalone-2*node)/go']];
  const first = [['reservations', 'ours: first ADD, no index', 'ours: first ADD after a Go ADD+DEL', 'go: one ADD']];
  for (const n of SIZES) {
    const oursDir = join(root, `ours-${n}`);
    const goDir = join(root, `go-${n}`);
    const saDir = join(root, `sa-${n}`);
    populate(oursDir, n);
    populate(saDir, n);
    populate(goDir, n);
    // First calls of ours on a directory someone else wrote: the index is built (or rebuilt) by one scan.
    // A Go ADD on the same directory is timed between them, so drift hits both alike.
    const cold = [];
    const afterGo = [];
    const goOne = [];
    for (let i = 0; i < FIRST_CALLS; i++) {
      fs.rmSync(join(oursDir, '.cni-ts'), { recursive: true, force: true });
      cold.push(call(OURS, 'ADD', oursDir, `cold${i}`));
      call(OURS, 'DEL', oursDir, `cold${i}`);
      const g = addDel(GO, oursDir, `go${i}`);
      goOne.push(g.add);
      afterGo.push(call(OURS, 'ADD', oursDir, `after${i}`));
      call(OURS, 'DEL', oursDir, `after${i}`);
    }
    addDel(GO, goDir, 'warm-go');
    addDel(STANDALONE, saDir, 'warm-sa');
    const samples = { ours: [], sa: [], go: [], floor: [] };
    for (let i = 0; i < ITERATIONS; i++) {
      samples.floor.push(timed(['node', '-e', '0'], { env: CODE_CACHE }));
      const o = addDel(OURS, oursDir, `b${i}`);
      samples.ours.push(o.add + o.del);
      const s = addDel(STANDALONE, saDir, `b${i}`);
      samples.sa.push(s.add + s.del);
      const g = addDel(GO, goDir, `b${i}`);
      samples.go.push(g.add + g.del);
    }
    const [o, s, g, f] = [median(samples.ours), median(samples.sa), median(samples.go), median(samples.floor)];
    rows.push([String(n), fmt(o), fmt(s), fmt(g), fmt(f), ratio(o, g), ratio(o - 2 * f, g), ratio(s - 2 * f, g)]);
    first.push([String(n), fmt(median(cold)), fmt(median(afterGo)), fmt(median(goOne))]);
  }
  table(rows);
  console.log(`\nfirst call of ours on a directory another program wrote, beside one Go ADD on it (medians of ${FIRST_CALLS})`);
  table(first);
}

/** ADD+DEL with ipam.stickyTTL beside without, on 1,000 reservations, interleaved. */
function stickyCalls() {
  const n = 1000;
  const dirs = { plain: join(root, 'sticky-plain'), newPod: join(root, 'sticky-new'), samePod: join(root, 'sticky-same') };
  for (const d of Object.values(dirs)) populate(d, n);
  const run = (dataDir, ipam, id, pod) => {
    const args = `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${pod}`;
    const input = conf(dataDir, ipam);
    return timed([OURS], { env: env('ADD', id, args), input }) + timed([OURS], { env: env('DEL', id, args), input });
  };
  const sticky = { stickyTTL: '1h' };
  const samples = { plain: [], newPod: [], samePod: [], floor: [] };
  for (let i = -2; i < ITERATIONS; i++) {
    const s = {
      plain: run(dirs.plain, {}, `p${i}`, `pod-${i}`),
      newPod: run(dirs.newPod, sticky, `n${i}`, `pod-${i}`),
      samePod: run(dirs.samePod, sticky, `s${i}`, 'web-0'),
      floor: timed(['node', '-e', '0'], { env: CODE_CACHE }),
    };
    if (i >= 0) for (const k of Object.keys(s)) samples[k].push(s[k]); // two warm-up rounds
  }
  console.log(`\nADD+DEL with stickyTTL beside without, ${n} reservations, medians of ${ITERATIONS}`);
  const f = median(samples.floor);
  table([
    ['', 'ADD+DEL', 'minus 2x node -e 0'],
    ['without stickyTTL', fmt(median(samples.plain)), fmt(median(samples.plain) - 2 * f)],
    ['stickyTTL, a new pod each time (DEL parks)', fmt(median(samples.newPod)), fmt(median(samples.newPod) - 2 * f)],
    ['stickyTTL, the same pod recreated (ADD gets it back)', fmt(median(samples.samePod)), fmt(median(samples.samePod) - 2 * f)],
    ['node -e 0', fmt(f), ''],
  ]);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts an ADD of ours that will stop inside the network's lock, reading the
 * FIFO that stands in for last_reserved_ip.0. Resolves once it is there (a FIFO
 * opens for writing without blocking only when a reader has it open).
 */
function startStuckAdd(dataDir, id) {
  const child = spawn(OURS, [], { env: { PATH: process.env.PATH, ...env('ADD', id) }, stdio: ['pipe', 'ignore', 'ignore'] });
  child.stdin.end(conf(dataDir));
  const closed = new Promise((r) => child.on('close', r));
  return { child, closed };
}

async function waitInsideLock(fifo) {
  for (;;) {
    try {
      return fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
    } catch {
      await sleep(1);
    }
  }
}

/**
 * A call SIGKILLed while it holds the lock, then: how long until the next call
 * (already started and waiting) holds it. A storm: STORM calls in a row, each
 * killed while holding the lock, each next one waiting behind it.
 */
async function lockTakeover() {
  const dataDir = join(root, 'lock');
  populate(dataDir, 0);
  call(OURS, 'ADD', dataDir, 'first');
  const fifo = join(dataDir, 'bench', 'last_reserved_ip.0');
  fs.rmSync(fifo, { force: true });
  spawnSync('mkfifo', [fifo]);
  const waits = [];
  let holder = startStuckAdd(dataDir, 'storm0');
  let writer = await waitInsideLock(fifo);
  const stormStart = process.hrtime.bigint();
  for (let i = 1; i <= STORM; i++) {
    const next = startStuckAdd(dataDir, `storm${i}`);
    await sleep(300); // the next call is started and waiting for the lock
    const killedAt = process.hrtime.bigint();
    holder.child.kill('SIGKILL');
    await holder.closed;
    fs.closeSync(writer);
    writer = await waitInsideLock(fifo);
    waits.push(Number(process.hrtime.bigint() - killedAt) / 1e6);
    holder = next;
  }
  const storm = Number(process.hrtime.bigint() - stormStart) / 1e6 - STORM * 300;
  holder.child.kill('SIGKILL');
  await holder.closed;
  fs.closeSync(writer);
  console.log(`\nlock after SIGKILL: the waiting call holds the lock ${fmt(median(waits))} after its holder was killed (median of ${STORM}; max ${fmt(Math.max(...waits))});`);
  console.log(`a storm of ${STORM} calls each killed holding the lock: ${fmt(storm)} of waiting in all`);
}

try {
  steadyAndFirstCalls();
  const dataDir = join(root, 'rss');
  const rss = [
    ['ours', peakRssKiB([OURS], { env: env('ADD', 'rss'), input: conf(dataDir) })],
    ['standalone', peakRssKiB([STANDALONE], { env: env('ADD', 'rss-sa'), input: conf(dataDir) })],
    ['go', peakRssKiB([GO], { env: env('ADD', 'rss-go'), input: conf(dataDir) })],
    ['node -e 0', peakRssKiB(['node', '-e', '0'], { env: CODE_CACHE })],
  ];
  if (rss.every(([, v]) => v !== undefined)) console.log(`\npeak RSS of one ADD: ${rss.map(([k, v]) => `${k} ${v} KiB`).join(', ')}`);
  else console.log('\npeak RSS: /usr/bin/time not installed (apt-get install time)');
  stickyCalls();
  await lockTakeover();
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
